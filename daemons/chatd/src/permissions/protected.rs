//! `rm`/`rmdir` aimed at a protected place: `/`, a home, the workspace root
//! or one of their ancestors.

use super::commands::basename;

/// `Some((command, target))` when the words are `rm`/`rmdir` aimed at a
/// protected place.
pub(super) fn protected_target(
    words: &[String],
    workspace_root: Option<&str>,
) -> Option<(String, String)> {
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
