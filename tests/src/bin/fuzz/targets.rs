//! The targets: each builds its input from the random bytes, mostly out of
//! the pieces its parser cares about (so inputs reach past the first
//! check), and says what must hold of the result.

use arbitrary::{Result as Built, Unstructured};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::{Target, Verdict};

pub fn all() -> Vec<Target> {
    vec![
        Target {
            name: "telegram-markdown-v2",
            run: telegram_markdown_v2,
        },
        Target {
            name: "schedule",
            run: schedule,
        },
        Target {
            name: "bash-rules",
            run: bash_rules,
        },
        Target {
            name: "slack-mrkdwn",
            run: slack_mrkdwn,
        },
        Target {
            name: "egress-address",
            run: egress_address,
        },
    ]
}

/// A text of `pieces` chosen at random, now and then a random character;
/// what was built when the bytes give out.
fn text_of(u: &mut Unstructured, pieces: &[&str], most: usize) -> String {
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

/// An answer's Markdown cut into Telegram messages: every part must parse
/// as MarkdownV2 the way the Bot API parses it (the fake's parser, which
/// follows tdlib's), fit the limit, and show something.
fn telegram_markdown_v2(u: &mut Unstructured) -> Verdict {
    const PIECES: &[&str] = &[
        "word",
        " ",
        "\n",
        "\n\n",
        "*",
        "**",
        "_",
        "__",
        "`",
        "```",
        "```rust\n",
        "~~",
        "[",
        "]",
        "(",
        ")",
        "](http://x.example/a_b)",
        ">",
        "> ",
        "#",
        "# ",
        "- ",
        "1. ",
        "|",
        "\\",
        ".",
        "!",
        "-",
        "+",
        "=",
        "{",
        "}",
        "é",
        "😀",
        "\t",
        "    ",
        "||",
    ];
    let markdown = text_of(u, PIECES, 400);
    let limit = u.int_in_range(64..=4096).unwrap_or(4096);
    for (i, part) in connectord::telegram::markdown::parts(&markdown, limit)
        .iter()
        .enumerate()
    {
        let units = connectord::telegram::markdown::utf16_len(&part.v2);
        if units > limit {
            return Err(format!(
                "part {i} is {units} UTF-16 units, over the limit {limit}; markdown {markdown:?}"
            ));
        }
        if let Err(why) = tandem_tests::fakebot::parse_markdown_v2(&part.v2) {
            return Err(format!(
                "part {i} {:?} is refused ({why}); markdown {markdown:?}",
                part.v2
            ));
        }
        if part.plain.trim().is_empty() {
            return Err(format!("part {i} shows nothing; markdown {markdown:?}"));
        }
    }
    Ok(())
}

/// An answer's Markdown as Slack messages: converting and cutting never
/// panic, and every part is within the size asked (16 characters at the
/// least, room for a reopened code fence) and says something.
fn slack_mrkdwn(u: &mut Unstructured) -> Verdict {
    const PIECES: &[&str] = &[
        "word",
        " ",
        "\n",
        "\n\n",
        "*",
        "**",
        "_",
        "`",
        "```",
        "```js\n",
        "~~",
        "[",
        "]",
        "(",
        ")",
        "](https://x.example/?a=1&b=<2>)",
        "<",
        ">",
        "&",
        "> ",
        "# ",
        "- ",
        "1. ",
        "|",
        "\\",
        "é",
        "😀",
        "\t",
        "@here",
        "<!channel>",
    ];
    let markdown = text_of(u, PIECES, 400);
    let max = u.int_in_range(1..=4000).unwrap_or(4000);
    let text = connectord::slack::mrkdwn::to_mrkdwn(&markdown);
    for (i, part) in connectord::slack::mrkdwn::split(&text, max)
        .iter()
        .enumerate()
    {
        let chars = part.chars().count();
        if chars > max.max(16) {
            return Err(format!(
                "part {i} is {chars} characters, over {}; markdown {markdown:?}",
                max.max(16)
            ));
        }
        if part.trim().is_empty() {
            return Err(format!("part {i} is empty; markdown {markdown:?}"));
        }
    }
    Ok(())
}

/// A trigger's `when`: parsing never panics, and for a schedule it takes,
/// the forward walk and the backward walk agree: the next due instant `n`
/// after `t` is after `t`, is what comes next after one second before it,
/// and is the last due instant in (t, n].
fn schedule(u: &mut Unstructured) -> Verdict {
    const PIECES: &[&str] = &[
        "daily",
        "weekdays",
        "weekly",
        "monthly",
        "once",
        " ",
        "  ",
        "09:00",
        "9:30",
        "23:59",
        "24:00",
        "00:00",
        "7:5",
        "mon",
        "Monday",
        "thu",
        "sun",
        "mon,thu",
        "1",
        "15",
        "29",
        "31",
        "0",
        "32",
        "2026-03-29",
        "2028-02-29",
        "2026-12-24",
        "*",
        "*/5",
        "*/0",
        "1-5",
        "5-1",
        "0,30",
        "2",
        "12",
        "7",
        ",",
        "-",
        "/",
        "\t",
    ];
    let Ok(when) = when_text(u, PIECES) else {
        return Ok(());
    };
    let Ok(schedule) = triggerd::schedule::Schedule::parse(&when) else {
        return Ok(());
    };
    let zones = [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Asia/Kolkata",
    ];
    let zone_name = u.choose(&zones).map_or("UTC", |z| *z);
    let Ok(tz) = TimeZone::get(zone_name) else {
        return Err(format!("zone {zone_name} is not in the database"));
    };
    // An instant between 2024 and 2031, to the second.
    let secs = u
        .int_in_range(1_704_067_200i64..=1_924_992_000)
        .unwrap_or(1_704_067_200);
    let Ok(after) = Timestamp::from_second(secs) else {
        return Ok(());
    };
    let Some(next) = schedule.next_after(after, &tz) else {
        return Ok(());
    };
    let say = |what: &str| format!("{when:?} in {zone_name} after {after}: {what}");
    if next <= after {
        return Err(say(&format!("next {next} is not after it")));
    }
    let before = next - SignedDuration::from_secs(1);
    if schedule.next_after(before, &tz) != Some(next) {
        return Err(say(&format!(
            "next is {next}, but the next after {before} is {:?}",
            schedule.next_after(before, &tz)
        )));
    }
    if schedule.last_due(after, next, &tz) != Some(next) {
        return Err(say(&format!(
            "next is {next}, but the last due up to it is {:?}",
            schedule.last_due(after, next, &tz)
        )));
    }
    Ok(())
}

/// A `when`: half the time one of the forms the parser takes with random
/// fields (so most of them parse and reach the walks), else random pieces.
fn when_text(u: &mut Unstructured, pieces: &[&str]) -> Built<String> {
    if u.ratio(1, 2)? {
        return Ok(text_of(u, pieces, 12));
    }
    let time = format!("{}:{:02}", u.int_in_range(0..=23)?, u.int_in_range(0..=59)?);
    let days = [
        "mon", "tue", "wed", "thu", "fri", "sat", "sun", "mon,thu", "sat,sun",
    ];
    let field = |u: &mut Unstructured, most: u32| -> Built<String> {
        Ok(match u.int_in_range(0..=3)? {
            0 => "*".to_string(),
            1 => u.int_in_range(0..=most)?.to_string(),
            2 => format!("*/{}", u.int_in_range(1..=most.max(1))?),
            _ => {
                let a = u.int_in_range(0..=most)?;
                format!("{a}-{}", u.int_in_range(a..=most)?)
            }
        })
    };
    Ok(match u.int_in_range(0..=5)? {
        0 => format!("daily {time}"),
        1 => format!("weekdays {time}"),
        2 => format!("weekly {} {time}", u.choose(&days)?),
        3 => format!("monthly {} {time}", u.int_in_range(1..=31)?),
        4 => format!(
            "once {}-{:02}-{:02} {time}",
            u.int_in_range(2024..=2031)?,
            u.int_in_range(1..=12)?,
            u.int_in_range(1..=31)?
        ),
        _ => format!(
            "{} {} {} {} {}",
            field(u, 59)?,
            field(u, 23)?,
            field(u, 31)?,
            field(u, 12)?,
            field(u, 7)?
        ),
    })
}

/// A command line under the permission rules: splitting it and deciding on
/// it in every mode never panics, and "Always on this instance" (a rule for
/// exactly that line) never lets another line run by rule.
fn bash_rules(u: &mut Unstructured) -> Verdict {
    use chatd::permissions::{decide, split_command, Approval, Call, Decision, Effect, Mode, Rule};
    const PIECES: &[&str] = &[
        "ls",
        "rm",
        "-rf",
        " ",
        "/",
        "~",
        "..",
        "git",
        "push",
        "status",
        "|",
        "||",
        "&&",
        "&",
        ";",
        "\n",
        "$(",
        ")",
        "`",
        "'",
        "\"",
        "\\",
        ">",
        ">>",
        "<",
        "<(",
        "2>&1",
        "FOO=1",
        "#",
        "*",
        "cd",
        "sudo",
        "python3",
        "-c",
        "/workspace",
        "/etc/passwd",
        "$HOME",
        "{",
        "}",
        "(",
    ];
    let command = text_of(u, PIECES, 40);
    let _ = split_command(&command);
    let inside = u.arbitrary().unwrap_or(true);
    let rules = [Rule::exact("bash", &command)];
    let other = format!("{} x", command.trim());
    for mode in [Mode::Ask, Mode::Auto, Mode::Yolo] {
        for line in [&command, &other] {
            let call = Call {
                tool: "bash",
                effect: Effect::Command,
                command: Some(line),
                inside,
                workspace_root: Some("/workspace"),
            };
            let decision = decide(mode, &call, &rules);
            if line == &other && decision == Decision::Run(Approval::Rule) {
                return Err(format!(
                    "a rule for exactly {command:?} let {other:?} run in {mode:?}"
                ));
            }
        }
    }
    Ok(())
}

/// An authority as a tunnel or a URL names it, in every spelling: whenever
/// it reads as an address that the reference below calls not public, the
/// egress policy refuses that address (no spelling slips a private, local
/// or metadata address past it).
fn egress_address(u: &mut Unstructured) -> Verdict {
    use tandem_shared::netpolicy::{classify, split_authority, Host};
    const PIECES: &[&str] = &[
        "127",
        "0",
        "1",
        "10",
        "169",
        "254",
        "192",
        "168",
        "172",
        "16",
        "100",
        "64",
        "255",
        ".",
        "0x7f",
        "0x",
        "0177",
        "00",
        "2130706433",
        "4294967295",
        "[",
        "]",
        "::",
        ":",
        "ffff",
        "::1",
        "fe80",
        "fc00",
        "fd00",
        "%2e",
        "%31",
        "localhost",
        "metadata.google.internal",
        "xn--",
        ":80",
        ":443",
        "a",
        "-",
        "%25",
        "::ffff:",
        "0:0:0:0:0:ffff:7f00:1",
    ];
    let text = if u.ratio(1, 2).unwrap_or(true) {
        text_of(u, PIECES, 16)
    } else {
        let Ok(text) = spelled_address(u) else {
            return Ok(());
        };
        text
    };
    let Ok((Host::Ip(ip), _)) = split_authority(&text, 443) else {
        return Ok(());
    };
    if !public_by_reference(ip) && classify(ip).is_none() {
        return Err(format!(
            "{text:?} reads as {ip}, which is not public, yet it is allowed"
        ));
    }
    Ok(())
}

/// A v4 address near a class boundary, spelled one of the ways a URL host
/// may spell it, sometimes inside an IPv6 form.
fn spelled_address(u: &mut Unstructured) -> Built<String> {
    const NEAR: &[u32] = &[
        0x7f00_0001,
        0x0a00_0000,
        0xa9fe_a9fe,
        0xc0a8_0001,
        0xac10_0000,
        0xac1f_ffff,
        0x6440_0000,
        0x647f_ffff,
        0x0000_0000,
        0xffff_ffff,
        0xe000_0001,
        0x0808_0808,
        0x01_02_03_04,
    ];
    let v4 = if u.ratio(1, 2)? {
        u.choose(NEAR)?
            .wrapping_add(u.int_in_range(0..=3)?)
            .wrapping_sub(1)
    } else {
        u.arbitrary::<u32>()?
    };
    let b = v4.to_be_bytes();
    Ok(match u.int_in_range(0..=6)? {
        0 => format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3]),
        1 => v4.to_string(),
        2 => format!("0x{v4:x}"),
        3 => format!("0{:o}.0{:o}.0{:o}.0{:o}", b[0], b[1], b[2], b[3]),
        4 => format!("{}.{}", b[0], v4 & 0x00ff_ffff),
        5 => format!("[::ffff:{}.{}.{}.{}]", b[0], b[1], b[2], b[3]),
        _ => format!("[::ffff:{:x}:{:x}]", v4 >> 16, v4 & 0xffff),
    })
}

/// The slow reference: what no chat may reach, from the standard library's
/// own tests of an address, written apart from the policy's tables.
fn public_by_reference(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b)))
        }
        IpAddr::V6(v6) => {
            if let Some(inner) = v6.to_ipv4_mapped() {
                return public_by_reference(IpAddr::V4(inner));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || first & 0xfe00 == 0xfc00
                || first & 0xffc0 == 0xfe80)
        }
    }
}
