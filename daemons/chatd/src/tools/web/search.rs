//! `web_search`: a query to DuckDuckGo's HTML page or the person's SearXNG,
//! through egressd, and the results parsed from either.

use std::fmt::Write as _;

use serde_json::Value;
use url::Url;

use super::client::{block_on, fetch, Method};
use super::search_settings::{SafeSearch, TimeRange};
use super::{access, SearchEngine, UNTRUSTED};
use crate::tools::fit::fit_output;
use crate::tools::{one_line, Args, ToolContext, ToolOutput};
use crate::workspace::ToolError;

/// One search result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
    /// When the page was published, as the provider says (SearXNG's
    /// `publishedDate`), if it does.
    pub date: Option<String>,
    /// The engine SearXNG had it from, if it says.
    pub engine: Option<String>,
}

pub fn web_search(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let query = args
        .string("query", "what to search for")?
        .trim()
        .to_string();
    if query.is_empty() {
        return Err(args.field_error("query", "must not be empty"));
    }
    if query.chars().count() > 500 {
        return Err(args.field_error("query", "is longer than 500 characters; say it shorter"));
    }
    let web = access(ctx)?;
    let settings = &web.settings;
    let most = settings.query.max_results;
    let wanted = args.opt_count("max_results", 1)?.unwrap_or(most).min(most) as usize;
    let query_settings = &settings.query;
    let engine = settings.engine;
    let mut url = Url::parse(&settings.search_url).map_err(|e| {
        ToolError::new(format!(
            "[chatd] search_url {:?} is not an address: {e}",
            settings.search_url
        ))
    })?;
    let method = match engine {
        SearchEngine::DuckDuckGo => {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("q", &query).append_pair("b", "");
            // DuckDuckGo's own words: kp safe search, df the time range.
            match query_settings.safe_search {
                SafeSearch::Moderate => {}
                SafeSearch::Off => {
                    form.append_pair("kp", "-2");
                }
                SafeSearch::Strict => {
                    form.append_pair("kp", "1");
                }
            }
            if let Some(range) = query_settings.time_range {
                form.append_pair("df", &range.as_str()[..1]);
            }
            Method::PostForm(form.finish())
        }
        SearchEngine::Searxng => {
            {
                let mut pairs = url.query_pairs_mut();
                pairs.append_pair("q", &query).append_pair("format", "json");
                let safe = match query_settings.safe_search {
                    SafeSearch::Off => "0",
                    SafeSearch::Moderate => "1",
                    SafeSearch::Strict => "2",
                };
                pairs.append_pair("safesearch", safe);
                if !query_settings.language.is_empty() {
                    pairs.append_pair("language", &query_settings.language);
                }
                if let Some(range) = query_settings.time_range {
                    pairs.append_pair("time_range", TimeRange::as_str(range));
                }
            }
            match &query_settings.auth {
                Some((header, value)) => Method::GetAuthed {
                    header: header.clone(),
                    value: value.clone(),
                },
                None => Method::Get,
            }
        }
    };
    let fetched = block_on(fetch(web, url, method))??;
    let status = fetched.status;
    let body = fetched.body.clone().unwrap_or_default();
    let name = engine.name();
    let fix = "set [chatd] search_engine = \"searxng\" with your own SearXNG (search_url = its /search address)";
    match (engine, status) {
        (SearchEngine::DuckDuckGo, 202) => {
            return Err(ToolError::new(format!(
                "DuckDuckGo asked for a bot check (202) instead of answering; tell the person: {fix}"
            )))
        }
        (_, 429) => {
            return Err(ToolError::new(format!(
                "{name} rate-limited this search (429); {}",
                match &fetched.retry_after {
                    Some(s) => format!("try again after {s} s"),
                    None => "wait a minute before searching again".into(),
                }
            )))
        }
        (SearchEngine::Searxng, 401) => {
            return Err(ToolError::new(
                "SearXNG refused the login (401): tell the person to check the login header and \
                 value in the web search settings",
            ))
        }
        (SearchEngine::Searxng, 403) => {
            return Err(ToolError::new(
                "SearXNG refused the search (403): its JSON format is off. Tell the person to enable it in \
                 SearXNG's settings.yml (search: formats: [html, json]) and restart SearXNG.",
            ))
        }
        (SearchEngine::DuckDuckGo, 403) => {
            return Err(ToolError::new(format!(
                "DuckDuckGo refused the search (403 Forbidden); try again later, or tell the person: {fix}"
            )))
        }
        (_, s) if !(200..300).contains(&s) => {
            return Err(ToolError::new(format!(
                "{name} answered {s} {} to the search; try again later",
                fetched.reason
            )))
        }
        _ => {}
    }
    let hits = match engine {
        SearchEngine::DuckDuckGo => parse_duckduckgo(&String::from_utf8_lossy(&body)),
        SearchEngine::Searxng => {
            let value: Value = serde_json::from_slice(&body).map_err(|_| {
                ToolError::new(format!(
                    "SearXNG answered with something that is not JSON ({}); its JSON format must be enabled: \
                     tell the person to add json to search: formats in SearXNG's settings.yml",
                    if fetched.content_type.is_empty() {
                        "no type".to_string()
                    } else {
                        fetched.content_type.clone()
                    }
                ))
            })?;
            parse_searxng(&value)
        }
    };
    let hits: Vec<Hit> = hits.into_iter().take(wanted).collect();
    let mut out = String::new();
    out.push_str(UNTRUSTED);
    out.push('\n');
    let _ = writeln!(
        out,
        "Search results from {name} for \"{}\": {} result{}",
        one_line(&query, 200),
        hits.len(),
        if hits.len() == 1 { "" } else { "s" }
    );
    if hits.is_empty() {
        out.push_str("No results. Try other words.\n");
    }
    for (i, hit) in hits.iter().enumerate() {
        let _ = writeln!(out, "\n{}. {}", i + 1, hit.title);
        let _ = writeln!(out, "   {}", hit.url);
        if !hit.snippet.is_empty() {
            let _ = writeln!(out, "   {}", hit.snippet);
        }
        let said: Vec<String> = [
            hit.date.as_ref().map(|d| format!("published {d}")),
            hit.engine.as_ref().map(|e| format!("from {e}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !said.is_empty() {
            let _ = writeln!(out, "   ({})", said.join(", "));
        }
    }
    let bytes = out.len() as u64;
    let text = fit_output(ctx.workspace, ctx.call_id, out, ctx.budget_chars);
    Ok(ToolOutput::ok(
        text,
        format!(
            "web_search \"{}\": {} result{}",
            one_line(&query, 60),
            hits.len(),
            if hits.len() == 1 { "" } else { "s" }
        ),
        bytes,
    ))
}

/// Collapses whitespace runs to one space.
fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The results of DuckDuckGo's HTML page: `a.result__a` titles whose links
/// go through `//duckduckgo.com/l/?uddg=<the address>`, `.result__snippet`
/// snippets; ads (`result--ad`, `y.js` links) left out.
pub fn parse_duckduckgo(html: &str) -> Vec<Hit> {
    use scraper::{Html, Selector};
    let document = Html::parse_document(html);
    let result = Selector::parse("div.result").expect("a valid selector");
    let link = Selector::parse("a.result__a").expect("a valid selector");
    let snippet = Selector::parse(".result__snippet").expect("a valid selector");
    let mut hits: Vec<Hit> = Vec::new();
    for node in document.select(&result) {
        if node.value().classes().any(|c| c == "result--ad") {
            continue;
        }
        let Some(a) = node.select(&link).next() else {
            continue;
        };
        let Some(url) = a.value().attr("href").and_then(ddg_target) else {
            continue;
        };
        if hits.iter().any(|h| h.url == url) {
            continue;
        }
        let title = one_line(&squash(&a.text().collect::<String>()), 200);
        let snippet = node
            .select(&snippet)
            .next()
            .map(|s| one_line(&squash(&s.text().collect::<String>()), 500))
            .unwrap_or_default();
        hits.push(Hit {
            title: if title.is_empty() { url.clone() } else { title },
            url,
            snippet,
            date: None,
            engine: None,
        });
    }
    hits
}

/// The address a DuckDuckGo result link leads to: `uddg` of its `/l/`
/// redirect, or the link itself; `None` for ads and anything not http(s).
pub(super) fn ddg_target(href: &str) -> Option<String> {
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else if href.starts_with('/') {
        format!("https://duckduckgo.com{href}")
    } else {
        href.to_string()
    };
    let url = Url::parse(&absolute).ok()?;
    let on_ddg = url
        .host_str()
        .is_some_and(|h| h == "duckduckgo.com" || h.ends_with(".duckduckgo.com"));
    let target = if on_ddg {
        if url.path() != "/l/" && url.path() != "/l" {
            return None; // y.js ads and DuckDuckGo's own pages
        }
        let (_, uddg) = url.query_pairs().find(|(k, _)| k == "uddg")?;
        Url::parse(&uddg).ok()?
    } else {
        url
    };
    matches!(target.scheme(), "http" | "https").then(|| target.to_string())
}

/// The results of a SearXNG JSON answer: `results[].title/url/content`.
pub fn parse_searxng(value: &Value) -> Vec<Hit> {
    let mut hits: Vec<Hit> = Vec::new();
    for r in value["results"].as_array().into_iter().flatten() {
        let Some(url) = r["url"].as_str().filter(|u| !u.is_empty()) else {
            continue;
        };
        if hits.iter().any(|h| h.url == url) {
            continue;
        }
        let url = one_line(url, 1000);
        let title = one_line(&squash(r["title"].as_str().unwrap_or("")), 200);
        hits.push(Hit {
            title: if title.is_empty() { url.clone() } else { title },
            url,
            snippet: one_line(&squash(r["content"].as_str().unwrap_or("")), 500),
            date: r["publishedDate"]
                .as_str()
                .filter(|d| !d.is_empty())
                .map(|d| one_line(d, 40)),
            engine: r["engine"]
                .as_str()
                .filter(|e| !e.is_empty())
                .map(|e| one_line(e, 40)),
        });
    }
    hits
}
