//! Layered configuration, the same for every daemon.
//!
//! A daemon's settings come from, in order (later wins):
//!
//! 1. its TOML config file: `--config PATH`, else `$QSE_CONFIG`, else
//!    `~/.config/tandem/tandem.toml`. A missing default file is fine; a
//!    missing file that was named explicitly is an error;
//! 2. the operator env files `run/serve.env` then `run/local.env`
//!    (`KEY=VALUE` lines, see [`parse_env_file`]); missing ones are skipped;
//! 3. the process environment.
//!
//! Only the `QSE_*` variables the daemon maps with an [`EnvKey`] are used;
//! every other variable in the env files and the environment is ignored
//! (those files are shared with the engine's own scripts).
//!
//! The daemon's struct is deserialized with serde and is expected to use
//! `#[serde(deny_unknown_fields, default)]` on every struct, `Default`
//! giving the documented defaults.
//!
//! Every error is one line for a person and names where the bad setting
//! came from: `file:line: key: problem` for the TOML file,
//! `env-file:line: VAR="value" (key): problem` for an env file and
//! `environment variable VAR="value" (key): problem` for the environment.
//! A value is never shown when the variable or key name looks secret
//! (contains KEY, TOKEN, SECRET or PASSWORD).

use std::fmt;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};

/// Default config file, relative to the home folder.
pub const DEFAULT_CONFIG_FILE: &str = ".config/tandem/tandem.toml";

/// Environment variable naming the config file (when `--config` is absent).
pub const CONFIG_ENV: &str = "QSE_CONFIG";

/// The operator env files, relative to the folder holding `run/`, in the
/// order they are applied (later wins).
pub const ENV_FILES: [&str; 2] = ["run/serve.env", "run/local.env"];

/// Placeholder written instead of a value whose name looks secret.
pub const HIDDEN: &str = "<hidden>";

/// One `QSE_*` variable and the dotted config key it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvKey {
    /// The variable's name, e.g. `QSE_CHAT_MAX_RUNS`.
    pub env: &'static str,
    /// The dotted key in the daemon's config struct, e.g. `chatd.max_runs`.
    pub key: &'static str,
}

impl EnvKey {
    pub const fn new(env: &'static str, key: &'static str) -> EnvKey {
        EnvKey { env, key }
    }
}

/// Where the configuration is read from. Build it with
/// [`Sources::from_process`] in a daemon, or by hand in tests.
#[derive(Clone, Default)]
pub struct Sources {
    /// A config file named explicitly (`--config` or `$QSE_CONFIG`): it must exist.
    pub file: Option<PathBuf>,
    /// The default config file, read only when `file` is `None`; may be missing.
    pub default_file: Option<PathBuf>,
    /// Env files in the order they are applied (later wins); missing ones are skipped.
    pub env_files: Vec<PathBuf>,
    /// The process environment (only mapped names are used).
    pub env: Vec<(String, String)>,
}

impl fmt::Debug for Sources {
    // The environment may hold secrets: show only the names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sources")
            .field("file", &self.file)
            .field("default_file", &self.default_file)
            .field("env_files", &self.env_files)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .finish()
    }
}

impl Sources {
    /// The sources of a running daemon: `explicit_file` is its `--config`
    /// argument; without one, `$QSE_CONFIG` names the file; the default file
    /// is `$HOME/.config/tandem/tandem.toml`. `env_root` is the folder
    /// holding `run/` (none: no env files). The `QSE_*` variables of the
    /// process environment are captured.
    pub fn from_process(explicit_file: Option<PathBuf>, env_root: Option<&Path>) -> Sources {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let file = explicit_file.or_else(|| var(CONFIG_ENV).map(PathBuf::from));
        let home = var("HOME").map(PathBuf::from);
        Sources {
            file,
            default_file: home.as_deref().map(default_config_path),
            env_files: env_root.map(env_files_in).unwrap_or_default(),
            env: std::env::vars_os()
                .filter_map(|(k, v)| {
                    let k = k.into_string().ok()?;
                    k.starts_with("QSE_")
                        .then(|| (k, v.to_string_lossy().into_owned()))
                })
                .collect(),
        }
    }
}

/// The default config file under the home folder `home`.
pub fn default_config_path(home: &Path) -> PathBuf {
    home.join(DEFAULT_CONFIG_FILE)
}

/// The operator env files under `root` (the folder holding `run/`), in order.
pub fn env_files_in(root: &Path) -> Vec<PathBuf> {
    ENV_FILES.iter().map(|f| root.join(f)).collect()
}

/// A loaded configuration and where it came from.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    pub config: T,
    /// The files that were read, in order (for a startup log line).
    pub origins: Vec<String>,
    /// The settings taken from env files or the environment, in the order
    /// applied (a later one for the same key wins).
    pub overrides: Vec<Override>,
}

/// One setting taken from an env file or the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub env: &'static str,
    pub key: &'static str,
    /// `path:line` of an env file, or `environment`.
    pub origin: String,
}

/// Why the configuration could not be loaded. `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {} does not exist", .path.display())]
    MissingFile { path: PathBuf },

    #[error("cannot read {}: {source}", .path.display())]
    Read { path: PathBuf, source: io::Error },

    /// The TOML file is not valid TOML.
    #[error("{}: {message}", at(.path, *.line))]
    FileSyntax {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },

    /// A key in the TOML file that the daemon does not know.
    #[error("{}: unknown key \"{key}\"{hint}", at(.path, *.line))]
    UnknownKey {
        path: PathBuf,
        line: Option<usize>,
        /// Dotted key, e.g. `chatd.max_rusn`.
        key: String,
        /// e.g. `, expected one of `listen`, `max_runs`` (may be empty).
        hint: String,
    },

    /// A value in the TOML file that does not fit.
    #[error("{}: {}{message}", at(.path, *.line), key_prefix(.key))]
    FileValue {
        path: PathBuf,
        line: Option<usize>,
        /// Dotted key, when it could be found.
        key: Option<String>,
        message: String,
    },

    /// The struct cannot be built from nothing (a struct lacks
    /// `#[serde(default)]`): a bug in the daemon, not in the settings.
    #[error("the built-in defaults do not load: {message}")]
    Defaults { message: String },

    /// An env file line that is not `KEY=VALUE`.
    #[error("{}: {message}", at(.path, Some(*.line)))]
    EnvFileSyntax {
        path: PathBuf,
        line: usize,
        message: String,
    },

    /// A mapped variable in an env file with a value that does not fit.
    #[error("{}: {var}={value} ({key}): {message}", at(.path, Some(*.line)))]
    EnvFileValue {
        path: PathBuf,
        line: usize,
        var: &'static str,
        key: &'static str,
        /// The value quoted, or `<hidden>`.
        value: String,
        message: String,
    },

    /// A mapped variable in the process environment with a value that does not fit.
    #[error("environment variable {var}={value} ({key}): {message}")]
    EnvValue {
        var: &'static str,
        key: &'static str,
        /// The value quoted, or `<hidden>`.
        value: String,
        message: String,
    },
}

fn at(path: &Path, line: Option<usize>) -> String {
    match line {
        Some(line) => format!("{}:{line}", path.display()),
        None => path.display().to_string(),
    }
}

fn key_prefix(key: &Option<String>) -> String {
    key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default()
}

/// Whether a variable or key name looks like it holds a secret (its value
/// is then never written in an error).
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|w| upper.contains(w))
}

/// Loads the configuration `T` from `sources`; `keys` maps the `QSE_*`
/// variables onto dotted keys of `T`.
///
/// An environment value is tried first as the TOML value it spells (integer,
/// float, boolean, array, ...) and then as a plain string, so `8` fits a
/// number and a string alike. An empty value counts as unset.
pub fn load<T: DeserializeOwned>(
    sources: &Sources,
    keys: &[EnvKey],
) -> Result<Loaded<T>, ConfigError> {
    let mut origins = Vec::new();

    // 1. The TOML file, checked alone so its errors name file, line and key.
    let file = match (&sources.file, &sources.default_file) {
        (Some(path), _) => Some((path, read(path)?.ok_or_else(|| missing(path))?)),
        (None, Some(path)) => read(path)?.map(|text| (path, text)),
        (None, None) => None,
    };
    let (mut table, mut config) = match file {
        Some((path, text)) => {
            let (table, config) = check_file::<T>(path, &text)?;
            origins.push(path.display().to_string());
            (table, config)
        }
        None => {
            let table = toml::Table::new();
            let config = deserialize::<T>(&table).map_err(|e| ConfigError::Defaults {
                message: one_line(&e.to_string()),
            })?;
            (table, config)
        }
    };

    // 2. The overrides, in the order they apply.
    let mut pending: Vec<(EnvKey, String, Origin)> = Vec::new();
    for path in &sources.env_files {
        let Some(vars) = read_env_file(path)? else {
            continue;
        };
        origins.push(path.display().to_string());
        for var in vars {
            for key in keys.iter().filter(|k| k.env == var.key) {
                let origin = Origin::File(path.clone(), var.line);
                pending.push((*key, var.value.clone(), origin));
            }
        }
    }
    for (name, value) in &sources.env {
        for key in keys.iter().filter(|k| k.env == name) {
            pending.push((*key, value.clone(), Origin::Env));
        }
    }

    // 3. Apply each one and check the result, so a bad value is blamed on
    // the variable that brought it.
    let mut overrides = Vec::new();
    for (key, raw, origin) in pending {
        if raw.is_empty() {
            continue;
        }
        let mut first_error = None;
        let mut accepted = None;
        for value in candidates(&raw) {
            let mut trial = table.clone();
            set_dotted(&mut trial, key.key, value);
            match deserialize::<T>(&trial) {
                Ok(c) => {
                    accepted = Some((trial, c));
                    break;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match accepted {
            Some((trial, c)) => {
                table = trial;
                config = c;
                overrides.push(Override {
                    env: key.env,
                    key: key.key,
                    origin: origin.to_string(),
                });
            }
            None => {
                let error = first_error.expect("at least one candidate was tried");
                return Err(env_error(key, &raw, origin, error.message()));
            }
        }
    }

    Ok(Loaded {
        config,
        origins,
        overrides,
    })
}

enum Origin {
    File(PathBuf, usize),
    Env,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path, line) => write!(f, "{}:{line}", path.display()),
            Origin::Env => f.write_str("environment"),
        }
    }
}

fn env_error(key: EnvKey, raw: &str, origin: Origin, message: &str) -> ConfigError {
    let secret = is_secret_name(key.env) || is_secret_name(key.key);
    let (value, message) = if secret {
        (HIDDEN.to_string(), redact(&one_line(message), raw))
    } else {
        (format!("{raw:?}"), one_line(message))
    };
    let (var, key) = (key.env, key.key);
    match origin {
        Origin::File(path, line) => ConfigError::EnvFileValue {
            path,
            line,
            var,
            key,
            value,
            message,
        },
        Origin::Env => ConfigError::EnvValue {
            var,
            key,
            value,
            message,
        },
    }
}

fn missing(path: &Path) -> ConfigError {
    ConfigError::MissingFile {
        path: path.to_path_buf(),
    }
}

/// Reads a text file; `None` when it does not exist.
fn read(path: &Path) -> Result<Option<String>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn deserialize<T: DeserializeOwned>(table: &toml::Table) -> Result<T, toml::de::Error> {
    toml::Value::Table(table.clone()).try_into()
}

/// Parses and checks the TOML file alone.
fn check_file<T: DeserializeOwned>(
    path: &Path,
    text: &str,
) -> Result<(toml::Table, T), ConfigError> {
    let spanned = DeTable::parse(text).map_err(|e| ConfigError::FileSyntax {
        path: path.to_path_buf(),
        line: e.span().map(|s| line_of(text, s.start)),
        message: one_line(e.message()),
    })?;
    let config = toml::from_str::<T>(text).map_err(|e| file_error(path, text, &spanned, &e))?;
    let table = toml::from_str::<toml::Table>(text).map_err(|e| ConfigError::FileSyntax {
        path: path.to_path_buf(),
        line: e.span().map(|s| line_of(text, s.start)),
        message: one_line(e.message()),
    })?;
    Ok((table, config))
}

fn file_error(
    path: &Path,
    text: &str,
    spanned: &toml::Spanned<DeTable<'_>>,
    error: &toml::de::Error,
) -> ConfigError {
    let path = path.to_path_buf();
    let span = error.span();
    let line = span.as_ref().map(|s| line_of(text, s.start));
    let found = span.as_ref().and_then(|s| find_key(spanned.get_ref(), s));
    let message = one_line(error.message());

    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((field, hint)) = rest.split_once('`') {
            let key = match &found {
                // The span is the unknown key itself, so the path ends in it.
                Some(found) if found.path.last().map(String::as_str) == Some(field) => {
                    found.path.join(".")
                }
                Some(found) => format!("{}.{field}", found.path.join(".")),
                None => field.to_string(),
            };
            return ConfigError::UnknownKey {
                path,
                line,
                key,
                hint: hint.to_string(),
            };
        }
    }
    let key = found.as_ref().map(|f| f.path.join("."));
    let secret = key.as_deref().is_some_and(is_secret_name);
    let message = match (&found, secret) {
        (Some(found), true) => redact(&message, found.raw.as_deref().unwrap_or("")),
        _ => message,
    };
    ConfigError::FileValue {
        path,
        line,
        key,
        message,
    }
}

struct Found {
    /// Keys from the top down.
    path: Vec<String>,
    /// The scalar value's text, when the span is on one (for redaction).
    raw: Option<String>,
}

/// Finds the innermost key whose key or value span holds `span`.
fn find_key(table: &DeTable<'_>, span: &Range<usize>) -> Option<Found> {
    let holds = |outer: Range<usize>| outer.start <= span.start && span.end <= outer.end;
    for (key, value) in table {
        if holds(key.span()) {
            return Some(Found {
                path: vec![key.get_ref().to_string()],
                raw: None,
            });
        }
        if holds(value.span()) {
            let mut found = find_in_value(value.get_ref(), span).unwrap_or(Found {
                path: Vec::new(),
                raw: scalar_text(value.get_ref()),
            });
            found.path.insert(0, key.get_ref().to_string());
            return Some(found);
        }
    }
    // A header span (`[chatd]`) may not sit inside the value span: look deeper.
    for (key, value) in table {
        if let Some(mut found) = find_in_value(value.get_ref(), span) {
            found.path.insert(0, key.get_ref().to_string());
            return Some(found);
        }
    }
    None
}

fn find_in_value(value: &DeValue<'_>, span: &Range<usize>) -> Option<Found> {
    match value {
        DeValue::Table(table) => find_key(table, span),
        DeValue::Array(items) => items.iter().find_map(|item| {
            let s = item.span();
            if s.start <= span.start && span.end <= s.end {
                find_in_value(item.get_ref(), span).or(Some(Found {
                    path: Vec::new(),
                    raw: scalar_text(item.get_ref()),
                }))
            } else {
                find_in_value(item.get_ref(), span)
            }
        }),
        _ => None,
    }
}

fn scalar_text(value: &DeValue<'_>) -> Option<String> {
    match value {
        DeValue::String(s) => Some(s.to_string()),
        DeValue::Integer(i) => Some(i.as_str().to_string()),
        DeValue::Float(f) => Some(f.as_str().to_string()),
        DeValue::Boolean(b) => Some(b.to_string()),
        DeValue::Datetime(d) => Some(d.to_string()),
        DeValue::Array(_) | DeValue::Table(_) => None,
    }
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Removes a secret value from a serde message.
fn redact(message: &str, raw: &str) -> String {
    // serde writes `invalid type: <what it got>, expected <what it wanted>`.
    let mut out = message.to_string();
    for prefix in ["invalid type: ", "invalid value: "] {
        if let (Some(_), Some(i)) = (message.strip_prefix(prefix), message.rfind(", expected ")) {
            if i >= prefix.len() {
                out = format!("{prefix}{HIDDEN}{}", &message[i..]);
            }
        }
    }
    if !raw.is_empty() && out.contains(raw) {
        out = format!("invalid value ({HIDDEN})");
    }
    out
}

/// The TOML values an environment string may stand for, most specific first.
fn candidates(raw: &str) -> Vec<toml::Value> {
    let mut out = Vec::with_capacity(2);
    if let Ok(mut t) = toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        if t.len() == 1 {
            if let Some(v) = t.remove("v") {
                if !v.is_str() {
                    out.push(v);
                }
            }
        }
    }
    out.push(toml::Value::String(raw.to_string()));
    out
}

/// Sets a dotted key (`chatd.max_runs`), making tables on the way.
fn set_dotted(table: &mut toml::Table, key: &str, value: toml::Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().unwrap_or(key);
    let mut here = table;
    for part in parts {
        let slot = here
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !slot.is_table() {
            *slot = toml::Value::Table(toml::Table::new());
        }
        here = match slot {
            toml::Value::Table(t) => t,
            _ => unreachable!("made a table above"),
        };
    }
    here.insert(last.to_string(), value);
}

/// One `NAME=VALUE` assignment of an env file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvEntry {
    /// 1-based line number.
    pub line: usize,
    /// The variable's name.
    pub key: String,
    pub value: String,
}

/// Parses an env file: `NAME=VALUE` lines, `#` comments, blank lines, an
/// optional `export ` prefix, and a value optionally in single quotes
/// (literal) or double quotes (`\"`, `\\`, `\$` and `` \` `` unescaped).
/// An unquoted value ends at a `#` that follows a blank. `$VAR` is not
/// expanded. A bare `export NAME` line is allowed and sets nothing.
/// A name given twice is listed twice; the later one wins when applied.
///
/// A line that is not `NAME=VALUE` is refused as `(line, reason)`, the
/// line 1-based; the reason never holds a value.
pub fn parse_env_file(text: &str) -> Result<Vec<EnvEntry>, (usize, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (exported, line) = match line.strip_prefix("export") {
            Some(rest) if rest.starts_with([' ', '\t']) => (true, rest.trim_start()),
            _ => (false, line),
        };
        let Some((name, rest)) = line.split_once('=') else {
            if exported && line.split_whitespace().all(valid_name) {
                continue; // `export NAME`: sets nothing
            }
            return Err((n, "expected NAME=VALUE".to_string()));
        };
        let name = name.trim_end();
        if !valid_name(name) {
            return Err((n, format!("invalid variable name {name:?}")));
        }
        let value = parse_value(rest).map_err(|m| (n, format!("{name}: {m}")))?;
        entries.push(EnvEntry {
            line: n,
            key: name.to_string(),
            value,
        });
    }
    Ok(entries)
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn parse_value(rest: &str) -> Result<String, &'static str> {
    let trimmed = rest.trim_start();
    let Some(quote @ ('"' | '\'')) = trimmed.chars().next() else {
        // Unquoted: a `#` after a blank starts a comment.
        let mut end = rest.len();
        let mut prev_blank = false;
        for (i, c) in rest.char_indices() {
            if c == '#' && prev_blank {
                end = i;
                break;
            }
            prev_blank = c == ' ' || c == '\t';
        }
        return Ok(rest[..end].trim().to_string());
    };
    let mut value = String::new();
    let mut chars = trimmed[1..].char_indices();
    let after = loop {
        let Some((i, c)) = chars.next() else {
            return Err(if quote == '"' {
                "unterminated double quote"
            } else {
                "unterminated single quote"
            });
        };
        match c {
            c if c == quote => break &trimmed[1 + i + 1..],
            '\\' if quote == '"' => match chars.next() {
                Some((_, e @ ('"' | '\\' | '$' | '`'))) => value.push(e),
                Some((_, e)) => {
                    value.push('\\');
                    value.push(e);
                }
                None => return Err("unterminated double quote"),
            },
            c => value.push(c),
        }
    };
    let after = after.trim_start();
    if after.is_empty() || after.starts_with('#') {
        Ok(value)
    } else {
        Err("unexpected text after the closing quote")
    }
}

/// Reads and parses an env file; `None` when it does not exist. Errors name
/// the file (and line).
pub fn read_env_file(path: &Path) -> Result<Option<Vec<EnvEntry>>, ConfigError> {
    let Some(text) = read(path)? else {
        return Ok(None);
    };
    parse_env_file(&text)
        .map(Some)
        .map_err(|(line, message)| ConfigError::EnvFileSyntax {
            path: path.to_path_buf(),
            line,
            message,
        })
}

/// Checks of settings that types alone cannot make; each error names
/// `section.key` and the limit, as a daemon prints it at start.
pub mod checks {
    use std::path::Path;

    /// `value` within `min..=max`.
    pub fn range(section: &str, key: &str, value: u64, min: u64, max: u64) -> anyhow::Result<()> {
        if (min..=max).contains(&value) {
            return Ok(());
        }
        Err(anyhow::anyhow!(
            "{section}.{key}: {value} is outside {min}..={max}"
        ))
    }

    /// An absolute path.
    pub fn absolute(section: &str, key: &str, path: &Path) -> anyhow::Result<()> {
        if path.is_absolute() {
            return Ok(());
        }
        Err(anyhow::anyhow!(
            "{section}.{key}: {} is not an absolute path",
            path.display()
        ))
    }

    /// An absolute path short enough for a unix socket (107 bytes).
    pub fn socket(section: &str, key: &str, path: &Path) -> anyhow::Result<()> {
        absolute(section, key, path)?;
        let len = path.as_os_str().len();
        if len > 107 {
            return Err(anyhow::anyhow!(
                "{section}.{key}: {} is {len} bytes long, over the 107 a socket path may have",
                path.display()
            ));
        }
        Ok(())
    }

    /// An HTTP address (`127.0.0.1:8016` or a URL) with its scheme and
    /// without a trailing slash.
    pub fn http_base(url: &str) -> String {
        let url = url.trim_end_matches('/');
        if url.starts_with("http://") || url.starts_with("https://") {
            url.to_string()
        } else {
            format!("http://{url}")
        }
    }

    /// An address `http_base` makes a URL of.
    pub fn http_url(section: &str, key: &str, url: &str, example: &str) -> anyhow::Result<()> {
        if reqwest::Url::parse(&http_base(url)).is_ok() {
            return Ok(());
        }
        Err(anyhow::anyhow!(
            "{section}.{key}: {url:?} is not an address like {example}"
        ))
    }
}
