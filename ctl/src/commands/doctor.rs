//! `tandem doctor`: runs the set-up checks (`crate::checks`), each line a
//! check, with the fix when it fails.

use std::process::ExitCode;

pub const LONG_ABOUT: &str = "\
Checks what tandem needs on this box, one line each, with the fix for each
failure: the engine, the secrets file, file modes, the units, lingering, the
container runtime, chatd's front when one is set (and that a front on the
network asks for the admin token), egressd, triggerd and connectord (and
that chatd forwards to each), the connectors' key file and the egress rules. Exits 0
when every check passes.

Example:
  tandem doctor";

pub async fn exec() -> anyhow::Result<ExitCode> {
    crate::checks::run().await
}
