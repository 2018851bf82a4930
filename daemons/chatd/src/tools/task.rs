//! task (Agents mode): the main agent hands a job to a worker. What the
//! call asks is read and checked here, the brief's shape and its lack of
//! code included, so a bad brief is refused before any worker starts;
//! `runs/tasks.rs` starts the worker and waits for its report.

use serde_json::{json, Value};

use super::{Effect, ToolSpec};

pub const NAME: &str = "task";
/// Workers one run of the main agent may start, at most.
pub const PER_RUN_MAX: usize = 8;
/// A title's characters, at most.
const TITLE_CHARS: usize = 80;
/// `expect`'s characters, at most.
const EXPECT_CHARS: usize = 2_000;
/// HTML tags a brief may hold before it counts as markup to copy.
const TAGS_MAX: usize = 4;
/// Code-like lines in a row a brief may hold.
const CODE_RUN_MAX: usize = 8;
/// A line this long with almost no spaces and many braces is minified code.
const MINIFIED_CHARS: usize = 200;

/// The four lines a brief must have, in the words the model writes them.
pub const BRIEF_LINES: [&str; 4] = ["Goal", "Files", "Constraints", "Check"];

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME,
        description: "Hand a job to a worker: a fresh agent with the write tools and bash that \
            works in this chat's files and answers with a report. Give it every file write and \
            every build or fix of more than one step. `brief` has four lines, `Goal:`, `Files:`, \
            `Constraints:` and `Check:`, and describes the job in words: no code, no code \
            fences, no markup to copy (the worker writes the code). One worker runs at a time; \
            at most 8 a run.",
        parameters: json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "description": "A few words naming the job"},
                "brief": {"type": "string", "description": "Goal: ...\nFiles: ...\nConstraints: ...\nCheck: ... (in words, no code)"},
                "expect": {"type": "string", "description": "What you need back from the worker"}
            },
            "required": ["title", "brief", "expect"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

/// A call's arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub title: String,
    pub brief: String,
    pub expect: String,
}

impl Args {
    /// The arguments, or why not, naming the field and the limit. A brief
    /// without its four lines or with code in it is refused here.
    pub fn parse(arguments: &str) -> Result<Args, String> {
        let map = super::object_of(arguments, NAME, &["title", "brief", "expect"])?;
        let text = |name: &str| -> Result<String, String> {
            let text = map
                .get(name)
                .and_then(Value::as_str)
                .map(str::trim)
                .unwrap_or("");
            if text.is_empty() {
                return Err(format!("`{name}` is required, as a string"));
            }
            Ok(text.to_string())
        };
        let title = text("title")?;
        if title.chars().count() > TITLE_CHARS || title.contains('\n') {
            return Err(format!(
                "`title` must be one line of at most {TITLE_CHARS} characters"
            ));
        }
        let expect = text("expect")?;
        if expect.chars().count() > EXPECT_CHARS {
            return Err(format!("`expect` is over {EXPECT_CHARS} characters"));
        }
        let brief = text("brief")?;
        if let Some(why) = brief_refusal(&brief) {
            return Err(format!("`brief` {why}; no worker started"));
        }
        Ok(Args {
            title,
            brief,
            expect,
        })
    }
}

/// Why a brief cannot go to a worker: a missing line of the four, or code.
pub fn brief_refusal(brief: &str) -> Option<String> {
    let missing: Vec<&str> = BRIEF_LINES
        .iter()
        .copied()
        .filter(|name| {
            !brief
                .lines()
                .any(|l| field_of(l).is_some_and(|f| f == *name))
        })
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "misses the line{} {}: a brief has four lines, Goal:, Files:, Constraints: and Check:",
            if missing.len() == 1 { "" } else { "s" },
            missing
                .iter()
                .map(|m| format!("{m}:"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    code_in(brief).map(|what| {
        format!("holds code ({what}): describe the job in words and let the worker write the code")
    })
}

/// Which of the four lines `line` starts, if one (`- **Goal:** …` too).
fn field_of(line: &str) -> Option<&'static str> {
    let bare = line
        .trim_start()
        .trim_start_matches(['-', '*', '#', ' '])
        .trim_start();
    BRIEF_LINES.iter().copied().find(|name| {
        // `get`: a brief is the model's text, and a cut inside a character is no match.
        bare.get(..name.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(name))
            && bare[name.len()..].trim_start_matches('*').starts_with(':')
    })
}

/// What in `text` is code, if anything: a fence, markup, a run of
/// code-like lines (blank lines between them do not end a run), a minified
/// line or a `CODE:` block.
fn code_in(text: &str) -> Option<String> {
    let mut run = 0usize;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            return Some("a code fence".to_string());
        }
        if trimmed.starts_with("CODE:") {
            return Some("a CODE: block".to_string());
        }
        if minified(trimmed) {
            return Some("a line of minified code".to_string());
        }
        if trimmed.is_empty() {
            continue;
        }
        run = if code_like(trimmed) { run + 1 } else { 0 };
        if run > CODE_RUN_MAX {
            return Some(format!("more than {CODE_RUN_MAX} code-like lines in a row"));
        }
    }
    let tags = html_tags(text);
    (tags > TAGS_MAX).then(|| format!("{tags} HTML tags, more than {TAGS_MAX}"))
}

/// A line that reads as a statement of a program rather than prose: it
/// ends a statement or opens a block, defines something, assigns, compares,
/// or is a JSON member.
fn code_like(line: &str) -> bool {
    if field_of(line).is_some() {
        return false;
    }
    const DEFINES: [&str; 8] = [
        "fn ",
        "pub fn ",
        "def ",
        "function ",
        "class ",
        "#include",
        "import ",
        "async def ",
    ];
    const BLOCKS: [&str; 8] = [
        "if ", "elif ", "else", "for ", "while ", "try", "except", "with ",
    ];
    let first = line.split_whitespace().next().unwrap_or("");
    let assigns = line.split_once(" = ").is_some_and(|(left, _)| {
        !left.is_empty()
            && left
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '$'))
    });
    line.ends_with([';', '{', '}'])
        || line == "}"
        || (DEFINES.iter().any(|d| line.starts_with(d)) && line.contains(['(', ':', '{']))
        || (BLOCKS.iter().any(|b| line.starts_with(b)) && line.ends_with(':'))
        || ["=>", " == ", ":=", " != ", "->"]
            .iter()
            .any(|op| line.contains(op))
        || assigns
        || (first.starts_with('"') && line.contains("\":"))
}

/// A long line with almost no spaces and many of a program's marks.
fn minified(line: &str) -> bool {
    let chars = line.chars().count();
    if chars < MINIFIED_CHARS {
        return false;
    }
    let spaces = line.chars().filter(|c| c.is_whitespace()).count();
    let marks = line
        .chars()
        .filter(|c| matches!(c, ';' | '{' | '}'))
        .count();
    spaces * 20 < chars && marks >= 5
}

/// How many HTML tags `text` holds (`<div>`, `</p>`, `<br/>`).
fn html_tags(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut count = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'<' {
            let mut j = i + 1;
            if bytes.get(j) == Some(&b'/') {
                j += 1;
            }
            if bytes.get(j).is_some_and(u8::is_ascii_alphabetic) {
                let close = bytes[j..]
                    .iter()
                    .take_while(|b| **b != b'\n' && **b != b'<')
                    .position(|b| *b == b'>');
                if let Some(at) = close {
                    count += 1;
                    i = j + at;
                }
            }
        }
        i += 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "Goal: a clock page that shows the time in three cities\n\
        Files: clock.html, clock.css\n\
        Constraints: no libraries; works offline\n\
        Check: open it with render_page and read the three times";

    fn args(brief: &str) -> String {
        json!({"title": "Clock", "brief": brief, "expect": "the files and what the check showed"})
            .to_string()
    }

    #[test]
    fn a_brief_with_its_four_lines_in_words_is_taken() {
        let parsed = Args::parse(&args(GOOD)).expect("taken");
        assert_eq!(parsed.title, "Clock");
        let marked = "- **Goal:** x\n- **Files:** y\n- **Constraints:** z\n- **Check:** w";
        assert!(
            brief_refusal(marked).is_none(),
            "{:?}",
            brief_refusal(marked)
        );
    }

    #[test]
    fn a_brief_missing_a_line_is_refused_naming_it() {
        let why = Args::parse(&args("Goal: x\nFiles: y")).unwrap_err();
        assert!(why.contains("Constraints:, Check:"), "{why}");
    }

    #[test]
    fn code_in_a_brief_is_refused_before_a_worker_starts() {
        let fence = format!("{GOOD}\n```js\nlet x = 1;\n```");
        assert!(Args::parse(&args(&fence))
            .unwrap_err()
            .contains("a code fence"));
        let block = format!("{GOOD}\nCODE: print(1)");
        assert!(Args::parse(&args(&block)).unwrap_err().contains("CODE:"));
        let tags = format!("{GOOD}\n<div><p>a</p><span>b</span></div>");
        assert!(Args::parse(&args(&tags)).unwrap_err().contains("HTML tags"));
        let lines = (0..9)
            .map(|i| format!("let v{i} = f({i});"))
            .collect::<Vec<_>>();
        let run = format!("{GOOD}\n{}", lines.join("\n"));
        assert!(Args::parse(&args(&run))
            .unwrap_err()
            .contains("code-like lines"));
        let mini = format!(
            "{GOOD}\n{}",
            "function a(b){b++;};c={d:1};x=[1,2];".repeat(8)
        );
        assert!(Args::parse(&args(&mini)).unwrap_err().contains("minified"));
    }

    #[test]
    fn a_few_code_words_in_prose_pass() {
        let prose = format!(
            "{GOOD}\nUse <b>bold</b> for the city names.\nThe function tick() runs each second."
        );
        assert!(
            brief_refusal(&prose).is_none(),
            "{:?}",
            brief_refusal(&prose)
        );
        // Eight code-like lines are still a sketch, not a program.
        let lines = (0..8)
            .map(|i| format!("step {i} ends here;"))
            .collect::<Vec<_>>();
        let sketch = format!("{GOOD}\n{}", lines.join("\n"));
        assert!(brief_refusal(&sketch).is_none());
    }

    #[test]
    fn a_brief_in_any_script_is_read_and_blank_lines_do_not_hide_code() {
        let accented = "Café: ouvert\nGoal: une horloge\nFiles: a.html\nConstraints: •\nCheck: ✓";
        assert!(
            brief_refusal(accented).is_none(),
            "{:?}",
            brief_refusal(accented)
        );
        let spaced = (0..9)
            .map(|i| format!("total{i} = compute({i})\n"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(brief_refusal(&format!("{GOOD}\n{spaced}")).is_some());
        let python = "def tick(now):\n".to_string()
            + &(0..8)
                .map(|i| format!("if hour == {i}:\n"))
                .collect::<String>();
        assert!(brief_refusal(&format!("{GOOD}\n{python}")).is_some());
        // A long list of ordinary steps is prose.
        let steps = (0..12)
            .map(|i| format!("- step {i}: show the time from the city list (see above)\n"))
            .collect::<String>();
        assert!(brief_refusal(&format!("{GOOD}\n{steps}")).is_none());
    }

    #[test]
    fn bad_fields_name_the_field_and_the_limit() {
        let long = json!({"title": "x".repeat(81), "brief": GOOD, "expect": "y"}).to_string();
        assert!(Args::parse(&long).unwrap_err().contains("`title`"));
        let none = json!({"title": "x", "brief": GOOD}).to_string();
        assert!(Args::parse(&none)
            .unwrap_err()
            .contains("`expect` is required"));
        let other = json!({"title": "x", "brief": GOOD, "expect": "y", "code": 1}).to_string();
        assert!(Args::parse(&other)
            .unwrap_err()
            .contains("`code` is not an argument"));
        assert!(Args::parse("[1]").is_err());
    }
}
