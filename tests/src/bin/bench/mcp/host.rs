//! Figure 17's stdio row on a box without a container runtime: chatd runs
//! `node …/dist/index.js stdio` through hostexecd (`POST /serve`: its
//! keeper, its namespaces, the upgraded stream of frames), the same 200-step
//! `echo` run in one chat against the bench's own rmcp session over the
//! stdin/stdout of the same command as its child; and a new chat's first
//! turn (the server started through hostexecd, initialize, tools/list)
//! against the same turn with the session open and the bench's own start.

use super::*;

/// This machine's `node`, from PATH.
fn node_on_path() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("node"))
        .find(|p| p.is_file())
        .context("node is not on PATH")
}

pub(super) async fn over_host(
    quick: bool,
    steps: usize,
    http: (i64, i64),
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    say("\n### 17, stdio through hostexecd: server-everything run on this machine (no container runtime)");
    let fresh = if quick { 1 } else { 3 };
    let package = npm::package(EVERYTHING)
        .context("server-everything is not installed (ops/test installs it under tests/npm)")?;
    let script_path = package.join("dist/index.js");
    let node = node_on_path()?;
    let (opened, plain) = stdio_directly(&node, &script_path, fresh, steps).await?;

    let hostexecd = tandem_tests::harness::Hostexecd::start("").await?;
    let sim = Sim::start(&["--tokens-per-second", "0", "--context-window", "4000000"])?;
    let max_steps = (steps + 10).to_string();
    let socket = hostexecd.socket.display().to_string();
    let chat_data = hostexecd.chat_data.display().to_string();
    let env = [
        ("QSE_HOSTEXEC_SOCKET", socket.as_str()),
        ("QSE_CHAT_DATA", chat_data.as_str()),
        ("QSE_CHAT_MAX_STEPS", max_steps.as_str()),
        ("QSE_CHAT_CONTEXT_WINDOW", "4000000"),
    ];
    let chatd = Chatd::start(&sim.url(), &env).await?;
    let client = chatd.client();
    let (cold, warm, through) =
        stdio_through_chatd(&sim, &client, &node, &script_path, fresh, steps).await?;
    drop(client);
    drop(chatd);
    drop(hostexecd);
    let figures = StdioFigures {
        label: "stdio through hostexecd",
        server: "stdio server run through hostexecd (no container runtime)",
        through,
        plain,
        cold,
        warm,
        opened,
    };
    figures.report(steps, http, rows);
    Ok(())
}
