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
