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
use crate::permissions::Mode;
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
    let asked = match &body.permission_mode {
        Some(mode) => Some(check_mode("permission_mode", mode)?),
        None => None,
    };
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
            if let Some(mode) = asked {
                meta::set_default_mode(ctx, mode)?;
            }
            Ok((current, asked))
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

/// The mode a request names in `field`, spelled exactly as the API writes it.
pub fn check_mode(field: &str, mode: &str) -> Result<Mode, ApiError> {
    Mode::ALL
        .into_iter()
        .find(|known| known.as_str() == mode)
        .ok_or_else(|| {
            ApiError::bad_input(
                field,
                format!("{mode:?} is not one of plan, ask, auto, yolo"),
            )
        })
}

pub async fn default_mode_value(app: &App) -> Result<Mode, ApiError> {
    app.store.read(meta::default_mode).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API takes a mode spelled exactly, and names the field and the
    /// three words when it is not one.
    #[test]
    fn a_mode_is_one_of_three_words_spelled_exactly() {
        for mode in Mode::ALL {
            assert_eq!(check_mode("mode", mode.as_str()).unwrap(), mode);
        }
        for refused in ["Ask", " auto", "sometimes", ""] {
            let err = check_mode("permission_mode", refused).unwrap_err();
            assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
            assert_eq!(err.kind, "bad_input");
            assert_eq!(
                err.message,
                format!("permission_mode: {refused:?} is not one of plan, ask, auto, yolo")
            );
            assert_eq!(err.extra["field"], "permission_mode");
        }
    }
}
