//! The MCP part's App pages (`--parts mcp`): between the chat's turns, the
//! good server's clock page (`tandem_tests::mcpapps`) read through
//! `…/mcp-apps/resource`, served as the chat page's frame by
//! `…/mcp-apps/frame`, and its page-only tool called through
//! `…/mcp-apps/call`, while the fake goes down and up, forgets its
//! sessions, and chatd is killed.
//!
//! `Inv::Mcp`: a read answers the page (its HTML, its content policy cut to
//! the https/wss origins) or, while the server is away, 502 naming the
//! connector; the frame is that page as HTML under a policy of its own
//! (`sandbox allow-scripts`, `frame-ancestors 'self'`) or the same 502; a
//! call answers the tool's result (the time it ticked to) or
//! 502; nothing else, and no answer carries a secret.

use super::*;

use tandem_tests::mcpapps::CLOCK_PAGE;

#[derive(Default)]
pub(crate) struct Pages {
    pub read: u64,
    pub framed: u64,
    pub called: u64,
    /// 502s while the server was away.
    pub away: u64,
    /// Not answered (chatd down: its own killer).
    pub unanswered: u64,
}

impl Pages {
    pub(crate) fn line(&self) -> String {
        format!(
            "app pages through chatd: {} read, {} served as a frame, {} page calls answered, {} answered 502 with the server away, {} not answered (chatd down)",
            self.read, self.framed, self.called, self.away, self.unanswered
        )
    }
}

/// One read of the clock page and one call of `clock_tick` by `n`, for
/// `chat`, with the good connector `good`.
pub(crate) async fn step(
    shared: &Shared,
    chat: &str,
    good: &str,
    n: u64,
    secrets: &[String],
    pages: &mut Pages,
) {
    let server = format!("connector:{good}");
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("server", &server)
        .append_pair("uri", CLOCK_PAGE)
        .finish();
    let read = shared
        .call(
            reqwest::Method::GET,
            &format!("/conversations/{chat}/mcp-apps/resource?{query}"),
            None,
        )
        .await;
    let framed = frame(shared, chat, &query).await;
    let by = n % 60;
    let body = json!({"server": server, "tool": "clock_tick", "arguments": {"by": by}});
    let called = shared
        .call(
            reqwest::Method::POST,
            &format!("/conversations/{chat}/mcp-apps/call"),
            Some(body),
        )
        .await;
    for (what, answer) in [("read", read), ("frame", framed), ("call", called)] {
        let Ok((status, body)) = answer else {
            pages.unanswered += 1;
            continue;
        };
        let text = body.to_string();
        if secrets.iter().any(|s| text.contains(s.as_str())) {
            shared.violate(
                Inv::Mcp,
                format!("mcp: a page's {what} answer carried a secret"),
            );
        }
        let fine = match (what, status) {
            ("read", 200) => {
                pages.read += 1;
                body["html"]
                    .as_str()
                    .is_some_and(|h| h.contains("<p id=t>12:00</p>"))
                    && body["meta"]["csp"]["connectDomains"] == json!(["https://api.example.com"])
            }
            ("frame", 200) => {
                pages.framed += 1;
                body["html"]
                    .as_str()
                    .is_some_and(|h| h.contains("<p id=t>12:00</p>"))
                    && body["policy"].as_str().is_some_and(|p| {
                        p.starts_with("sandbox allow-scripts;")
                            && p.contains("frame-ancestors 'self'")
                    })
            }
            ("call", 200) => {
                pages.called += 1;
                body["result"]["structuredContent"]["time"] == format!("12:{by:02}")
            }
            (_, 502) => {
                pages.away += 1;
                body["error"]["type"] == "mcp_error" && body["error"]["connector"] == good
            }
            _ => false,
        };
        if !fine {
            shared.violate(
                Inv::Mcp,
                format!(
                    "mcp: a page's {what} answered {status}: {}",
                    text.chars().take(300).collect::<String>()
                ),
            );
        }
    }
}

/// `…/mcp-apps/frame`: its status and, for a page, `{html, policy}` (its
/// text and its Content-Security-Policy), else the refusal's JSON.
async fn frame(shared: &Shared, chat: &str, query: &str) -> anyhow::Result<(u16, Value)> {
    let response = shared
        .http
        .get(format!(
            "{}/v1/chat-app/conversations/{chat}/mcp-apps/frame?{query}",
            shared.chatd_url
        ))
        .header("x-forward-key", FORWARD_KEY)
        .timeout(Duration::from_secs(15))
        .send()
        .await?;
    let status = response.status().as_u16();
    let policy = response
        .headers()
        .get(reqwest::header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = response.text().await?;
    Ok(match status {
        200 => (status, json!({"html": text, "policy": policy})),
        _ => (status, serde_json::from_str(&text).unwrap_or(Value::Null)),
    })
}
