//! The front's other routes go to the engine as they came: `/v1/models`,
//! `/v1/chat/completions` (streamed back as it streams), the engine's own
//! page. The browser's session cookie stays at the door.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use tandem_shared::http::ApiError;

/// The largest request body forwarded (a chat request with pictures).
pub const MAX_BODY: usize = 64 << 20;

/// Headers about one hop, never forwarded.
const HOP: [HeaderName; 8] = [
    header::CONNECTION,
    header::HOST,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::CONTENT_LENGTH,
];

pub struct EngineForward {
    client: reqwest::Client,
    base: String,
    /// The engine's address as a browser may see it: no user or password.
    shown: String,
}

fn shown(engine_url: &str) -> String {
    match url::Url::parse(engine_url) {
        Ok(url) => format!(
            "{}://{}{}",
            url.scheme(),
            url.host_str().unwrap_or("?"),
            url.port().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Err(_) => "QSE_ENGINE_URL".into(),
    }
}

impl EngineForward {
    pub fn new(engine_url: &str) -> anyhow::Result<EngineForward> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            // The engine's answers are passed on as they are, redirects too.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        Ok(EngineForward {
            client,
            base: engine_url.trim_end_matches('/').to_string(),
            shown: shown(engine_url),
        })
    }

    pub async fn forward(&self, request: Request) -> Response {
        let (parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let url = format!("{}{path}", self.base);
        // Bodies are read whole: some engines refuse a chunked request.
        let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
            return ApiError::too_large("a request to the engine", MAX_BODY).into_response();
        };
        let mut headers = parts.headers;
        for name in HOP {
            headers.remove(name);
        }
        headers.remove(header::COOKIE);
        headers.remove("x-forward-key");
        let answer = self
            .client
            .request(parts.method, &url)
            .headers(headers)
            .body(body)
            .send()
            .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(err) => {
                tracing::info!(error = %err.without_url(), "front: the engine did not answer");
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "engine_unavailable",
                    format!("the engine at {} does not answer", self.shown),
                )
                .into_response();
            }
        };
        let status = answer.status();
        let mut answer_headers = answer.headers().clone();
        for name in HOP {
            answer_headers.remove(name);
        }
        // The engine's answers come from the page's origin: a page of the
        // engine's (FastAPI's /docs loads scripts from a CDN) would run with
        // the browser's session. Sandboxed, it runs in an origin of its own;
        // JSON and streams read the same. The engine sets no cookie of ours.
        answer_headers.remove(header::SET_COOKIE);
        answer_headers.insert(
            header::CONTENT_SECURITY_POLICY,
            axum::http::HeaderValue::from_static(super::API_CSP),
        );
        answer_headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            axum::http::HeaderValue::from_static("nosniff"),
        );
        let mut response = Response::new(Body::from_stream(answer.bytes_stream()));
        *response.status_mut() = status;
        *response.headers_mut() = answer_headers;
        response
    }
}
