//! chatd's integration tests, one binary (one link): chatd end to end, the
//! agent loop, saved agents, what a run sends the engine, the inbox, Web Push,
//! sd-notify, the listeners under idle connections, one daemon per data
//! folder (chatd, egressd, hostexecd), and the engine simulator itself. Each module is one area's tests.

mod agent;
mod agent_files;
mod agent_folders;
mod agents;
mod chatd;
mod commands;
mod failures;
mod files;
mod goals;
mod inbox;
mod instances;
mod listeners;
mod loops;
mod notify;
mod policies;
mod push;
mod requests;
mod saved_agents;
mod scripted;
mod sim;
mod skills;
mod subagents;
mod tasks;
mod tool_switches;
mod uploads;
mod web_search;
