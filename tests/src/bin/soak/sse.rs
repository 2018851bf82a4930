//! A raw SSE client on a TCP socket, one per device: chunked decoding and
//! frames, with a small receive buffer for the slow readers.

use super::*;

/// A streamed response on a raw socket: chunked decoding, split into SSE frames.
pub(crate) struct Sse {
    pub(crate) sock: TcpStream,
    pub(crate) raw: Vec<u8>,
    pub(crate) body: Vec<u8>,
    pub(crate) chunked: bool,
    pub(crate) chunk_left: Option<usize>,
    pub(crate) ended: bool,
    pub(crate) buf: Box<[u8]>,
}

pub(crate) enum OpenError {
    /// No connection or no answer: chatd is down or starting.
    Down,
    /// An answer other than 200.
    Status(u16, String),
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Sse {
    pub(crate) async fn open(
        port: u16,
        chat: &str,
        after: i64,
        by_query: bool,
        slow: bool,
    ) -> Result<Sse, OpenError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let socket = tokio::net::TcpSocket::new_v4().map_err(|_| OpenError::Down)?;
        if slow {
            // A small receive window: the device really reads slowly, and
            // chatd's writes back up behind it.
            let _ = socket.set_recv_buffer_size(4096);
        }
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let sock = tokio::time::timeout_at(deadline, socket.connect(addr))
            .await
            .map_err(|_| OpenError::Down)?
            .map_err(|_| OpenError::Down)?;
        let _ = sock.set_nodelay(true);
        let (target, header) = if by_query {
            (
                format!("/v1/chat-app/conversations/{chat}/events?after={after}"),
                String::new(),
            )
        } else {
            (
                format!("/v1/chat-app/conversations/{chat}/events"),
                format!("Last-Event-ID: {after}\r\n"),
            )
        };
        let request = format!(
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Forward-Key: {FORWARD_KEY}\r\n\
             Accept: text/event-stream\r\n{header}\r\n"
        );
        let mut s = Sse {
            sock,
            raw: Vec::new(),
            body: Vec::new(),
            chunked: false,
            chunk_left: None,
            ended: false,
            buf: vec![0u8; 16 * 1024].into_boxed_slice(),
        };
        tokio::time::timeout_at(deadline, s.sock.write_all(request.as_bytes()))
            .await
            .map_err(|_| OpenError::Down)?
            .map_err(|_| OpenError::Down)?;
        let head_end = loop {
            if let Some(end) = find(&s.raw, b"\r\n\r\n") {
                break end;
            }
            let n = tokio::time::timeout_at(deadline, s.sock.read(&mut s.buf))
                .await
                .map_err(|_| OpenError::Down)?
                .map_err(|_| OpenError::Down)?;
            if n == 0 {
                return Err(OpenError::Down);
            }
            s.raw.extend_from_slice(&s.buf[..n]);
        };
        let head = String::from_utf8_lossy(&s.raw[..head_end]).to_ascii_lowercase();
        s.chunked = head.contains("transfer-encoding: chunked");
        s.raw.drain(..head_end + 4);
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if status != 200 {
            // Read the (small) error body, bounded.
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let body_deadline = tokio::time::Instant::now() + Duration::from_secs(2);
            while s.raw.len() < length {
                match tokio::time::timeout_at(body_deadline, s.sock.read(&mut s.buf)).await {
                    Ok(Ok(n)) if n > 0 => s.raw.extend_from_slice(&s.buf[..n]),
                    _ => break,
                }
            }
            return Err(OpenError::Status(
                status,
                String::from_utf8_lossy(&s.raw).into_owned(),
            ));
        }
        s.decode();
        Ok(s)
    }

    /// Reads at most `max` bytes once; `false` at the end of the stream.
    /// Cancel-safe: nothing is lost if the read is dropped before it returns.
    pub(crate) async fn read(&mut self, max: usize) -> std::io::Result<bool> {
        if self.ended {
            return Ok(false);
        }
        let max = max.min(self.buf.len());
        let n = self.sock.read(&mut self.buf[..max]).await?;
        if n == 0 {
            self.ended = true;
            return Ok(false);
        }
        self.raw.extend_from_slice(&self.buf[..n]);
        self.decode();
        Ok(true)
    }

    pub(crate) fn decode(&mut self) {
        if !self.chunked {
            self.body.append(&mut self.raw);
            return;
        }
        if tandem_tests::chunked::decode(&mut self.raw, &mut self.body, &mut self.chunk_left) {
            self.ended = true;
        }
    }

    /// Every complete frame received so far (a frame cut by a dropped
    /// connection is never handed out).
    pub(crate) fn frames(&mut self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        let mut start = 0;
        while let Some(end) = find(&self.body[start..], b"\n\n") {
            frames.push(self.body[start..start + end].to_vec());
            start += end + 2;
        }
        self.body.drain(..start);
        frames
    }
}
