//! The MCP part (`--parts mcp`): chatd's MCP connectors under the soak's
//! load and chatd's SIGKILLs, against the fake MCP server of
//! `tandem_tests::mcpservers` (chatd runs with `QSE_CHAT_MCP_ALLOW_PRIVATE`:
//! the fake is on loopback). Three connectors: `good` (the token the fake
//! wants, and a header; the fake's address with its App pages), `wrong`
//! (another token) and `moved` (its address
//! redirects to the cloud metadata address). Meanwhile, one request at a
//! time, asked again while chatd is down: a test of one of them, the fake
//! going down (503) and coming back, the fake forgetting its sessions (404
//! to the next request, as a restarted server answers: chatd opens a new
//! one), an edit of `good` that leaves its secrets out, `wrong` switched
//! off and on.
//!
//! `Inv::Mcp` at the end: every test said what the fake's state at that
//! moment deserves (`good`: connected with the fake's two tools, or
//! cant_connect naming HTTP 503 while it was down; `wrong`: needs_sign_in,
//! or cant_connect while down; `moved`: cant_connect naming 169.254.169.254,
//! always); every edit kept the sealed token and headers; the fake only ever
//! saw the two tokens it was given. The tokens and the header's value are secrets: no log may hold
//! them (`Inv::Secrets`). Meanwhile a chat calls the fake's tool
//! (`mcp_turns.rs`) and reads and calls the good server's App page
//! (`mcp_pages.rs`).

use super::*;

use futures_util::future::BoxFuture;
use reqwest::Method;
use tandem_tests::mcpservers::FakeMcp;

use crate::push::{ask, Counts};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Good,
    Wrong,
    Moved,
}

const ALL: [Which; 3] = [Which::Good, Which::Wrong, Which::Moved];

impl Which {
    fn as_str(self) -> &'static str {
        match self {
            Which::Good => "good",
            Which::Wrong => "wrong",
            Which::Moved => "moved",
        }
    }
}

#[derive(Default)]
struct Tally {
    tests: u64,
    connected: u64,
    sign_in: u64,
    while_down: u64,
    redirects: u64,
    edits: u64,
    switches: u64,
    downs: u64,
    /// Times the fake forgot its sessions, as a restarted server does.
    forgotten: u64,
}

struct Run {
    fake: FakeMcp,
    ids: Vec<(Which, String)>,
    token: String,
    wrong: String,
    header: String,
    tally: Tally,
    counts: Counts,
}

pub(crate) struct McpPart {
    run: Mutex<Option<Run>>,
    turns: Mutex<Option<crate::mcp_turns::Turns>>,
}

impl McpPart {
    pub(crate) fn new() -> McpPart {
        McpPart {
            run: Mutex::new(None),
            turns: Mutex::new(None),
        }
    }
}

impl Part for McpPart {
    fn name(&self) -> PartName {
        PartName::Mcp
    }

    fn chatd_env(&self) -> Vec<(String, String)> {
        vec![("QSE_CHAT_MCP_ALLOW_PRIVATE".into(), "true".into())]
    }

    fn drive(self: Arc<Self>, shared: Arc<Shared>, seed: u64) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let run = match start(&shared, &mut rng).await {
                Ok(run) => run,
                Err(err) => {
                    shared.violate(Inv::Mcp, format!("mcp: could not start: {err:#}"));
                    return;
                }
            };
            let secrets = vec![run.token.clone(), run.wrong.clone(), run.header.clone()];
            let turns_seed = rng.random::<u64>();
            let (run, turns) = tokio::join!(
                load(&shared, run, &mut rng),
                crate::mcp_turns::drive(&shared, turns_seed, &secrets)
            );
            *lock(&self.run) = Some(run);
            *lock(&self.turns) = Some(turns);
        })
    }

    fn finish(self: Arc<Self>, shared: Arc<Shared>) -> BoxFuture<'static, PartEnd> {
        Box::pin(async move {
            let Some(mut run) = lock(&self.run).take() else {
                return PartEnd::default();
            };
            check_end(&shared, &mut run).await;
            let t = &run.tally;
            let turns = lock(&self.turns).take().unwrap_or_default();
            let totals = vec![
                turns.line(),
                format!(
                    "tests: {} ({} connected, {} needs_sign_in, {} cant_connect while the server was down, {} redirects to metadata refused)",
                    t.tests, t.connected, t.sign_in, t.while_down, t.redirects
                ),
                format!(
                    "{} edits kept the sealed token and headers; {} switches; the server went down {} times and forgot its sessions {} times",
                    t.edits, t.switches, t.downs, t.forgotten
                ),
                format!(
                    "requests: {} asked again while chatd was down, {} with no answer",
                    run.counts.retried, run.counts.lost
                ),
            ];
            PartEnd {
                totals,
                secrets: vec![run.token.clone(), run.wrong.clone(), run.header.clone()],
                ..PartEnd::default()
            }
        })
    }
}

async fn start(shared: &Shared, rng: &mut StdRng) -> anyhow::Result<Run> {
    let token = format!("soak-mcp-token-{:016x}", rng.random::<u64>());
    let wrong = format!("soak-mcp-wrong-{:016x}", rng.random::<u64>());
    let header = format!("soak-mcp-header-{:016x}", rng.random::<u64>());
    let fake = FakeMcp::start(Some(&token)).await?;
    let mut counts = Counts::default();
    let mut ids = Vec::new();
    for which in ALL {
        let body = match which {
            Which::Good => json!({"name": "soak good", "url": fake.url("/apps"),
                "token": token, "headers": {"X-Soak": header}}),
            Which::Wrong => json!({"name": "soak wrong", "url": fake.url("/mcp"), "token": wrong}),
            Which::Moved => json!({"name": "soak moved", "url": fake.url("/redirect")}),
        };
        let name = body["name"].as_str().unwrap_or("").to_string();
        let id = match ask(
            shared,
            &mut counts,
            Method::POST,
            "/mcp-connectors",
            Some(body),
        )
        .await
        {
            Some((201, made)) => made["id"].as_str().context("id")?.to_string(),
            // The first answer was lost to a kill after the commit.
            Some((409, _)) => find(shared, &mut counts, &name).await?,
            other => bail!("adding the {} connector answered {other:?}", which.as_str()),
        };
        ids.push((which, id));
    }
    Ok(Run {
        fake,
        ids,
        token,
        wrong,
        header,
        tally: Tally::default(),
        counts,
    })
}

async fn find(shared: &Shared, counts: &mut Counts, name: &str) -> anyhow::Result<String> {
    match ask(shared, counts, Method::GET, "/mcp-connectors", None).await {
        Some((200, listed)) => listed["connectors"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == name))
            .and_then(|c| c["id"].as_str())
            .map(str::to_string)
            .with_context(|| format!("{name} is not listed after a 409")),
        other => bail!("listing the connectors answered {other:?}"),
    }
}

fn id_of(run: &Run, which: Which) -> String {
    run.ids
        .iter()
        .find(|(w, _)| *w == which)
        .map(|(_, id)| id.clone())
        .unwrap_or_default()
}

async fn load(shared: &Shared, mut run: Run, rng: &mut StdRng) -> Run {
    let mut down = false;
    let mut phase = shared.phase.subscribe();
    // Pacing of the load, not a wait for anything.
    while sleep_in(
        &mut phase,
        Duration::from_millis(rng.random_range(200..600)),
        |p| p == Phase::Load,
    )
    .await
    {
        match rng.random_range(0..100) {
            0..=64 => {
                let which = ALL[rng.random_range(0..ALL.len())];
                test(shared, &mut run, which, down).await;
            }
            65..=69 => {
                run.fake.forget_sessions();
                run.tally.forgotten += 1;
                shared.fault("mcp server lost its sessions (404)");
            }
            70..=74 => {
                down = !down;
                run.fake.set_down(down);
                if down {
                    run.tally.downs += 1;
                    shared.fault("mcp server down (503)");
                }
            }
            75..=87 => edit(shared, &mut run, rng).await,
            _ => switch(shared, &mut run).await,
        }
    }
    run.fake.set_down(false);
    run
}

/// One test, and whether its answer is what the fake deserved.
async fn test(shared: &Shared, run: &mut Run, which: Which, down: bool) {
    let id = id_of(run, which);
    let path = format!("/mcp-connectors/{id}/test");
    let Some((status, body)) = ask(shared, &mut run.counts, Method::POST, &path, None).await else {
        return;
    };
    run.tally.tests += 1;
    let state = body["state"].as_str().unwrap_or("");
    let reason = body["reason"].as_str().unwrap_or("");
    let tools = body["tools"].clone();
    let fine = status == 200
        && match (which, down) {
            (Which::Moved, _) => state == "cant_connect" && reason.contains("169.254.169.254"),
            (_, true) => state == "cant_connect" && reason.contains("503"),
            (Which::Good, false) => {
                state == "connected"
                    && tools
                        == json!([
                            "lookup",
                            "send",
                            "big",
                            "whoami",
                            "read_file",
                            "clock",
                            "clock_hold",
                            "clock_tick",
                            "lookup_model",
                            "odd_visibility",
                            "huge_page",
                            "plain_page"
                        ])
            }
            (Which::Wrong, false) => state == "needs_sign_in",
        };
    match (which, state) {
        (Which::Moved, "cant_connect") => run.tally.redirects += 1,
        (_, "cant_connect") => run.tally.while_down += 1,
        (_, "connected") => run.tally.connected += 1,
        (_, "needs_sign_in") => run.tally.sign_in += 1,
        _ => {}
    }
    if !fine {
        shared.violate(
            Inv::Mcp,
            format!(
                "mcp: the {} connector's test (server {}) answered {status}: {body}",
                which.as_str(),
                if down { "down" } else { "up" }
            ),
        );
    }
}

/// `good` renamed, its secrets left out: they must be kept.
async fn edit(shared: &Shared, run: &mut Run, rng: &mut StdRng) {
    let id = id_of(run, Which::Good);
    let body = json!({"name": format!("soak good {}", rng.random_range(0..1000)), "url": run.fake.url("/apps")});
    let path = format!("/mcp-connectors/{id}");
    let Some((status, after)) = ask(shared, &mut run.counts, Method::PUT, &path, Some(body)).await
    else {
        return;
    };
    run.tally.edits += 1;
    if status != 200 || after["has_token"] != true || after["has_headers"] != true {
        shared.violate(
            Inv::Mcp,
            format!("mcp: an edit without the secrets answered {status}: {after}"),
        );
    }
}

/// `wrong` off and on again: its state says `off` between.
async fn switch(shared: &Shared, run: &mut Run) {
    let id = id_of(run, Which::Wrong);
    for (verb, state) in [("disable", "off"), ("enable", "")] {
        let path = format!("/mcp-connectors/{id}/{verb}");
        let Some((status, after)) = ask(shared, &mut run.counts, Method::POST, &path, None).await
        else {
            return;
        };
        let off_ok = state.is_empty() || after["state"] == state;
        if status != 200 || !off_ok {
            shared.violate(Inv::Mcp, format!("mcp: {verb} answered {status}: {after}"));
        }
    }
    run.tally.switches += 1;
}

async fn check_end(shared: &Shared, run: &mut Run) {
    let listed = ask(
        shared,
        &mut run.counts,
        Method::GET,
        "/mcp-connectors",
        None,
    )
    .await;
    let Some((200, listed)) = listed else {
        shared.violate(Inv::Mcp, format!("mcp: the list answered {listed:?}"));
        return;
    };
    let all = listed["connectors"].as_array().cloned().unwrap_or_default();
    if all.len() != ALL.len() {
        shared.violate(
            Inv::Mcp,
            format!(
                "mcp: {} connectors listed, {} made: {listed}",
                all.len(),
                ALL.len()
            ),
        );
    }
    let text = listed.to_string();
    for secret in [&run.token, &run.wrong, &run.header] {
        if text.contains(secret.as_str()) {
            shared.violate(Inv::Mcp, "mcp: a secret came back in the list".into());
        }
    }
    let good = format!("Bearer {}", run.token);
    let wrong = format!("Bearer {}", run.wrong);
    for seen in run.fake.seen() {
        let auth = seen.header("authorization").unwrap_or("");
        let known = auth.is_empty() || auth == good || auth == wrong;
        if !known {
            shared.violate(
                Inv::Mcp,
                "mcp: the fake saw a token it was never given".into(),
            );
        }
    }
}
