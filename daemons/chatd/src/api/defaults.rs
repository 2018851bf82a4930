//! What a new chat starts with: `GET|PATCH /defaults` (its model settings
//! and its permission mode). A chat made with a saved agent takes the
//! agent's settings instead of the box's.

use std::sync::Arc;

use axum::extract::State;
use rusqlite::{Connection, OptionalExtension};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::system::{check_mode, default_mode_value};
use super::Json;
use crate::settings::Settings;
use crate::App;

const KEY: &str = "default_settings";

/// The settings a new chat starts with.
pub fn settings(conn: &Connection) -> Result<Settings, ApiError> {
    let text: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = ?1", [KEY], |r| r.get(0))
        .optional()?;
    Ok(text
        .map(|t| Settings::from_stored_text(&t))
        .unwrap_or_default())
}

pub async fn show(State(app): State<Arc<App>>) -> Result<axum::Json<Value>, ApiError> {
    let settings = app.store.read(settings).await?;
    let mode = default_mode_value(&app).await?;
    Ok(axum::Json(json!({
        "settings": settings.to_value(),
        "permission_mode": mode,
    })))
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct DefaultsBody {
    settings: Option<Value>,
    permission_mode: Option<String>,
}

/// Lays `settings` over the stored defaults (a null clears one) and sets
/// the mode; a refused field stores nothing (the write job rolls back).
pub async fn update(
    State(app): State<Arc<App>>,
    Json(body): Json<DefaultsBody>,
) -> Result<axum::Json<Value>, ApiError> {
    if let Some(mode) = &body.permission_mode {
        check_mode("permission_mode", mode)?;
    }
    let windows = app.clone();
    let (settings, mode) = app
        .store
        .write(move |ctx| {
            let mut current = settings(ctx.conn())?;
            if let Some(patch) = &body.settings {
                current = current.patched("settings", patch)?;
                // New chats get chatd's default model unless they name one.
                super::conversations::check_window(&windows, &windows.default_model(), &current)?;
                ctx.conn().execute(
                    "INSERT INTO meta (key, value) VALUES (?1, ?2) \
                     ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    [KEY, &current.to_text()],
                )?;
            }
            if let Some(mode) = &body.permission_mode {
                ctx.conn().execute(
                    "INSERT INTO meta (key, value) VALUES ('permission_mode', ?1) \
                     ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    [mode],
                )?;
            }
            Ok((current, body.permission_mode.clone()))
        })
        .await?;
    let mode = match mode {
        Some(mode) => mode,
        None => default_mode_value(&app).await?,
    };
    tracing::info!(permission_mode = %mode, "defaults changed");
    Ok(axum::Json(json!({
        "settings": settings.to_value(),
        "permission_mode": mode,
    })))
}
