//! The box-wide values kept in the `meta` table: the settings a new chat
//! starts with and the default permission mode, read and written.

use rusqlite::{Connection, OptionalExtension};
use tandem_shared::http::ApiError;

use super::Ctx;
use crate::permissions::Mode;
use crate::settings::Settings;

const SETTINGS_KEY: &str = "default_settings";

/// The settings a new chat starts with.
pub fn default_settings(conn: &Connection) -> Result<Settings, ApiError> {
    let text: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = ?1",
            [SETTINGS_KEY],
            |r| r.get(0),
        )
        .optional()?;
    Ok(text
        .map(|t| Settings::from_stored_text(&t))
        .unwrap_or_default())
}

pub fn set_default_settings(ctx: &mut Ctx, settings: &Settings) -> Result<(), ApiError> {
    ctx.conn().execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) \
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [SETTINGS_KEY, &settings.to_text()],
    )?;
    Ok(())
}

/// The permission mode a new chat starts with: `auto` unless one was set.
pub fn default_mode(conn: &Connection) -> Result<Mode, ApiError> {
    let stored: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'permission_mode'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    // Only the API sets it, with a mode it checked: one it does not know is `auto`.
    Ok(stored
        .and_then(|text| Mode::parse(&text).ok())
        .unwrap_or(Mode::Auto))
}

pub fn set_default_mode(ctx: &mut Ctx, mode: Mode) -> Result<(), ApiError> {
    ctx.conn().execute(
        "INSERT INTO meta (key, value) VALUES ('permission_mode', ?1) \
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [mode.as_str()],
    )?;
    Ok(())
}

/// The box's web search settings; `config` (chatd's `search_engine` and
/// `search_url`) until they are set.
pub fn web_search(
    conn: &Connection,
    config: &crate::config::ChatdConfig,
) -> Result<crate::tools::web::search_settings::SearchSettings, ApiError> {
    use crate::tools::web::search_settings::SearchSettings;
    let text: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'web_search'", [], |r| {
            r.get(0)
        })
        .optional()?;
    // A stored text this build cannot read is the config's, said here.
    Ok(match text.map(|t| serde_json::from_str(&t)) {
        Some(Ok(settings)) => settings,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "web_search: the stored settings do not read; the config's hold");
            SearchSettings::from_config(config)
        }
        None => SearchSettings::from_config(config),
    })
}

pub fn set_web_search(
    ctx: &mut Ctx,
    settings: &crate::tools::web::search_settings::SearchSettings,
) -> Result<(), ApiError> {
    let text = serde_json::to_string(settings)
        .map_err(|e| ApiError::internal(format!("web_search: {e}")))?;
    ctx.conn().execute(
        "INSERT INTO meta (key, value) VALUES ('web_search', ?1) \
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [text],
    )?;
    Ok(())
}
