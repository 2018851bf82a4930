//! Copies a tunnel both ways until either side closes, or until it has
//! carried nothing for `idle`. Each side's reads are counted and stamped, so
//! the idle bound costs one timer per tunnel, not one per read.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tandem_shared::sync::lock;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

/// What a tunnel carried.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Relayed {
    /// Bytes from the client to the origin.
    pub up: u64,
    /// Bytes from the origin to the client.
    pub down: u64,
    /// Closed by the idle bound.
    pub idled: bool,
}

/// The size of each direction's buffer: large enough that a bulk transfer
/// is not bound by system calls.
const BUFFER: usize = 256 * 1024;

/// Buffers kept between tunnels: a new tunnel takes one instead of
/// allocating and zeroing 256 KiB (which was a third of a new connection's
/// CPU). At most this many are kept (16 MiB).
const KEPT: usize = 64;

static POOL: Mutex<Vec<Box<[u8]>>> = Mutex::new(Vec::new());

/// A buffer from the pool, given back when dropped.
struct Buffer(Option<Box<[u8]>>);

impl Buffer {
    fn take() -> Buffer {
        let kept = lock(&POOL).pop();
        Buffer(Some(
            kept.unwrap_or_else(|| vec![0u8; BUFFER].into_boxed_slice()),
        ))
    }
}

impl std::ops::Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // Some from take() until drop.
        self.0.as_deref().unwrap_or(&[])
    }
}

impl std::ops::DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().unwrap_or(&mut [])
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(buffer) = self.0.take() {
            let mut pool = lock(&POOL);
            if pool.len() < KEPT {
                pool.push(buffer);
            }
        }
    }
}

/// One direction: reads until the end, passing each read on; at the end
/// the other side's write half is shut (a half-close, as TCP has).
async fn pump<R, W>(reader: &mut R, writer: &mut W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = Buffer::take();
    loop {
        let n = reader.read(&mut buffer).await?;
        if n == 0 {
            return writer.shutdown().await;
        }
        writer.write_all(&buffer[..n]).await?;
    }
}

pub async fn relay<A, B>(client: A, upstream: B, idle: Duration) -> Relayed
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let start = Instant::now();
    // Milliseconds since `start` of the last byte read on either side.
    let last = Arc::new(AtomicU64::new(0));
    let (mut client_in, mut client_out) =
        tokio::io::split(Counted::new(client, start, last.clone()));
    let (mut upstream_in, mut upstream_out) =
        tokio::io::split(Counted::new(upstream, start, last.clone()));
    let mut idled = false;
    {
        // Both ways at once; an error either way ends the tunnel.
        let copy = async {
            tokio::try_join!(
                pump(&mut client_in, &mut upstream_out),
                pump(&mut upstream_in, &mut client_out)
            )
        };
        tokio::pin!(copy);
        loop {
            let deadline = start + Duration::from_millis(last.load(Ordering::Relaxed)) + idle;
            tokio::select! {
                _ = &mut copy => break,
                _ = tokio::time::sleep_until(deadline) => {
                    let quiet = start.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
                    if quiet >= idle {
                        idled = true;
                        break;
                    }
                }
            }
        }
    }
    let client = client_in.unsplit(client_out);
    let upstream = upstream_in.unsplit(upstream_out);
    Relayed {
        up: client.read,
        down: upstream.read,
        idled,
    }
}

/// Plain HTTP, one request a connection: the head in origin form, the
/// body by its length (what came with the head first), then only the
/// answer, back to the client until the origin closes. Whatever else the
/// client sends (a second, pipelined request) is never passed on: it would
/// not have been checked.
pub async fn one_request<A, B>(
    mut client: A,
    mut upstream: B,
    head: &[u8],
    mut already: Vec<u8>,
    body_length: u64,
    idle: Duration,
) -> Relayed
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut relayed = Relayed::default();
    already.truncate(body_length.min(already.len() as u64) as usize);
    if upstream.write_all(head).await.is_err() || upstream.write_all(&already).await.is_err() {
        return relayed;
    }
    relayed.up = already.len() as u64;
    let left = body_length - relayed.up;
    if left > 0 {
        let (sent, idled) = copy_idle(&mut (&mut client).take(left), &mut upstream, idle).await;
        relayed.up += sent;
        if idled || relayed.up < body_length {
            relayed.idled = idled;
            return relayed;
        }
    }
    let (down, idled) = copy_idle(&mut upstream, &mut client, idle).await;
    relayed.down = down;
    relayed.idled = idled;
    let _ = client.shutdown().await;
    relayed
}

/// Copies until the reader ends or is quiet for `idle`: (bytes, idled).
async fn copy_idle<R, W>(reader: &mut R, writer: &mut W, idle: Duration) -> (u64, bool)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; 64 * 1024];
    let mut copied = 0u64;
    loop {
        let n = match tokio::time::timeout(idle, reader.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (copied, false),
            Ok(Ok(n)) => n,
            Err(_) => return (copied, true),
        };
        if writer.write_all(&buffer[..n]).await.is_err() {
            return (copied, false);
        }
        copied += n as u64;
    }
}

/// A stream whose reads are counted and stamped.
struct Counted<S> {
    inner: S,
    read: u64,
    start: Instant,
    last: Arc<AtomicU64>,
}

impl<S> Counted<S> {
    fn new(inner: S, start: Instant, last: Arc<AtomicU64>) -> Counted<S> {
        Counted {
            inner,
            read: 0,
            start,
            last,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.read += n as u64;
            let now = self.start.elapsed().as_millis() as u64;
            self.last.store(now, Ordering::Relaxed);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_request_passes_its_body_and_nothing_after_it() {
        let (client, mut client_far) = tokio::io::duplex(4096);
        let (upstream, mut origin) = tokio::io::duplex(4096);
        let relay = tokio::spawn(async move {
            one_request(
                client,
                upstream,
                b"POST / HTTP/1.1\r\n\r\n",
                b"abc".to_vec(),
                5,
                Duration::from_secs(5),
            )
            .await
        });
        // The rest of the body, then a pipelined request that must not pass.
        client_far
            .write_all(b"deGET /admin HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut seen = vec![0u8; 24];
        origin.read_exact(&mut seen).await.unwrap();
        assert_eq!(&seen, b"POST / HTTP/1.1\r\n\r\nabcde");
        origin
            .write_all(b"HTTP/1.1 200 OK\r\n\r\nok")
            .await
            .unwrap();
        origin.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client_far.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"HTTP/1.1 200 OK\r\n\r\nok");
        let relayed = relay.await.unwrap();
        // The relay has ended and dropped its end: all the origin ever got.
        let mut after = Vec::new();
        origin.read_to_end(&mut after).await.unwrap();
        assert!(after.is_empty(), "{:?}", String::from_utf8_lossy(&after));
        assert_eq!((relayed.up, relayed.down), (5, 21));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_tunnel_is_closed_and_a_busy_one_is_not() {
        let (client, mut client_far) = tokio::io::duplex(1024);
        let (upstream, mut origin) = tokio::io::duplex(1024);
        let relay = tokio::spawn(relay(client, upstream, Duration::from_secs(300)));
        // Traffic every 200 s keeps it open past 300 s.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(200)).await;
            client_far.write_all(b"ping").await.unwrap();
            let mut got = [0u8; 4];
            origin.read_exact(&mut got).await.unwrap();
        }
        assert!(!relay.is_finished());
        tokio::time::sleep(Duration::from_secs(301)).await;
        let relayed = relay.await.unwrap();
        assert!(relayed.idled);
        assert_eq!(relayed.up, 12);
    }
}
