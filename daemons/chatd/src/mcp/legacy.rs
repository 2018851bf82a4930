//! MCP's legacy HTTP+SSE transport (protocol 2024-11-05), for servers made
//! before Streamable HTTP: the client opens an event stream with a GET; its
//! first event, `endpoint`, names where to POST each message, and every
//! answer comes back on the stream. rmcp 3 has no client for it, so this is
//! one, as an rmcp `Transport`: the stream read into a channel, each
//! message sent with a POST of its own. `client::open` falls back to it when the
//! server refuses Streamable HTTP's first POST with 400, 404 or 405.
//!
//! The same reqwest client as Streamable HTTP's (every address checked, no
//! proxy, checked redirects) and the same sealed token and headers; the
//! endpoint must be on the stream's own origin, so a server cannot send
//! them somewhere else.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RoleClient;
use rmcp::transport::Transport;
use tandem_shared::sse::{parse_frame, Frames};
use tokio::time::Instant;
use url::Url;

/// A message's POST at most: it only waits for "taken" (the answer comes on
/// the stream), and one that hangs must not hold the session.
const POST_LIMIT: Duration = Duration::from_secs(30);
/// Messages read ahead of rmcp at most (each up to the event limit).
const READ_AHEAD: usize = 8;
/// POSTs under way at most, as rmcp's own Streamable HTTP client allows:
/// rmcp answers each request a server sends (a ping) in a task of its own,
/// so a server streaming requests must not get a socket for each.
const POSTS_AT_ONCE: usize = 16;

/// Why the event stream could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The GET's status was not a success.
    Status(u16),
    /// It answered something other than an event stream.
    NotAnEventStream,
    /// The request failed (no connection, refused address, a redirect).
    Request(reqwest::Error),
    /// No usable endpoint in time: the words say why.
    Endpoint(String),
}

/// Why sending a message failed (rmcp carries it to the call's error).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("the server answered HTTP {0}")]
    Status(u16),
    #[error("the message could not be sent")]
    Request(#[source] reqwest::Error),
}

/// The transport rmcp runs a session on: each message sent is a POST of
/// its own (so one that fails fails alone), each one received the next
/// `message` event of the stream.
pub struct Legacy {
    post: Arc<Post>,
    incoming: tokio::sync::mpsc::Receiver<ServerJsonRpcMessage>,
    reader: AbortOnDrop,
}

impl Transport<RoleClient> for Legacy {
    type Error = SendError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), SendError>> + Send + 'static {
        let post = self.post.clone();
        async move {
            // Never closed: the semaphore lives as long as `post`.
            let _permit = post.permits.acquire().await;
            post.send(&item).await
        }
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<ServerJsonRpcMessage>> + Send {
        let post = self.post.clone();
        let incoming = &mut self.incoming;
        async move {
            // The next message is read once a POST could go out for it: a
            // server that sends faster than its POSTs are taken is made to
            // wait (the channel fills, then TCP pushes back).
            drop(post.permits.acquire().await);
            incoming.recv().await
        }
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), SendError>> + Send {
        self.reader.0.abort();
        self.incoming.close();
        std::future::ready(Ok(()))
    }
}

/// Opens the event stream at `url` and waits for the endpoint it names,
/// all within `limit`. An event over `max_event` bytes ends the stream.
pub async fn open(
    http: &reqwest::Client,
    url: &Url,
    headers: HeaderMap,
    limit: Duration,
    max_event: usize,
) -> Result<Legacy, OpenError> {
    let deadline = Instant::now() + limit;
    let too_late = || {
        OpenError::Endpoint(format!(
            "the event stream named no endpoint within {} s",
            limit.as_secs()
        ))
    };
    let asked = http
        .get(url.clone())
        .headers(headers.clone())
        .header(ACCEPT, "text/event-stream")
        .send();
    let answer = tokio::time::timeout_at(deadline, asked)
        .await
        .map_err(|_| too_late())?
        .map_err(|e| OpenError::Request(e.without_url()))?;
    if !answer.status().is_success() {
        return Err(OpenError::Status(answer.status().as_u16()));
    }
    let kind = answer
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !kind.starts_with("text/event-stream") {
        return Err(OpenError::NotAnEventStream);
    }
    // A redirect within the origin may have moved it: the endpoint is
    // relative to where the stream is.
    let base = answer.url().clone();
    let (endpoint_tx, endpoint_rx) = tokio::sync::oneshot::channel();
    let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD);
    let reader = AbortOnDrop(tokio::spawn(read(answer, base, max_event, endpoint_tx, tx)));
    let endpoint = match tokio::time::timeout_at(deadline, endpoint_rx).await {
        Err(_) => return Err(too_late()),
        Ok(Err(_)) => {
            return Err(OpenError::Endpoint(
                "the event stream ended before it named an endpoint".into(),
            ))
        }
        Ok(Ok(Err(why))) => return Err(OpenError::Endpoint(why)),
        Ok(Ok(Ok(endpoint))) => endpoint,
    };
    Ok(Legacy {
        post: Arc::new(Post {
            http: http.clone(),
            endpoint,
            headers,
            permits: tokio::sync::Semaphore::new(POSTS_AT_ONCE),
        }),
        incoming: rx,
        reader,
    })
}

/// Where and how each message is sent.
struct Post {
    http: reqwest::Client,
    endpoint: Url,
    headers: HeaderMap,
    permits: tokio::sync::Semaphore,
}

impl Post {
    async fn send(&self, message: &ClientJsonRpcMessage) -> Result<(), SendError> {
        let answer = self
            .http
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .timeout(POST_LIMIT)
            .json(message)
            .send()
            .await
            // Its Debug would name the endpoint and its query.
            .map_err(|e| SendError::Request(e.without_url()))?;
        // The answer itself comes on the stream; this one only says taken.
        if answer.status().is_success() {
            Ok(())
        } else {
            Err(SendError::Status(answer.status().as_u16()))
        }
    }
}

/// Reads the stream: the first `endpoint` event to `endpoint`, then each
/// `message` event parsed to `messages`, until the stream ends, breaks, an
/// event outgrows `max_event` or the session closes.
async fn read(
    answer: reqwest::Response,
    base: Url,
    max_event: usize,
    endpoint: tokio::sync::oneshot::Sender<Result<Url, String>>,
    messages: tokio::sync::mpsc::Sender<ServerJsonRpcMessage>,
) {
    let mut endpoint = Some(endpoint);
    let mut body = answer.bytes_stream();
    let mut frames = Frames::default();
    let mut unreadable = 0usize;
    while let Some(Ok(chunk)) = body.next().await {
        frames.push(&chunk);
        while let Some(frame) = frames.next_frame() {
            let Some(frame) = parse_frame(&frame) else {
                continue;
            };
            match (frame.kind.as_str(), endpoint.take()) {
                ("endpoint", Some(tell)) => {
                    let named = endpoint_of(&base, frame.data.trim());
                    let failed = named.is_err();
                    let _ = tell.send(named);
                    if failed {
                        return;
                    }
                }
                (_, Some(tell)) => endpoint = Some(tell),
                ("message", None) => {
                    match serde_json::from_str(&frame.data) {
                        Ok(message) => {
                            if messages.send(message).await.is_err() {
                                return;
                            }
                        }
                        Err(_) => {
                            unreadable += 1;
                            if unreadable == 1 {
                                tracing::info!("an MCP event stream sent a message that is not JSON-RPC; skipped");
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if frames.rest().len() > max_event {
            tracing::info!(
                bytes = frames.rest().len(),
                "an MCP event stream sent an event over the limit; the session ends"
            );
            return;
        }
    }
}

/// The endpoint an `endpoint` event names, relative to the stream's
/// address; refused on another origin (the token would go there).
fn endpoint_of(base: &Url, named: &str) -> Result<Url, String> {
    let url = base
        .join(named)
        .map_err(|_| "the event stream named an endpoint that is not an address".to_string())?;
    if url.origin() != base.origin() {
        return Err(
            "the event stream named an endpoint on another origin; refused (the token would go there)"
                .into(),
        );
    }
    Ok(url)
}

/// Ends the stream's reader with the transport.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_taken_on_the_streams_origin_only() {
        let base = Url::parse("http://127.0.0.1:3001/sse").unwrap();
        let same = endpoint_of(&base, "/message?sessionId=abc").unwrap();
        assert_eq!(same.as_str(), "http://127.0.0.1:3001/message?sessionId=abc");
        let whole = endpoint_of(&base, "http://127.0.0.1:3001/m").unwrap();
        assert_eq!(whole.path(), "/m");
        for elsewhere in [
            "http://169.254.169.254/m",
            "//evil.example/m",
            "https://127.0.0.1:3001/m",
            "http://127.0.0.1:3002/m",
        ] {
            let refused = endpoint_of(&base, elsewhere).unwrap_err();
            assert!(refused.contains("another origin"), "{elsewhere}: {refused}");
        }
    }
}
