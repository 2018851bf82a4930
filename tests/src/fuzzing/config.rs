//! Target for the config loader (`tandem_shared::config::load`) and each
//! daemon's checks of its section (chatd, egressd, hostexecd, triggerd,
//! connectord), on TOML built from the real keys of config/tandem.toml.

use std::path::Path;
use std::sync::OnceLock;

use arbitrary::{Result as Built, Unstructured};
use tandem_shared::config::{ConfigError, EnvKey, Sources};

use super::Verdict;

/// One key of config/tandem.toml: its section (`chatd.sandbox`), its name
/// and its value there, as TOML text.
struct Key {
    section: String,
    name: String,
    value: String,
}

/// The keys of config/tandem.toml, commented-out examples among them.
fn keys() -> &'static [Key] {
    static KEYS: OnceLock<Vec<Key>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = Vec::new();
        let mut section = String::new();
        for line in chatd::config::DEFAULT_TOML.lines() {
            let line = line.trim();
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_string();
                continue;
            }
            let assignment = line.strip_prefix("# ").unwrap_or(line);
            let Some((name, value)) = assignment.split_once(" = ") else {
                continue;
            };
            let name_like = name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
            if name_like && !section.is_empty() && toml::from_str::<toml::Table>(assignment).is_ok()
            {
                keys.push(Key {
                    section: section.clone(),
                    name: name.to_string(),
                    value: value.to_string(),
                });
            }
        }
        keys
    })
}

/// The one key that was changed: dotted, its line in the file, and how.
struct Changed {
    key: String,
    line: usize,
    change: Change,
}

/// What was done to the one key that was changed.
enum Change {
    /// Its value replaced.
    Value,
    /// Written twice.
    Twice,
    /// Its name misspelt (an unknown key).
    Misspelt(String),
}

/// A config file of the real keys, one of them given a random value (any
/// type, huge numbers, unicode), written twice or misspelt, or a `QSE_*`
/// variable given a random value: loading and checking it never panics, the
/// defaults load, and a refusal names the key (or, for TOML that does not
/// parse, the file and the line).
pub(super) fn config(u: &mut Unstructured) -> Verdict {
    let Ok((text, changed)) = file_text(u) else {
        return Ok(());
    };
    let env = match env_var(u) {
        Ok(Some(var)) if changed.is_none() => vec![var],
        _ => Vec::new(),
    };
    let path = std::env::temp_dir().join(format!("tandem-fuzz-config-{}.toml", std::process::id()));
    std::fs::write(&path, &text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    let sources = Sources {
        file: Some(path.clone()),
        env: env.clone(),
        ..Sources::default()
    };
    let results = [
        (
            "chatd",
            load(
                &sources,
                chatd::config::ENV_KEYS,
                |c: chatd::config::FileConfig| c.chatd.check(),
            ),
        ),
        (
            "egress",
            load(
                &sources,
                egressd::config::ENV_KEYS,
                |c: egressd::config::FileConfig| c.egress.check(),
            ),
        ),
        (
            "hostexec",
            load(
                &sources,
                hostexecd::config::ENV_KEYS,
                |c: hostexecd::config::FileConfig| c.hostexec.check(),
            ),
        ),
        (
            "triggers",
            load(
                &sources,
                triggerd::config::ENV_KEYS,
                |c: triggerd::config::FileConfig| c.triggers.check(),
            ),
        ),
        (
            "connectors",
            load(
                &sources,
                connectord::config::ENV_KEYS,
                |c: connectord::config::FileConfig| c.connectors.check(),
            ),
        ),
    ];
    let _ = std::fs::remove_file(&path);
    // The defaults with one line changed: that line says what the input was.
    let changed_line = changed
        .as_ref()
        .and_then(|c| text.lines().nth(c.line - 1))
        .unwrap_or("");
    let say = |what: String| {
        format!("config/tandem.toml's keys with {changed_line:?}, environment {env:?}: {what}")
    };
    for (daemon, result) in results {
        let Err(refusal) = result else {
            continue;
        };
        let named = match (&changed, &env[..]) {
            (None, []) => return Err(say(format!("{daemon} refuses the defaults: {refusal}"))),
            (None, [(var, _)]) => named_env(
                &refusal,
                var,
                &[
                    chatd::config::ENV_KEYS,
                    egressd::config::ENV_KEYS,
                    hostexecd::config::ENV_KEYS,
                    triggerd::config::ENV_KEYS,
                    connectord::config::ENV_KEYS,
                ],
            ),
            (Some(c), _) => named_file(&refusal, &path, &c.key, c.line, &c.change),
            (None, _) => true,
        };
        if !named {
            return Err(say(format!(
                "{daemon}'s refusal names neither the key nor its line: {refusal}"
            )));
        }
    }
    Ok(())
}

/// Why a daemon refused: the loader's error, or its section's check.
enum Refusal {
    Load(ConfigError),
    Check(anyhow::Error),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Load(e) => write!(f, "{e}"),
            Refusal::Check(e) => write!(f, "{e:#}"),
        }
    }
}

fn load<T: serde::de::DeserializeOwned>(
    sources: &Sources,
    keys: &[EnvKey],
    check: impl Fn(T) -> anyhow::Result<()>,
) -> Result<(), Refusal> {
    let loaded = tandem_shared::config::load::<T>(sources, keys).map_err(Refusal::Load)?;
    check(loaded.config).map_err(Refusal::Check)
}

/// Whether a refusal of the file names the changed key, or for TOML that
/// does not parse the changed line.
fn named_file(refusal: &Refusal, path: &Path, key: &str, line: usize, change: &Change) -> bool {
    let at_line = format!("{}:{line}", path.display());
    match (refusal, change) {
        (Refusal::Load(ConfigError::FileSyntax { .. }), _) => {
            refusal.to_string().starts_with(&format!("{at_line}:"))
        }
        (Refusal::Load(ConfigError::UnknownKey { key: got, .. }), Change::Misspelt(wrong)) => {
            got == wrong
        }
        (Refusal::Load(ConfigError::FileValue { key: Some(got), .. }), _) => got == key,
        (Refusal::Check(e), Change::Value) => e.to_string().contains(key),
        _ => false,
    }
}

/// Whether a refusal of a variable names it and its key.
fn named_env(refusal: &Refusal, var: &str, maps: &[&[EnvKey]]) -> bool {
    let keys: Vec<&str> = maps
        .iter()
        .flat_map(|m| m.iter())
        .filter(|k| k.env == var)
        .map(|k| k.key)
        .collect();
    let text = refusal.to_string();
    match refusal {
        Refusal::Load(_) => text.contains(var) && keys.iter().any(|k| text.contains(k)),
        Refusal::Check(_) => keys.iter().any(|k| text.starts_with(k)),
    }
}

/// The file: every key at its value in config/tandem.toml, under its
/// section, one of them changed (none a quarter of the time); the dotted key
/// changed, its line and how.
fn file_text(u: &mut Unstructured) -> Built<(String, Option<Changed>)> {
    let keys = keys();
    let target = if u.ratio(1, 4)? {
        None
    } else {
        Some(u.choose_index(keys.len())?)
    };
    let mut text = String::new();
    let mut lines = 0;
    let mut section = "";
    let mut changed = None;
    for (i, key) in keys.iter().enumerate() {
        if key.section != section {
            section = &key.section;
            text.push_str(&format!("[{section}]\n"));
            lines += 1;
        }
        let dotted = format!("{}.{}", key.section, key.name);
        if Some(i) != target {
            text.push_str(&format!("{} = {}\n", key.name, key.value));
            lines += 1;
            continue;
        }
        match u.int_in_range(0..=5)? {
            0 => {
                text.push_str(&format!(
                    "{} = {}\n{} = {}\n",
                    key.name, key.value, key.name, key.value
                ));
                lines += 2;
                changed = Some(Changed {
                    key: dotted,
                    line: lines,
                    change: Change::Twice,
                });
            }
            1 => {
                let wrong = format!("{}{}", key.name, u.choose(&["s", "_", "é", "2"])?);
                text.push_str(&format!("{wrong} = {}\n", key.value));
                lines += 1;
                changed = Some(Changed {
                    key: dotted,
                    line: lines,
                    change: Change::Misspelt(format!("{}.{wrong}", key.section)),
                });
            }
            _ => {
                text.push_str(&format!("{} = {}\n", key.name, value_text(u)?));
                lines += 1;
                changed = Some(Changed {
                    key: dotted,
                    line: lines,
                    change: Change::Value,
                });
            }
        }
    }
    Ok((text, changed))
}

/// A TOML value of any type, often an edge of one.
fn value_text(u: &mut Unstructured) -> Built<String> {
    const VALUES: &[&str] = &[
        "0",
        "1",
        "-1",
        "9223372036854775807",
        "-9223372036854775808",
        "99999999999999999999",
        "4294967296",
        "65536",
        "1e400",
        "nan",
        "-inf",
        "0.5",
        "true",
        "\"\"",
        "\"off\"",
        "\"on\"",
        "\"ask\"",
        "\"127.0.0.1:0\"",
        "\"[::1]:8016\"",
        "\"http://127.0.0.1:8000\"",
        "\"/\"",
        "\"relative/path\"",
        "\"é😀\u{202e}\"",
        "\"\\u0000\"",
        "[]",
        "[1, \"a\"]",
        "[\"gpubox.lan\", \"\"]",
        "{}",
        "{ a = 1 }",
        "1979-05-27T07:32:00Z",
        "'''multi\nline'''",
        "\"unterminated",
        "= 1",
        "",
    ];
    if u.ratio(1, 4)? {
        return Ok(format!("{:?}", u.arbitrary::<String>()?));
    }
    if u.ratio(1, 4)? {
        return Ok(u.arbitrary::<i64>()?.to_string());
    }
    Ok((*u.choose(VALUES)?).to_string())
}

/// Half the time one `QSE_*` variable of some daemon, with a random value.
fn env_var(u: &mut Unstructured) -> Built<Option<(String, String)>> {
    if !u.ratio(1, 2)? {
        return Ok(None);
    }
    let all: Vec<&EnvKey> = [
        chatd::config::ENV_KEYS,
        egressd::config::ENV_KEYS,
        hostexecd::config::ENV_KEYS,
        triggerd::config::ENV_KEYS,
        connectord::config::ENV_KEYS,
    ]
    .iter()
    .flat_map(|m| m.iter())
    .collect();
    let key = u.choose(&all)?;
    let value = if u.ratio(1, 2)? {
        value_text(u)?
    } else {
        u.arbitrary::<String>()?
    };
    Ok(Some((key.env.to_string(), value)))
}
