//! How a plain HTTP request's body is framed: by one `Content-Length` of
//! digits only, or not at all. egressd passes the body on by that length
//! and nothing after it; an origin that read the length another way (the
//! first of two headers, `+5` as 5 or as nothing, a chunked body) would take
//! the rest of what egressd passed on as a second request, one nobody
//! checked. So every length that could be read two ways is refused.

/// The bytes of body the request's head announces: 0 without a
/// `Content-Length`; an error, one line for the 400, otherwise.
pub fn body_length(headers: &[httparse::Header<'_>]) -> Result<u64, String> {
    let lengths: Vec<&[u8]> = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| h.value)
        .collect();
    let encoded = headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
    if encoded {
        if !lengths.is_empty() {
            return Err("the request has both Transfer-Encoding and Content-Length: send one Content-Length alone".into());
        }
        return Err("a chunked request body is not passed on plain HTTP: send a Content-Length, or use https (CONNECT)".into());
    }
    let value = match lengths.as_slice() {
        [] => return Ok(0),
        [one] => *one,
        more => {
            return Err(format!(
                "the request has {} Content-Length headers: send one",
                more.len()
            ))
        }
    };
    // The spaces and tabs around a value are the header's, not the value's.
    let digits = value.trim_ascii();
    let text = String::from_utf8_lossy(digits);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(format!(
            "Content-Length {text:?} is not a length: digits 0-9 only"
        ));
    }
    text.parse().map_err(|_| {
        format!(
            "Content-Length {text} is over the largest length egressd passes on, {}",
            u64::MAX
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The length, or the start of the refusal, for these header lines.
    fn check(lines: &[(&str, &str)], want: Result<u64, &str>) {
        let headers: Vec<httparse::Header> = lines
            .iter()
            .map(|(name, value)| httparse::Header {
                name,
                value: value.as_bytes(),
            })
            .collect();
        match (body_length(&headers), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{lines:?}"),
            (Err(got), Err(want)) => assert!(got.starts_with(want), "{lines:?}: {got}"),
            (got, want) => panic!("{lines:?}: {got:?}, not {want:?}"),
        }
    }

    #[test]
    fn framing_lengths() {
        check(&[], Ok(0));
        check(&[("Host", "x")], Ok(0));
        check(&[("Content-Length", "0")], Ok(0));
        check(&[("content-length", "5")], Ok(5));
        check(&[("Content-Length", " 5\t")], Ok(5));
        check(&[("Content-Length", "007")], Ok(7));
        check(&[("Content-Length", "18446744073709551615")], Ok(u64::MAX));
        check(
            &[("Content-Length", "18446744073709551616")],
            Err("Content-Length 18446744073709551616 is over the largest length"),
        );
        for bad in ["+5", "-5", "5, 5", "5 5", "0x5", "5.0", "", " ", "½", "٥"] {
            check(
                &[("Content-Length", bad)],
                Err(&format!("Content-Length {:?} is not a length", bad.trim())),
            );
        }
        check(
            &[("Content-Length", "0"), ("Content-Length", "5")],
            Err("the request has 2 Content-Length headers"),
        );
        check(
            &[("Content-Length", "5"), ("CONTENT-LENGTH", "5")],
            Err("the request has 2 Content-Length headers"),
        );
        check(
            &[("Transfer-Encoding", "chunked")],
            Err("a chunked request body is not passed on"),
        );
        check(
            &[("Content-Length", "5"), ("transfer-encoding", "identity")],
            Err("the request has both Transfer-Encoding and Content-Length"),
        );
    }
}
