//! Reading a server-sent event stream (chatd's `/events`): frames cut off
//! the front of a byte buffer at each blank line, and their fields.

/// One event: its `id` (chatd's seq), `event` type and joined `data` lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub id: Option<u64>,
    pub kind: String,
    pub data: String,
}

/// Takes one frame (up to a blank line) off the front of `buffer`; `None`
/// while the frame is not whole yet.
pub fn take_frame(buffer: &mut Vec<u8>) -> Option<String> {
    let end = buffer.windows(2).position(|w| w == b"\n\n")?;
    let frame: Vec<u8> = buffer.drain(..end + 2).collect();
    Some(String::from_utf8_lossy(&frame[..end]).into_owned())
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

    #[test]
    fn frames_split_and_parse() {
        let mut buf =
            b": keepalive\n\nid: 7\nevent: run.finished\ndata: {\"run_id\":\"r_1\"}\n\nid: 8\nev"
                .to_vec();
        let first = take_frame(&mut buf).unwrap();
        assert!(parse_frame(&first).is_none(), "a comment is no event");
        let second = parse_frame(&take_frame(&mut buf).unwrap()).unwrap();
        assert_eq!(second.id, Some(7));
        assert_eq!(second.kind, "run.finished");
        assert_eq!(second.data, "{\"run_id\":\"r_1\"}");
        assert!(take_frame(&mut buf).is_none(), "half a frame waits");
        assert_eq!(buf, b"id: 8\nev");
    }
}
