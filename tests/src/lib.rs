//! tandem's cross-daemon tests: the engine simulator (`sim`, binary
//! `engine-sim`), a harness that runs the real binaries (`harness`), and the
//! benchmarks (binary `bench`).

pub mod chunked;
pub mod egressbench;
pub mod harness;
pub mod sim;
