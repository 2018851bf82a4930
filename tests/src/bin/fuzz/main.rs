//! `fuzz`: random inputs in bulk against tandem's parsers, on the stable
//! toolchain. Each target builds its input from random bytes through
//! `arbitrary`'s `Unstructured` (so a failing input is its bytes, printed in
//! hex to replay with `--replay`), calls the parser where a panic is caught,
//! and checks what the parser promises beside not panicking.
//!
//! `fuzz --seconds N` runs every target for N seconds each and prints the
//! executions per second and in total of each; a failure prints the target,
//! the seed, the input's bytes and what broke, and the run exits 1.

use std::time::{Duration, Instant};

use clap::Parser;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tandem_tests::fuzzing::{self as targets, check, Target};

#[derive(Parser)]
#[command(about = "random inputs in bulk against tandem's parsers (see docs/soak.md)")]
struct Args {
    /// Seconds each target runs.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Run only this target (`--list` names them).
    #[arg(long)]
    only: Option<String>,
    /// The seed of the random bytes (default: from the clock, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Name the targets and stop.
    #[arg(long)]
    list: bool,
    /// Run the `--only` target once on these bytes (hex, as a failure prints them).
    #[arg(long)]
    replay: Option<String>,
}

fn main() {
    let args = Args::parse();
    let all = targets::all();
    if args.list {
        for t in &all {
            println!("{}", t.name);
        }
        return;
    }
    let chosen: Vec<&Target> = all
        .iter()
        .filter(|t| args.only.as_deref().is_none_or(|o| o == t.name))
        .collect();
    if chosen.is_empty() {
        eprintln!(
            "fuzz: no target {:?}; --list names them",
            args.only.unwrap_or_default()
        );
        std::process::exit(2);
    }
    // Each input's panic is caught and reported as its failure, not printed twice.
    std::panic::set_hook(Box::new(|_| {}));
    if let Some(hex) = &args.replay {
        let Some(bytes) = from_hex(hex) else {
            eprintln!("fuzz: --replay takes hex bytes");
            std::process::exit(2);
        };
        let code = match check(chosen[0], &bytes) {
            Ok(()) => 0,
            Err(why) => {
                println!("{}: {why}", chosen[0].name);
                1
            }
        };
        std::process::exit(code);
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    println!("fuzz: seed {seed}, {} s a target", args.seconds);
    let mut failed = false;
    for target in chosen {
        let mut rng = StdRng::seed_from_u64(seed);
        let began = Instant::now();
        let bound = Duration::from_secs(args.seconds);
        let mut runs = 0u64;
        let mut bytes = Vec::new();
        while began.elapsed() < bound {
            // Short inputs mostly, now and then a long one.
            let len = if rng.random_bool(0.05) {
                rng.random_range(0..16_384)
            } else {
                rng.random_range(0..512)
            };
            bytes.clear();
            bytes.extend((0..len).map(|_| rng.random::<u8>()));
            runs += 1;
            if let Err(why) = check(target, &bytes) {
                println!(
                    "fuzz: {} FAILED after {runs} inputs (seed {seed}): {why}\n  replay: fuzz --only {} --replay {}",
                    target.name,
                    target.name,
                    to_hex(&bytes)
                );
                failed = true;
                break;
            }
        }
        let secs = began.elapsed().as_secs_f64();
        println!(
            "fuzz: {:<28} {runs:>10} inputs in {secs:.1} s, {:.0}/s",
            target.name,
            runs as f64 / secs.max(1e-9)
        );
    }
    if failed {
        std::process::exit(1);
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}
