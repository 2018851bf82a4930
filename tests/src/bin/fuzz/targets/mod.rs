//! The targets: each builds its input from the random bytes, mostly out of
//! the pieces its parser cares about (so inputs reach past the first
//! check), and says what must hold of the result. One module per area.

mod chatd;
mod config;
mod connectors;
mod egress;
mod sse;
mod triggers;

use arbitrary::Unstructured;

use crate::Target;

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
