//! The web side's integration tests, one binary (one link): chatd's front
//! over HTTP, the web page in headless Chromium, and the web tools through
//! egressd. Each module is one area's tests.

mod accessibility;
mod agents_page;
mod around;
mod commands_page;
mod composer;
mod files_page;
mod files_page_gone;
mod files_page_preview;
mod files_page_search;
mod files_page_trash;
mod front;
mod goal_page;
mod inbox;
mod keyboard;
mod loops_page;
mod mcp_apps_page;
mod mcp_page;
mod policies_page;
mod push;
mod settings;
mod skills_page;
mod status;
mod subagents_page;
mod tasks_page;
mod tools_menu;
mod web;
mod web_tools;
