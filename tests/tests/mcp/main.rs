//! MCP connectors end to end, one binary: the real chatd and engine-sim,
//! the MCP project's reference server from the npm registry, and a fake
//! MCP server of our own for the faults (tandem_tests::mcpservers).

mod addresses;
mod apps;
mod connectors;
mod context;
mod ctl_mcp;
mod host;
mod in_chats;
mod legacy;
mod saved_agents;
mod setup;
mod stdio;
