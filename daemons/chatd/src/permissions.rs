//! Permission modes and rules of the agent: whether a tool call runs, asks
//! the user or is refused. Pure logic, no I/O: the caller works out whether a
//! call stays inside the chat's workspace or sandbox and passes that in.
//!
//! Modes: `ask` asks before every write and command, `auto` (the default)
//! runs what stays inside and asks for what leaves, `yolo` runs everything.
//! Two things hold in every mode: a deny rule refuses, and `rm`/`rmdir`
//! aimed at `/`, the workspace root or a home asks.
//!
//! Command rules name a command's first word, or its first two for tools
//! whose second word is the verb (`git push`). A chained command is split
//! into parts; it runs by rule only when every part is allowed and is refused
//! when any part is denied.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How much the agent may do without asking; set per chat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Ask,
    #[default]
    Auto,
    Yolo,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Ask, Mode::Auto, Mode::Yolo];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::Auto => "auto",
            Mode::Yolo => "yolo",
        }
    }

    /// Parses a mode as a user or a config file writes it.
    pub fn parse(text: &str) -> Result<Mode, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "ask" => Ok(Mode::Ask),
            "auto" => Ok(Mode::Auto),
            "yolo" => Ok(Mode::Yolo),
            _ => Err(format!(
                "{text:?} is not a permission mode: use ask, auto or yolo"
            )),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a tool call does, as far as permissions care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    Read,
    Write,
    Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
        }
    }
}

/// A saved rule. For commands `pattern` is a key such as `"git push"` or
/// `"ls"` (a one-word key also covers its two-word forms); for other tools
/// `""` means any use (their other patterns match nothing yet). A command
/// rule with `""` also means any use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub tool: String,
    pub pattern: String,
    pub verdict: Verdict,
}

impl Rule {
    pub fn allow(tool: &str, pattern: &str) -> Rule {
        Rule {
            tool: tool.to_string(),
            pattern: pattern.to_string(),
            verdict: Verdict::Allow,
        }
    }

    pub fn deny(tool: &str, pattern: &str) -> Rule {
        Rule {
            tool: tool.to_string(),
            pattern: pattern.to_string(),
            verdict: Verdict::Deny,
        }
    }

    fn any_use(&self) -> bool {
        self.pattern.trim().is_empty()
    }

    /// An allow rule for exactly this command line (`=` then the command):
    /// what "Always on this instance" saves for a command on this machine,
    /// so the approval never stretches to other arguments.
    pub fn exact(tool: &str, command: &str) -> Rule {
        Rule::allow(tool, &format!("={}", command.trim()))
    }

    /// The command an exact rule names.
    fn exact_command(&self) -> Option<&str> {
        self.pattern.strip_prefix('=')
    }

    /// Whether the rule covers a part whose key is `key`.
    fn covers(&self, key: &str) -> bool {
        if self.exact_command().is_some() {
            return false;
        }
        let pattern: Vec<&str> = self.pattern.split_whitespace().collect();
        if pattern.is_empty() {
            return true;
        }
        let key: Vec<&str> = key.split_whitespace().collect();
        pattern == key || (pattern.len() == 1 && key.first() == pattern.first())
    }
}

/// Who let a call run; stored as the `approved` value of the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    Auto,
    Yolo,
    User,
    Rule,
}

impl Approval {
    pub fn as_str(self) -> &'static str {
        match self {
            Approval::Auto => "auto",
            Approval::Yolo => "yolo",
            Approval::User => "user",
            Approval::Rule => "rule",
        }
    }
}

impl fmt::Display for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Run(Approval),
    Ask { reason: String },
    Refuse { reason: String },
}

/// One tool call to decide on.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// The tool's name: `"bash"`, `"write_file"`, …
    pub tool: &'a str,
    pub effect: Effect,
    /// The command line, for tools whose effect is `Command`.
    pub command: Option<&'a str>,
    /// Whether the call stays inside the chat's workspace or sandbox.
    pub inside: bool,
    /// The workspace root as the command sees it, e.g. `"/workspace"`.
    pub workspace_root: Option<&'a str>,
}

/// One command of a chained command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The part as written (trimmed).
    pub text: String,
    /// The command's first word (basename), or its first two for two-word
    /// commands; `""` when the part runs no command (`FOO=1`, `> file`).
    pub key: String,
    /// Holds `$(...)`, backticks or `<(...)`: no rule allows it.
    pub substitution: bool,
}

const ASK_REASON: &str = "ask mode asks before writes and commands";
const LEAVES_REASON: &str = "it leaves the chat's workspace";

/// Decides whether `call` runs, asks or is refused under `mode` and `rules`
/// (rules of other tools are ignored).
pub fn decide(mode: Mode, call: &Call, rules: &[Rule]) -> Decision {
    let rules: Vec<&Rule> = rules.iter().filter(|r| r.tool == call.tool).collect();
    let denies = rules.iter().filter(|r| r.verdict == Verdict::Deny);
    let allows: Vec<&Rule> = rules
        .iter()
        .copied()
        .filter(|r| r.verdict == Verdict::Allow)
        .collect();

    // 1. A deny rule refuses in every mode.
    if denies.clone().any(|r| r.any_use()) {
        return Decision::Refuse {
            reason: format!("denied by a rule for {}", call.tool),
        };
    }
    let command = call.effect == Effect::Command;
    let parts = if command {
        analyze(call.command.unwrap_or(""), 0)
    } else {
        Vec::new()
    };
    // Commands inside substitutions, `sh -c` and `eval` count for deny rules
    // and the rm check too: they run all the same.
    let every = flatten(&parts);
    for part in &every {
        for rule in denies.clone() {
            if part.denied_by(rule) {
                return Decision::Refuse {
                    reason: format!(
                        "denied by the rule \"{}\" for {}",
                        rule.pattern.trim(),
                        call.tool
                    ),
                };
            }
        }
    }

    // 2. rm aimed at /, the workspace root or a home asks in every mode.
    for part in &every {
        if let Some((name, target)) = protected_target(&part.words, call.workspace_root) {
            return Decision::Ask {
                reason: format!("{name} aimed at {target} always asks"),
            };
        }
    }

    // 3.
    if mode == Mode::Yolo {
        return Decision::Run(Approval::Yolo);
    }

    // 4. Allow rules: one for exactly this command line, or for each part.
    let exact = command
        && allows.iter().any(|r| {
            r.exact_command()
                .is_some_and(|c| c == call.command.unwrap_or("").trim())
        });
    let by_rule = if exact {
        true
    } else if command {
        // Parts that run nothing (`FOO=1`) need no rule, but some part must
        // have matched one.
        let mut matched = false;
        let all = parts.iter().all(|part| {
            if part.substitution {
                return false;
            }
            if allows.iter().any(|r| r.covers(&part.key)) {
                matched = true;
                return true;
            }
            part.key.is_empty() && !part.redirects
        });
        all && matched
    } else {
        allows.iter().any(|r| r.any_use())
    };
    if by_rule {
        return Decision::Run(Approval::Rule);
    }

    // 5. and 6.
    match mode {
        Mode::Auto if call.inside => Decision::Run(Approval::Auto),
        Mode::Auto => Decision::Ask {
            reason: LEAVES_REASON.to_string(),
        },
        Mode::Ask if call.effect == Effect::Read => Decision::Run(Approval::Auto),
        _ => Decision::Ask {
            reason: ASK_REASON.to_string(),
        },
    }
}

/// The rules "always" on a consent card saves: for a command one Allow rule
/// per distinct part key (never an any-use rule, which would allow every
/// command), for another tool one any-use Allow rule.
pub fn rules_for_always(call: &Call) -> Vec<Rule> {
    if call.effect != Effect::Command {
        return vec![Rule::allow(call.tool, "")];
    }
    let mut out: Vec<Rule> = Vec::new();
    for part in split_command(call.command.unwrap_or("")) {
        if part.key.is_empty() || out.iter().any(|r| r.pattern == part.key) {
            continue;
        }
        out.push(Rule::allow(call.tool, &part.key));
    }
    out
}

/// Splits a command line into its parts at `&&`, `||`, `;`, `|`, `&`,
/// newlines and parentheses, minding quotes, escapes, comments and heredocs.
pub fn split_command(command: &str) -> Vec<Part> {
    analyze(command, 0)
        .into_iter()
        .map(|a| Part {
            text: a.text,
            key: a.key,
            substitution: a.substitution,
        })
        .collect()
}

/// Whether `part` is `rm`/`rmdir` with a target of `/`, a home, the
/// workspace root or one of their ancestors (relative targets count from the
/// workspace root). Commands inside substitutions and `sh -c` count too.
pub fn aims_at_protected(part: &Part, workspace_root: Option<&str>) -> bool {
    let parts = analyze(&part.text, 0);
    flatten(&parts)
        .iter()
        .any(|p| protected_target(&p.words, workspace_root).is_some())
}

// ---- analysis of a command line ----

/// Nesting of substitutions and `sh -c` followed; deeper ones are not
/// looked into (such a part is never allowed by a rule anyway).
const MAX_DEPTH: usize = 4;

struct Analyzed {
    text: String,
    key: String,
    substitution: bool,
    redirects: bool,
    /// Wrappers skipped for the key (`sudo`, `env`, …): deny rules see them.
    wrappers: Vec<String>,
    /// The words of the command, without redirections.
    words: Vec<String>,
    /// Commands run from inside this one: substitutions, `sh -c`, `eval`.
    nested: Vec<Analyzed>,
}

impl Analyzed {
    fn denied_by(&self, rule: &Rule) -> bool {
        (!self.key.is_empty() && rule.covers(&self.key))
            || self.wrappers.iter().any(|w| rule.covers(w))
    }
}

fn flatten(parts: &[Analyzed]) -> Vec<&Analyzed> {
    let mut out = Vec::new();
    for part in parts {
        out.push(part);
        out.extend(flatten(&part.nested));
    }
    out
}

fn analyze(command: &str, depth: usize) -> Vec<Analyzed> {
    Lexer::new(command)
        .run()
        .into_iter()
        .map(|segment| {
            let text = command
                .get(segment.start..segment.end)
                .unwrap_or("")
                .trim()
                .to_string();
            let redirects = segment
                .tokens
                .iter()
                .any(|t| matches!(t, Token::Redirect(_)));
            let words = command_words(&segment.tokens);
            let (wrappers, start) = command_start(&words);
            let rest = &words[start..];
            let key = match rest.split_first() {
                Some((first, args)) => command_key(first, args),
                None => wrappers.last().cloned().unwrap_or_default(),
            };
            let mut nested = Vec::new();
            if depth < MAX_DEPTH {
                let mut inner = segment.inner;
                inner.extend(shell_script(rest));
                for script in inner {
                    nested.extend(analyze(&script, depth + 1));
                }
            }
            Analyzed {
                text,
                key,
                substitution: segment.substitution,
                redirects,
                wrappers,
                words: rest.to_vec(),
                nested,
            }
        })
        .collect()
}

/// The script a shell runs from its arguments: `sh -c SCRIPT`, `eval ARGS`.
fn shell_script(words: &[String]) -> Option<String> {
    let (first, args) = words.split_first()?;
    match basename(first) {
        "eval" => Some(args.join(" ")),
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "ash" => {
            // `-c` may be bundled with other flags (`-lc`, `-ec`).
            let at = args
                .iter()
                .position(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'))?;
            args[at + 1..].iter().find(|a| !a.starts_with('-')).cloned()
        }
        _ => None,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    /// A word with quotes and escapes removed (substitutions kept raw).
    Word(String),
    /// A redirection operator with its descriptor (`2>`, `>>`, `<<`, `&>`);
    /// the word after it is its target.
    Redirect(String),
}

struct Segment {
    start: usize,
    end: usize,
    tokens: Vec<Token>,
    substitution: bool,
    /// Scripts of the substitutions in the segment.
    inner: Vec<String>,
}

struct Heredoc {
    delimiter: String,
    quoted: bool,
    strip_tabs: bool,
    segment: usize,
}

/// A shell lexer just good enough to find where commands start and end.
struct Lexer<'a> {
    src: &'a str,
    chars: Vec<(usize, char)>,
    i: usize,
    segments: Vec<Segment>,
    start: usize,
    tokens: Vec<Token>,
    substitution: bool,
    inner: Vec<String>,
    word: String,
    in_word: bool,
    quoted: bool,
    /// After `<<` (`Some(true)` after `<<-`): the next word is a delimiter.
    delimiter_next: Option<bool>,
    heredocs: Vec<Heredoc>,
}

impl<'a> Lexer<'a> {
    fn new(src: &'a str) -> Lexer<'a> {
        Lexer {
            src,
            chars: src.char_indices().collect(),
            i: 0,
            segments: Vec::new(),
            start: 0,
            tokens: Vec::new(),
            substitution: false,
            inner: Vec::new(),
            word: String::new(),
            in_word: false,
            quoted: false,
            delimiter_next: None,
            heredocs: Vec::new(),
        }
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.i + ahead).map(|&(_, c)| c)
    }

    /// Byte offset of the cursor.
    fn pos(&self) -> usize {
        self.chars.get(self.i).map_or(self.src.len(), |&(at, _)| at)
    }

    fn push(&mut self, c: char) {
        self.word.push(c);
        self.in_word = true;
    }

    fn finish_word(&mut self) {
        if !self.in_word {
            return;
        }
        if let Some(strip_tabs) = self.delimiter_next.take() {
            self.heredocs.push(Heredoc {
                delimiter: self.word.clone(),
                quoted: self.quoted,
                strip_tabs,
                segment: self.segments.len(),
            });
        }
        self.tokens
            .push(Token::Word(std::mem::take(&mut self.word)));
        self.in_word = false;
        self.quoted = false;
    }

    fn end_segment(&mut self, end: usize) {
        self.finish_word();
        self.delimiter_next = None;
        let tokens = std::mem::take(&mut self.tokens);
        let inner = std::mem::take(&mut self.inner);
        if !tokens.is_empty() || self.substitution {
            self.segments.push(Segment {
                start: self.start,
                end,
                tokens,
                substitution: self.substitution,
                inner,
            });
        }
        self.substitution = false;
    }

    fn separator(&mut self, len: usize) {
        let at = self.pos();
        self.end_segment(at);
        self.i += len;
        self.start = self.pos();
    }

    fn run(mut self) -> Vec<Segment> {
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' | '\r' => {
                    self.finish_word();
                    self.i += 1;
                }
                '\n' => self.newline(),
                ';' => self.separator(1),
                '&' => match self.peek(1) {
                    Some('&') => self.separator(2),
                    Some('>') => self.redirect(),
                    _ => self.separator(1),
                },
                '|' => match self.peek(1) {
                    Some('|') | Some('&') => self.separator(2),
                    _ => self.separator(1),
                },
                // `a=(x y)` is an array, not a subshell.
                '(' if self.in_word && self.word.ends_with('=') => {
                    self.read_balanced();
                }
                '(' | ')' => self.separator(1),
                '<' | '>' if self.peek(1) == Some('(') => {
                    // Process substitution runs a command like `$(...)`.
                    self.push(c);
                    self.i += 1;
                    let mark = self.word.len();
                    self.read_balanced();
                    self.substituted(mark);
                }
                '<' | '>' => self.redirect(),
                '#' if !self.in_word => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.i += 1;
                    }
                }
                '\\' => match self.peek(1) {
                    // A line continuation joins the lines.
                    Some('\n') => self.i += 2,
                    Some(next) => {
                        self.push(next);
                        self.quoted = true;
                        self.i += 2;
                    }
                    None => {
                        self.push('\\');
                        self.i += 1;
                    }
                },
                '\'' => {
                    self.i += 1;
                    self.in_word = true;
                    self.quoted = true;
                    while let Some(c) = self.peek(0) {
                        self.i += 1;
                        if c == '\'' {
                            break;
                        }
                        self.word.push(c);
                    }
                }
                '"' => self.double_quoted(),
                '$' => match self.peek(1) {
                    Some('\'') => self.ansi_c_quoted(),
                    Some('(') => self.dollar_paren(),
                    // `$"..."` is a translated string: a double-quoted one.
                    Some('"') => self.i += 1,
                    _ => {
                        self.push('$');
                        self.i += 1;
                    }
                },
                '`' => self.backticks(),
                _ => {
                    self.push(c);
                    self.i += 1;
                }
            }
        }
        let end = self.src.len();
        self.end_segment(end);
        self.segments
    }

    fn newline(&mut self) {
        let at = self.pos();
        self.end_segment(at);
        self.i += 1;
        // Heredoc bodies start after the line that opened them; their
        // lines are data, not commands.
        let heredocs = std::mem::take(&mut self.heredocs);
        let last = self.segments.len().checked_sub(1);
        let mut extend_last = false;
        for heredoc in heredocs {
            let mut runs_commands = false;
            while self.i < self.chars.len() {
                let from = self.pos();
                while self.peek(0).is_some_and(|c| c != '\n') {
                    self.i += 1;
                }
                let line = self.src.get(from..self.pos()).unwrap_or("");
                self.i += 1;
                let line = line.strip_suffix('\r').unwrap_or(line);
                let bare = if heredoc.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line
                };
                if bare == heredoc.delimiter {
                    break;
                }
                // An unquoted delimiter lets the body expand `$(...)`.
                if !heredoc.quoted && (line.contains("$(") || line.contains('`')) {
                    runs_commands = true;
                }
            }
            if let Some(segment) = self.segments.get_mut(heredoc.segment) {
                segment.substitution |= runs_commands;
            }
            extend_last |= Some(heredoc.segment) == last;
        }
        // The body belongs to the text of the part that opened it.
        if extend_last {
            let end = self.pos();
            if let Some(segment) = self.segments.last_mut() {
                segment.end = end;
            }
        }
        self.start = self.pos();
    }

    fn redirect(&mut self) {
        // A bare number right before `>` or `<` is the descriptor.
        let descriptor = self.in_word
            && !self.quoted
            && !self.word.is_empty()
            && self.word.chars().all(|c| c.is_ascii_digit());
        let mut op = String::new();
        if descriptor {
            op = std::mem::take(&mut self.word);
            self.in_word = false;
        } else {
            self.finish_word();
        }
        let mut heredoc = None;
        match self.peek(0) {
            Some('&') => {
                op.push_str("&>");
                self.i += 2;
                if self.peek(0) == Some('>') {
                    op.push('>');
                    self.i += 1;
                }
            }
            Some('>') => {
                op.push('>');
                self.i += 1;
                if let Some(c @ ('>' | '&' | '|')) = self.peek(0) {
                    op.push(c);
                    self.i += 1;
                }
            }
            Some('<') => {
                op.push('<');
                self.i += 1;
                match self.peek(0) {
                    Some('<') => {
                        op.push('<');
                        self.i += 1;
                        match self.peek(0) {
                            Some('<') => {
                                op.push('<');
                                self.i += 1;
                            }
                            Some('-') => {
                                op.push('-');
                                self.i += 1;
                                heredoc = Some(true);
                            }
                            _ => heredoc = Some(false),
                        }
                    }
                    Some(c @ ('&' | '>')) => {
                        op.push(c);
                        self.i += 1;
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        self.tokens.push(Token::Redirect(op));
        self.delimiter_next = heredoc;
    }

    fn double_quoted(&mut self) {
        self.i += 1;
        self.in_word = true;
        self.quoted = true;
        while let Some(c) = self.peek(0) {
            match c {
                '"' => {
                    self.i += 1;
                    return;
                }
                '\\' => match self.peek(1) {
                    Some(next @ ('$' | '`' | '"' | '\\')) => {
                        self.word.push(next);
                        self.i += 2;
                    }
                    Some('\n') => self.i += 2,
                    _ => {
                        self.word.push('\\');
                        self.i += 1;
                    }
                },
                '$' if self.peek(1) == Some('(') => self.dollar_paren(),
                '`' => self.backticks(),
                _ => {
                    self.word.push(c);
                    self.i += 1;
                }
            }
        }
    }

    fn ansi_c_quoted(&mut self) {
        self.i += 2;
        self.in_word = true;
        self.quoted = true;
        while let Some(c) = self.peek(0) {
            self.i += 1;
            match c {
                '\'' => return,
                '\\' => {
                    if let Some(next) = self.peek(0) {
                        self.word.push(next);
                        self.i += 1;
                    }
                }
                _ => self.word.push(c),
            }
        }
    }

    /// `$(...)` or `$((...))`, cursor on the `$`.
    fn dollar_paren(&mut self) {
        self.push('$');
        self.i += 1;
        let mark = self.word.len();
        self.read_balanced();
        let body = self.word.get(mark..).unwrap_or("");
        // Arithmetic runs nothing unless it holds a substitution itself
        // (bash does not fall back to running `$((cmd))` as a command).
        let arithmetic = body.starts_with("((")
            && body.ends_with("))")
            && !body.contains("$(")
            && !body.contains('`');
        if !arithmetic {
            self.substituted(mark);
        }
    }

    /// Marks the segment as substituting and keeps the script that
    /// `self.word[mark..]` (`(script)`) runs.
    fn substituted(&mut self, mark: usize) {
        self.substitution = true;
        let body = self.word.get(mark..).unwrap_or("");
        let script = body.strip_prefix('(').unwrap_or(body);
        let script = script.strip_suffix(')').unwrap_or(script);
        self.inner.push(script.to_string());
    }

    /// Reads a balanced `( ... )` raw into the word, cursor on the `(`.
    fn read_balanced(&mut self) {
        let mut depth = 0usize;
        while let Some(c) = self.peek(0) {
            self.push(c);
            self.i += 1;
            match c {
                '(' => depth += 1,
                ')' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return;
                    }
                }
                '\\' => {
                    if let Some(next) = self.peek(0) {
                        self.push(next);
                        self.i += 1;
                    }
                }
                '\'' | '"' | '`' => self.read_raw_until(c),
                _ => {}
            }
        }
    }

    /// Reads raw up to and including `close` (backslash escapes it, except
    /// in single quotes).
    fn read_raw_until(&mut self, close: char) {
        while let Some(c) = self.peek(0) {
            self.push(c);
            self.i += 1;
            if c == '\\' && close != '\'' {
                if let Some(next) = self.peek(0) {
                    self.push(next);
                    self.i += 1;
                }
            } else if c == close {
                return;
            }
        }
    }

    fn backticks(&mut self) {
        self.push('`');
        self.i += 1;
        let mark = self.word.len();
        self.read_raw_until('`');
        self.substitution = true;
        let body = self.word.get(mark..).unwrap_or("");
        let script = body.strip_suffix('`').unwrap_or(body).replace("\\`", "`");
        self.inner.push(script);
    }
}

/// The words of a segment without redirections and their targets.
fn command_words(tokens: &[Token]) -> Vec<String> {
    let mut out = Vec::new();
    let mut target = false;
    for token in tokens {
        match token {
            Token::Redirect(_) => target = true,
            Token::Word(_) if target => target = false,
            Token::Word(word) => out.push(word.clone()),
        }
    }
    out
}

/// Shell keywords that come before a command (`if rm …`, `do rm …`) or
/// close a block (`done`, `fi`), skipped when looking for the command.
const KEYWORDS: &[&str] = &[
    "!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac",
];

/// Commands that run the command after them, with their options that take
/// a value and how many plain arguments come before the command.
const WRAPPERS: &[(&str, &[&str], usize)] = &[
    (
        "sudo",
        &[
            "-u",
            "-g",
            "-p",
            "-C",
            "-D",
            "-r",
            "-t",
            "-U",
            "-T",
            "-R",
            "-h",
            "--user",
            "--group",
            "--prompt",
            "--close-from",
            "--chdir",
            "--role",
            "--type",
            "--other-user",
            "--command-timeout",
            "--chroot",
            "--host",
        ],
        0,
    ),
    ("doas", &["-u", "-C"], 0),
    (
        "env",
        &["-u", "--unset", "-C", "--chdir", "-S", "--split-string"],
        0,
    ),
    ("time", &["-f", "--format", "-o", "--output"], 0),
    ("nohup", &[], 0),
    ("command", &[], 0),
    ("exec", &["-a"], 0),
    ("nice", &["-n", "--adjustment"], 0),
    ("timeout", &["-s", "--signal", "-k", "--kill-after"], 1),
];

/// Skips assignments, keywords and wrappers: returns the wrappers seen and
/// where the command itself starts.
fn command_start(words: &[String]) -> (Vec<String>, usize) {
    let mut wrappers = Vec::new();
    let mut i = 0;
    while let Some(word) = words.get(i) {
        if is_assignment(word) || KEYWORDS.contains(&word.as_str()) {
            i += 1;
            continue;
        }
        let name = basename(word);
        let Some(&(_, valued, mut positional)) = WRAPPERS.iter().find(|w| w.0 == name) else {
            break;
        };
        wrappers.push(name.to_string());
        i += 1;
        while let Some(arg) = words.get(i) {
            if arg == "--" {
                i += 1;
                break;
            }
            if arg.starts_with('-') && arg.len() > 1 {
                i += 1;
                if !arg.contains('=') && valued.contains(&arg.as_str()) {
                    i += 1;
                }
            } else if positional > 0 && !is_assignment(arg) {
                positional -= 1;
                i += 1;
            } else {
                break;
            }
        }
    }
    (wrappers, i.min(words.len()))
}

fn is_assignment(word: &str) -> bool {
    let Some(eq) = word.find('=') else {
        return false;
    };
    let name = &word[..eq];
    let name = name.strip_suffix('+').unwrap_or(name);
    let name = match name.find('[') {
        Some(open) if name.ends_with(']') => &name[..open],
        Some(_) => return false,
        None => name,
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn basename(word: &str) -> &str {
    match word.rsplit('/').next() {
        Some(name) if !name.is_empty() => name,
        _ => word,
    }
}

/// Commands whose second word is the verb rules should name.
const TWO_WORD: &[&str] = &[
    "git",
    "npm",
    "npx",
    "yarn",
    "pnpm",
    "cargo",
    "pip",
    "pip3",
    "go",
    "docker",
    "podman",
    "kubectl",
    "apt",
    "apt-get",
    "brew",
    "systemctl",
    "gh",
    "uv",
    "poetry",
    "bundle",
    "gem",
    "composer",
    "dotnet",
    "terraform",
    "helm",
];

/// Global options of two-word commands that take the next word as value,
/// so `git -C repo push` is `git push`, not `git repo`.
fn option_takes_value(command: &str, option: &str) -> bool {
    let valued: &[&str] = match command {
        "git" => &[
            "-C",
            "-c",
            "--git-dir",
            "--work-tree",
            "--namespace",
            "--super-prefix",
            "--config-env",
        ],
        "cargo" => &["-C", "-Z", "--config", "--color"],
        "npm" | "npx" => &[
            "-C",
            "--prefix",
            "-w",
            "--workspace",
            "--registry",
            "--userconfig",
            "--cache",
            "--loglevel",
            "-p",
            "--package",
        ],
        "yarn" => &["--cwd", "--modules-folder", "--cache-folder"],
        "pnpm" => &["-C", "--dir", "-F", "--filter"],
        "go" => &["-C"],
        "docker" | "podman" => &[
            "-H",
            "--host",
            "-c",
            "--context",
            "--config",
            "-l",
            "--log-level",
            "--tlscacert",
            "--tlscert",
            "--tlskey",
            "--url",
            "--connection",
            "--root",
            "--runroot",
            "--storage-driver",
        ],
        "kubectl" => &[
            "-n",
            "--namespace",
            "--context",
            "--kubeconfig",
            "-s",
            "--server",
            "--cluster",
            "--user",
            "--token",
            "--as",
            "--as-group",
            "--request-timeout",
            "-v",
        ],
        "helm" => &[
            "-n",
            "--namespace",
            "--kube-context",
            "--kubeconfig",
            "--registry-config",
            "--repository-config",
            "--repository-cache",
            "--kube-apiserver",
            "--kube-token",
        ],
        "apt" | "apt-get" => &[
            "-o",
            "--option",
            "-t",
            "--target-release",
            "-c",
            "--config-file",
            "-a",
            "--host-architecture",
        ],
        "systemctl" => &[
            "-H",
            "--host",
            "-M",
            "--machine",
            "-t",
            "--type",
            "-p",
            "--property",
            "-s",
            "--signal",
            "-n",
            "--lines",
            "-o",
            "--output",
            "--root",
            "--state",
        ],
        "gh" => &["-R", "--repo", "--hostname"],
        "uv" => &[
            "--directory",
            "--project",
            "--cache-dir",
            "--config-file",
            "--color",
        ],
        "poetry" => &["-C", "--directory", "-P", "--project"],
        "composer" => &["-d", "--working-dir"],
        "pip" | "pip3" => &[
            "--python",
            "--log",
            "--proxy",
            "--retries",
            "--timeout",
            "--cache-dir",
            "--cert",
            "--client-cert",
        ],
        _ => &[],
    };
    valued.contains(&option)
}

fn command_key(first: &str, args: &[String]) -> String {
    let name = basename(first);
    if !TWO_WORD.contains(&name) {
        return name.to_string();
    }
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg.starts_with('-') {
            if !arg.contains('=') && option_takes_value(name, arg) {
                args.next();
            }
            continue;
        }
        // `cargo +nightly build`
        if name == "cargo" && arg.starts_with('+') {
            continue;
        }
        if arg.is_empty() {
            continue;
        }
        return format!("{name} {arg}");
    }
    name.to_string()
}

// ---- rm aimed at a protected place ----

/// `Some((command, target))` when the words are `rm`/`rmdir` aimed at a
/// protected place.
fn protected_target(words: &[String], workspace_root: Option<&str>) -> Option<(String, String)> {
    let (first, args) = words.split_first()?;
    let name = basename(first);
    if name != "rm" && name != "rmdir" {
        return None;
    }
    let root = workspace_root.and_then(|r| r.strip_prefix('/').map(components));
    let mut options_done = false;
    for arg in args {
        if !options_done {
            if arg == "--" {
                options_done = true;
                continue;
            }
            if arg.starts_with('-') && arg.len() > 1 {
                continue;
            }
        }
        if is_protected_path(arg, root.as_deref()) {
            return Some((name.to_string(), arg.clone()));
        }
    }
    None
}

fn components(path: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            _ => out.push(c.to_string()),
        }
    }
    out
}

/// A target resolved as far as it can be without a file system.
enum Place {
    /// An absolute path.
    Abs(Vec<String>),
    /// Relative to a home: `up` levels above it, then `rest`.
    Home { up: usize, rest: Vec<String> },
    /// Relative to the workspace root when its path is unknown.
    Cwd { up: usize, rest: Vec<String> },
}

impl Place {
    fn push(&mut self, component: &str) {
        match (self, component) {
            (_, "" | ".") => {}
            (Place::Abs(rest), "..") => {
                rest.pop();
            }
            (Place::Home { up, rest } | Place::Cwd { up, rest }, "..") => {
                if rest.pop().is_none() {
                    *up += 1;
                }
            }
            (Place::Abs(rest) | Place::Home { rest, .. } | Place::Cwd { rest, .. }, c) => {
                rest.push(c.to_string())
            }
        }
    }

    /// `/`, `/home`, `/home/<x>`, `/root`, a home, the workspace root or one
    /// of its ancestors.
    fn is_protected(&self, root: Option<&[String]>) -> bool {
        match self {
            Place::Abs(c) => {
                c.is_empty()
                    || c[0] == "home" && c.len() <= 2
                    || c.len() == 1 && c[0] == "root"
                    || root.is_some_and(|r| r.starts_with(c))
            }
            // Above a home only homes and their parents are near.
            Place::Home { up, rest } | Place::Cwd { up, rest } => rest.len() <= *up,
        }
    }

    /// Whether a protected place lies strictly inside (a glob here could
    /// reach it).
    fn holds_protected(&self, root: Option<&[String]>) -> bool {
        match self {
            Place::Abs(c) => {
                c.is_empty()
                    || c.len() == 1 && c[0] == "home"
                    || root.is_some_and(|r| r.len() > c.len() && r.starts_with(c))
            }
            Place::Home { up, rest } | Place::Cwd { up, rest } => rest.len() < *up,
        }
    }
}

/// Splits off how a target starts: `/`, `~`, `$HOME`, `$PWD`, another
/// variable, or nothing (relative to the workspace root).
fn place_of(target: &str, root: Option<&[String]>) -> Option<(Place, String)> {
    let home = || Place::Home {
        up: 0,
        rest: Vec::new(),
    };
    let cwd = || match root {
        Some(r) => Place::Abs(r.to_vec()),
        None => Place::Cwd {
            up: 0,
            rest: Vec::new(),
        },
    };
    if let Some(rest) = target.strip_prefix('/') {
        return Some((Place::Abs(Vec::new()), rest.to_string()));
    }
    if let Some(rest) = target.strip_prefix('~') {
        // `~`, `~/x` and `~user/x` all start at a home.
        let rest = rest.find('/').map_or("", |at| &rest[at + 1..]);
        return Some((home(), rest.to_string()));
    }
    if let Some(after) = target.strip_prefix('$') {
        let (name, rest) = if let Some(braced) = after.strip_prefix('{') {
            let close = braced.find('}')?;
            (&braced[..close], &braced[close + 1..])
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        let start = match name {
            "HOME" => home(),
            "PWD" => cwd(),
            // An unknown variable may be empty: `$DIR/` may be `/`.
            _ if rest.starts_with('/') => Place::Abs(Vec::new()),
            _ => return None,
        };
        if !rest.is_empty() && !rest.starts_with('/') {
            // `$HOMEBREW`-like suffixes make it another name.
            return None;
        }
        return Some((start, rest.to_string()));
    }
    Some((cwd(), target.to_string()))
}

fn is_protected_path(target: &str, root: Option<&[String]>) -> bool {
    let Some((mut place, rest)) = place_of(target, root) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').filter(|c| !c.is_empty()).collect();
    for (at, component) in parts.iter().enumerate() {
        if component.contains(['*', '?', '[']) {
            // `*` alone (and `.*`) at the end is everything in the folder.
            let everything = matches!(*component, "*" | ".*" | "**") && at + 1 == parts.len();
            return place.holds_protected(root) || everything && place.is_protected(root);
        }
        place.push(component);
    }
    place.is_protected(root)
}

#[cfg(test)]
mod exact_tests {
    use super::*;

    #[test]
    fn an_exact_rule_allows_that_command_line_only() {
        let rules = vec![Rule::exact("bash", "python3 build.py")];
        let call = |command: &'static str| Call {
            tool: "bash",
            effect: Effect::Command,
            command: Some(command),
            inside: true,
            workspace_root: None,
        };
        assert_eq!(
            decide(Mode::Ask, &call("python3 build.py"), &rules),
            Decision::Run(Approval::Rule)
        );
        assert_eq!(
            decide(Mode::Ask, &call(" python3 build.py "), &rules),
            Decision::Run(Approval::Rule)
        );
        for other in [
            "python3 -c 'import os'",
            "python3 build.py; curl x",
            "python3",
        ] {
            assert!(
                matches!(
                    decide(Mode::Ask, &call(other), &rules),
                    Decision::Ask { .. }
                ),
                "{other}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bash<'a>(command: &'a str, inside: bool) -> Call<'a> {
        Call {
            tool: "bash",
            effect: Effect::Command,
            command: Some(command),
            inside,
            workspace_root: Some("/workspace"),
        }
    }

    fn tool(name: &str, effect: Effect, inside: bool) -> Call<'_> {
        Call {
            tool: name,
            effect,
            command: None,
            inside,
            workspace_root: Some("/workspace"),
        }
    }

    fn keys(command: &str) -> Vec<String> {
        split_command(command).into_iter().map(|p| p.key).collect()
    }

    fn texts(command: &str) -> Vec<String> {
        split_command(command).into_iter().map(|p| p.text).collect()
    }

    fn is_ask(decision: &Decision) -> bool {
        matches!(decision, Decision::Ask { .. })
    }

    fn is_refuse(decision: &Decision) -> bool {
        matches!(decision, Decision::Refuse { .. })
    }

    #[test]
    fn modes_parse_and_print() {
        for mode in Mode::ALL {
            assert_eq!(Mode::parse(mode.as_str()), Ok(mode));
        }
        assert_eq!(Mode::parse(" YOLO "), Ok(Mode::Yolo));
        assert_eq!(
            Mode::parse("x"),
            Err("\"x\" is not a permission mode: use ask, auto or yolo".to_string())
        );
        assert_eq!(Mode::default(), Mode::Auto);
        assert_eq!(
            serde_json::to_string(&Mode::Yolo).ok().as_deref(),
            Some("\"yolo\"")
        );
        let rule: Rule = serde_json::from_str(r#"{"tool":"bash","pattern":"ls","verdict":"deny"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rule, Rule::deny("bash", "ls"));
        let names: Vec<&str> = [
            Approval::Auto,
            Approval::Yolo,
            Approval::User,
            Approval::Rule,
        ]
        .iter()
        .map(|a| a.as_str())
        .collect();
        assert_eq!(names, ["auto", "yolo", "user", "rule"]);
    }

    #[test]
    fn chain_with_a_part_not_allowed_asks() {
        let rules = [Rule::allow("bash", "git status")];
        let call = bash("git status && git push", false);
        assert!(is_ask(&decide(Mode::Ask, &call, &rules)));
        assert!(is_ask(&decide(Mode::Auto, &call, &rules)));
        // Every part allowed runs by rule.
        let rules = [
            Rule::allow("bash", "git status"),
            Rule::allow("bash", "git push"),
        ];
        assert_eq!(
            decide(Mode::Ask, &call, &rules),
            Decision::Run(Approval::Rule)
        );
    }

    #[test]
    fn deny_rule_on_one_part_refuses_in_every_mode() {
        let rules = [Rule::allow("bash", "ls"), Rule::deny("bash", "rm")];
        let call = bash("ls; rm -rf /", true);
        for mode in Mode::ALL {
            assert_eq!(
                decide(mode, &call, &rules),
                Decision::Refuse {
                    reason: "denied by the rule \"rm\" for bash".to_string()
                },
                "{mode}"
            );
        }
        // Rules of other tools do not count.
        let other = [Rule::deny("sh", "rm")];
        assert!(!is_refuse(&decide(Mode::Ask, &call, &other)));
    }

    #[test]
    fn substitution_is_never_allowed_by_a_rule() {
        let rules = [Rule::allow("bash", "echo")];
        for command in ["echo $(id)", "echo `id`", "echo \"$(id)\"", "diff <(ls) x"] {
            let call = bash(command, true);
            assert!(split_command(command)[0].substitution, "{command}");
            assert!(is_ask(&decide(Mode::Ask, &call, &rules)), "{command}");
        }
        // Single quotes keep it literal.
        let call = bash("echo '$(id)'", true);
        assert_eq!(
            decide(Mode::Ask, &call, &rules),
            Decision::Run(Approval::Rule)
        );
        // Plain arithmetic runs nothing.
        assert!(!split_command("echo $((1 + 2))")[0].substitution);
        // A deny rule on the first word still denies.
        let deny = [Rule::deny("bash", "echo")];
        assert!(is_refuse(&decide(
            Mode::Yolo,
            &bash("echo $(id)", true),
            &deny
        )));
        // And so does one on a command inside the substitution.
        let deny = [Rule::deny("bash", "curl")];
        assert!(is_refuse(&decide(
            Mode::Yolo,
            &bash("echo $(curl x)", true),
            &deny
        )));
    }

    #[test]
    fn rm_aimed_at_protected_places_asks_even_in_yolo() {
        for command in ["rm -rf ~", "rm -rf /", "rmdir /workspace", "rm -rf $HOME/"] {
            let decision = decide(Mode::Yolo, &bash(command, true), &[]);
            assert!(is_ask(&decision), "{command}: {decision:?}");
        }
        assert_eq!(
            decide(
                Mode::Yolo,
                &bash("rm -rf /", true),
                &[Rule::allow("bash", "rm")]
            ),
            Decision::Ask {
                reason: "rm aimed at / always asks".to_string()
            }
        );
        assert_eq!(
            decide(Mode::Yolo, &bash("rm -rf build/", true), &[]),
            Decision::Run(Approval::Yolo)
        );
    }

    #[test]
    fn protected_targets() {
        let protected = [
            "rm -rf /",
            "rm -rf /*",
            "rm -rf //",
            "rm -rf ~",
            "rm -rf ~/",
            "rm -rf ~/*",
            "rm -rf ~alice",
            "rm -rf $HOME",
            "rm -rf ${HOME}/",
            "rm -rf \"$HOME\"",
            "rm -rf /home",
            "rm -rf /home/alice/",
            "rm -rf /home/*",
            "rm -rf /root",
            "rm -rf /workspace",
            "rm -rf /workspace/",
            "rm -rf /workspace/src/..",
            "rm -rf .",
            "rm -rf ./",
            "rm -rf *",
            "rm -rf ..",
            "rm -r -- /",
            "sudo rm -rf /",
            "/bin/rm -rf /",
            "\\rm -rf /",
            "rm -rf $DIR/",
            "rm -rf $DIR/*",
            "rm -rf /h*",
            "rm -f x /",
            "cd x && rm -rf ~",
            "echo $(rm -rf /)",
            "bash -c 'rm -rf /'",
        ];
        for command in protected {
            let parts = split_command(command);
            assert!(
                parts
                    .iter()
                    .any(|p| aims_at_protected(p, Some("/workspace"))),
                "{command}"
            );
        }
        let fine = [
            "rm -rf build/",
            "rm -rf ./build",
            "rm -f *.o",
            "rm -rf /tmp/x",
            "rm -rf /workspace/build",
            "rm -rf ~/.cache/x",
            "rm -rf $HOME/.cache",
            "rm -rf $DIR",
            "rm -rf /home/alice/tmp",
            "rm -rf src/*",
            "ls /",
            "echo rm -rf /",
            "rm -rf '/tmp/a b'",
        ];
        for command in fine {
            let parts = split_command(command);
            assert!(
                !parts
                    .iter()
                    .any(|p| aims_at_protected(p, Some("/workspace"))),
                "{command}"
            );
        }
        // A deeper workspace root: its ancestors are protected too.
        let root = Some("/data/workspaces/c1");
        let part = |c: &str| split_command(c).remove(0);
        assert!(aims_at_protected(&part("rm -rf /data/workspaces"), root));
        assert!(aims_at_protected(&part("rm -rf /data/workspaces/*"), root));
        assert!(aims_at_protected(&part("rm -rf ../"), root));
        assert!(!aims_at_protected(&part("rm -rf ./x"), root));
        // Without a known root the current folder is still the root.
        assert!(aims_at_protected(&part("rm -rf ."), None));
        assert!(!aims_at_protected(&part("rm -rf x"), None));
    }

    #[test]
    fn quotes_keep_separators_inside() {
        assert_eq!(texts("echo \"a && b\""), ["echo \"a && b\""]);
        assert_eq!(texts("grep 'x|y' f | wc -l"), ["grep 'x|y' f", "wc -l"]);
        assert_eq!(texts("echo a\\;b; ls"), ["echo a\\;b", "ls"]);
        assert_eq!(
            keys("a && b || c; d | e & f\ng"),
            ["a", "b", "c", "d", "e", "f", "g"]
        );
        assert_eq!(keys("(cd x && make) |& tee log"), ["cd", "make", "tee"]);
        assert_eq!(keys("ls; ; "), ["ls"]);
    }

    #[test]
    fn redirections_comments_and_heredocs_do_not_split() {
        assert_eq!(keys("make 2>&1 | tee log"), ["make", "tee"]);
        assert_eq!(keys("cargo build &> out.txt"), ["cargo build"]);
        assert_eq!(keys(">out ls"), ["ls"]);
        assert_eq!(keys("ls # && rm -rf /"), ["ls"]);
        let heredoc = "cat > f.txt <<'EOF'\nrm -rf /\na && b\nEOF\nls";
        assert_eq!(keys(heredoc), ["cat", "ls"]);
        assert_eq!(
            texts(heredoc)[0],
            "cat > f.txt <<'EOF'\nrm -rf /\na && b\nEOF"
        );
        assert_eq!(
            decide(Mode::Yolo, &bash(heredoc, true), &[]),
            Decision::Run(Approval::Yolo)
        );
        // An unquoted delimiter expands substitutions in the body.
        let parts = split_command("cat <<EOF\n$(id)\nEOF");
        assert_eq!(parts.len(), 1);
        assert!(parts[0].substitution);
        assert_eq!(keys("cat <<-END\n\tx\n\tEND\npwd"), ["cat", "pwd"]);
        // Redirect-only and assignment-only parts run no command.
        assert_eq!(keys("FOO=1; > f"), ["", ""]);
    }

    #[test]
    fn keys_skip_options_wrappers_and_paths() {
        assert_eq!(keys("git -C repo push origin"), ["git push"]);
        assert_eq!(keys("FOO=1 sudo npm install x"), ["npm install"]);
        assert_eq!(keys("/usr/bin/ls -la"), ["ls"]);
        assert_eq!(keys("/usr/bin/git push"), ["git push"]);
        assert_eq!(keys("git"), ["git"]);
        assert_eq!(keys("git --no-pager log"), ["git log"]);
        assert_eq!(keys("cargo +nightly build"), ["cargo build"]);
        assert_eq!(keys("kubectl -n prod get pods"), ["kubectl get"]);
        assert_eq!(keys("env -u X A=1 time -p make"), ["make"]);
        assert_eq!(keys("timeout 5 cargo test"), ["cargo test"]);
        assert_eq!(keys("sudo -u bob rm x"), ["rm"]);
        assert_eq!(keys("python -m pip install x"), ["python"]);
        assert_eq!(keys("if grep -q x f; then rm f; fi"), ["grep", "rm", ""]);
        assert_eq!(keys("sudo"), ["sudo"]);
        assert_eq!(keys("'ls' -l"), ["ls"]);
    }

    #[test]
    fn one_word_rules_cover_two_word_keys() {
        let call = bash("git push && git status", false);
        assert_eq!(
            decide(Mode::Ask, &call, &[Rule::allow("bash", "git")]),
            Decision::Run(Approval::Rule)
        );
        // A two-word rule covers only its own verb.
        assert!(is_ask(&decide(
            Mode::Ask,
            &bash("git", false),
            &[Rule::allow("bash", "git push")]
        )));
        // A deny rule on a wrapper refuses what it wraps.
        assert!(is_refuse(&decide(
            Mode::Yolo,
            &bash("sudo ls", true),
            &[Rule::deny("bash", "sudo")]
        )));
        // Assignment-only parts need no rule, but some rule must match.
        assert_eq!(
            decide(
                Mode::Ask,
                &bash("X=1; ls", true),
                &[Rule::allow("bash", "ls")]
            ),
            Decision::Run(Approval::Rule)
        );
        assert!(is_ask(&decide(Mode::Ask, &bash("X=1", true), &[])));
        assert!(is_ask(&decide(
            Mode::Ask,
            &bash("ls; > f", true),
            &[Rule::allow("bash", "ls")]
        )));
    }

    #[test]
    fn always_saves_one_rule_per_distinct_part() {
        let call = bash("git status && git push | tee x; git push", true);
        assert_eq!(
            rules_for_always(&call),
            [
                Rule::allow("bash", "git status"),
                Rule::allow("bash", "git push"),
                Rule::allow("bash", "tee"),
            ]
        );
        let call = bash("git status && git push | tee x", true);
        assert_eq!(rules_for_always(&call).len(), 3);
        // Never an any-use rule for a command.
        assert!(rules_for_always(&bash("FOO=1", true)).is_empty());
        assert_eq!(
            rules_for_always(&tool("write_file", Effect::Write, true)),
            [Rule::allow("write_file", "")]
        );
    }

    #[test]
    fn non_command_tools_by_mode() {
        let read = tool("read_file", Effect::Read, false);
        let write_in = tool("write_file", Effect::Write, true);
        let write_out = tool("write_file", Effect::Write, false);
        assert_eq!(decide(Mode::Ask, &read, &[]), Decision::Run(Approval::Auto));
        assert!(is_ask(&decide(Mode::Ask, &write_in, &[])));
        assert_eq!(
            decide(Mode::Auto, &write_in, &[]),
            Decision::Run(Approval::Auto)
        );
        assert_eq!(
            decide(Mode::Auto, &write_out, &[]),
            Decision::Ask {
                reason: "it leaves the chat's workspace".to_string()
            }
        );
        let allow = [Rule::allow("write_file", "")];
        assert_eq!(
            decide(Mode::Ask, &write_out, &allow),
            Decision::Run(Approval::Rule)
        );
        for call in [read, write_in, write_out, bash("curl x | sh", false)] {
            assert_eq!(
                decide(Mode::Yolo, &call, &[]),
                Decision::Run(Approval::Yolo)
            );
        }
    }

    #[test]
    fn deny_rule_for_any_use_refuses_in_yolo() {
        let deny = [Rule::deny("write_file", "")];
        let call = tool("write_file", Effect::Write, true);
        assert_eq!(
            decide(Mode::Yolo, &call, &deny),
            Decision::Refuse {
                reason: "denied by a rule for write_file".to_string()
            }
        );
        assert!(is_refuse(&decide(
            Mode::Yolo,
            &bash("ls", true),
            &[Rule::deny("bash", "")]
        )));
    }

    #[test]
    fn commands_in_auto_follow_inside() {
        assert_eq!(
            decide(Mode::Auto, &bash("cargo test", true), &[]),
            Decision::Run(Approval::Auto)
        );
        assert!(is_ask(&decide(Mode::Auto, &bash("curl x", false), &[])));
        assert!(is_ask(&decide(Mode::Ask, &bash("ls", true), &[])));
        assert_eq!(
            decide(Mode::Auto, &bash("ls", true), &[Rule::allow("bash", "ls")]),
            Decision::Run(Approval::Rule)
        );
    }

    #[test]
    fn odd_input_does_not_panic() {
        for command in [
            "",
            "'",
            "\"",
            "$(",
            "`",
            "\\",
            "<<",
            "cat <<",
            "a |",
            "| a",
            "$((",
            "${",
            "rm -rf ${",
            "rm -rf $",
            "é && ü",
            "x=(",
            "2>",
            "&>",
            "rm ~é/..",
        ] {
            let _ = split_command(command);
            let _ = decide(Mode::Yolo, &bash(command, true), &[Rule::deny("bash", "x")]);
        }
    }
}
