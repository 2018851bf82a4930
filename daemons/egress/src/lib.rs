//! egressd: the only way out for a chat's sandboxed commands.
//!
//! This first slice holds the proxy itself (`proxy.rs`): one listener a
//! chat, on a unix socket whose path is the chat's identity; plain HTTP and
//! `CONNECT`; every address a name resolves to checked by
//! `tandem_shared::netpolicy`, and the connection made to the checked
//! address, never by a second lookup. The daemon around it (its API, the
//! stored presets and rules, cards, the audit in SQLite, nftables) comes in
//! the next slices of issue 5.

pub mod proxy;
