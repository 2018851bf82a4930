//! Reading a server-sent event stream (chatd's `/events`, an MCP server's
//! older HTTP+SSE transport): frames cut at each blank line, and their
//! fields.

/// One event: its `id` (chatd's seq), `event` type and joined `data` lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub id: Option<u64>,
    pub kind: String,
    pub data: String,
}

/// An event stream's bytes cut into frames at blank lines, in time linear
/// in the bytes (a server's many tiny frames or one long one cost no
/// rescans). CR LF and a lone CR end a line as LF does, across chunks.
#[derive(Debug, Default)]
pub struct Frames {
    buffer: Vec<u8>,
    /// Where the next frame starts.
    start: usize,
    /// How far the search for a blank line has looked.
    searched: usize,
    /// The last byte was a CR: an LF right after it belongs to it.
    after_cr: bool,
}

impl Frames {
    /// Appends a chunk as it came: it may end inside a character or
    /// between a CR and its LF.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.searched -= self.start;
            self.start = 0;
        }
        self.buffer.reserve(chunk.len());
        for &b in chunk {
            match (b, self.after_cr) {
                (b'\n', true) => self.after_cr = false,
                (b'\r', _) => {
                    self.buffer.push(b'\n');
                    self.after_cr = true;
                }
                _ => {
                    self.buffer.push(b);
                    self.after_cr = false;
                }
            }
        }
    }

    /// The next whole frame, without its blank line; `None` while the
    /// next one is not whole yet.
    pub fn next_frame(&mut self) -> Option<String> {
        let from = self.searched.max(self.start);
        match self.buffer[from..].windows(2).position(|w| w == b"\n\n") {
            None => {
                self.searched = self.buffer.len().saturating_sub(1).max(self.start);
                None
            }
            Some(at) => {
                let end = from + at;
                let frame = String::from_utf8_lossy(&self.buffer[self.start..end]).into_owned();
                self.start = end + 2;
                self.searched = self.start;
                Some(frame)
            }
        }
    }

    /// The bytes of a frame not whole yet (line ends read as LF).
    pub fn rest(&self) -> &[u8] {
        &self.buffer[self.start..]
    }
}

/// The frame's fields; `None` for a frame of comments only (a keepalive).
pub fn parse_frame(frame: &str) -> Option<Frame> {
    let mut id = None;
    let mut kind = String::from("message");
    let mut data = String::new();
    let mut any = false;
    for line in frame.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        any = true;
        match field {
            "id" => id = value.parse().ok(),
            "event" => kind = value.to_string(),
            "data" => {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(value);
            }
            _ => {}
        }
    }
    any.then_some(Frame { id, kind, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of a stream fed in `chunks`, and what is left.
    fn read(chunks: &[&[u8]]) -> (Vec<String>, Vec<u8>) {
        let mut frames = Frames::default();
        let mut got = Vec::new();
        for chunk in chunks {
            frames.push(chunk);
            while let Some(f) = frames.next_frame() {
                got.push(f);
            }
        }
        (got, frames.rest().to_vec())
    }

    #[test]
    fn frames_split_and_parse() {
        let stream =
            b": keepalive\n\nid: 7\nevent: run.finished\ndata: {\"run_id\":\"r_1\"}\n\nid: 8\nev";
        let (frames, rest) = read(&[stream]);
        assert_eq!(frames.len(), 2, "half a frame waits: {frames:?}");
        assert!(parse_frame(&frames[0]).is_none(), "a comment is no event");
        let second = parse_frame(&frames[1]).unwrap();
        assert_eq!(second.id, Some(7));
        assert_eq!(second.kind, "run.finished");
        assert_eq!(second.data, "{\"run_id\":\"r_1\"}");
        assert_eq!(rest, b"id: 8\nev");
    }

    #[test]
    fn frames_are_cut_at_blank_lines_whatever_the_line_ends_and_chunks() {
        let stream =
            b"event: endpoint\r\ndata: /m\r\n\r\n: keep\n\nevent: message\rdata: {}\r\rdata: x\n";
        let want = [
            "event: endpoint\ndata: /m",
            ": keep",
            "event: message\ndata: {}",
        ];
        // Every cut of the stream into two chunks gives the same frames.
        for cut in 0..=stream.len() {
            let (got, rest) = read(&[&stream[..cut], &stream[cut..]]);
            assert_eq!(got, want, "cut at {cut}");
            assert_eq!(rest, b"data: x\n", "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(read(&bytes).0, want, "a byte a chunk");
    }
}
