//! Serving a router on a listener with bounds, the same for every daemon:
//! HTTP/1.1 only; a connection has `header_timeout` to bring a request's
//! head (from its accept, or from the first byte of a later request); a
//! kept-alive connection with no request in flight is closed after
//! `idle_timeout` (an answer that streams for hours is in flight, never
//! idle); and a connection past the listener's cap, in all or from one
//! address, gets one short refusal written without waiting and is closed at
//! once. So a crowd of connections that ask nothing cannot take the
//! descriptors and memory every other request needs.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::shutdown::Shutdown;
use crate::sync::lock;

/// Seconds a request's head may take: from a new connection's accept, or
/// from the first byte of a kept-alive connection's next request.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a kept-alive connection may wait, with nothing asked, for its
/// next request.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections open at once on a unix-socket API (its callers are other
/// daemons and `tandem` of the same user).
pub const SOCKET_MAX_CONNECTIONS: usize = 512;
/// Descriptors kept out of every listener's reach for the daemon's own use
/// (databases, logs, the calls it makes).
pub const RESERVED_DESCRIPTORS: u64 = 128;
/// The largest request head taken (request line and headers).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Connections the kernel completes and queues before the daemon takes
/// them (the standard library's 128 overflowed when a few hundred devices
/// came back at once).
pub const LISTEN_BACKLOG: u32 = 1024;
/// How often a run of refused connections is written to the log.
const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// One listener's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    /// Connections open at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Connections open at once from one address (TCP); more are answered
    /// 429 and closed. `None`: no cap per address.
    pub max_per_peer: Option<usize>,
}

impl Limits {
    /// A unix-socket API's bounds.
    pub fn socket_api() -> Limits {
        Limits {
            header_timeout: HEADER_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections: SOCKET_MAX_CONNECTIONS,
            max_per_peer: None,
        }
    }

    /// These bounds with the caps cut to what a descriptor limit of `soft`
    /// leaves room for: no listener takes more than a quarter of what is
    /// left after [`RESERVED_DESCRIPTORS`], so two listeners and the calls
    /// their requests make still fit.
    pub fn within_descriptors(self, soft: u64) -> Limits {
        let room = (soft.saturating_sub(RESERVED_DESCRIPTORS) / 4).max(8) as usize;
        Limits {
            max_connections: self.max_connections.min(room),
            max_per_peer: self.max_per_peer.map(|p| p.min(room)),
            ..self
        }
    }
}

/// Listens on `address` with a backlog of [`LISTEN_BACKLOG`].
pub fn bind_tcp(address: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match address {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // A restarted daemon binds again at once, past the old connections'
    // TIME-WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `router` on a TCP listener until `shutdown` begins, then stops
/// taking connections, lets open requests end and returns when every
/// connection has closed. `name` says which listener in the log.
pub async fn serve_tcp(
    name: &'static str,
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    shutdown: Shutdown,
) {
    serve(name, Tcp(listener), router, limits, shutdown, |addr| {
        Some(addr.ip().to_canonical())
    })
    .await
}

/// The same on a unix socket whose callers' uid is checked.
pub async fn serve_socket(
    name: &'static str,
    listener: crate::http::PeerChecked,
    router: Router,
    limits: Limits,
    shutdown: Shutdown,
) {
    serve(name, listener, router, limits, shutdown, |_| None).await
}

/// A TCP listener whose accept rides out errors: a connection reset before
/// it was taken is skipped, running out of descriptors waits a moment.
struct Tcp(tokio::net::TcpListener);

impl axum::serve::Listener for Tcp {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((stream, addr)) => {
                    // Small SSE frames go out at once instead of waiting on
                    // the peer's delayed acknowledgement (up to 40 ms).
                    let _ = stream.set_nodelay(true);
                    return (stream, addr);
                }
                Err(err) if connection_error(&err) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "accept failed; trying again in 50 ms");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

fn connection_error(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        err.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

async fn serve<L: axum::serve::Listener>(
    name: &'static str,
    mut listener: L,
    router: Router,
    limits: Limits,
    shutdown: Shutdown,
    peer_of: fn(&L::Addr) -> Option<IpAddr>,
) {
    let soft = crate::nofile::soft();
    let wanted = limits;
    let limits = limits.within_descriptors(soft);
    if limits != wanted {
        tracing::warn!(
            listener = name,
            max_connections = limits.max_connections,
            wanted = wanted.max_connections,
            nofile = soft,
            "the descriptor limit is too low for this listener's connections: fewer are taken \
             (raise LimitNOFILE= or `ulimit -n`)"
        );
    }
    tracing::info!(
        listener = name,
        max_connections = limits.max_connections,
        max_per_peer = limits.max_per_peer,
        header_timeout_s = limits.header_timeout.as_secs_f64(),
        idle_timeout_s = limits.idle_timeout.as_secs_f64(),
        nofile = soft,
        "listener bounds"
    );
    let places = Arc::new(Places::default());
    let refusals = Refusals::start(name, shutdown.clone());
    // Every connection task holds a receiver: serving ends when all are gone.
    let (open_tx, open_rx) = watch::channel(());
    loop {
        let (io, addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait() => break,
        };
        let peer = peer_of(&addr);
        let place = match places.take(peer, &limits) {
            Ok(place) => place,
            Err(refusal) => {
                refusals.note(&refusal);
                refusal.answer(io);
                continue;
            }
        };
        let router = router.clone();
        let shutdown = shutdown.clone();
        let open = open_rx.clone();
        tokio::spawn(async move {
            serve_connection(io, router, limits, shutdown).await;
            drop(place);
            drop(open);
        });
    }
    drop(listener);
    drop(open_rx);
    open_tx.closed().await;
}

/// Counts of open connections, in all and by address.
#[derive(Default)]
struct Places {
    state: Mutex<PlacesState>,
}

#[derive(Default)]
struct PlacesState {
    open: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// One connection's place; given back when dropped.
struct Place {
    places: Arc<Places>,
    peer: Option<IpAddr>,
}

impl Places {
    fn take(self: &Arc<Places>, peer: Option<IpAddr>, limits: &Limits) -> Result<Place, Refusal> {
        let mut state = lock(&self.state);
        if state.open >= limits.max_connections {
            return Err(Refusal::Total(limits.max_connections));
        }
        if let (Some(peer), Some(cap)) = (peer, limits.max_per_peer) {
            let from_peer = state.by_peer.entry(peer).or_default();
            if *from_peer >= cap {
                return Err(Refusal::Peer(cap));
            }
            *from_peer += 1;
        }
        state.open += 1;
        Ok(Place {
            places: self.clone(),
            peer,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut state = lock(&self.places.state);
        state.open = state.open.saturating_sub(1);
        if let Some(peer) = self.peer {
            if let Some(count) = state.by_peer.get_mut(&peer) {
                *count -= 1;
                if *count == 0 {
                    state.by_peer.remove(&peer);
                }
            }
        }
    }
}

/// Why a connection was not taken, with the cap it met.
enum Refusal {
    Total(usize),
    Peer(usize),
}

impl Refusal {
    /// Writes the refusal if the socket takes it at once (a new socket's
    /// buffer is empty, so it does), then closes: nothing waits on the peer.
    fn answer<I: AsyncWrite + Unpin>(&self, mut io: I) {
        let (status, message, limit) = match self {
            Refusal::Total(limit) => (
                "503 Service Unavailable",
                format!("this listener has {limit} connections open, the most it takes; try again in a moment"),
                *limit,
            ),
            Refusal::Peer(limit) => (
                "429 Too Many Requests",
                format!("your address has {limit} connections open here, the most one address may; close some and try again"),
                *limit,
            ),
        };
        let body = serde_json::json!({"error": {
            "type": "too_many_connections",
            "message": message,
            "limit": limit,
        }})
        .to_string();
        let text = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             retry-after: 1\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        let _ = Pin::new(&mut io).poll_write(&mut cx, text.as_bytes());
        let _ = Pin::new(&mut io).poll_shutdown(&mut cx);
    }
}

/// Refused connections in the log: the first of a run at once, then one
/// line every 10 s with the count while they go on.
struct Refusals {
    name: &'static str,
    since_logged: AtomicU64,
    /// The cap last met, as the log line names it.
    last: Mutex<(&'static str, usize)>,
    quiet: std::sync::atomic::AtomicBool,
}

impl Refusals {
    fn start(name: &'static str, shutdown: Shutdown) -> Arc<Refusals> {
        let refusals = Arc::new(Refusals {
            name,
            since_logged: AtomicU64::new(0),
            last: Mutex::new(("connections", 0)),
            quiet: std::sync::atomic::AtomicBool::new(true),
        });
        let counting = refusals.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REFUSALS_LOGGED_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => counting.report(),
                    _ = shutdown.wait() => return,
                }
            }
        });
        refusals
    }

    fn note(&self, refusal: &Refusal) {
        let (cap, limit) = match refusal {
            Refusal::Total(limit) => ("connections", *limit),
            Refusal::Peer(limit) => ("connections from one address", *limit),
        };
        *lock(&self.last) = (cap, limit);
        if self.quiet.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                listener = self.name,
                cap,
                limit,
                "a connection refused at a cap; more are counted every 10 s"
            );
        } else {
            self.since_logged.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn report(&self) {
        let count = self.since_logged.swap(0, Ordering::Relaxed);
        if count == 0 {
            // A quiet 10 s: the next refusal is logged at once again.
            self.quiet.store(true, Ordering::Relaxed);
            return;
        }
        let (cap, limit) = *lock(&self.last);
        tracing::warn!(
            listener = self.name,
            refused = count,
            cap,
            limit,
            "connections refused at a cap in the last 10 s"
        );
    }
}

/// What the timeouts of one connection look at. Times are milliseconds
/// since the connection's accept, plus one, so that 0 can mean "not yet".
struct Timing {
    accepted: Instant,
    in_flight: AtomicUsize,
    requests: AtomicU64,
    idle_since: AtomicU64,
    head_since: AtomicU64,
    changed: Notify,
}

impl Timing {
    fn new() -> Timing {
        Timing {
            accepted: Instant::now(),
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            idle_since: AtomicU64::new(1),
            head_since: AtomicU64::new(0),
            changed: Notify::new(),
        }
    }

    fn now(&self) -> u64 {
        self.accepted.elapsed().as_millis() as u64 + 1
    }

    fn at(&self, stamp: u64) -> Instant {
        self.accepted + Duration::from_millis(stamp.saturating_sub(1))
    }

    /// When the connection is closed if nothing changes; `None` while a
    /// request is in flight.
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let head = self.head_since.load(Ordering::SeqCst);
        if head != 0 {
            return Some(self.at(head) + limits.header_timeout);
        }
        // A new connection's first head is timed from its accept.
        let wait = if self.requests.load(Ordering::SeqCst) == 0 {
            limits.header_timeout
        } else {
            limits.idle_timeout
        };
        Some(self.at(self.idle_since.load(Ordering::SeqCst)) + wait)
    }

    /// Bytes came in: the first ones with no request in flight start a head.
    fn read_some(&self) {
        if self.in_flight.load(Ordering::SeqCst) == 0 && self.head_since.load(Ordering::SeqCst) == 0
        {
            self.head_since.store(self.now(), Ordering::SeqCst);
            self.changed.notify_one();
        }
    }
}

/// A request from its head until its answer's last byte (or until hyper
/// drops the answer): the connection is not idle meanwhile.
struct InFlight(Arc<Timing>);

impl InFlight {
    fn begin(timing: Arc<Timing>) -> InFlight {
        timing.in_flight.fetch_add(1, Ordering::SeqCst);
        timing.requests.fetch_add(1, Ordering::SeqCst);
        timing.head_since.store(0, Ordering::SeqCst);
        timing.changed.notify_one();
        InFlight(timing)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let timing = &self.0;
        timing.idle_since.store(timing.now(), Ordering::SeqCst);
        timing.head_since.store(0, Ordering::SeqCst);
        timing.in_flight.fetch_sub(1, Ordering::SeqCst);
        timing.changed.notify_one();
    }
}

/// The socket, noting when bytes come in.
struct Watched<I> {
    inner: I,
    timing: Arc<Timing>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.timing.read_some();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The router as hyper calls it, each request counted in flight until its
/// answer is done.
#[derive(Clone)]
struct Counted {
    router: Router,
    timing: Arc<Timing>,
}

impl hyper::service::Service<Request<Incoming>> for Counted {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::begin(self.timing.clone());
        let router = self.router.clone();
        Box::pin(async move {
            let response = match router.oneshot(request.map(Body::new)).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            // The answer's body holds the count: it ends when hyper has sent
            // the last frame and dropped the body.
            Ok(response.map(move |body| {
                Body::new(body.map_frame(move |frame| {
                    let _held = &in_flight;
                    frame
                }))
            }))
        })
    }
}

async fn serve_connection<I>(io: I, router: Router, limits: Limits, shutdown: Shutdown)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let timing = Arc::new(Timing::new());
    let service = Counted {
        router,
        timing: timing.clone(),
    };
    let io = TokioIo::new(Watched {
        inner: io,
        timing: timing.clone(),
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The timeouts are ours (below): hyper's own would time a kept-alive
    // connection's wait for its next request like a slow head.
    builder
        .max_header_size(MAX_HEAD_BYTES)
        .header_read_timeout(None);
    // With upgrades: hostexecd's `/serve` turns its connection into a
    // server's stream; a route that does not ask is served as before.
    let serving = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(serving);
    let mut draining = false;
    loop {
        let deadline = timing.deadline(&limits);
        tokio::select! {
            _ = serving.as_mut() => return,
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                // Dropping the connection closes the socket.
                if timing.deadline(&limits).is_some_and(|d| d <= Instant::now()) {
                    return;
                }
            }
            _ = timing.changed.notified() => {}
            _ = shutdown.wait(), if !draining => {
                serving.as_mut().graceful_shutdown();
                draining = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_shrink_to_a_quarter_of_the_descriptors_past_the_reserve() {
        let limits = Limits {
            header_timeout: HEADER_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections: 1024,
            max_per_peer: Some(64),
        };
        let check = |soft: u64, total: usize, peer: usize| {
            let cut = limits.within_descriptors(soft);
            assert_eq!(
                (cut.max_connections, cut.max_per_peer),
                (total, Some(peer)),
                "{soft}"
            );
        };
        check(65_536, 1024, 64);
        check(1024, 224, 64);
        check(256, 32, 32);
        check(100, 8, 8);
    }

    #[test]
    fn places_are_counted_in_all_and_by_address_and_given_back() {
        let places = Arc::new(Places::default());
        let limits = Limits {
            max_connections: 3,
            max_per_peer: Some(2),
            ..Limits::socket_api()
        };
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = places.take(Some(a), &limits).ok();
        let _second = places.take(Some(a), &limits).ok();
        assert!(matches!(
            places.take(Some(a), &limits),
            Err(Refusal::Peer(2))
        ));
        let _third = places.take(Some(b), &limits).ok();
        assert!(matches!(
            places.take(Some(b), &limits),
            Err(Refusal::Total(3))
        ));
        drop(first);
        assert!(places.take(Some(a), &limits).is_ok());
    }
}
