//! `web_fetch`: one address read through egressd and shown to the model as
//! untrusted text, with what was cut and why.

use std::fmt::Write as _;

use super::client::{block_on, fetch, parse_url, BodyEnd, Fetched, Method};
use super::content::{html_to_text, Kind};
use super::{access, UNTRUSTED};
use crate::tools::fit::{commas, fit_output};
use crate::tools::{one_line, Args, ToolContext, ToolOutput};
use crate::workspace::ToolError;

pub fn web_fetch(args: &Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let raw = args.string("url", "an http:// or https:// address")?;
    let max_chars = args.opt_count("max_chars", 100)?;
    let web = access(ctx)?;
    let url = parse_url(raw.trim()).map_err(|why| ToolError::new(format!("web_fetch: {why}")))?;
    let fetched = block_on(fetch(web, url, Method::Get))??;

    let Fetched {
        url: final_url,
        first_url,
        status,
        reason,
        content_type,
        length,
        body,
        end,
        ..
    } = fetched;
    let kind = if body.is_some() {
        Kind::of(&content_type, body.as_deref())
    } else {
        Kind::Other
    };
    let mut out = String::new();
    out.push_str(UNTRUSTED);
    out.push('\n');
    let _ = writeln!(out, "URL: {final_url}");
    if first_url != final_url {
        let _ = writeln!(out, "Redirected from: {first_url}");
    }
    let _ = writeln!(out, "Status: {status} {reason}");
    let shown_type = if content_type.is_empty() {
        "not given".to_string()
    } else {
        content_type.clone()
    };
    let mut read_bytes = 0u64;
    let content = match (&kind, body) {
        (Kind::Other, _) | (_, None) => {
            let size = match length {
                Some(n) => format!("{} bytes", commas(n)),
                None => "size not given".to_string(),
            };
            let _ = writeln!(out, "Type: {shown_type}");
            let _ = writeln!(
                out,
                "[not shown: the answer is {shown_type}, {size}; web_fetch reads text, HTML and JSON only]"
            );
            None
        }
        (kind, Some(bytes)) => {
            read_bytes = bytes.len() as u64;
            let text = match kind {
                Kind::Html => {
                    let _ = writeln!(out, "Type: {shown_type} (converted to text)");
                    html_to_text(bytes)
                }
                _ => {
                    let _ = writeln!(out, "Type: {shown_type}");
                    String::from_utf8_lossy(&bytes).into_owned()
                }
            };
            Some(text)
        }
    };
    match end {
        BodyEnd::Complete => {}
        BodyEnd::Cut => {
            let _ = writeln!(
                out,
                "[cut: the answer is longer than {} bytes (web_max_bytes); only its first {} bytes were read]",
                commas(web.settings.max_bytes as u64),
                commas(read_bytes)
            );
        }
        BodyEnd::TimedOut => {
            let _ = writeln!(
                out,
                "[cut: the answer stopped coming; {} bytes were read within {} s (web_timeout_s)]",
                commas(read_bytes),
                web.settings.timeout.as_secs()
            );
        }
        BodyEnd::Broken => {
            let _ = writeln!(
                out,
                "[cut: the connection broke after {} bytes]",
                commas(read_bytes)
            );
        }
    }
    if let Some(mut text) = content {
        if let Some(max) = max_chars {
            let total = text.chars().count() as u64;
            if total > max {
                text = text.chars().take(max as usize).collect();
                let _ = writeln!(
                    out,
                    "[cut at max_chars={max}: {} more characters not shown]",
                    commas(total - max)
                );
            }
        }
        out.push_str("---\n");
        out.push_str(text.trim_end());
        out.push('\n');
    }
    let bytes = out.len() as u64;
    let text = fit_output(ctx.workspace, ctx.call_id, out, ctx.budget_chars);
    let summary = format!(
        "web_fetch {}: {status}, {}",
        one_line(final_url.as_str(), 70),
        if read_bytes > 0 {
            format!("{} bytes", commas(read_bytes))
        } else {
            shown_type
        }
    );
    Ok(ToolOutput {
        ok: (200..300).contains(&status),
        text,
        summary: one_line(&summary, 120),
        bytes,
    })
}
