//! Target for the readers of an event stream: the shared crate's
//! (`tandem_shared::sse`, used by chatd's MCP HTTP+SSE transport,
//! connectord and the `tandem` command) and the test harness's
//! `EventStream` (its own fields over the same `Frames`). One stream read
//! whole and read cut into chunks anywhere must give the same events, and
//! CR or CR LF line ends the same as LF.

use arbitrary::{Result as Built, Unstructured};
use futures_util::FutureExt;

use super::Verdict;
use super::{cut, text_of};

/// A stream of frames split at random places (inside a UTF-8 character,
/// between `\r` and `\n`, one byte at a time): every reader gives the same
/// events as from the whole stream, and never panics.
pub(super) fn sse_lines(u: &mut Unstructured) -> Verdict {
    let Ok(stream) = stream_text(u) else {
        return Ok(());
    };
    let bytes = stream.as_bytes();
    let chunks = cut(u, bytes);
    let say = |what: String| format!("stream {stream:?} cut at {:?}: {what}", lengths(&chunks));

    let (whole, whole_rest) = shared_read(&[bytes]);
    let (parts, parts_rest) = shared_read(&chunks);
    if whole != parts || whole_rest != parts_rest {
        return Err(say(format!(
            "tandem_shared::sse read {parts:?} (rest {parts_rest:?}), whole {whole:?} (rest {whole_rest:?})"
        )));
    }
    // CR LF and a lone CR end a line as LF does.
    let lf = stream.replace("\r\n", "\n").replace('\r', "\n");
    let (as_lf, as_lf_rest) = shared_read(&[lf.as_bytes()]);
    if whole != as_lf || whole_rest != as_lf_rest {
        return Err(say(format!(
            "tandem_shared::sse read {whole:?} (rest {whole_rest:?}), with LF ends {as_lf:?} (rest {as_lf_rest:?})"
        )));
    }

    let whole = harness_read(vec![bytes]).map_err(&say)?;
    let parts = harness_read(chunks.clone()).map_err(&say)?;
    if whole != parts {
        return Err(say(format!(
            "the harness's EventStream read {parts:?}, whole {whole:?}"
        )));
    }
    Ok(())
}

/// Frames of SSE lines, mostly chatd's own fields, with comments, junk,
/// `\r\n` ends and non-ASCII text among them.
fn stream_text(u: &mut Unstructured) -> Built<String> {
    const LINES: &[&str] = &[
        "id: 7",
        "id:8",
        "id: 18446744073709551615",
        "id: 99999999999999999999",
        "id: -1",
        "id: x",
        "event: text.delta",
        "event:run.finished",
        "event: reset",
        "data: {\"text\":\"héllo 😀\"}",
        "data: {\"run_id\":\"r_1\"}",
        "data:{}",
        "data: ",
        "data",
        ": keepalive",
        ":",
        "retry: 100",
        "junk",
        "é",
        "😀",
        "\u{feff}data: x",
    ];
    const ENDS: &[&str] = &["\n", "\n", "\n", "\r\n", "\r", "\n\n", "\r\n\r\n"];
    let mut out = String::new();
    for _ in 0..u.int_in_range(0..=24)? {
        if u.ratio(1, 6)? {
            out.push_str(&text_of(u, &["data: ", "é", "😀", "\r", "\n", ":", " "], 6));
        } else {
            out.push_str(u.choose(LINES)?);
        }
        out.push_str(u.choose(ENDS)?);
    }
    Ok(out)
}

fn lengths(chunks: &[&[u8]]) -> Vec<usize> {
    chunks.iter().map(|c| c.len()).collect()
}

/// The shared reader as its callers drive it: each chunk pushed, every
/// whole frame taken; the events, and what was left over.
fn shared_read(chunks: &[&[u8]]) -> (Vec<Option<tandem_shared::sse::Frame>>, Vec<u8>) {
    use tandem_shared::sse::{parse_frame, Frames};
    let mut frames = Frames::default();
    let mut events = Vec::new();
    for chunk in chunks {
        frames.push(chunk);
        while let Some(frame) = frames.next_frame() {
            events.push(parse_frame(&frame));
        }
    }
    (events, frames.rest().to_vec())
}

/// The harness's reader to the stream's end: (seq, kind, data) of each event.
fn harness_read(chunks: Vec<&[u8]>) -> Result<Vec<String>, String> {
    let chunks = chunks
        .into_iter()
        .map(bytes::Bytes::copy_from_slice)
        .collect();
    let mut stream = crate::harness::EventStream::of_chunks(chunks);
    let mut events = Vec::new();
    loop {
        // The chunks are all there: the reader never has to wait.
        match stream.next().now_or_never() {
            Some(Ok(Some(event))) => {
                events.push(format!("{:?} {:?} {}", event.seq, event.kind, event.data));
            }
            Some(Ok(None)) => return Ok(events),
            Some(Err(err)) => return Err(format!("the harness's EventStream failed: {err}")),
            None => return Err("the harness's EventStream waited on chunks it had".into()),
        }
    }
}
