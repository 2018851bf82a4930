//! The front (`chatd --front ADDR`): for an engine without a `/v1/chat-app`
//! forward, chatd itself is the door a browser opens. It serves the page
//! (`page/`, built into the binary), answers `/v1/chat-app/*` through the
//! same router as chatd's own listener after checking the browser's session
//! (the admin token buys a cookie, `session.rs`) and adding the forward key
//! itself, and forwards every other route to the engine (`engine.rs`).
//!
//! Without an admin token the front is open to whoever reaches it; the page
//! says so (`GET /v1/chat-app/session` answers `auth: "none"`).

mod engine;
pub mod session;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use serde_json::json;
use tandem_shared::http::ApiError;
use tower::ServiceExt;

use crate::App;

/// The page and its files, served as they are: no build step. index.html
/// loads the scripts in this order (app.js last: its `init()` starts the page).
const INDEX_HTML: &str = include_str!("page/index.html");
const PAGE_FILES: [(&str, &str, &str); 24] = [
    (
        "/chat-app/composer.js",
        include_str!("page/composer.js"),
        JS,
    ),
    ("/chat-app/around.js", include_str!("page/around.js"), JS),
    (
        "/chat-app/markdown.js",
        include_str!("page/markdown.js"),
        JS,
    ),
    ("/chat-app/chat.js", include_str!("page/chat.js"), JS),
    ("/chat-app/preview.js", include_str!("page/preview.js"), JS),
    ("/chat-app/files.js", include_str!("page/files.js"), JS),
    (
        "/chat-app/filesearch.js",
        include_str!("page/filesearch.js"),
        JS,
    ),
    ("/chat-app/stream.js", include_str!("page/stream.js"), JS),
    ("/chat-app/status.js", include_str!("page/status.js"), JS),
    (
        "/chat-app/settings.js",
        include_str!("page/settings.js"),
        JS,
    ),
    ("/chat-app/inbox.js", include_str!("page/inbox.js"), JS),
    ("/chat-app/push.js", include_str!("page/push.js"), JS),
    ("/chat-app/mcp.js", include_str!("page/mcp.js"), JS),
    ("/chat-app/context.js", include_str!("page/context.js"), JS),
    ("/chat-app/apps.js", include_str!("page/apps.js"), JS),
    (
        "/chat-app/subagents.js",
        include_str!("page/subagents.js"),
        JS,
    ),
    ("/chat-app/agents.js", include_str!("page/agents.js"), JS),
    ("/chat-app/skills.js", include_str!("page/skills.js"), JS),
    ("/chat-app/tools.js", include_str!("page/tools.js"), JS),
    ("/chat-app/app.js", include_str!("page/app.js"), JS),
    (
        "/chat-app/app.css",
        include_str!("page/app.css"),
        "text/css; charset=utf-8",
    ),
    (
        "/chat-app/icon.svg",
        include_str!("page/icon.svg"),
        "image/svg+xml",
    ),
    ("/index.html", INDEX_HTML, HTML),
    // The service worker at the root, so its scope is the whole page.
    ("/sw.js", include_str!("page/sw.js"), JS),
];
const JS: &str = "text/javascript; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";

/// The page may load only what the front serves; it talks only to the front.
/// `frame-src blob:` is for a PDF in the files pane, shown by the
/// browser's own viewer in a frame of a blob URL the page made of the file's
/// bytes, typed `application/pdf` by the page itself (app.js `pdfUrl`);
/// `'self'` for an MCP App's page (`…/mcp-apps/frame`, sandboxed by its own
/// policy: an origin of its own). The API's other answers stay unframeable
/// (`API_CSP`), and no frame may load anything else; `object-src` stays at `'self'` (no `<embed>`/`<object>`).
/// `worker-src 'self'`: push.js registers the front's own /sw.js, nothing else.
const PAGE_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data: blob:; frame-src 'self' blob:; connect-src 'self'; worker-src 'self'; \
    base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// API answers are data, never a document: opened as a page they run nothing.
pub(crate) const API_CSP: &str = "sandbox; default-src 'none'; frame-ancestors 'none'";

struct Front {
    app: Arc<App>,
    /// chatd's own router: the front hands it requests with the forward key.
    api: Router,
    engine: engine::EngineForward,
    limiter: session::Limiter,
}

/// The front's router over chatd's own `api`.
pub fn router(app: Arc<App>, api: Router) -> anyhow::Result<Router> {
    let front = Arc::new(Front {
        engine: engine::EngineForward::new(&app.config.engine_url)?,
        app,
        api,
        limiter: session::Limiter::default(),
    });
    let mut router = Router::new().route(
        "/",
        get(|headers: HeaderMap| async move { page(INDEX_HTML, HTML, &headers) }),
    );
    for (path, body, kind) in PAGE_FILES {
        router = router.route(
            path,
            get(move |headers: HeaderMap| async move { page(body, kind, &headers) }),
        );
    }
    Ok(router
        .route(
            "/v1/chat-app/session",
            get(session_state).post(sign_in).delete(sign_out),
        )
        .fallback(dispatch)
        .with_state(front))
}

/// A page file's validator: its bytes' hash, so a browser that has them
/// (`If-None-Match`) gets a 304 instead of the file again.
fn etag(body: &str) -> String {
    use std::hash::{Hash, Hasher};
    // DefaultHasher::new() has fixed keys: the same bytes, the same tag, in every chatd.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    format!("\"{:016x}\"", hasher.finish())
}

fn page(body: &'static str, content_type: &'static str, asked: &HeaderMap) -> Response {
    let tag = etag(body);
    let fresh = asked
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        body.into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&tag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // A new chatd binary brings a new page: the browser asks each time, and
    // the ETag above makes the answer a 304 while the file is the same.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Who is asking, as far as the front can tell.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Access {
    /// No admin token is set: the trusted-network mode.
    Open,
    /// The admin token as a bearer, or a session cookie it issued.
    SignedIn,
    SignedOut,
}

impl Front {
    fn access(&self, headers: &HeaderMap) -> Access {
        let Some(admin) = &self.app.secrets.admin_token else {
            return Access::Open;
        };
        if session::from_headers(headers).is_some_and(|value| session::verify(admin, value, now()))
        {
            return Access::SignedIn;
        }
        // A bearer is a guess like a sign-in: it takes a try of the limiter,
        // and once the tries are spent it is not even compared.
        let Some(token) = bearer(headers) else {
            return Access::SignedOut;
        };
        if self.limiter.attempt().is_err() {
            return Access::SignedOut;
        }
        if admin.matches(token) {
            self.limiter.refund();
            Access::SignedIn
        } else {
            tracing::warn!("front: a request with a wrong bearer token");
            Access::SignedOut
        }
    }

    /// In the trusted-network mode, a request must name this box: a page
    /// elsewhere whose name was made to point here (DNS rebinding) would
    /// otherwise be same-origin with the front and need no sign-in.
    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        if self.app.secrets.admin_token.is_some() {
            // Signed-out requests get nothing; a rebound name has no cookie.
            return true;
        }
        let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
            return true;
        };
        let name = host_name(host);
        if name.parse::<std::net::IpAddr>().is_ok() || name.eq_ignore_ascii_case("localhost") {
            return true;
        }
        let own = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let own = own.trim();
        (!own.is_empty()
            && (name.eq_ignore_ascii_case(own)
                || name.eq_ignore_ascii_case(&format!("{own}.local"))))
            || self
                .app
                .config
                .front_hosts
                .iter()
                .any(|allowed| name.eq_ignore_ascii_case(allowed))
    }
}

/// The name in a `Host` header: no port, an IPv6 literal without brackets.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
    .trim_end_matches('.')
}

fn wrong_host() -> Response {
    ApiError::new(
        StatusCode::MISDIRECTED_REQUEST,
        "wrong_host",
        "this front answers to its own addresses only (an IP address, localhost, this box's name); \
         add other names to [chatd] front_hosts",
    )
    .into_response()
}

/// The request's `Authorization: Bearer` token.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn signed_out() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "signed_out",
        "sign in with the box's admin token (QSE_ADMIN_TOKEN)",
    )
}

/// A write from another site: a page elsewhere making this browser post here.
/// `Sec-Fetch-Site` says so in every current browser; an `Origin` naming
/// another host says so in older ones. `Origin: null` is a page without an
/// origin of its own (a sandboxed frame, a file, a data: URL, a redirect
/// from elsewhere): never the front's page, so its writes are refused too.
fn cross_site(request: &Request) -> bool {
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return false;
    }
    let headers = request.headers();
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
    {
        return true;
    }
    // An Origin that is not even text is no page of ours either.
    let origin = headers.get(header::ORIGIN).map(|v| v.to_str().ok());
    if matches!(origin, Some(None) | Some(Some("null"))) {
        return true;
    }
    let origin_host = origin
        .flatten()
        .map(|o| o.split_once("://").map_or(o, |(_, rest)| rest));
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match (origin_host, host) {
        (Some(origin), Some(host)) => !origin.eq_ignore_ascii_case(host),
        (Some(_), None) => true,
        _ => false,
    }
}

fn refuse_cross_site() -> Response {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "cross_site",
        "a write from another site is refused",
    )
    .into_response()
}

/// `GET /v1/chat-app/session`: whether this browser is signed in, and
/// whether signing in is needed at all.
async fn session_state(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    if !front.host_allowed(&headers) {
        return wrong_host();
    }
    let access = front.access(&headers);
    axum::Json(json!({
        "signed_in": access != Access::SignedOut,
        "auth": if access == Access::Open { "none" } else { "token" },
    }))
    .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

/// `POST /v1/chat-app/session {token}`: the admin token buys a cookie.
async fn sign_in(State(front): State<Arc<Front>>, request: Request) -> Response {
    if cross_site(&request) {
        return refuse_cross_site();
    }
    let Some(admin) = front.app.secrets.admin_token.clone() else {
        // Nothing to sign in to: everyone here is in already.
        return StatusCode::NO_CONTENT.into_response();
    };
    if let Err(wait) = front.limiter.attempt() {
        return ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_attempts",
            format!(
                "{} wrong tokens in a minute: try again in {wait} s",
                session::MAX_FAILURES
            ),
        )
        .retry_after(wait)
        .into_response();
    }
    // A body that is not a sign-in is no guess: its try comes back.
    let Ok(bytes) = axum::body::to_bytes(request.into_body(), 4096).await else {
        front.limiter.refund();
        return ApiError::too_large("the sign-in body", 4096).into_response();
    };
    let body: SignIn = match tandem_shared::http::parse_body(&bytes) {
        Ok(body) => body,
        Err(err) => {
            front.limiter.refund();
            return err.into_response();
        }
    };
    if !admin.matches(body.token.trim()) {
        tracing::warn!("front: a sign-in with a wrong token");
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "signed_out",
            "that is not the box's admin token (QSE_ADMIN_TOKEN in the secrets file)",
        )
        .into_response();
    }
    front.limiter.refund();
    tracing::info!("front: a browser signed in");
    let cookie = session::set_cookie(&session::mint(&admin, now()));
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `DELETE /v1/chat-app/session`: this browser's cookie goes.
async fn sign_out(request: Request) -> Response {
    if cross_site(&request) {
        return refuse_cross_site();
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(value) = HeaderValue::from_str(&session::clear_cookie()) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// Every other route: chatd's API when it is under `/v1/chat-app`, else the engine.
async fn dispatch(State(front): State<Arc<Front>>, request: Request) -> Response {
    if cross_site(&request) {
        return refuse_cross_site();
    }
    if !front.host_allowed(request.headers()) {
        return wrong_host();
    }
    let access = front.access(request.headers());
    let path = request.uri().path();
    let chat_app = path == "/v1/chat-app" || path.starts_with("/v1/chat-app/");
    if !chat_app {
        if access == Access::SignedOut {
            return signed_out().into_response();
        }
        let mut request = request;
        // The admin token is the front's, not the engine's: an engine key a
        // client sends for the engine itself passes on.
        let admin_bearer = front
            .app
            .secrets
            .admin_token
            .as_ref()
            .is_some_and(|admin| bearer(request.headers()).is_some_and(|t| admin.matches(t)));
        if admin_bearer {
            request.headers_mut().remove(header::AUTHORIZATION);
        }
        return front.engine.forward(request).await;
    }
    let probe = path == "/v1/chat-app/capabilities" && request.method() == Method::GET;
    if access == Access::SignedOut && !probe {
        return signed_out().into_response();
    }
    let mut request = request;
    let headers = request.headers_mut();
    // The browser's credentials stay at the door; chatd's API knows the key.
    headers.remove(header::COOKIE);
    headers.remove(header::AUTHORIZATION);
    headers.remove("x-forward-key");
    if access != Access::SignedOut {
        if let Ok(key) = HeaderValue::from_str(front.app.secrets.forward_key.expose()) {
            headers.insert("x-forward-key", key);
        }
    }
    let mut response = match front.api.clone().oneshot(request.map(Body::new)).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let headers = response.headers_mut();
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(API_CSP));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, headers: &[(&str, &str)]) -> Request {
        let mut builder = Request::builder()
            .method(method)
            .uri("/v1/chat-app/conversations");
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        builder.body(Body::empty()).unwrap()
    }

    #[test]
    fn writes_from_another_site_are_told_apart() {
        let check = |method: Method, headers: &[(&str, &str)], expect: bool| {
            assert_eq!(
                cross_site(&request(method.clone(), headers)),
                expect,
                "{method} {headers:?}"
            );
        };
        check(Method::POST, &[("sec-fetch-site", "cross-site")], true);
        check(Method::POST, &[("sec-fetch-site", "same-origin")], false);
        check(Method::GET, &[("sec-fetch-site", "cross-site")], false);
        check(
            Method::POST,
            &[("origin", "http://evil.example"), ("host", "box:4180")],
            true,
        );
        check(
            Method::POST,
            &[("origin", "http://box:4180"), ("host", "box:4180")],
            false,
        );
        check(
            Method::DELETE,
            &[("origin", "https://box:4180"), ("host", "BOX:4180")],
            false,
        );
        // curl and the tandem command send neither.
        check(Method::POST, &[("host", "box:4180")], false);
        check(
            Method::POST,
            &[("origin", "null"), ("host", "box:4180")],
            true,
        );
        check(Method::PUT, &[("origin", "null")], true);
        check(Method::GET, &[("origin", "null")], false);
    }
}
