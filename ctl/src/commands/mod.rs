pub mod chat;
pub mod up;
