//! `tandem mcp …` end to end: the `tandem` binary talking to the real
//! chatd (loopback servers allowed) and the fake MCP server of
//! `tandem_tests::mcpservers`, which wants a token.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use tandem_tests::harness::{bin_dir, Chatd, Sim};
use tandem_tests::mcpservers::FakeMcp;

const TOKEN: &str = "ctl-mcp-token-5be1";

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `tandem ARGS` as a person runs it, with `stdin` piped in.
fn tandem(chatd: &Chatd, home: &std::path::Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(bin_dir().join("tandem"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("QSE_ROOT", home)
        .env("QSE_CHAT_URL", format!("127.0.0.1:{}", chatd.port))
        .env("QSE_SECRETS", chatd.dir.path().join("secrets.env"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// The fake (wanting [`TOKEN`]), engine-sim, chatd allowing loopback
/// servers, and a home for `tandem`.
async fn started() -> (FakeMcp, Sim, Chatd, tempfile::TempDir) {
    let fake = FakeMcp::start(Some(TOKEN)).await.unwrap();
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let chatd = Chatd::start(&sim.url(), &[("QSE_CHAT_MCP_ALLOW_PRIVATE", "true")])
        .await
        .unwrap();
    (fake, sim, chatd, tempfile::tempdir().unwrap())
}

/// `tandem mcp add Glossary URL --token-file -` with the token on stdin.
fn add_glossary(chatd: &Chatd, home: &std::path::Path, url: &str) -> Output {
    let added = tandem(
        chatd,
        home,
        &["mcp", "add", "Glossary", url, "--token-file", "-"],
        &format!("{TOKEN}\n"),
    );
    assert!(added.status.success(), "{}", text(&added));
    added
}

/// add (token from stdin) prints the tools; list shows the row without the
/// token; test by name; off; a wrong token's test exits 1 with the reason;
/// rm; an unknown name is one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_test_list_switch_and_remove_a_server() {
    let (fake, _sim, chatd, home) = started().await;
    let url = fake.url("/mcp");
    let added = add_glossary(&chatd, home.path(), &url);
    let out = String::from_utf8_lossy(&added.stdout);
    assert!(
        out.contains("added mc_") && out.contains("Glossary"),
        "{out}"
    );
    assert!(out.contains("connected, 5 tools"), "{out}");
    assert!(
        out.contains("lookup") && out.contains("Looks a word up"),
        "{out}"
    );

    let listed = tandem(&chatd, home.path(), &["mcp", "list"], "");
    let out = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{}", text(&listed));
    assert!(
        out.contains("connected") && out.contains("127.0.0.1") && out.contains("token"),
        "{out}"
    );
    assert!(!out.contains(TOKEN), "{out}");

    let tested = tandem(&chatd, home.path(), &["mcp", "test", "glossary"], "");
    assert!(tested.status.success(), "{}", text(&tested));

    // A chat's tools, and the server switched off for that chat alone.
    let chat = chatd.client().create_chat().await.unwrap();
    let tools = tandem(&chatd, home.path(), &["mcp", "tools", &chat], "");
    assert!(tools.status.success(), "{}", text(&tools));
    let out = String::from_utf8_lossy(&tools.stdout);
    assert!(
        out.lines()
            .any(|l| l.contains("lookup") && l.contains("mcp mc_")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("read_file") && l.contains("built-in")),
        "{out}"
    );
    assert!(out.contains("used here"), "{out}");
    let off_here = tandem(
        &chatd,
        home.path(),
        &["mcp", "off", "Glossary", "--chat", &chat],
        "",
    );
    assert!(off_here.status.success(), "{}", text(&off_here));
    let tools = tandem(&chatd, home.path(), &["mcp", "tools", &chat], "");
    let out = String::from_utf8_lossy(&tools.stdout);
    assert!(out.contains("switched off for this chat"), "{out}");
    assert!(!out.contains("lookup"), "{out}");
    let on_here = tandem(
        &chatd,
        home.path(),
        &["mcp", "on", "glossary", "--chat", &chat],
        "",
    );
    assert!(on_here.status.success(), "{}", text(&on_here));
    let tools = tandem(&chatd, home.path(), &["mcp", "tools", &chat], "");
    assert!(String::from_utf8_lossy(&tools.stdout).contains("lookup"));

    let off = tandem(&chatd, home.path(), &["mcp", "off", "Glossary"], "");
    assert!(
        String::from_utf8_lossy(&off.stdout).contains(" off "),
        "{}",
        text(&off)
    );

    let wrong = tandem(
        &chatd,
        home.path(),
        &["mcp", "add", "Wrong", &url, "--token-file", "-", "--off"],
        "not-the-token\n",
    );
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        err.contains("needs_sign_in") && err.contains("check the token"),
        "{err}"
    );

    let removed = tandem(&chatd, home.path(), &["mcp", "rm", "Glossary"], "");
    assert!(removed.status.success(), "{}", text(&removed));
    let unknown = tandem(&chatd, home.path(), &["mcp", "test", "Glossary"], "");
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown));
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(err.contains("no MCP connector is named Glossary"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!chatd.log().contains(TOKEN));
}

/// A command server: `add NAME --env-file - -- COMMAND ARGS` saves it
/// (the environment sealed: `env` in the row, never its value); on a box
/// with no container runtime its test exits 1 saying where it would run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_server_is_added_with_its_environment_from_stdin() {
    let sim = Sim::start(&["--tokens-per-second", "0"]).unwrap();
    let chatd = Chatd::start(&sim.url(), &[]).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let secret = "ctl-env-value-77aa";
    let added = tandem(
        &chatd,
        home.path(),
        &[
            "mcp",
            "add",
            "Notes",
            "--env-file",
            "-",
            "--",
            "uvx",
            "notes-mcp",
            "--root",
            "/workspace",
        ],
        &format!("# the notes key\nNOTES_KEY={secret}\n"),
    );
    assert_eq!(added.status.code(), Some(1), "{}", text(&added));
    let out = String::from_utf8_lossy(&added.stdout);
    assert!(
        out.contains("added mc_") && out.contains("uvx") && out.contains("env"),
        "{out}"
    );
    let err = String::from_utf8_lossy(&added.stderr);
    assert!(err.contains("no container runtime"), "{err}");
    assert!(!out.contains(secret) && !err.contains(secret));

    let both = tandem(
        &chatd,
        home.path(),
        &["mcp", "add", "Both", "https://x.example/mcp", "--", "uvx"],
        "",
    );
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));
}

/// A chat's prompts and resources from the terminal: listed, one shown,
/// and both sent in front of a message; a prompt without its required
/// argument and an argument no prompt takes are refused before anything
/// is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_and_resources_are_listed_shown_and_sent() {
    let (fake, _sim, chatd, home) = started().await;
    add_glossary(&chatd, home.path(), &fake.url("/mcp"));
    let chat = chatd.client().create_chat().await.unwrap();

    let prompts = tandem(&chatd, home.path(), &["mcp", "prompts", &chat], "");
    assert!(prompts.status.success(), "{}", text(&prompts));
    let out = String::from_utf8_lossy(&prompts.stdout);
    assert!(
        out.lines()
            .any(|l| l.contains("Glossary") && l.contains("brief") && l.contains("topic*")),
        "{out}"
    );
    let resources = tandem(&chatd, home.path(), &["mcp", "resources", &chat], "");
    let out = String::from_utf8_lossy(&resources.stdout);
    assert!(out.contains("fake://glossary"), "{}", text(&resources));
    assert!(out.contains("fake://word/{word}"), "{out}");

    let shown = tandem(
        &chatd,
        home.path(),
        &[
            "mcp",
            "show",
            &chat,
            "--prompt",
            "glossary:brief",
            "--arg",
            "topic=bikes",
        ],
        "",
    );
    assert!(shown.status.success(), "{}", text(&shown));
    assert_eq!(
        String::from_utf8_lossy(&shown.stdout).trim(),
        "Write a brief about bikes."
    );
    let missing = tandem(
        &chatd,
        home.path(),
        &[
            "chat",
            "send",
            "Go",
            "--chat",
            &chat,
            "--prompt",
            "Glossary:brief",
        ],
        "",
    );
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("needs --arg topic"),
        "{}",
        text(&missing)
    );
    let stray = tandem(
        &chatd,
        home.path(),
        &[
            "chat",
            "send",
            "Go",
            "--chat",
            &chat,
            "--resource",
            "Glossary:fake://glossary",
            "--arg",
            "x=1",
        ],
        "",
    );
    assert_eq!(stray.status.code(), Some(1), "{}", text(&stray));

    let sent = tandem(
        &chatd,
        home.path(),
        &[
            "chat",
            "send",
            "Go ahead",
            "--chat",
            &chat,
            "--prompt",
            "Glossary:brief",
            "--arg",
            "topic=bikes",
            "--resource",
            "Glossary:fake://glossary",
        ],
        "",
    );
    assert!(sent.status.success(), "{}", text(&sent));
    let snapshot = chatd.client().snapshot(&chat).await.unwrap();
    let stored = snapshot["messages"]
        .as_array()
        .and_then(|all| all.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["text"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        stored
            .starts_with("[context from MCP connector Glossary: prompt \"brief\" (topic: bikes)]"),
        "{stored}"
    );
    assert!(stored.contains("tandem: two working as one"), "{stored}");
    assert!(stored.ends_with("Go ahead"), "{stored}");
    assert_eq!(
        snapshot["messages"].as_array().map(Vec::len),
        Some(2),
        "{snapshot}"
    );
}
