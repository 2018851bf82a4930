//! The fake MCP server's apps (its `/apps` address, `mcpservers::FakeMcp`):
//! the tools, pages and answers of a server that offers MCP Apps, with the
//! faults the rules are for. `clock` shows `ui://clock/app.html` and
//! echoes the Authorization it got in its structured result (a careless
//! server); `clock_tick` is for the page alone (`visibility: ["app"]`), as
//! is `clock_hold`, which answers once the test says so
//! (`FakeMcp::release_held`);
//! `lookup_model` for the model alone; `odd_visibility` names no audience
//! tandem knows (so neither may call it); `huge_page` declares a page over
//! 4 MiB, `plain_page` one that is not HTML; `ui://nobody/page.html` is
//! there but no tool declares it.

use axum::http::HeaderMap;
use serde_json::{json, Value};

/// The page `clock` shows.
pub const CLOCK_PAGE: &str = "ui://clock/app.html";
/// A page the fake has that no tool declares.
pub const UNDECLARED_PAGE: &str = "ui://nobody/page.html";

/// The app tools the fake lists at `/apps`, after its usual ones.
pub fn tools() -> Value {
    json!([
        {"name": "clock", "description": "Shows the fake's clock on a page.",
         "inputSchema": {"type": "object", "properties": {"zone": {"type": "string"}}},
         "annotations": {"readOnlyHint": true},
         "_meta": {"ui": {"resourceUri": CLOCK_PAGE}}},
        {"name": "clock_hold", "description": "The page's call that takes as long as the test wants.",
         "inputSchema": {"type": "object"},
         "_meta": {"ui": {"resourceUri": CLOCK_PAGE, "visibility": ["app"]}}},
        {"name": "clock_tick", "description": "Moves the page's clock on (the page's own).",
         "inputSchema": {"type": "object", "properties": {"by": {"type": "integer"}}},
         "_meta": {"ui": {"resourceUri": CLOCK_PAGE, "visibility": ["app"]}}},
        {"name": "lookup_model", "description": "For the model alone.",
         "inputSchema": {"type": "object"},
         "_meta": {"ui": {"visibility": ["model"]}}},
        {"name": "odd_visibility", "description": "Names no audience tandem knows.",
         "inputSchema": {"type": "object"},
         "_meta": {"ui": {"resourceUri": CLOCK_PAGE, "visibility": ["App"]}}},
        {"name": "huge_page", "description": "Declares a page over 4 MiB.",
         "inputSchema": {"type": "object"},
         "_meta": {"ui": {"resourceUri": "ui://clock/huge.html"}}},
        {"name": "plain_page", "description": "Declares a page that is not HTML.",
         "inputSchema": {"type": "object"},
         "_meta": {"ui/resourceUri": "ui://clock/plain.txt"}}
    ])
}

/// The answer to a call of an app tool; none for another tool.
pub fn call(name: &str, args: &Value, headers: &HeaderMap) -> Option<Value> {
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("nothing");
    Some(match name {
        "clock" => {
            let zone = args["zone"].as_str().unwrap_or("UTC");
            json!({"content": [{"type": "text", "text": format!("it is 12:00 in {zone}")}],
                   "structuredContent": {"time": "12:00", "zone": zone, "presented": presented}})
        }
        "clock_tick" => {
            let by = args["by"].as_i64().unwrap_or(1);
            json!({"content": [{"type": "text", "text": format!("ticked by {by}")}],
                   "structuredContent": {"time": format!("12:{by:02}")}})
        }
        "lookup_model" => json!({"content": [{"type": "text", "text": "for the model"}]}),
        "clock_hold" => json!({"content": [{"type": "text", "text": "held, then answered"}]}),
        "huge_page" | "plain_page" => json!({"content": [{"type": "text", "text": "a page"}]}),
        _ => return None,
    })
}

/// The page `uri`, as `resources/read` answers it; none for another URI.
pub fn page(uri: &str, headers: &HeaderMap) -> Option<Value> {
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("nothing");
    Some(match uri {
        CLOCK_PAGE => json!({"uri": uri, "mimeType": "text/html;profile=mcp-app",
            "text": format!("<!doctype html><title>clock</title><p id=t>12:00</p>\
                             <!-- presented: {presented} -->"),
            "_meta": {"ui": {"csp": {
                "connectDomains": ["https://api.example.com", "http://plain.example.com",
                                   "javascript:alert(1)"],
                "resourceDomains": ["https://cdn.example.com/lib", "wss://ws.example.com"]},
                "permissions": {"camera": {}}, "prefersBorder": true}}}),
        UNDECLARED_PAGE => json!({"uri": uri, "mimeType": "text/html",
            "text": "<p>nobody declares me</p>"}),
        "ui://clock/huge.html" => json!({"uri": uri, "mimeType": "text/html",
            "text": format!("<p>{}</p>", "x".repeat((4 << 20) + 1))}),
        "ui://clock/plain.txt" => json!({"uri": uri, "mimeType": "text/plain",
            "text": "not a page"}),
        _ => return None,
    })
}
