//! What every tandem daemon does the same way: configuration and env files,
//! logging, sd-notify, the data lock, SQLite opening and its one writer,
//! private folders and sockets, shutdown, metrics, HTTP serving with bounds
//! on every listener, the descriptor limit, poisoned locks, the TLS client
//! config. A daemon's `main` is these calls in order, then its own work.

pub mod chatd;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod db;
pub mod docker;
pub mod fsmode;
pub mod http;
pub mod interfaces;
pub mod listen;
pub mod logging;
pub mod metrics;
pub mod netpolicy;
pub mod nofile;
pub mod notify;
pub mod seal;
pub mod secrets;
pub mod shutdown;
pub mod sse;
pub mod sync;
pub mod time;
pub mod tls;
pub mod tree;
pub mod words;
