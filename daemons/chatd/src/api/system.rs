//! Health, capabilities and the default permission mode.

use std::sync::Arc;

use axum::extract::{Extension, State};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::defaults::{check_mode, default_mode_value};
use super::{Json, SignedIn};
use crate::store::meta;
use crate::App;

pub async fn health(State(app): State<Arc<App>>) -> axum::Json<Value> {
    let engine = app.engine_state();
    axum::Json(json!({
        "ok": true,
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": app.started.elapsed().as_secs(),
        "pid": std::process::id(),
        "engine": {"reachable": engine.reachable},
        "runs": app.runs.running_count(),
    }))
}

pub async fn capabilities(
    State(app): State<Arc<App>>,
    Extension(SignedIn(signed_in)): Extension<SignedIn>,
) -> axum::Json<Value> {
    let engine = app.engine_state();
    if !signed_in {
        return axum::Json(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "signed_in": false,
            "engine": {"reachable": engine.reachable},
        }));
    }
    let models: Vec<Value> = engine
        .models
        .iter()
        .map(|m| {
            json!({
                "id": m.id,
                "context_window": m.context_window.unwrap_or(app.config.context_window),
                "vision": m.vision,
                "tools": m.tools,
            })
        })
        .collect();
    let mode = default_mode_value(&app)
        .await
        .unwrap_or(crate::permissions::Mode::Auto);
    let agents: Vec<Value> = app
        .store
        .read(crate::agents::list)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|a| json!({"id": a.id, "name": a.name}))
        .collect();
    let settings = app
        .store
        .read(meta::default_settings)
        .await
        .unwrap_or_default();
    axum::Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "signed_in": true,
        "engine": {"url": app.engine.url(), "reachable": engine.reachable, "models": models},
        "limits": {
            "max_runs": app.config.max_runs,
            "sse_reset_after": app.config.sse_reset_after,
            "max_body_bytes": app.config.max_body_bytes,
            "max_steps": app.config.max_steps,
            "compact_percent": app.config.compact_percent,
        },
        "sandbox": sandbox_status(&app).await,
        "host_exec": match app.config.host_exec() {
            crate::config::HostExec::Off => "off",
            crate::config::HostExec::Ask => "ask",
            crate::config::HostExec::On => "on",
        },
        "defaults": {"permission_mode": mode, "agents": agents, "settings": settings.to_value()},
        "commands": commands_of(&app),
        "features": {
            "branches": true, "fork": true, "trash": true, "export": ["json", "md"],
            "import": true, "pending": true, "continue": true,
            "tools": app.runs.registry().names(),
            "commands": app.runs.registry().get("bash").is_some(), "compaction": true,
            "consent": true,
            "triggers": app.triggers.installed(),
            "connectors": app.connectors.installed(),
            "inbox": true,
        },
    }))
}

pub async fn default_mode(State(app): State<Arc<App>>) -> Result<axum::Json<Value>, ApiError> {
    Ok(axum::Json(
        json!({"default": default_mode_value(&app).await?}),
    ))
}

#[derive(Deserialize)]
pub struct ModeBody {
    default: String,
}

pub async fn set_default_mode(
    State(app): State<Arc<App>>,
    Json(body): Json<ModeBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let mode = check_mode("default", &body.default)?;
    app.store
        .write(move |ctx| meta::set_default_mode(ctx, mode))
        .await?;
    Ok(axum::Json(json!({"default": body.default})))
}

/// Where a chat's `bash` runs on this chatd: `sandbox`, `host` (through
/// hostexecd) or `none`, as the model is told.
fn commands_of(app: &App) -> &'static str {
    if app.sandboxes.is_some() {
        "sandbox"
    } else if app.config.host_exec() == crate::config::HostExec::Off {
        "none"
    } else {
        "host"
    }
}

/// `{installed, runtime, reason?}`: sandboxes are used only when chatd found
/// the runtime and the image at its start. The reason says where `bash`
/// runs instead.
async fn sandbox_status(app: &App) -> Value {
    let status = app.sandboxes_probe.probe_cached().await;
    let (installed, reason) = match (&app.sandboxes, status.installed) {
        (Some(_), true) => (true, None),
        (Some(_), false) => (false, status.reason),
        (None, true) => (
            false,
            Some(
                "the runtime and the image are there now, but chatd found none when it \
                 started: restart chatd (`tandem chat restart`) to use them"
                    .to_string(),
            ),
        ),
        (None, false) => (false, status.reason),
    };
    let mut value = json!({"installed": installed, "runtime": status.runtime});
    if let Some(reason) = reason {
        let instead = match commands_of(app) {
            "host" => "bash runs on this machine through hostexecd instead, with no isolation",
            "none" => "bash is not offered (host_exec = off)",
            _ => "",
        };
        value["reason"] = json!(if instead.is_empty() {
            reason
        } else {
            format!("{reason}; {instead}")
        });
    }
    value
}
