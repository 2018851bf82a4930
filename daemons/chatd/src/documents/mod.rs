//! Documents a chat's files hold (PDF, workbooks, Word, slides, EPUB,
//! CSV/TSV): read into text by a helper process with limits, so a parser's
//! crash or loop costs one document and never chatd.

pub mod formats;
