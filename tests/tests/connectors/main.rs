//! Connectors' integration tests, one binary (one link): connectord end to
//! end on Telegram and Slack, its readers and Outboxes against the fakes,
//! and `tandem connector …`. Each module is one area's tests.

mod connectord;
mod connectord_slack;
mod ctl_connectors;
mod slack_fake;
mod telegram_fake;
