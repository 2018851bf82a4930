//! `tandem-fuzz`: the fuzz targets (`tandem_tests::fuzzing`) under libFuzzer,
//! coverage-guided on the stable toolchain. rustc adds the coverage counters
//! when built with `-Cpasses=sancov-module` (a stable codegen option), as
//! `ops/fuzz --coverage` does; libFuzzer then keeps the inputs that reach new
//! code and mutates those, so it gets past checks random bytes rarely pass.
//!
//! The target is named by `TANDEM_FUZZ_TARGET`; every other argument is
//! libFuzzer's (`-max_total_time=30`, a corpus folder, a crash file to
//! replay). A verdict against an input, or a panic that escapes a target,
//! aborts the process, which libFuzzer records as a crash with the input's
//! bytes; a panic the code under test catches is not one.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tandem_tests::fuzzing::{all, Target};

static TARGET: OnceLock<Target> = OnceLock::new();

fn chosen() -> Target {
    let name = std::env::var("TANDEM_FUZZ_TARGET").unwrap_or_default();
    let mut targets = all();
    let Some(at) = targets.iter().position(|t| t.name == name) else {
        let names: Vec<&str> = targets.iter().map(|t| t.name).collect();
        eprintln!(
            "tandem-fuzz: TANDEM_FUZZ_TARGET={name:?} names no target; one of: {}",
            names.join(", ")
        );
        std::process::exit(2);
    };
    targets.swap_remove(at)
}

fuzz_target!(
    init: {
        let _ = TARGET.set(chosen());
        // libfuzzer-sys's hook aborts at any panic, even one the code under
        // test catches (the document readers catch pdf-extract's panics page
        // by page, as chatd's reader does). A panic that escapes the target
        // still aborts: libfuzzer-sys catches each input's unwind and aborts,
        // a crash with its input (replayed with `fuzz --replay` for its
        // message).
        std::panic::set_hook(Box::new(|_| {}));
    },
    |data: &[u8]| {
        // Set by `init` before the first input, or the process has exited.
        let target = TARGET.get().expect("the target is chosen in init");
        let mut u = arbitrary::Unstructured::new(data);
        if let Err(why) = (target.run)(&mut u) {
            eprintln!("{}: {why}", target.name);
            std::process::abort();
        }
    }
);
