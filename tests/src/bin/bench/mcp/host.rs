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

    let mut opened = Vec::with_capacity(fresh);
    for _ in 1..fresh {
        let (session, child, took) = open_stdio(&node, &script_path).await?;
        opened.push(took);
        let _ = session.cancel().await;
        drop(child);
    }
    let (session, child, took) = open_stdio(&node, &script_path).await?;
    opened.push(took);
    let plain = echoes(&session, steps).await;
    let _ = session.cancel().await;
    drop(child);
    let plain = plain?;

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
    let made = client
        .post(
            "/mcp-connectors",
            json!({
                "name": "Everything",
                "transport": "stdio",
                "command": node.display().to_string(),
                "args": [script_path.display().to_string(), "stdio"],
            }),
        )
        .await?;
    anyhow::ensure!(made.status == 201, "{made:?}");
    let mut cold = Vec::with_capacity(fresh);
    let mut chat = String::new();
    for n in 0..fresh {
        let new = client.create_chat_in("yolo").await?;
        let turn = steps_through_chatd(
            &sim,
            &client,
            &new,
            1,
            script(1, "echo", |_| json!({"message": format!("cold {n}")})),
        )
        .await?;
        cold.push(turn.first);
        if n == 0 {
            chat = new;
        }
    }
    let (warm, through) = echo_steps(&sim, &client, &chat, steps).await?;
    drop(client);
    drop(chatd);
    drop(hostexecd);

    let (t, d) = (dist(through), dist(plain));
    say(format!(
        "stdio through hostexecd: chatd step with an MCP echo: median {} p99 {}; echo directly with rmcp over stdio: median {} p99 {}; the HTTP connector's step above: median {} p99 {} ({steps} calls each)",
        ms(t.p50), ms(t.p99), ms(d.p50), ms(d.p99), ms(http.0), ms(http.1)
    ));
    let (c, o) = (median_us(&cold), median_us(&opened));
    say(format!(
        "stdio through hostexecd: a new chat's first turn to its first request (server started, initialize, tools/list): {}; the same turn with the session open: {}; node started + initialize + tools/list directly: {}",
        listed(&cold),
        ms(warm.first),
        listed(&opened)
    ));
    rows.push(
        row(
            format!("17. MCP echo call through chatd, stdio server run through hostexecd (no container runtime), a whole step ({steps} steps)"),
            format!("median {} / p99 {}", ms(t.p50), ms(t.p99)),
        )
        .baseline(
            format!("rmcp over stdio directly {} / {}", ms(d.p50), ms(d.p99)),
            format!(
                "+{} median / +{} p99 (HTTP step {} / {})",
                ms(t.p50 - d.p50),
                ms(t.p99 - d.p99),
                ms(http.0),
                ms(http.1)
            ),
        ),
    );
    rows.push(
        row(
            format!("17. a new chat's first turn to its first request, stdio server started through hostexecd (median of {fresh})"),
            format!("{} (each {})", ms(c), listed(&cold)),
        )
        .baseline(
            format!(
                "the session open {}; node + initialize directly {}",
                ms(warm.first),
                ms(o)
            ),
            format!("+{} over the open session", ms(c - warm.first)),
        ),
    );
    Ok(())
}
