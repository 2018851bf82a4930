//! What a search looks for: words (every one on the same line, any case by
//! default) or a regular expression, and the trigram query that narrows the
//! parts to read first.

use regex::{Regex, RegexBuilder};

/// The longest query taken, in characters.
pub const MAX_QUERY_CHARS: usize = 500;
/// The most compiled size of a regular expression.
const REGEX_SIZE: usize = 1 << 20;

/// A query as a search asks it.
#[derive(Debug, Clone)]
pub struct Query {
    pub text: String,
    pub regex: bool,
    pub ignore_case: bool,
}

/// A line's test.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Every word on the line (lowercased when case does not count).
    Words {
        words: Vec<String>,
        ignore_case: bool,
    },
    Regex(Regex),
}

impl Matcher {
    /// The matcher of `query`, or what is wrong with it (for the field `query`).
    pub fn new(query: &Query) -> Result<Matcher, String> {
        let text = query.text.trim();
        if text.is_empty() {
            return Err("is empty: give a word or phrase to look for".into());
        }
        let chars = text.chars().count();
        if chars > MAX_QUERY_CHARS {
            return Err(format!(
                "is {chars} characters; at most {MAX_QUERY_CHARS} are taken"
            ));
        }
        if query.regex {
            return RegexBuilder::new(text)
                .case_insensitive(query.ignore_case)
                .size_limit(REGEX_SIZE)
                .build()
                .map(Matcher::Regex)
                .map_err(|e| {
                    let shown: String = e.to_string().lines().last().unwrap_or("").into();
                    format!("is not a regular expression ({})", shown.trim())
                });
        }
        let words = text
            .split_whitespace()
            .map(|w| {
                if query.ignore_case {
                    w.to_lowercase()
                } else {
                    w.to_string()
                }
            })
            .collect();
        Ok(Matcher::Words {
            words,
            ignore_case: query.ignore_case,
        })
    }

    /// Whether `line` matches.
    pub fn is_match(&self, line: &str) -> bool {
        match self {
            Matcher::Regex(re) => re.is_match(line),
            Matcher::Words { words, ignore_case } => {
                if *ignore_case {
                    let lower = lowered(line);
                    words.iter().all(|w| lower.contains(w.as_str()))
                } else {
                    words.iter().all(|w| line.contains(w.as_str()))
                }
            }
        }
    }

    /// The FTS5 query that finds every part a match can be in: each word of
    /// three characters or more as a phrase (the trigram tokenizer finds a
    /// phrase as a substring, in any case). `None`: every part must be read
    /// (a regular expression, or only shorter words).
    pub fn fts(&self) -> Option<String> {
        let Matcher::Words { words, .. } = self else {
            return None;
        };
        let long: Vec<String> = words
            .iter()
            .filter(|w| w.chars().count() >= 3)
            .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
            .collect();
        (!long.is_empty()).then(|| long.join(" AND "))
    }
}

/// `line` lowercased; ASCII without a new string's Unicode tables.
fn lowered(line: &str) -> std::borrow::Cow<'_, str> {
    if line.is_ascii() {
        if line.bytes().any(|b| b.is_ascii_uppercase()) {
            std::borrow::Cow::Owned(line.to_ascii_lowercase())
        } else {
            std::borrow::Cow::Borrowed(line)
        }
    } else {
        std::borrow::Cow::Owned(line.to_lowercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(text: &str, regex: bool, ignore_case: bool) -> Query {
        Query {
            text: text.into(),
            regex,
            ignore_case,
        }
    }

    #[test]
    fn every_word_must_be_on_the_line() {
        let m = Matcher::new(&query("Acme invoice", false, true)).unwrap();
        assert!(m.is_match("the ACME Corp. invoice 2291"));
        assert!(!m.is_match("the acme order"));
        assert_eq!(m.fts().as_deref(), Some("\"acme\" AND \"invoice\""));
        let exact = Matcher::new(&query("Acme", false, false)).unwrap();
        assert!(!exact.is_match("ACME"));
        assert!(Matcher::new(&query("Q3", false, true))
            .unwrap()
            .fts()
            .is_none());
        let quoted = Matcher::new(&query("say\"what", false, true)).unwrap();
        assert_eq!(quoted.fts().as_deref(), Some("\"say\"\"what\""));
    }

    #[test]
    fn bad_queries_say_what_is_wrong() {
        assert!(Matcher::new(&query("  ", false, true))
            .unwrap_err()
            .contains("empty"));
        assert!(Matcher::new(&query("(unclosed", true, true))
            .unwrap_err()
            .starts_with("is not a regular expression"));
        let long = "x".repeat(MAX_QUERY_CHARS + 1);
        assert!(Matcher::new(&query(&long, false, true))
            .unwrap_err()
            .contains("at most 500"));
        let re = Matcher::new(&query(r"inv\w+ \d{4}", true, true)).unwrap();
        assert!(re.is_match("INVOICE 2291"));
        assert!(re.fts().is_none());
    }
}
