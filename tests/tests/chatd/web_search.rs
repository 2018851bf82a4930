//! The box's web search settings end to end (docs/api.md "Web search"):
//! the real chatd, `GET|PUT /web-search`. A partial PUT keeps what it does
//! not name; a bad value is refused naming the field and changes nothing;
//! the SearXNG login's value is sealed: never in an answer, in chatd's log
//! or in the database as given, and `null` clears it. (What web_search
//! sends with them is chatd's unit tests', tools/web/tests.rs, against a
//! SearXNG-shaped origin behind a fake egressd.)

use serde_json::json;
use tandem_tests::harness::{Chatd, Sim};

const LOGIN: &str = "Basic c29hazpzM2NyZXQtdmFsdWU=";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_settings_keep_what_is_not_named_and_never_show_the_login() -> anyhow::Result<()> {
    let sim = Sim::start(&[])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let client = chatd.client();

    let first = client.get("/web-search").await?;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body["provider"], "duckduckgo");
    assert_eq!(first.body["max_results"], 8);
    assert_eq!(first.body["searxng_auth_set"], false);

    let set = client
        .call(
            reqwest::Method::PUT,
            "/web-search",
            Some(
                json!({"provider": "searxng", "searxng_url": "http://searx.lan:8888/search",
                   "searxng_auth_header": "Authorization", "searxng_auth_value": LOGIN,
                   "max_results": 12, "safe_search": "strict", "time_range": "week"}),
            ),
        )
        .await?;
    assert_eq!(set.status, 200, "{set:?}");
    assert_eq!(set.body["searxng_auth_set"], true, "{set:?}");
    assert_eq!(set.body["max_results"], 12);
    assert!(!set.body.to_string().contains("c29hazpz"), "{set:?}");

    // A partial PUT keeps the rest, the login too.
    let lang = client
        .call(
            reqwest::Method::PUT,
            "/web-search",
            Some(json!({"language": "de-CH"})),
        )
        .await?;
    assert_eq!(lang.status, 200, "{lang:?}");
    assert_eq!(lang.body["provider"], "searxng");
    assert_eq!(lang.body["searxng_auth_set"], true);
    assert_eq!(lang.body["time_range"], "week");

    // Bad values: 400 naming the field, nothing changed.
    for (body, field) in [
        (json!({"max_results": 0}), "max_results"),
        (json!({"timeout_s": 31}), "timeout_s"),
        (
            json!({"safe_search": "on", "max_results": 3}),
            "safe_search",
        ),
        (
            json!({"searxng_url": "http://me:pw@searx.lan/search"}),
            "searxng_url",
        ),
        (
            json!({"searxng_auth_header": "Host"}),
            "searxng_auth_header",
        ),
        (
            json!({"provider": "searxng", "searxng_url": ""}),
            "searxng_url",
        ),
        (json!({"colour": "blue"}), "colour"),
    ] {
        let refused = client
            .call(reqwest::Method::PUT, "/web-search", Some(body.clone()))
            .await?;
        assert_eq!(refused.status, 400, "{body}: {refused:?}");
        assert_eq!(refused.body["error"]["field"], field, "{body}: {refused:?}");
    }
    let now = client.get("/web-search").await?;
    assert_eq!(now.body, lang.body, "a refused PUT changed something");

    // Cleared by null; the value was never in the log or stored as given.
    let cleared = client
        .call(
            reqwest::Method::PUT,
            "/web-search",
            Some(json!({"searxng_auth_value": null})),
        )
        .await?;
    assert_eq!(cleared.body["searxng_auth_set"], false, "{cleared:?}");
    assert!(
        !chatd.log().contains("c29hazpz"),
        "the login is in chatd's log"
    );
    let db = std::fs::read(chatd.data_dir().join("chat.sqlite3"))?;
    let wal = std::fs::read(chatd.data_dir().join("chat.sqlite3-wal")).unwrap_or_default();
    for bytes in [db, wal] {
        assert!(
            !bytes.windows(8).any(|w| w == b"c29hazpz"),
            "the login is stored as given"
        );
    }
    Ok(())
}
