//! A shell lexer just good enough to find where commands start and end:
//! quotes, escapes, comments, heredocs, redirections and substitutions.

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Token {
    /// A word with quotes and escapes removed (substitutions kept raw).
    Word(String),
    /// A redirection operator with its descriptor (`2>`, `>>`, `<<`, `&>`);
    /// the word after it is its target.
    Redirect(String),
}

pub(super) struct Segment {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) tokens: Vec<Token>,
    pub(super) substitution: bool,
    /// Scripts of the substitutions in the segment.
    pub(super) inner: Vec<String>,
}

struct Heredoc {
    delimiter: String,
    quoted: bool,
    strip_tabs: bool,
    segment: usize,
}

/// A shell lexer just good enough to find where commands start and end.
pub(super) struct Lexer<'a> {
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
    pub(super) fn new(src: &'a str) -> Lexer<'a> {
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

    pub(super) fn run(mut self) -> Vec<Segment> {
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
