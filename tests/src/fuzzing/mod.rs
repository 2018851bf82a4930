//! The fuzz targets, shared by the two engines that drive them: `fuzz`
//! (random inputs in bulk, tests/src/bin/fuzz) and `tandem-fuzz`
//! (coverage-guided, libFuzzer, fuzz/). Each target builds its input from
//! the random bytes through `arbitrary`'s `Unstructured`, mostly out of the
//! pieces its parser cares about (so inputs reach past the first check),
//! and says what must hold of the result. One module per area.

mod chatd;
mod config;
mod connectors;
mod documents;
mod egress;
mod sse;
mod triggers;

use std::panic::{catch_unwind, AssertUnwindSafe};

use arbitrary::Unstructured;

/// What a target found wrong with one input.
pub type Verdict = Result<(), String>;

/// One parser under test: its name and what it does with an input.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&mut Unstructured) -> Verdict,
}

/// One input through one target: its verdict, a panic counted as a failure.
pub fn check(target: &Target, bytes: &[u8]) -> Verdict {
    let mut u = Unstructured::new(bytes);
    match catch_unwind(AssertUnwindSafe(|| (target.run)(&mut u))) {
        Ok(verdict) => verdict,
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_default();
            Err(format!("panicked: {text}"))
        }
    }
}

pub fn all() -> Vec<Target> {
    vec![
        Target {
            name: "telegram-markdown-v2",
            run: connectors::telegram_markdown_v2,
        },
        Target {
            name: "schedule",
            run: triggers::schedule,
        },
        Target {
            name: "bash-rules",
            run: chatd::bash_rules,
        },
        Target {
            name: "slack-mrkdwn",
            run: connectors::slack_mrkdwn,
        },
        Target {
            name: "egress-address",
            run: egress::egress_address,
        },
        Target {
            name: "engine-stream",
            run: chatd::engine_stream,
        },
        Target {
            name: "proxy-head",
            run: egress::proxy_head,
        },
        Target {
            name: "egress-url",
            run: egress::egress_url,
        },
        Target {
            name: "sse-lines",
            run: sse::sse_lines,
        },
        Target {
            name: "config",
            run: config::config,
        },
        Target {
            name: "documents",
            run: documents::documents,
        },
        Target {
            name: "skill-md",
            run: chatd::skill_md,
        },
    ]
}

/// A text of `pieces` chosen at random, now and then a random character;
/// what was built when the bytes give out.
pub(crate) fn text_of(u: &mut Unstructured, pieces: &[&str], most: usize) -> String {
    let mut out = String::new();
    let n = u.int_in_range(0..=most).unwrap_or(0);
    for _ in 0..n {
        let piece = if u.ratio(1, 8).unwrap_or(false) {
            u.arbitrary::<char>().map(String::from)
        } else {
            u.choose(pieces).map(|p| (*p).to_string())
        };
        match piece {
            Ok(piece) => out.push_str(&piece),
            Err(_) => break,
        }
    }
    out
}

/// `bytes` cut at random places, now and then one byte at a time; a cut
/// right after a `\r` or inside a character is as likely as any other.
pub(crate) fn cut<'a>(u: &mut Unstructured, bytes: &'a [u8]) -> Vec<&'a [u8]> {
    let mut chunks = Vec::new();
    let mut at = 0;
    let bytewise = u.ratio(1, 10).unwrap_or(false);
    while at < bytes.len() {
        let len = if bytewise {
            1
        } else {
            u.int_in_range(1..=(bytes.len() - at).min(64))
                .unwrap_or(bytes.len() - at)
        };
        chunks.push(&bytes[at..at + len]);
        at += len;
    }
    chunks
}
