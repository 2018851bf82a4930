//! Triggers' integration tests, one binary (one link): triggerd end to end,
//! chatd's side of triggers, and `tandem trigger …`. Each module is one
//! area's tests.

mod ctl_triggers;
mod triggerd;
mod triggers;
