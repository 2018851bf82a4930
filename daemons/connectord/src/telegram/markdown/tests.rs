//! Escaping, entities and splitting as Telegram parses them: odd input,
//! UTF-16 lengths, long answers in parts, code blocks reopened.

use super::render::escape_text;
use super::*;

#[test]
fn escape_table() {
    // Every reserved character outside entities, and nothing else.
    let all = "_*[]()~`>#+-=|{}.!\\";
    let escaped: String = all.chars().flat_map(|c| ['\\', c]).collect();
    assert_eq!(to_markdown_v2("a\\_b\\*c"), "a\\_b\\*c");
    let mut out = String::new();
    escape_text(all, &mut out);
    assert_eq!(out, escaped);
    assert_eq!(
        to_markdown_v2("plain, words; ok? yes: 100% @me $5 & 'q' \"d\" / ^ ,"),
        "plain, words; ok? yes: 100% @me $5 & 'q' \"d\" / ^ ,"
    );
    assert_eq!(
        to_markdown_v2("1. a.b! c-d (e) #f"),
        "1\\. a\\.b\\! c\\-d \\(e\\) \\#f"
    );
    // Inside code and pre: only ` and \.
    assert_eq!(to_markdown_v2("`a_b*c.d\\e`"), "`a_b*c.d\\\\e`");
    assert_eq!(
        to_markdown_v2("```rust\nlet x = a.b(c) * 2; // `q` \\n\n```"),
        "```rust\nlet x = a.b(c) * 2; // \\`q\\` \\\\n\n```"
    );
    // Inside a link's (...): only ) and \.
    assert_eq!(
        to_markdown_v2("[the docs](https://x.org/a_(b)?c=d.e)"),
        "[the docs](https://x.org/a_(b\\)?c=d.e)"
    );
    assert_eq!(
        to_markdown_v2("[a.b](https://x.org)"),
        "[a\\.b](https://x.org)"
    );
}

#[test]
fn entities_convert() {
    assert_eq!(
        to_markdown_v2("**bold** and *it* and _it2_"),
        "*bold* and _it_ and _it2_"
    );
    assert_eq!(to_markdown_v2("~~gone~~"), "~gone~");
    assert_eq!(to_markdown_v2("***both***"), "*_both_*");
    assert_eq!(to_markdown_v2("**a *b* c**"), "*a _b_ c*");
    assert_eq!(to_markdown_v2("*a **b** c*"), "_a *b* c_");
    assert_eq!(to_markdown_v2("# Title.\n## Sub"), "*Title\\.*\n*Sub*");
    assert_eq!(
        to_markdown_v2("- one\n  * two\n+ three"),
        "• one\n  • two\n• three"
    );
    assert_eq!(
        to_markdown_v2("> quoted **x**\n>> deeper"),
        ">quoted *x*\n>deeper"
    );
    assert_eq!(to_markdown_v2("**`code` in bold**"), "*`code` in bold*");
    assert_eq!(
        to_markdown_v2("<https://a.b/c>"),
        "[https://a\\.b/c](https://a.b/c)"
    );
    assert_eq!(to_markdown_v2("[rel](docs/a.md)"), "rel \\(docs/a\\.md\\)");
    assert_eq!(to_markdown_v2("---"), "——————");
    // A fenced block with its language; an unknown info string is dropped.
    assert_eq!(
        to_markdown_v2("```python\nprint(1)\n```"),
        "```python\nprint(1)\n```"
    );
    assert_eq!(to_markdown_v2("~~~ {weird stuff}\nx\n~~~"), "```\nx\n```");
}

#[test]
fn odd_input() {
    // Unbalanced and stray markers are text.
    assert_eq!(to_markdown_v2("**unbalanced"), "\\*\\*unbalanced");
    assert_eq!(to_markdown_v2("a lone ` backtick"), "a lone \\` backtick");
    assert_eq!(to_markdown_v2("2 * 3 * 4"), "2 \\* 3 \\* 4");
    assert_eq!(to_markdown_v2("snake_case_name"), "snake\\_case\\_name");
    assert_eq!(to_markdown_v2("**a `**` b**"), "*a `**` b*");
    assert_eq!(
        to_markdown_v2("[not a link] (x)"),
        "\\[not a link\\] \\(x\\)"
    );
    assert_eq!(to_markdown_v2("a **** b"), "a \\*\\*\\*\\* b");
    assert_eq!(to_markdown_v2("~one~"), "\\~one\\~");
    // A block that never closes is closed.
    assert_eq!(to_markdown_v2("```sh\nls"), "```sh\nls\n```");
    // Italic next to italic in another link: never `__`.
    let out = to_markdown_v2("[*a*](https://a.b)[*b*](https://c.d)");
    assert!(!out.contains("__"), "{out}");
}

#[test]
fn plain_text() {
    assert_eq!(
        to_plain("**Bold** [the docs](https://x.org/a) and <https://y.org>\n```py\nx = 1\n```"),
        "Bold the docs (https://x.org/a) and https://y.org\nx = 1"
    );
    assert_eq!(to_plain("# Head\n- item `c`"), "Head\n• item c");
}

#[test]
fn lengths_are_utf16() {
    assert_eq!(utf16_len("😀"), 2);
    assert_eq!(utf16_len("é"), 1);
    // 3,000 emoji are 6,000 units: two parts, none over 4,096.
    let text = "😀".repeat(3000);
    let parts = split(&text, LIMIT);
    assert_eq!(parts.len(), 2);
    assert!(parts.iter().all(|p| utf16_len(p) <= LIMIT));
    assert_eq!(parts.concat(), text);
    let parts = parts_of(&text);
    assert!(parts.iter().all(|p| utf16_len(&p.v2) <= LIMIT));
}

fn parts_of(markdown: &str) -> Vec<Part> {
    parts(markdown, LIMIT)
}

/// The 10,000-character answer: prose, a long Python block across the
/// first cut, more prose.
fn long_answer() -> String {
    let mut md = String::from("# Report\n\n");
    while md.len() < 2500 {
        md.push_str("Some prose with a [link](https://example.org/x) and **bold** words. ");
    }
    md.push_str("\n\n```python\n");
    let mut i = 0;
    while md.len() < 8000 {
        md.push_str(&format!(
            "value_{i} = compute(`x`, {i}) * 2.5  # step {i}\n"
        ));
        i += 1;
    }
    md.push_str("```\n\nAfter the block.\n\n");
    while md.chars().count() < 10_000 {
        md.push_str("More words after the code. ");
    }
    md
}

#[test]
fn ten_thousand_characters_in_three_parts() {
    let md = long_answer();
    assert!(md.chars().count() >= 10_000);
    let parts = parts_of(&md);
    assert_eq!(
        parts.len(),
        3,
        "{:#?}",
        parts.iter().map(|p| p.v2.len()).collect::<Vec<_>>()
    );
    for part in &parts {
        assert!(utf16_len(&part.v2) <= LIMIT);
        // Fences balance in each part.
        assert_eq!(part.v2.matches("```").count() % 2, 0, "{}", part.v2);
    }
    // The block is cut at a part boundary: closed there, reopened
    // with its language (and not at its first line) in the next part.
    let cut = (0..parts.len() - 1)
        .find(|&n| parts[n].v2.ends_with("```") && parts[n + 1].v2.starts_with("```python\n"))
        .expect("a block cut across parts");
    assert!(parts[cut].v2.contains("value_"));
    assert!(!parts[cut + 1].v2.starts_with("```python\nvalue_0 "));
    // Nothing lost: the code lines all arrive once.
    let all: String = parts
        .iter()
        .map(|p| p.v2.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(all.matches("value_0 =").count(), 1);
    assert!(all.contains("After the block\\."));
    // The plain parts carry the same text without markup.
    assert!(parts[1].plain.contains("value_"));
    assert!(!parts[1].plain.contains("```"));
}

#[test]
fn split_reopens_blocks() {
    let mut text = String::from("intro\n\n```rust\n");
    for i in 0..40 {
        text.push_str(&format!("line {i}\n"));
    }
    text.push_str("```\nend");
    let parts = split(&text, 100);
    assert!(parts.len() > 2);
    for (n, part) in parts.iter().enumerate() {
        assert!(utf16_len(part) <= 100, "{part}");
        if n > 0 && part.contains("line") {
            assert!(part.starts_with("```rust\n"), "{part}");
        }
        assert_eq!(part.matches("```").count() % 2, 0, "{part}");
    }
    // Cut at a space when a line is too long.
    let parts = split("aaaa bbbb cccc dddd", 10);
    assert_eq!(parts, vec!["aaaa bbbb", "cccc dddd"]);
    // A paragraph break is preferred to a line break.
    let parts = split("one two three\nfour\n\nfive six seven\neight", 30);
    assert_eq!(parts, vec!["one two three\nfour", "five six seven\neight"]);
}

#[test]
fn long_lines_keep_entities_valid() {
    let md = format!("**{}**", "word ".repeat(2000).trim_end());
    let parts = parts_of(&md);
    assert!(parts.len() >= 3);
    for part in &parts {
        assert!(utf16_len(&part.v2) <= LIMIT);
        assert!(
            part.v2.starts_with('*') && part.v2.ends_with('*'),
            "{}",
            &part.v2[..20]
        );
    }
    // One giant word of reserved characters: cut anywhere, still escaped.
    let md = ".".repeat(5000);
    let parts = parts_of(&md);
    assert_eq!(parts.len(), 3);
    for part in &parts {
        assert!(utf16_len(&part.v2) <= LIMIT);
        assert!(!part.v2.contains(".."), "every dot escaped");
    }
}

#[test]
fn a_line_of_spaces_then_a_dash_and_an_escape_stays_within_the_limit() {
    // Found by the coverage-guided fuzzer (telegram-markdown-v2): 64 spaces,
    // a dash, 5 spaces, a backslash and 197 NULs, cut at 64 units.
    let markdown = format!("{}-{}\\{}", " ".repeat(64), " ".repeat(5), "\0".repeat(197));
    for limit in [64, 65, 100, 4096] {
        for (i, part) in parts(&markdown, limit).iter().enumerate() {
            let units = utf16_len(&part.v2);
            assert!(
                units <= limit,
                "part {i} is {units} units, over {limit}: {:?}",
                part.v2
            );
        }
    }
}
