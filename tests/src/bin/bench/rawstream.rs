//! A cheap HTTP/1.1 streaming client on a raw socket (one per device), with the
//! kernel's receive timestamps, and the readers of figure 1's stamped tokens
//! (through chatd, and straight from the engine for the baseline).

use super::*;

/// A streamed response read from a raw socket: chunked transfer decoding,
/// then split into SSE frames (`...\n\n`).
pub(crate) struct RawStream {
    pub(crate) sock: TcpStream,
    /// Received bytes not yet decoded.
    pub(crate) raw: Vec<u8>,
    /// Decoded body bytes not yet split into frames.
    pub(crate) body: Vec<u8>,
    pub(crate) chunked: bool,
    /// Bytes left in the current chunk; `None` while reading a size line.
    pub(crate) chunk_left: Option<usize>,
    /// Leading bytes of `body` already searched for a frame end.
    pub(crate) scanned: usize,
    pub(crate) ended: bool,
    pub(crate) buf: Box<[u8]>,
}

impl RawStream {
    /// Connects, sends `request` and reads up to the end of a 200's headers.
    pub(crate) async fn open(
        port: u16,
        request: &[u8],
        deadline: tokio::time::Instant,
    ) -> anyhow::Result<RawStream> {
        let sock = tokio::time::timeout_at(deadline, TcpStream::connect(("127.0.0.1", port)))
            .await
            .context("connect timed out")??;
        sock.set_nodelay(true)?;
        nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::ReceiveTimestampns, &true)?;
        let mut s = RawStream {
            sock,
            raw: Vec::new(),
            body: Vec::new(),
            chunked: false,
            chunk_left: None,
            scanned: 0,
            ended: false,
            buf: vec![0u8; 16 * 1024].into_boxed_slice(),
        };
        tokio::time::timeout_at(deadline, s.sock.write_all(request))
            .await
            .context("write timed out")??;
        let head_end = loop {
            if let Some(end) = find(&s.raw, b"\r\n\r\n") {
                break end;
            }
            let n = tokio::time::timeout_at(deadline, s.sock.read(&mut s.buf))
                .await
                .context("headers timed out")??;
            if n == 0 {
                bail!("the server closed the connection before its headers");
            }
            s.raw.extend_from_slice(&s.buf[..n]);
        };
        let head = String::from_utf8_lossy(&s.raw[..head_end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") {
            bail!("answered {:?}", head.lines().next().unwrap_or(""));
        }
        s.chunked = head.contains("transfer-encoding: chunked");
        s.raw.drain(..head_end + 4);
        s.decode();
        Ok(s)
    }

    /// Reads once; returns when it was read and when its last byte arrived
    /// at the socket (the kernel's receive timestamp), in unix µs; `None` at the end.
    pub(crate) async fn read_more(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> anyhow::Result<Option<(i64, i64)>> {
        if self.ended {
            return Ok(None);
        }
        let fd = self.sock.as_raw_fd();
        let read = async {
            loop {
                self.sock.readable().await?;
                let buf = &mut self.buf;
                match self
                    .sock
                    .try_io(Interest::READABLE, || recv_stamped(fd, buf))
                {
                    Ok(got) => return Ok::<_, std::io::Error>(got),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
        };
        let (n, arrived) = tokio::time::timeout_at(deadline, read)
            .await
            .context("read timed out")??;
        let read_at = now_micros();
        let at = (read_at, arrived.unwrap_or(read_at));
        if n == 0 {
            self.ended = true;
            return Ok(None);
        }
        self.raw.extend_from_slice(&self.buf[..n]);
        self.decode();
        Ok(Some(at))
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

    /// Hands every complete frame received so far to `f`.
    /// (A large frame arriving in many reads is searched once, not per read.)
    pub(crate) fn frames(&mut self, mut f: impl FnMut(&[u8])) {
        let mut start = 0;
        let mut from = self.scanned.saturating_sub(1);
        while let Some(end) = find(&self.body[from..], b"\n\n") {
            let end = from + end;
            f(&self.body[start..end]);
            start = end + 2;
            from = start;
        }
        self.body.drain(..start);
        self.scanned = self.body.len();
    }
}

/// `recvmsg` with the socket's `SO_TIMESTAMPNS` receive timestamp (unix µs).
pub(crate) fn recv_stamped(fd: RawFd, buf: &mut [u8]) -> std::io::Result<(usize, Option<i64>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::empty())
        .map_err(std::io::Error::from)?;
    let mut arrived = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for cmsg in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(ts) = cmsg {
                arrived = Some(ts.tv_sec() * 1_000_000 + ts.tv_nsec() / 1_000);
            }
        }
    }
    Ok((msg.bytes, arrived))
}

pub(crate) fn events_request(chat: &str, after: i64) -> Vec<u8> {
    format!(
        "GET /v1/chat-app/conversations/{chat}/events?after={after} HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         X-Forward-Key: {FORWARD_KEY}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .into_bytes()
}

/// Per-token latencies (µs) after the engine's stamp: when the device read
/// the token, and when it arrived at the device's socket.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) read: Vec<i64>,
    pub(crate) arrived: Vec<i64>,
    pub(crate) finished: bool,
}

impl Seen {
    pub(crate) fn with_capacity(n: usize) -> Seen {
        Seen {
            read: Vec::with_capacity(n),
            arrived: Vec::with_capacity(n),
            finished: false,
        }
    }

    pub(crate) fn note(&mut self, at: (i64, i64), stamp: i64) {
        self.read.push(at.0 - stamp);
        self.arrived.push(at.1 - stamp);
    }
}

/// Reads a chatd event stream until `run.finished` (or the deadline):
/// the latency of every stamped `text.delta`.
pub(crate) async fn read_deltas(
    mut s: RawStream,
    expect: usize,
    deadline: tokio::time::Instant,
) -> anyhow::Result<Seen> {
    let mut seen = Seen::with_capacity(expect);
    let mut at = (now_micros(), now_micros());
    loop {
        s.frames(|frame| {
            if find(frame, b"event: text.delta\n").is_some() {
                if let Some((_, stamp)) = stamp_after(frame, b"\"text\":\"w") {
                    seen.note(at, stamp);
                }
            } else if find(frame, b"event: run.finished\n").is_some() {
                seen.finished = true;
            }
        });
        if seen.finished {
            return Ok(seen);
        }
        match s.read_more(deadline).await? {
            Some(t) => at = t,
            None => bail!("the stream ended after {} deltas", seen.read.len()),
        }
    }
}

/// The baseline of figure 1: a client reading the engine's own stream.
pub(crate) async fn direct_latencies(
    sim_port: u16,
    tokens: usize,
    tps: f64,
    bound: Duration,
) -> anyhow::Result<Seen> {
    let body = json!({
        "model": "sim-small",
        "stream": true,
        "messages": [{"role": "user", "content": format!("[sim tokens={tokens} tps={tps} stamp=1 id=direct]")}],
    })
    .to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let deadline = tokio::time::Instant::now() + bound;
    let mut s = RawStream::open(sim_port, request.as_bytes(), deadline).await?;
    let mut seen = Seen::with_capacity(tokens);
    let mut at = (now_micros(), now_micros());
    loop {
        s.frames(|frame| {
            if let Some((_, stamp)) = stamp_after(frame, b"\"content\":\"w") {
                seen.note(at, stamp);
            } else if find(frame, b"data: [DONE]").is_some() {
                seen.finished = true;
            }
        });
        if seen.finished {
            return Ok(seen);
        }
        match s.read_more(deadline).await? {
            Some(t) => at = t,
            None => bail!("the engine stream ended after {} tokens", seen.read.len()),
        }
    }
}
