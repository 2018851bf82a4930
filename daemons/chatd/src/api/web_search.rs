//! The box's web search settings (docs/api.md "Web search"): `GET|PUT
//! /web-search`. The login's value is sealed before it is stored and is
//! never answered, logged or put in an error.

use std::sync::Arc;

use axum::extract::State;
use serde_json::{Map, Value};
use tandem_shared::http::ApiError;

use super::Json;
use crate::store::meta;
use crate::tools::web::search_settings::{AuthValue, AUTH_OWNER};
use crate::App;

/// `GET /web-search`.
pub async fn show(State(app): State<Arc<App>>) -> Result<axum::Json<Value>, ApiError> {
    let config = app.config.clone();
    let settings = app
        .store
        .read(move |conn| meta::web_search(conn, &config))
        .await?;
    Ok(axum::Json(settings.view()))
}

/// `PUT /web-search {…}`: the names given laid over the settings; a bad
/// one changes nothing.
pub async fn update(
    State(app): State<Arc<App>>,
    Json(patch): Json<Map<String, Value>>,
) -> Result<axum::Json<Value>, ApiError> {
    let (mcp, config) = (app.mcp.clone(), app.config.clone());
    let settings = app
        .store
        .write(move |ctx| {
            let now = meta::web_search(ctx.conn(), &config)?;
            let (mut next, auth) = now.patched("web_search", &patch)?;
            if let AuthValue::Set(value) = auth {
                next.searxng_auth_sealed = Some(mcp.seal_for(AUTH_OWNER, &value));
            }
            meta::set_web_search(ctx, &next)?;
            Ok(next)
        })
        .await
        // The field is named `web_search.<name>`; the route's own body has no prefix.
        .map_err(|mut e| {
            if let Some(Value::String(field)) = e.extra.get_mut("field") {
                if let Some(rest) = field.strip_prefix("web_search.") {
                    *field = rest.to_string();
                }
            }
            e
        })?;
    tracing::info!(provider = %settings.provider, auth = settings.searxng_auth_sealed.is_some(),
        "web search settings changed");
    Ok(axum::Json(settings.view()))
}
