//! One module per `tandem` verb: its arguments, its help and a call.

pub mod agent;
pub mod chat;
pub mod chat_files;
pub mod chat_goal;
pub mod chat_loop;
pub mod chat_policies;
pub mod chat_settings;
pub mod chat_subagents;
pub mod chat_tasks;
pub mod connector;
pub mod doctor;
pub mod egress;
pub mod mcp;
mod mcp_context;
pub mod sandbox;
pub mod service;
pub mod skill;
pub mod status;
pub mod trigger;
pub mod up;
pub mod watchdog;
pub mod web_search;
