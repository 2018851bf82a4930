//! tandem's cross-daemon tests: the engine simulator (`sim`, binary
//! `engine-sim`), a harness that runs the real binaries (`harness`), and the
//! benchmarks (binary `bench`; figures 7, 9 and 10 in `egressbench`,
//! `sandboxbench` and `triggerbench`; 11 in `connectorbench`; 12 in
//! `webbench`; 13 in `requestbench`; 15 in `docbench`; 16 in `searchbench`), headless Chromium for the web page's tests (`browser`),
//! a little internet in network namespaces for egressd's (`netlab`) and for
//! chatd's MCP connectors (`chatlab`), and
//! what a test needs from the machine (`needs`: root, podman, Chromium).

pub mod browser;
pub mod chatlab;
pub mod chunked;
pub mod connectorbench;
pub mod connectord;
pub mod daemon;
pub mod docbench;
pub mod docfixtures;
pub mod egressbench;
pub mod fakebot;
pub mod fakepush;
pub mod fakeslack;
pub mod fuzzing;
pub mod harness;
pub mod mcpapps;
pub mod mcpservers;
pub mod needs;
pub mod netlab;
pub mod npm;
pub mod pagebench;
pub mod pip;
pub mod procstat;
pub mod requestbench;
pub mod sandboxbench;
pub mod searchbench;
pub mod sim;
pub mod triggerbench;
pub mod triggerd;
pub mod webbench;
