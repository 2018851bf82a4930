//! What a new chat starts with: `GET|PATCH /defaults` (its model settings
//! and its permission mode), and the checks of a mode and a context size
//! every route that sets one makes. A chat made with a saved agent takes
//! the agent's settings instead of the box's.

use std::sync::Arc;

use axum::extract::State;
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::Json;
use crate::settings::Settings;
use crate::store::meta;
use crate::App;

pub async fn show(State(app): State<Arc<App>>) -> Result<axum::Json<Value>, ApiError> {
    let settings = app.store.read(meta::default_settings).await?;
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
            let mut current = meta::default_settings(ctx.conn())?;
            if let Some(patch) = &body.settings {
                current = current.patched("settings", patch)?;
                // New chats get chatd's default model unless they name one.
                check_window(&windows, &windows.default_model(), &current)?;
                meta::set_default_settings(ctx, &current)?;
            }
            if let Some(mode) = &body.permission_mode {
                meta::set_default_mode(ctx, mode)?;
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

/// Refuses a `context_size` above what the engine says the model holds
/// (when it says): a chat cannot plan with room the model does not have.
pub fn check_window(app: &App, model: &str, settings: &Settings) -> Result<(), ApiError> {
    match (settings.context_size, app.models.window(model)) {
        (Some(size), Some(window)) if size > window => Err(ApiError::bad_input(
            "settings.context_size",
            format!("{size} is more than the {window} tokens the engine gives {model}"),
        )),
        _ => Ok(()),
    }
}

const MODES: &[&str] = &["ask", "auto", "yolo"];

pub fn check_mode(field: &str, mode: &str) -> Result<(), ApiError> {
    if MODES.contains(&mode) {
        Ok(())
    } else {
        Err(ApiError::bad_input(
            field,
            format!("{mode:?} is not one of ask, auto, yolo"),
        ))
    }
}

pub async fn default_mode_value(app: &App) -> Result<String, ApiError> {
    app.store.read(meta::default_mode).await
}
