//! Documents: the readers of each format against real files the tests
//! write (`tandem_tests::docfixtures`).

mod chat;
mod formats;
mod media;
mod messages;
mod preview;
mod reader;
mod search;
