//! What a command line runs: its parts, each one's key for rules (wrappers,
//! options and paths skipped), and the scripts run from inside it
//! (substitutions, `sh -c`, `eval`).

use super::lexer::{Lexer, Token};
use super::Rule;

/// Nesting of substitutions and `sh -c` followed; deeper ones are not
/// looked into (such a part is never allowed by a rule anyway).
const MAX_DEPTH: usize = 4;

pub(super) struct Analyzed {
    pub(super) text: String,
    pub(super) key: String,
    pub(super) substitution: bool,
    pub(super) redirects: bool,
    /// Wrappers skipped for the key (`sudo`, `env`, …): deny rules see them.
    pub(super) wrappers: Vec<String>,
    /// The words of the command, without redirections.
    pub(super) words: Vec<String>,
    /// Commands run from inside this one: substitutions, `sh -c`, `eval`.
    pub(super) nested: Vec<Analyzed>,
}

impl Analyzed {
    pub(super) fn denied_by(&self, rule: &Rule) -> bool {
        (!self.key.is_empty() && rule.covers(&self.key))
            || self.wrappers.iter().any(|w| rule.covers(w))
    }
}

pub(super) fn flatten(parts: &[Analyzed]) -> Vec<&Analyzed> {
    let mut out = Vec::new();
    for part in parts {
        out.push(part);
        out.extend(flatten(&part.nested));
    }
    out
}

pub(super) fn analyze(command: &str, depth: usize) -> Vec<Analyzed> {
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

pub(super) fn basename(word: &str) -> &str {
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
