//! chatd's HTTP API: `/health`, `/metrics` and the CONTRACT's `/v1/chat-app/*`.

mod agent_files;
mod agents;
mod body;
mod chat_mcp;
mod commands;
mod conversations;
mod defaults;
mod egress;
mod events;
mod files;
mod fork;
mod form;
mod forward;
mod goals;
mod history;
mod invoke;
mod loops;
mod mcp;
mod mcp_apps;
mod mcp_context;
mod messages;
mod notifications;
mod outgoing;
mod policies;
mod preview;
mod push;
mod rules;
mod sandbox;
mod search;
mod skills;
mod subagents;
mod switches;
mod system;
mod tasks;
mod uploads;
mod web_search;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, patch, post, put};
use axum::Router;
use tandem_shared::http::ApiError;

use crate::App;

pub use body::Json;

pub fn router(app: Arc<App>) -> Router {
    let chat_app = Router::new()
        .route("/capabilities", get(system::capabilities))
        .route("/defaults", get(defaults::show).patch(defaults::update))
        .route("/agents", get(agents::list).post(agents::create))
        .route("/agents/templates", get(agent_files::templates))
        .route(
            "/agents/templates/{id}/create",
            post(agent_files::create_from_template),
        )
        .route("/agents/import", post(agent_files::import))
        .route("/agents/{id}/export", get(agent_files::export))
        .route("/agents/{id}/runs", get(agent_files::runs))
        .route(
            "/agents/{id}",
            get(agents::show)
                .put(agents::replace)
                .delete(agents::remove),
        )
        .route(
            "/conversations",
            post(conversations::create).get(conversations::list),
        )
        .route("/conversations/import", post(conversations::import))
        .route(
            "/conversations/{id}",
            get(conversations::snapshot)
                .patch(conversations::update)
                .delete(conversations::remove),
        )
        .route("/conversations/{id}/restore", post(conversations::restore))
        .route("/conversations/{id}/export", get(conversations::export))
        .route("/conversations/{id}/fork", post(fork::fork))
        .route(
            "/conversations/{id}/files",
            get(history::list_or_download).delete(history::delete),
        )
        .route("/conversations/{id}/files/trash", get(history::trash))
        .route(
            "/conversations/{id}/files/trash/restore",
            post(history::restore),
        )
        .route(
            "/conversations/{id}/files/trash/purge",
            post(history::purge),
        )
        .route(
            "/conversations/{id}/files/content",
            get(files::download).put(uploads::put_content),
        )
        .route("/conversations/{id}/files/preview", get(preview::preview))
        .route("/conversations/{id}/files/search", get(search::search))
        .route("/conversations/{id}/files/changes", get(history::changes))
        .route("/conversations/{id}/files/history", get(history::history))
        .route("/conversations/{id}/files/undo", post(history::undo))
        .route("/conversations/{id}/clear", post(conversations::clear))
        .route("/conversations/{id}/compact", post(conversations::compact))
        .route(
            "/conversations/{id}/settings",
            axum::routing::patch(policies::patch_settings),
        )
        .route(
            "/conversations/{id}/tools/policies",
            get(policies::chat_policies).put(policies::set_chat_policies),
        )
        .route("/web-search", get(web_search::show).put(web_search::update))
        .route(
            "/tools/policies",
            get(policies::box_policies).put(policies::set_box_policies),
        )
        .route(
            "/conversations/{id}/permission-mode",
            get(conversations::permission_mode).put(conversations::set_permission_mode),
        )
        .route("/conversations/{id}/messages", post(messages::send))
        .route(
            "/conversations/{id}/messages/{mid}/edit",
            post(messages::edit),
        )
        .route(
            "/conversations/{id}/pending/{pid}",
            patch(messages::update_pending).delete(messages::remove_pending),
        )
        .route("/commands", get(commands::list))
        .route("/skills", get(skills::list).post(skills::create))
        .route(
            "/skills/{name}",
            get(skills::get).put(skills::update).delete(skills::remove),
        )
        .route("/conversations/{id}/skills", put(skills::set_off))
        .route("/conversations/{id}/stop", post(messages::stop))
        .route(
            "/conversations/{id}/goal",
            get(goals::get).put(goals::set).delete(goals::clear),
        )
        .route("/conversations/{id}/goal/resume", post(goals::resume))
        .route("/conversations/{id}/goal/pause", post(goals::pause))
        .route(
            "/conversations/{id}/loops",
            get(loops::list)
                .post(loops::create)
                .delete(loops::remove_all),
        )
        .route(
            "/conversations/{id}/loops/{lid}",
            put(loops::change).delete(loops::remove_one),
        )
        .route("/conversations/{id}/tasks", get(tasks::list))
        .route("/conversations/{id}/tasks/{tid}", get(tasks::show))
        .route("/conversations/{id}/subagents", get(subagents::list))
        .route("/conversations/{id}/subagents/{sid}", get(subagents::show))
        .route(
            "/conversations/{id}/subagents/{sid}/stop",
            post(subagents::stop),
        )
        .route("/conversations/{id}/consent", post(messages::consent))
        .route(
            "/conversations/{id}/egress",
            get(egress::preset).put(egress::set_preset),
        )
        .route(
            "/conversations/{id}/egress/rules",
            get(egress::rules).post(egress::add_rule),
        )
        .route(
            "/conversations/{id}/egress/rules/{rule}",
            axum::routing::delete(egress::remove_rule),
        )
        .route("/egress/settings", get(egress::settings))
        .route("/egress/audit", get(egress::audit))
        .route(
            "/conversations/{id}/rules",
            get(rules::chat_list).post(rules::chat_add),
        )
        .route(
            "/conversations/{id}/rules/{rule_id}",
            axum::routing::delete(rules::chat_remove),
        )
        .route(
            "/permissions/rules",
            get(rules::global_list).post(rules::global_add),
        )
        .route(
            "/permissions/rules/{rule_id}",
            axum::routing::delete(rules::global_remove),
        )
        .route("/conversations/{id}/send-now", post(messages::send_now))
        .route("/conversations/{id}/continue", post(messages::resume))
        .route("/conversations/{id}/regenerate", post(messages::regenerate))
        .route("/conversations/{id}/events", get(events::stream))
        .route(
            "/conversations/{id}/sandbox",
            get(sandbox::show)
                .post(sandbox::start)
                .delete(sandbox::stop),
        )
        .route(
            "/permissions/mode",
            get(system::default_mode).put(system::set_default_mode),
        )
        .route(
            "/notifications",
            post(notifications::create)
                .get(notifications::list)
                .delete(notifications::remove),
        )
        .route("/notifications/count", get(notifications::count))
        .route("/notifications/read", post(notifications::mark_read))
        .route("/notifications/events", get(notifications::events))
        .route("/mcp-connectors", get(mcp::list).post(mcp::create))
        .route(
            "/mcp-connectors/{id}",
            get(mcp::show).put(mcp::replace).delete(mcp::remove),
        )
        .route("/mcp-connectors/{id}/test", post(mcp::test))
        .route("/mcp-connectors/{id}/enable", post(mcp::enable))
        .route("/mcp-connectors/{id}/disable", post(mcp::disable))
        .route("/conversations/{id}/tools", get(chat_mcp::tools))
        .route("/conversations/{id}/mcp", put(chat_mcp::set_off))
        .route("/conversations/{id}/builtins", put(chat_mcp::set_builtins))
        .route("/draft/tools", get(chat_mcp::draft_tools))
        .route(
            "/conversations/{id}/mcp/prompts",
            get(mcp_context::prompts).post(mcp_context::preview_prompt),
        )
        .route(
            "/conversations/{id}/mcp/resources",
            get(mcp_context::resources),
        )
        .route(
            "/conversations/{id}/mcp/resources/read",
            post(mcp_context::read_resource),
        )
        .route(
            "/conversations/{id}/mcp-apps/resource",
            get(mcp_apps::resource),
        )
        .route("/conversations/{id}/mcp-apps/frame", get(mcp_apps::frame))
        .route("/conversations/{id}/mcp-apps/call", post(mcp_apps::call))
        .route("/push/key", get(push::key))
        .route(
            "/push/subscribe",
            post(push::subscribe).delete(push::unsubscribe),
        )
        .route("/push/subscriptions", get(push::list))
        .route("/push/test", post(push::test))
        // triggerd's and connectord's routes, forwarded as they come.
        .route("/triggers", any(forward::triggers))
        .route("/triggers/{*rest}", any(forward::triggers))
        .route("/connectors", any(forward::connectors))
        .route("/connectors/{*rest}", any(forward::connectors))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), guard));
    Router::new()
        .route("/health", get(system::health))
        .nest("/v1/chat-app", chat_app)
        .merge(tandem_shared::metrics::router(app.registry.clone()))
        .fallback(not_found)
        .with_state(app)
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

/// Every `/v1/chat-app/*` request: cross-site writes refused, then the
/// forward key (constant-time). The capabilities probe answers without a
/// key, saying `signed_in: false`.
async fn guard(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    let write = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let cross_site = request
        .headers()
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    if write && cross_site {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_site",
            "a write from another site is refused",
        )
        .into_response();
    }
    let signed_in = request
        .headers()
        .get("x-forward-key")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|key| app.secrets.forward_key.matches(key));
    let probe = request.uri().path() == "/capabilities" && request.method() == Method::GET;
    if !signed_in && !probe {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "forward_key_required",
            "this route needs the X-Forward-Key header with the box's forward key",
        )
        .into_response();
    }
    if write {
        if let Some(refused) = subagent_write(&app, request.uri().path()) {
            return refused.into_response();
        }
    }
    request.extensions_mut().insert(SignedIn(signed_in));
    next.run(request).await
}

/// A write to a sub-agent's conversation: refused, but for its cards (a
/// person answers them where the parent shows them).
fn subagent_write(app: &App, path: &str) -> Option<ApiError> {
    let rest = path.strip_prefix("/conversations/")?;
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    // As the route's `Path` reads it: `%63_…` is `c_…`.
    let id = percent_encoding::percent_decode_str(id).decode_utf8_lossy();
    if tail == "consent" || !app.folders.is_subagent(&id) {
        return None;
    }
    let parent = app.folders.home(&id);
    Some(ApiError::conflict(
        "subagent_read_only",
        format!(
            "this is a sub-agent's conversation, run by its parent chat {parent}: read it, or \
             stop it with POST /conversations/{parent}/subagents/{id}/stop"
        ),
    ))
}

/// Whether the caller presented the forward key.
#[derive(Clone, Copy)]
pub struct SignedIn(pub bool);
