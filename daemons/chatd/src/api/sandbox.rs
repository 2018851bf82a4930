//! A chat's sandbox: `GET|POST|DELETE /conversations/{id}/sandbox` shows,
//! starts and stops it (a command starts it by itself; these are for a
//! person, the dashboard and the tests). Without a runtime: 503
//! `sandbox_unavailable` with the reason.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use crate::sandbox::{container_name, SandboxError, Sandboxes};
use crate::store::queries::{self, Trashed};
use crate::App;

fn sandboxes(app: &App) -> Result<&Sandboxes, ApiError> {
    app.sandboxes.as_ref().ok_or_else(|| {
        let reason = app
            .sandboxes_probe
            .status()
            .reason
            .unwrap_or_else(|| "chatd found no container runtime when it started".into());
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "sandbox_unavailable",
            reason,
        )
    })
}

/// 404 unless the chat exists and is not in the trash.
async fn live(app: &App, id: &str) -> Result<(), ApiError> {
    let cid = id.to_string();
    app.store
        .read(move |conn| queries::conversation(conn, &cid, Trashed::Exclude).map(|_| ()))
        .await
}

async fn describe(sandboxes: &Sandboxes, id: &str) -> Result<Value, ApiError> {
    let name = container_name(id);
    let found = sandboxes.docker().container(&name).await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "sandbox_unavailable",
            e.to_string(),
        )
    })?;
    let state = found
        .as_ref()
        .and_then(|c| c["State"]["Status"].as_str())
        .unwrap_or("absent")
        .to_string();
    Ok(json!({
        "conversation_id": id,
        "container": name,
        "state": state,
        "running": state == "running",
        "memory_bytes": sandboxes.limit(),
        "user": sandboxes.user(),
    }))
}

pub async fn show(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    live(&app, &id).await?;
    let sandboxes = sandboxes(&app)?;
    Ok(axum::Json(describe(sandboxes, &id).await?))
}

pub async fn start(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    live(&app, &id).await?;
    let sandboxes = sandboxes(&app)?;
    let lease = sandboxes.ensure(&id).await.map_err(|err| match err {
        SandboxError::Busy(message) => ApiError::conflict("sandbox_busy", message),
        other => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "sandbox_unavailable",
            other.to_string(),
        ),
    })?;
    drop(lease);
    Ok(axum::Json(describe(sandboxes, &id).await?))
}

pub async fn stop(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let cid = id.clone();
    app.store
        .read(move |conn| queries::conversation(conn, &cid, Trashed::Include).map(|_| ()))
        .await?;
    sandboxes(&app)?.stop(&id, "asked to stop").await;
    Ok(StatusCode::NO_CONTENT)
}
