//! Targets for connectord's converters: an answer's Markdown cut into
//! Telegram MarkdownV2 parts and into Slack mrkdwn parts.

use arbitrary::Unstructured;

use super::text_of;
use super::Verdict;

/// An answer's Markdown cut into Telegram messages: every part must parse
/// as MarkdownV2 the way the Bot API parses it (the fake's parser, which
/// follows tdlib's), fit the limit, and show something.
pub(super) fn telegram_markdown_v2(u: &mut Unstructured) -> Verdict {
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
        if let Err(why) = crate::fakebot::parse_markdown_v2(&part.v2) {
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
pub(super) fn slack_mrkdwn(u: &mut Unstructured) -> Verdict {
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
