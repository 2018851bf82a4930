//! tandem's cross-daemon tests: the engine simulator (`sim`, binary
//! `engine-sim`), a harness that runs the real binaries (`harness`), and the
//! benchmarks (binary `bench`; figures 7, 9 and 10 in `egressbench`,
//! `sandboxbench` and `triggerbench`).

pub mod chunked;
pub mod egressbench;
pub mod harness;
pub mod sandboxbench;
pub mod sim;
pub mod triggerbench;
pub mod triggerd;
