//! HTTP/1.1 chunked transfer coding, decoded as bytes arrive: the soak and
//! the benchmarks read raw sockets so they can count and time every byte.

/// Moves the data of every complete chunk in `raw` to `body` and drops what
/// it consumed from `raw`. `chunk_left` carries a chunk cut between reads.
/// Returns `true` once the last (empty) chunk has been seen.
pub fn decode(raw: &mut Vec<u8>, body: &mut Vec<u8>, chunk_left: &mut Option<usize>) -> bool {
    let mut pos = 0;
    let mut ended = false;
    loop {
        match *chunk_left {
            None => {
                let Some(eol) = raw[pos..].windows(2).position(|w| w == b"\r\n") else {
                    break;
                };
                let line = &raw[pos..pos + eol];
                let hex = line.split(|b| *b == b';').next().unwrap_or_default();
                let size = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| usize::from_str_radix(h.trim(), 16).ok())
                    .unwrap_or(0);
                pos += eol + 2;
                if size == 0 {
                    ended = true;
                    break;
                }
                *chunk_left = Some(size);
            }
            Some(0) => {
                // The CRLF after a chunk's data.
                if raw.len() - pos < 2 {
                    break;
                }
                pos += 2;
                *chunk_left = None;
            }
            Some(left) => {
                let take = left.min(raw.len() - pos);
                if take == 0 {
                    break;
                }
                body.extend_from_slice(&raw[pos..pos + take]);
                pos += take;
                *chunk_left = Some(left - take);
            }
        }
    }
    raw.drain(..pos);
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cut_anywhere_come_out_whole() {
        let wire = b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n";
        for cut in 1..wire.len() {
            let (mut raw, mut body, mut left) = (Vec::new(), Vec::new(), None);
            raw.extend_from_slice(&wire[..cut]);
            decode(&mut raw, &mut body, &mut left);
            raw.extend_from_slice(&wire[cut..]);
            assert!(decode(&mut raw, &mut body, &mut left), "cut at {cut}");
            assert_eq!(body, b"hello world", "cut at {cut}");
        }
    }
}
