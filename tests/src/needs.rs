//! What a test needs from the machine (root, podman, network namespaces,
//! Chromium) and what happens when it is missing: the test prints one
//! `SKIPPED` line naming the need and returns, or, with
//! `TANDEM_REQUIRE_ALL=1` (set by `.ci/run`), fails saying what to install
//! or how to run it. A developer without root sees the skips; CI never
//! passes a test that did not run.

use std::io::Write;
use std::process::{Command, Stdio};

/// The variable that turns a skip into a failure.
pub const REQUIRE_ALL: &str = "TANDEM_REQUIRE_ALL";

/// Whether a missing need fails the test (CI) instead of skipping it.
pub fn required() -> bool {
    std::env::var(REQUIRE_ALL).is_ok_and(|v| v == "1")
}

/// The test cannot run: it needs `missing`; `fix` says what to install or
/// how to run it. Panics under `TANDEM_REQUIRE_ALL=1`; otherwise writes the
/// `SKIPPED` line straight to stderr (past libtest's capture, which would
/// hide it for a test that returns) and the caller returns.
#[track_caller]
pub fn missing(missing: &str, fix: &str) {
    let test = test_name();
    if required() {
        panic!(
            "{test} cannot run: it needs {missing}; {fix} ({REQUIRE_ALL}=1 fails a test that cannot run)"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: it needs {missing}; {fix} (CI sets {REQUIRE_ALL}=1 and fails instead)"
    );
}

/// Whether this process is root; if not, [`missing`] with `why`.
#[track_caller]
pub fn root(why: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    missing(
        &format!("root ({why}; this is uid {})", nix::unistd::geteuid()),
        "run the tests as root, as CI does",
    );
    false
}

/// Whether every `(command, Debian package)` is on the PATH; if not,
/// [`missing`] naming the packages to install.
#[track_caller]
pub fn tools(tools: &[(&str, &str)]) -> bool {
    let absent: Vec<&(&str, &str)> = tools.iter().filter(|(tool, _)| !on_path(tool)).collect();
    if absent.is_empty() {
        return true;
    }
    let names: Vec<&str> = absent.iter().map(|(tool, _)| *tool).collect();
    let mut packages: Vec<&str> = absent.iter().map(|(_, package)| *package).collect();
    packages.dedup();
    missing(
        &format!("{} (not on the PATH)", names.join(", ")),
        &format!("apt-get install {} (.ci/run does)", packages.join(" ")),
    );
    false
}

/// Whether `tool` is a command on the PATH.
pub fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The running test: libtest names its thread after it; `main` (one test
/// thread) says nothing, so then the caller's place.
#[track_caller]
fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => std::panic::Location::caller().to_string(),
    }
}
