//! The connectors' routes: saved, tested against real servers, switched,
//! refused. chatd runs with `QSE_CHAT_MCP_ALLOW_PRIVATE` where a test
//! talks to a server on loopback, and without it where a test shows what
//! the rule refuses. Every wait is on a condition with a bound.

use crate::setup::PRIVATE;
use serde_json::{json, Value};
use tandem_tests::harness::{Chatd, Client, Sim};
use tandem_tests::mcpservers::{Everything, FakeMcp};

const TOKEN: &str = "tok-6c1f0e9a-sealed-secret";
const HEADER_VALUE: &str = "hdr-b7d2-also-secret";

async fn start(env: &[(&str, &str)]) -> anyhow::Result<(Sim, Chatd, Client)> {
    let sim = Sim::start(&["--tokens-per-second", "0"])?;
    let chatd = Chatd::start(&sim.url(), env).await?;
    let client = chatd.client();
    Ok((sim, chatd, client))
}

async fn put(
    client: &Client,
    path: &str,
    body: Value,
) -> anyhow::Result<tandem_tests::harness::Answer> {
    client.call(reqwest::Method::PUT, path, Some(body)).await
}

fn names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|t| t.as_str().or(t["name"].as_str()).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Added by its address with a token and a header, the reference server
/// is tested: connected, with its tools and their descriptions; the list
/// shows the host only, what is saved as has_token/has_headers, never a
/// value; an edit without the secrets keeps them and clears the last test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_is_added_tested_and_lists_its_tools() -> anyhow::Result<()> {
    let Some(server) = Everything::http().await? else {
        return Ok(());
    };
    let (_sim, chatd, client) = start(&[PRIVATE]).await?;
    let url = format!("{}?key={HEADER_VALUE}", server.url());
    let made = client
        .post(
            "/mcp-connectors",
            json!({"name": "Everything", "transport": "http", "url": url,
                   "token": TOKEN, "headers": {"X-Team": HEADER_VALUE}}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let id = made.body["id"].as_str().unwrap_or("").to_string();
    assert!(id.starts_with("mc_"), "{}", made.body);
    assert_eq!(
        made.body["host"], "127.0.0.1",
        "the host only: {}",
        made.body
    );
    assert_eq!(made.body["state"], "untested");
    assert_eq!(made.body["has_token"], true);
    assert_eq!(made.body["has_headers"], true);
    assert_eq!(made.body["has_env"], false);

    let tested = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(tested.status, 200, "{tested:?}");
    assert_eq!(tested.body["ok"], true, "{}", tested.body);
    assert_eq!(tested.body["state"], "connected");
    let tools = names(&tested.body["tools"]);
    assert!(
        tools.iter().any(|t| t == "echo"),
        "the reference server's echo: {tools:?}"
    );
    let echo = tested.body["tool_details"]
        .as_array()
        .and_then(|all| all.iter().find(|t| t["name"] == "echo"))
        .cloned()
        .unwrap_or_default();
    assert!(
        echo["description"].as_str().is_some_and(|d| !d.is_empty()),
        "{echo}"
    );

    let listed = client.get("/mcp-connectors").await?;
    let row = listed.body["connectors"][0].clone();
    assert_eq!(row["state"], "connected", "{row}");
    assert!(row["tested"].is_string(), "{row}");
    assert_eq!(names(&row["tools"]), tools);

    // An edit that leaves the secrets out keeps them; the last test was of
    // what was saved before, so it goes.
    let edited = put(
        &client,
        &format!("/mcp-connectors/{id}"),
        json!({"name": "Everything else", "url": server.url()}),
    )
    .await?;
    assert_eq!(edited.status, 200, "{edited:?}");
    assert_eq!(edited.body["has_token"], true, "{}", edited.body);
    assert_eq!(edited.body["has_headers"], true);
    assert_eq!(edited.body["state"], "untested");
    let again = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(again.body["ok"], true, "{}", again.body);

    let every = [
        made.body.to_string(),
        tested.body.to_string(),
        listed.body.to_string(),
        edited.body.to_string(),
        chatd.log(),
    ];
    for text in every {
        assert!(!text.contains(TOKEN), "the token came back: {text}");
        assert!(
            !text.contains(HEADER_VALUE),
            "a header value came back: {text}"
        );
    }
    Ok(())
}

/// A server that wants a token: without one the test says needs_sign_in
/// and to check the token; with it the fake sees `Bearer <token>` and the
/// header, and lists its tools. Neither value is in chatd's log or, in the
/// clear, in its database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_sign_in_says_so_and_a_saved_token_is_sent_and_never_shown() -> anyhow::Result<()>
{
    let fake = FakeMcp::start(Some(TOKEN)).await?;
    let (_sim, chatd, client) = start(&[PRIVATE]).await?;
    let made = client
        .post(
            "/mcp-connectors",
            json!({"name": "Glossary", "url": fake.url("/mcp"), "headers": {"X-Team": HEADER_VALUE}}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let id = made.body["id"].as_str().unwrap_or("").to_string();
    let refused = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(refused.body["ok"], false, "{}", refused.body);
    assert_eq!(refused.body["state"], "needs_sign_in", "{}", refused.body);
    let why = refused.body["reason"].as_str().unwrap_or("");
    assert!(why.contains("401") && why.contains("token"), "{why}");
    let shown = client.get(&format!("/mcp-connectors/{id}")).await?;
    assert_eq!(shown.body["state"], "needs_sign_in", "{}", shown.body);

    let with_token = put(
        &client,
        &format!("/mcp-connectors/{id}"),
        json!({"name": "Glossary", "url": fake.url("/mcp"), "token": TOKEN}),
    )
    .await?;
    assert_eq!(with_token.status, 200, "{with_token:?}");
    let tested = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(tested.body["ok"], true, "{}", tested.body);
    assert_eq!(
        names(&tested.body["tools"]),
        ["lookup", "send", "big", "whoami", "read_file"]
    );
    let last = fake
        .seen()
        .into_iter()
        .rfind(|s| s.method.as_deref() == Some("tools/list"))
        .expect("the fake was asked for its tools");
    assert_eq!(
        last.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(last.header("x-team"), Some(HEADER_VALUE));

    // An empty token clears it: refused again.
    let cleared = put(
        &client,
        &format!("/mcp-connectors/{id}"),
        json!({"name": "Glossary", "url": fake.url("/mcp"), "token": ""}),
    )
    .await?;
    assert_eq!(cleared.body["has_token"], false, "{}", cleared.body);
    let again = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(again.body["state"], "needs_sign_in", "{}", again.body);

    // A 401 with no challenge (its body echoing the key) and a 403 are
    // refused sign-ins too; no reason repeats the key.
    for (path, status) in [("/unchallenged", "401"), ("/forbidden", "403")] {
        let made = client
            .post(
                "/mcp-connectors",
                json!({"name": format!("Refusing {path}"), "url": fake.url(path), "token": TOKEN}),
            )
            .await?;
        let id = made.body["id"].as_str().unwrap_or("").to_string();
        let tested = client
            .post(&format!("/mcp-connectors/{id}/test"), json!({}))
            .await?;
        assert_eq!(
            tested.body["state"], "needs_sign_in",
            "{path}: {}",
            tested.body
        );
        let why = tested.body["reason"].as_str().unwrap_or("");
        assert!(why.contains(status), "{path}: {why}");
        assert!(!tested.body.to_string().contains(TOKEN), "{}", tested.body);
    }

    // The store, its WAL, the log: no file of chatd holds either in the clear.
    let holding = chatd.files_holding(&[TOKEN, HEADER_VALUE])?;
    assert!(holding.is_empty(), "in the clear in {holding:?}");
    Ok(())
}

/// A server of MCP's older HTTP+SSE transport that wants a token: the
/// token and the saved header go with the event stream's GET and with
/// every message posted to its endpoint; an endpoint named on another
/// origin is refused before anything is posted there; no file of chatd
/// holds either value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_transport_carries_the_secrets_and_stays_on_its_origin() -> anyhow::Result<()> {
    let fake = FakeMcp::start(Some(TOKEN)).await?;
    let (_sim, chatd, client) = start(&[PRIVATE]).await?;
    let mut tested = Vec::new();
    for path in ["/sse", "/sse-elsewhere"] {
        let made = client
            .post(
                "/mcp-connectors",
                json!({"name": format!("Older {path}"), "url": fake.url(path), "token": TOKEN,
                       "headers": {"X-Team": HEADER_VALUE}}),
            )
            .await?;
        assert_eq!(made.status, 201, "{made:?}");
        let id = made.body["id"].as_str().unwrap_or("");
        let answer = client
            .post(&format!("/mcp-connectors/{id}/test"), json!({}))
            .await?;
        tested.push((answer.body, fake.seen()));
    }
    let (older, seen) = &tested[0];
    assert_eq!(older["state"], "connected", "{older}");
    assert!(
        names(&older["tools"]).contains(&"lookup".to_string()),
        "{older}"
    );
    let stream = seen.iter().filter(|s| s.path == "/sse").count();
    let posted: Vec<_> = seen.iter().filter(|s| s.path == "/message").collect();
    assert_eq!(stream, 1, "one event stream");
    assert!(
        posted.len() >= 3,
        "initialize, initialized, tools/list: {posted:?}"
    );
    for request in seen.iter().filter(|s| s.path != "/mcp") {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str()),
            "{request:?}"
        );
        assert_eq!(request.header("x-team"), Some(HEADER_VALUE));
    }

    let (elsewhere, after) = &tested[1];
    assert_eq!(elsewhere["state"], "cant_connect", "{elsewhere}");
    let why = elsewhere["reason"].as_str().unwrap_or("");
    assert!(why.contains("another origin"), "{why}");
    let posted_after = after.iter().filter(|s| s.path == "/message").count();
    assert_eq!(
        posted_after,
        posted.len(),
        "nothing posted to the other origin"
    );

    let holding = chatd.files_holding(&[TOKEN, HEADER_VALUE])?;
    assert!(holding.is_empty(), "in the clear in {holding:?}");
    Ok(())
}

/// Without mcp_allow_private: a loopback address is refused at save and at
/// switch-on (400 naming url), kept when saved off, and its test refused at
/// the connection: an IP literal, and a name (localhost) by its lookup's
/// every address. With it: a redirect to the metadata address is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_addresses_and_redirects_are_refused_before_a_connection() -> anyhow::Result<()> {
    let fake = FakeMcp::start(None).await?;
    let (_sim, _chatd, client) = start(&[]).await?;
    let on = client
        .post(
            "/mcp-connectors",
            json!({"name": "Home", "url": fake.url("/mcp")}),
        )
        .await?;
    assert_eq!(on.status, 400, "{on:?}");
    assert_eq!(on.body["error"]["field"], "url", "{}", on.body);
    let message = on.body["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("loopback") && message.contains("mcp_allow_private"),
        "{message}"
    );

    let off = client
        .post(
            "/mcp-connectors",
            json!({"name": "Home", "url": fake.url("/mcp"), "enabled": false}),
        )
        .await?;
    assert_eq!(off.status, 201, "{off:?}");
    assert_eq!(off.body["state"], "off");
    let id = off.body["id"].as_str().unwrap_or("").to_string();
    let switched = client
        .post(&format!("/mcp-connectors/{id}/enable"), json!({}))
        .await?;
    assert_eq!(switched.status, 400, "{switched:?}");
    let tested = client
        .post(&format!("/mcp-connectors/{id}/test"), json!({}))
        .await?;
    assert_eq!(tested.body["state"], "cant_connect", "{}", tested.body);
    let why = tested.body["reason"].as_str().unwrap_or("");
    // Loopback, and this box's own address: either names it.
    assert!(
        why.contains("127.0.0.1 is") && why.contains("public addresses only"),
        "{why}"
    );

    let by_name = format!("http://localhost:{}/mcp", fake.addr.port());
    let named = client
        .post(
            "/mcp-connectors",
            json!({"name": "Home by name", "url": by_name, "enabled": false}),
        )
        .await?;
    let named_id = named.body["id"].as_str().unwrap_or("").to_string();
    let tested = client
        .post(&format!("/mcp-connectors/{named_id}/test"), json!({}))
        .await?;
    let why = tested.body["reason"].as_str().unwrap_or("");
    assert!(
        // 127.0.0.1 or ::1, whichever the box's lookup answers first.
        why.contains("localhost resolves to") && why.contains("public addresses only"),
        "{why}"
    );
    assert!(
        fake.seen().is_empty(),
        "nothing reached the server: {:?}",
        fake.seen()
    );

    // With private addresses open, a redirect to cloud metadata still is not.
    let (_sim2, _chatd2, open) = start(&[PRIVATE]).await?;
    let made = open
        .post(
            "/mcp-connectors",
            json!({"name": "Moved", "url": fake.url("/redirect")}),
        )
        .await?;
    assert_eq!(made.status, 201, "{made:?}");
    let moved = made.body["id"].as_str().unwrap_or("").to_string();
    let tested = open
        .post(&format!("/mcp-connectors/{moved}/test"), json!({}))
        .await?;
    assert_eq!(tested.body["state"], "cant_connect", "{}", tested.body);
    let why = tested.body["reason"].as_str().unwrap_or("");
    assert!(
        why.contains("redirect") && why.contains("169.254.169.254"),
        "{why}"
    );

    // A redirect to another server (here the same fake by another name) is
    // not followed: the token and headers are for the first alone, and no
    // Referer carries the address's query anywhere.
    let made = open
        .post(
            "/mcp-connectors",
            json!({"name": "Elsewhere", "url": format!("{}?key={HEADER_VALUE}", fake.url("/cross")),
                   "token": TOKEN, "headers": {"X-Team": HEADER_VALUE}}),
        )
        .await?;
    let elsewhere = made.body["id"].as_str().unwrap_or("").to_string();
    let before = fake.seen().len();
    let tested = open
        .post(&format!("/mcp-connectors/{elsewhere}/test"), json!({}))
        .await?;
    assert_eq!(tested.body["state"], "cant_connect", "{}", tested.body);
    let why = tested.body["reason"].as_str().unwrap_or("");
    assert!(why.contains("another server (localhost)"), "{why}");
    let seen = fake.seen();
    let after: Vec<_> = seen[before..].iter().map(|s| s.path.as_str()).collect();
    assert_eq!(after, ["/cross"], "only the first address was asked");
    assert!(
        seen.iter().all(|s| s.header("referer").is_none()),
        "a Referer was sent: {seen:?}"
    );
    Ok(())
}

/// Bad input is a 400 naming the field (or a 409 for a name taken and the
/// 21st connector) and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_names_the_field_and_changes_nothing() -> anyhow::Result<()> {
    let (_sim, _chatd, client) = start(&[PRIVATE]).await?;
    let url = "https://mcp.example.com/mcp";
    let long_token = "x".repeat(9000);
    let cases = [
        (json!({"name": "", "url": url}), "name"),
        (json!({"name": "A", "url": "ftp://mcp.example.com/"}), "url"),
        (
            json!({"name": "A", "url": "https://me:pw@mcp.example.com/mcp"}),
            "url",
        ),
        (
            json!({"name": "A", "url": "http://169.254.169.254/mcp"}),
            "url",
        ),
        (
            json!({"name": "A", "url": url, "headers": {"Accept": "x"}}),
            "headers",
        ),
        (
            json!({"name": "A", "url": url, "headers": {"Authorization": "x"}}),
            "headers",
        ),
        (
            json!({"name": "A", "url": url, "token": long_token}),
            "token",
        ),
        (
            json!({"name": "A", "transport": "carrier-pigeon", "url": url}),
            "transport",
        ),
    ];
    for (body, field) in cases {
        let refused = client.post("/mcp-connectors", body.clone()).await?;
        assert_eq!(refused.status, 400, "{body}: {refused:?}");
        assert_eq!(
            refused.body["error"]["field"], field,
            "{body}: {}",
            refused.body
        );
    }
    let unknown = client
        .post(
            "/mcp-connectors",
            json!({"name": "A", "url": url, "colour": "red"}),
        )
        .await?;
    assert_eq!(unknown.status, 400, "{unknown:?}");
    let listed = client.get("/mcp-connectors").await?;
    assert_eq!(
        listed.body["connectors"],
        json!([]),
        "nothing stored: {}",
        listed.body
    );

    for n in 0..20 {
        let made = client
            .post(
                "/mcp-connectors",
                json!({"name": format!("Server {n}"), "url": url}),
            )
            .await?;
        assert_eq!(made.status, 201, "{made:?}");
    }
    let same = client
        .post("/mcp-connectors", json!({"name": "server 3", "url": url}))
        .await?;
    assert_eq!(same.status, 409, "{same:?}");
    let more = client
        .post("/mcp-connectors", json!({"name": "One more", "url": url}))
        .await?;
    assert_eq!(more.status, 409, "{more:?}");
    assert_eq!(
        more.body["error"]["type"], "too_many_connectors",
        "{}",
        more.body
    );
    let listed = client.get("/mcp-connectors").await?;
    assert_eq!(listed.body["connectors"].as_array().map(Vec::len), Some(20));
    let gone = client
        .call(reqwest::Method::DELETE, "/mcp-connectors/mc_nope", None)
        .await?;
    assert_eq!(gone.status, 404, "{gone:?}");
    Ok(())
}
