//! Layered configuration: TOML file, then run/serve.env, then run/local.env,
//! then the environment; errors name where the bad setting came from.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tandem_shared::config::{load, parse_env_file, ConfigError, EnvEntry, EnvKey, Loaded, Sources};

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Example {
    chatd: ChatdSection,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ChatdSection {
    listen: String,
    max_runs: u32,
    engine_url: String,
    retry_window_s: u64,
    debug: bool,
    ratio: f64,
    default_model: String,
    forward_key: String,
    token_ttl_s: u64,
}

impl Default for ChatdSection {
    fn default() -> Self {
        ChatdSection {
            listen: "127.0.0.1:8016".into(),
            max_runs: 2,
            engine_url: "http://127.0.0.1:8000".into(),
            retry_window_s: 600,
            debug: false,
            ratio: 0.5,
            default_model: String::new(),
            forward_key: String::new(),
            token_ttl_s: 3600,
        }
    }
}

const KEYS: &[EnvKey] = &[
    EnvKey {
        env: "QSE_CHAT_URL",
        key: "chatd.listen",
    },
    EnvKey {
        env: "QSE_CHAT_MAX_RUNS",
        key: "chatd.max_runs",
    },
    EnvKey {
        env: "QSE_ENGINE_URL",
        key: "chatd.engine_url",
    },
    EnvKey {
        env: "QSE_CHAT_RETRY_WINDOW_S",
        key: "chatd.retry_window_s",
    },
    EnvKey {
        env: "QSE_CHAT_DEBUG",
        key: "chatd.debug",
    },
    EnvKey {
        env: "QSE_CHAT_RATIO",
        key: "chatd.ratio",
    },
    EnvKey {
        env: "QSE_CHAT_DEFAULT_MODEL",
        key: "chatd.default_model",
    },
    EnvKey {
        env: "QSE_FORWARD_KEY",
        key: "chatd.forward_key",
    },
    EnvKey {
        env: "QSE_ADMIN_TOKEN_TTL_S",
        key: "chatd.token_ttl_s",
    },
];

/// What is on disk and in the environment for one case.
#[derive(Default, Clone, Copy)]
struct Input {
    /// tandem.toml (the default file unless `explicit`).
    file: Option<&'static str>,
    /// Pass the file as explicitly named (`--config`).
    explicit: bool,
    serve: Option<&'static str>,
    local: Option<&'static str>,
    env: &'static [(&'static str, &'static str)],
}

#[derive(Clone, Copy)]
enum Expect {
    /// The defaults changed by this function.
    Config(fn(&mut ChatdSection)),
    /// The error's one line: it holds every fragment (after `{file}`,
    /// `{serve}`, `{local}` become the paths) and none of the `absent` ones.
    Error {
        has: &'static [&'static str],
        absent: &'static [&'static str],
    },
}

struct Paths {
    file: PathBuf,
    serve: PathBuf,
    local: PathBuf,
}

fn run(
    input: Input,
) -> (
    tempfile::TempDir,
    Paths,
    Result<Loaded<Example>, ConfigError>,
) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("run")).unwrap();
    let paths = Paths {
        file: root.join("tandem.toml"),
        serve: root.join("run/serve.env"),
        local: root.join("run/local.env"),
    };
    let write = |path: &Path, text: Option<&str>| {
        if let Some(text) = text {
            std::fs::write(path, text).unwrap();
        }
    };
    write(&paths.file, input.file);
    write(&paths.serve, input.serve);
    write(&paths.local, input.local);
    let sources = Sources {
        file: input.explicit.then(|| paths.file.clone()),
        default_file: (!input.explicit).then(|| paths.file.clone()),
        env_files: tandem_shared::config::env_files_in(root),
        env: input
            .env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let result = load::<Example>(&sources, KEYS);
    (dir, paths, result)
}

fn check(name: &str, input: Input, expect: Expect) {
    let (_dir, paths, result) = run(input);
    match (expect, result) {
        (Expect::Config(change), Ok(loaded)) => {
            let mut want = ChatdSection::default();
            change(&mut want);
            assert_eq!(loaded.config.chatd, want, "{name}");
        }
        (Expect::Error { has, absent }, Err(err)) => {
            let text = err.to_string();
            assert!(
                !text.contains('\n'),
                "{name}: error is not one line: {text}"
            );
            for fragment in has {
                let fragment = fragment
                    .replace("{file}", &paths.file.display().to_string())
                    .replace("{serve}", &paths.serve.display().to_string())
                    .replace("{local}", &paths.local.display().to_string());
                assert!(
                    text.contains(&fragment),
                    "{name}: error {text:?} lacks {fragment:?}"
                );
            }
            for fragment in absent {
                assert!(
                    !text.contains(fragment),
                    "{name}: error {text:?} shows {fragment:?}"
                );
            }
        }
        (Expect::Config(_), Err(err)) => panic!("{name}: unexpected error: {err}"),
        (Expect::Error { .. }, Ok(loaded)) => {
            panic!("{name}: expected an error, loaded {:?}", loaded.config)
        }
    }
}

const NOTHING: Input = Input {
    file: None,
    explicit: false,
    serve: None,
    local: None,
    env: &[],
};

const FILE: &str = "\
# tandem
[chatd]
listen = \"127.0.0.1:9000\"
max_runs = 4
engine_url = \"http://file:8000\"
";

#[test]
fn layers() {
    let cases: &[(&str, Input, Expect)] = &[
        (
            "defaults with nothing present",
            NOTHING,
            Expect::Config(|_| {}),
        ),
        (
            "file overrides defaults",
            Input {
                file: Some(FILE),
                ..NOTHING
            },
            Expect::Config(|c| {
                c.listen = "127.0.0.1:9000".into();
                c.max_runs = 4;
                c.engine_url = "http://file:8000".into();
            }),
        ),
        (
            "explicit file is read",
            Input {
                file: Some(FILE),
                explicit: true,
                ..NOTHING
            },
            Expect::Config(|c| {
                c.listen = "127.0.0.1:9000".into();
                c.max_runs = 4;
                c.engine_url = "http://file:8000".into();
            }),
        ),
        (
            "serve.env overrides the file",
            Input {
                file: Some(FILE),
                serve: Some("QSE_CHAT_MAX_RUNS=5\nQSE_CHAT_DEBUG=true\n"),
                ..NOTHING
            },
            Expect::Config(|c| {
                c.listen = "127.0.0.1:9000".into();
                c.max_runs = 5;
                c.engine_url = "http://file:8000".into();
                c.debug = true;
            }),
        ),
        (
            "local.env overrides serve.env",
            Input {
                file: Some(FILE),
                serve: Some("QSE_CHAT_MAX_RUNS=5\nQSE_ENGINE_URL=http://serve:1\n"),
                local: Some("QSE_CHAT_MAX_RUNS=6\n"),
                ..NOTHING
            },
            Expect::Config(|c| {
                c.listen = "127.0.0.1:9000".into();
                c.max_runs = 6;
                c.engine_url = "http://serve:1".into();
            }),
        ),
        (
            "environment overrides all",
            Input {
                file: Some(FILE),
                serve: Some("QSE_CHAT_MAX_RUNS=5\n"),
                local: Some("QSE_CHAT_MAX_RUNS=6\nQSE_CHAT_RETRY_WINDOW_S=60\n"),
                env: &[
                    ("QSE_CHAT_MAX_RUNS", "7"),
                    ("QSE_ENGINE_URL", "http://env:2"),
                ],
                ..NOTHING
            },
            Expect::Config(|c| {
                c.listen = "127.0.0.1:9000".into();
                c.max_runs = 7;
                c.engine_url = "http://env:2".into();
                c.retry_window_s = 60;
            }),
        ),
        (
            "later line of one file wins",
            Input {
                serve: Some("QSE_CHAT_MAX_RUNS=5\nQSE_CHAT_MAX_RUNS=9\n"),
                ..NOTHING
            },
            Expect::Config(|c| c.max_runs = 9),
        ),
        (
            "values become the type the key wants",
            Input {
                env: &[
                    ("QSE_CHAT_RATIO", "2"),
                    ("QSE_CHAT_DEBUG", "false"),
                    ("QSE_CHAT_DEFAULT_MODEL", "1234"),
                    ("QSE_FORWARD_KEY", "true"),
                    ("QSE_CHAT_URL", "0.0.0.0:80"),
                    ("QSE_CHAT_RETRY_WINDOW_S", " 90 "),
                ],
                ..NOTHING
            },
            Expect::Config(|c| {
                c.ratio = 2.0;
                c.debug = false;
                c.default_model = "1234".into();
                c.forward_key = "true".into();
                c.listen = "0.0.0.0:80".into();
                c.retry_window_s = 90;
            }),
        ),
        (
            "unknown and unmapped variables are ignored, empty means unset",
            Input {
                serve: Some("LLAMA_ARGS=--ctx 8192\nQSE_SOMETHING_ELSE=x\nQSE_CHAT_MAX_RUNS=\n"),
                env: &[("QSE_NOT_MAPPED", "many"), ("PATH", "/bin")],
                ..NOTHING
            },
            Expect::Config(|_| {}),
        ),
        (
            "missing default file is fine, env files still apply",
            Input {
                local: Some("QSE_CHAT_MAX_RUNS=3"),
                ..NOTHING
            },
            Expect::Config(|c| c.max_runs = 3),
        ),
        (
            "a table defined twice is a syntax error",
            Input {
                file: Some("chatd.max_runs = 8\nchatd = { }\n"),
                ..NOTHING
            },
            Expect::Error {
                has: &["{file}:2:"],
                absent: &[],
            },
        ),
        (
            "dotted keys in the file",
            Input {
                file: Some("chatd.max_runs = 8\nchatd.debug = true\n"),
                ..NOTHING
            },
            Expect::Config(|c| {
                c.max_runs = 8;
                c.debug = true;
            }),
        ),
    ];
    for (name, input, expect) in cases {
        check(name, *input, *expect);
    }
}

#[test]
fn errors() {
    let cases: &[(&str, Input, &[&str], &[&str])] = &[
        (
            "unknown key in the file: path, line, dotted key",
            Input {
                file: Some("# c\n\n[chatd]\nlisten = \"x\"\n\nmax_rusn = 2\n"),
                ..NOTHING
            },
            &["{file}:6: unknown key \"chatd.max_rusn\"", "expected one of"],
            &[],
        ),
        (
            "unknown section in the file",
            Input { file: Some("[chatd]\nmax_runs = 2\n[chatdd]\nx = 1\n"), ..NOTHING },
            &["{file}:3: unknown key \"chatdd\""],
            &[],
        ),
        (
            "unknown dotted key in the file",
            Input { file: Some("chatd.debug = true\nchatd.max_rusn = 2\n"), ..NOTHING },
            &["{file}:2: unknown key \"chatd.max_rusn\""],
            &[],
        ),
        (
            "bad type in the file: path, line, key",
            Input { file: Some("[chatd]\n\nmax_runs = \"two\"\n"), ..NOTHING },
            &["{file}:3: chatd.max_runs: invalid type: string \"two\", expected u32"],
            &[],
        ),
        (
            "bad value in the file",
            Input { file: Some("[chatd]\nlisten = \"a\"\nmax_runs = -1\n"), ..NOTHING },
            &["{file}:3: chatd.max_runs: invalid value: integer `-1`, expected u32"],
            &[],
        ),
        (
            "TOML syntax error names file and line",
            Input { file: Some("[chatd]\nmax_runs = 2\nlisten = \n"), ..NOTHING },
            &["{file}:3: "],
            &[],
        ),
        (
            "bad value in an env file: file, line, variable",
            Input {
                file: Some(FILE),
                serve: Some("QSE_CHAT_MAX_RUNS=5\n"),
                local: Some("# local\nexport PATH=/x\n\nQSE_CHAT_MAX_RUNS=\"many\"\n"),
                ..NOTHING
            },
            &[
                "{local}:4: QSE_CHAT_MAX_RUNS=\"many\" (chatd.max_runs): invalid type: string \"many\", expected u32",
            ],
            &[],
        ),
        (
            "negative number in an env file",
            Input { serve: Some("QSE_CHAT_RETRY_WINDOW_S=-5"), ..NOTHING },
            &["{serve}:1: QSE_CHAT_RETRY_WINDOW_S=\"-5\" (chatd.retry_window_s): invalid value: integer `-5`, expected u64"],
            &[],
        ),
        (
            "bad environment variable",
            Input { env: &[("QSE_CHAT_MAX_RUNS", "many")], ..NOTHING },
            &["environment variable QSE_CHAT_MAX_RUNS=\"many\" (chatd.max_runs): invalid type: string \"many\", expected u32"],
            &[],
        ),
        (
            "secret value hidden (environment)",
            Input { env: &[("QSE_ADMIN_TOKEN_TTL_S", "hunter2hunter2")], ..NOTHING },
            &["environment variable QSE_ADMIN_TOKEN_TTL_S=<hidden> (chatd.token_ttl_s): invalid type: <hidden>, expected u64"],
            &["hunter2"],
        ),
        (
            "secret value hidden (env file)",
            Input { local: Some("QSE_ADMIN_TOKEN_TTL_S='s3cr3t-value'\n"), ..NOTHING },
            &["{local}:1: QSE_ADMIN_TOKEN_TTL_S=<hidden> (chatd.token_ttl_s): invalid type: <hidden>, expected u64"],
            &["s3cr3t"],
        ),
        (
            "secret value hidden (file)",
            Input { file: Some("[chatd]\nforward_key = 12345678\n"), ..NOTHING },
            &["{file}:2: chatd.forward_key: invalid type: <hidden>, expected a string"],
            &["12345678"],
        ),
        (
            "env file syntax error names file and line",
            Input { serve: Some("# ok\nQSE_CHAT_MAX_RUNS=2\nthis is not an assignment\n"), ..NOTHING },
            &["{serve}:3: expected NAME=VALUE"],
            &[],
        ),
        (
            "unterminated quote in an env file",
            Input { local: Some("\n\nQSE_FORWARD_KEY=\"abc\n"), ..NOTHING },
            &["{local}:3: QSE_FORWARD_KEY: unterminated double quote"],
            &["abc"],
        ),
        (
            "missing explicit file",
            Input { explicit: true, ..NOTHING },
            &["config file {file} does not exist"],
            &[],
        ),
    ];
    for (name, input, has, absent) in cases {
        check(name, *input, Expect::Error { has, absent });
    }
}

#[test]
fn unreadable_file_names_path_and_os_error() {
    let dir = tempfile::tempdir().unwrap();
    // A folder where the file should be: reading it fails with an OS error.
    let path = dir.path().join("tandem.toml");
    std::fs::create_dir(&path).unwrap();
    let sources = Sources {
        default_file: Some(path.clone()),
        ..Sources::default()
    };
    let err = load::<Example>(&sources, KEYS).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("cannot read {}: ", path.display())),
        "{text}"
    );
    assert!(matches!(err, ConfigError::Read { .. }));
}

#[test]
fn origins_and_overrides() {
    let (_dir, paths, result) = run(Input {
        file: Some(FILE),
        serve: Some("QSE_CHAT_MAX_RUNS=5\n"),
        env: &[("QSE_ENGINE_URL", "http://env:2")],
        ..NOTHING
    });
    let loaded = result.unwrap();
    assert_eq!(
        loaded.origins,
        vec![
            paths.file.display().to_string(),
            paths.serve.display().to_string()
        ]
    );
    let seen: Vec<_> = loaded
        .overrides
        .iter()
        .map(|o| (o.env, o.key, o.origin.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                "QSE_CHAT_MAX_RUNS",
                "chatd.max_runs",
                format!("{}:1", paths.serve.display())
            ),
            (
                "QSE_ENGINE_URL",
                "chatd.engine_url",
                "environment".to_string()
            ),
        ]
    );
}

#[test]
fn env_file_syntax() {
    let text = "\
\u{feff}# comment line
   # indented comment

PLAIN=value
export EXPORTED=1
export\tTABBED=2
SPACED = around  
DOUBLE=\"a b # not a comment\"
SINGLE='it is $HOME \\n'
ESCAPES=\"q\\\"b\\\\d\\$e\\n\"
TRAILING=value # a comment
HASH=a#b
EMPTY=
EMPTY_QUOTED=\"\"
QUOTED_COMMENT=\"x\"   # note
EQUALS=a=b=c
export ALREADY_SET
CRLF=yes\r
";
    let got: Vec<(usize, String, String)> = parse_env_file(text)
        .unwrap()
        .into_iter()
        .map(|EnvEntry { line, key, value }| (line, key, value))
        .collect();
    let want: Vec<(usize, &str, &str)> = vec![
        (4, "PLAIN", "value"),
        (5, "EXPORTED", "1"),
        (6, "TABBED", "2"),
        (7, "SPACED", "around"),
        (8, "DOUBLE", "a b # not a comment"),
        (9, "SINGLE", "it is $HOME \\n"),
        (10, "ESCAPES", "q\"b\\d$e\\n"),
        (11, "TRAILING", "value"),
        (12, "HASH", "a#b"),
        (13, "EMPTY", ""),
        (14, "EMPTY_QUOTED", ""),
        (15, "QUOTED_COMMENT", "x"),
        (16, "EQUALS", "a=b=c"),
        (18, "CRLF", "yes"),
    ];
    let want: Vec<(usize, String, String)> = want
        .into_iter()
        .map(|(l, k, v)| (l, k.to_string(), v.to_string()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn env_file_syntax_errors() {
    let cases: &[(&str, usize, &str)] = &[
        ("A=1\nnot an assignment\n", 2, "expected NAME=VALUE"),
        ("1A=x\n", 1, "invalid variable name \"1A\""),
        ("A-B=x\n", 1, "invalid variable name \"A-B\""),
        ("A='open\n", 1, "A: unterminated single quote"),
        ("\n\nA=\"open\n", 3, "A: unterminated double quote"),
        (
            "A=\"x\" y\n",
            1,
            "A: unexpected text after the closing quote",
        ),
        ("=x\n", 1, "invalid variable name \"\""),
    ];
    for (text, line, reason) in cases {
        assert_eq!(
            parse_env_file(text),
            Err((*line, reason.to_string())),
            "{text:?}"
        );
    }
}

#[test]
fn secrets_file_format() {
    let entries = parse_env_file(
        "# made by make-secrets\nQSE_FORWARD_KEY=abc123\nexport QSE_ADMIN_TOKEN='t0k'\n",
    )
    .unwrap();
    assert_eq!(
        entries,
        vec![
            EnvEntry {
                line: 2,
                key: "QSE_FORWARD_KEY".into(),
                value: "abc123".into()
            },
            EnvEntry {
                line: 3,
                key: "QSE_ADMIN_TOKEN".into(),
                value: "t0k".into()
            },
        ]
    );
}

#[test]
fn from_process_uses_explicit_then_qse_config_then_home() {
    // Only reads the environment; the test process's own values decide the
    // default, so check the explicit path and the env files.
    let root = Path::new("/srv/box");
    let s = Sources::from_process(Some(PathBuf::from("/etc/t.toml")), Some(root));
    assert_eq!(s.file, Some(PathBuf::from("/etc/t.toml")));
    assert_eq!(
        s.env_files,
        vec![root.join("run/serve.env"), root.join("run/local.env")]
    );
    assert!(s.env.iter().all(|(k, _)| k.starts_with("QSE_")));
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        assert_eq!(
            s.default_file,
            Some(Path::new(&home).join(".config/tandem/tandem.toml"))
        );
    }
    let none = Sources::from_process(None, None);
    assert!(none.env_files.is_empty());
}
