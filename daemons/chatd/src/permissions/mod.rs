//! Permission modes and rules of the agent: whether a tool call runs, asks
//! the user or is refused. Pure logic, no I/O: the caller works out whether a
//! call stays inside the chat's workspace or sandbox and passes that in.
//!
//! Modes: `plan` runs the read tools only, `ask` asks before every write
//! and command, `auto` (the default) runs what stays inside and asks for
//! what leaves, `yolo` runs everything.
//! Two things hold in every mode: a deny rule refuses, and `rm`/`rmdir`
//! aimed at `/`, the workspace root or a home asks.
//!
//! Command rules name a command's first word, or its first two for tools
//! whose second word is the verb (`git push`). A chained command is split
//! into parts; it runs by rule only when every part is allowed and is refused
//! when any part is denied.

use std::fmt;

use serde::{Deserialize, Serialize};

mod commands;
mod lexer;
mod protected;
#[cfg(test)]
mod tests;

use commands::{analyze, flatten};
use protected::protected_target;

/// How much the agent may do without asking; set per chat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The read tools only: the model looks and plans, changes nothing.
    Plan,
    Ask,
    #[default]
    Auto,
    Yolo,
}

impl Mode {
    /// Strictest first.
    pub const ALL: [Mode; 4] = [Mode::Plan, Mode::Ask, Mode::Auto, Mode::Yolo];

    /// The one of the two that lets less run without asking (a sub-agent
    /// holds its own mode and its parent's, now, to the stricter).
    pub fn stricter(self, other: Mode) -> Mode {
        let rank = |m: Mode| Mode::ALL.iter().position(|x| *x == m).unwrap_or(0);
        if rank(self) <= rank(other) {
            self
        } else {
            other
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Plan => "plan",
            Mode::Ask => "ask",
            Mode::Auto => "auto",
            Mode::Yolo => "yolo",
        }
    }

    /// Parses a mode as a user or a config file writes it.
    pub fn parse(text: &str) -> Result<Mode, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "plan" => Ok(Mode::Plan),
            "ask" => Ok(Mode::Ask),
            "auto" => Ok(Mode::Auto),
            "yolo" => Ok(Mode::Yolo),
            _ => Err(format!(
                "{text:?} is not a permission mode: use plan, ask, auto or yolo"
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
pub const PLAN_REASON: &str =
    "the chat is in plan mode, which offers the read tools only: write the plan, and the \
     person switches the mode to carry it out";

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

    // Plan mode changes nothing: only what reads runs.
    if mode == Mode::Plan && call.effect != Effect::Read {
        return Decision::Refuse {
            reason: PLAN_REASON.to_string(),
        };
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
        Mode::Ask | Mode::Plan if call.effect == Effect::Read => Decision::Run(Approval::Auto),
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
