//! A plain request's body is passed on by its one `Content-Length`, digits
//! only. Every other way to write a length could be read one way by egressd
//! and another by the origin (which would then take part of the "body" as a
//! second request nobody checked), so each is a 400 with one line why,
//! audited, and nothing reaches the origin.

use super::{ask, setup};
use egressd::policy::Preset;
use egressd::verdicts::AuditVerdict;

/// Each way to write a body's length that is refused: (headers, body,
/// what the line must name).
const REFUSED: &[(&str, &str, &str)] = &[
    // Two lengths, the first 0: egressd used the second, an origin may the first.
    (
        "Content-Length: 0\r\nContent-Length: 5",
        "hello",
        "2 Content-Length headers",
    ),
    (
        "Content-Length: 5\r\nContent-Length: 0",
        "hello",
        "2 Content-Length headers",
    ),
    (
        "Content-Length: 5\r\nContent-Length: 5",
        "hello",
        "2 Content-Length headers",
    ),
    (
        "content-length: 5\r\nCONTENT-LENGTH: 5",
        "hello",
        "2 Content-Length headers",
    ),
    (
        "Content-Length: 1\r\nContent-Length: 2\r\nContent-Length: 3",
        "abc",
        "3 Content-Length headers",
    ),
    // A value that is not digits only.
    ("Content-Length: +5", "hello", "Content-Length \"+5\""),
    ("Content-Length: -5", "hello", "Content-Length \"-5\""),
    ("Content-Length: 5, 5", "hello", "Content-Length \"5, 5\""),
    ("Content-Length: 5 5", "hello", "Content-Length \"5 5\""),
    ("Content-Length: 0x5", "hello", "Content-Length \"0x5\""),
    ("Content-Length: 5.0", "hello", "Content-Length \"5.0\""),
    ("Content-Length: 5e0", "hello", "Content-Length \"5e0\""),
    (
        "Content-Length: \u{ff15}",
        "hello",
        "Content-Length \"\u{ff15}\"",
    ),
    ("Content-Length: ", "hello", "Content-Length \"\""),
    (
        "Content-Length: 99999999999999999999",
        "hello",
        "18446744073709551615",
    ),
    // Transfer-Encoding together with a length, either order, any coding.
    (
        "Transfer-Encoding: chunked\r\nContent-Length: 5",
        "hello",
        "Transfer-Encoding and Content-Length",
    ),
    (
        "Content-Length: 5\r\nTransfer-Encoding: chunked",
        "hello",
        "Transfer-Encoding and Content-Length",
    ),
    (
        "Content-Length: 5\r\nTransfer-Encoding: identity",
        "hello",
        "Transfer-Encoding and Content-Length",
    ),
];

#[tokio::test]
async fn a_body_length_is_one_content_length_of_digits_only() {
    let s = setup(Preset::All, |_| {}).await;
    let p = s.origin_port;
    for &(headers, body, named) in REFUSED {
        let request = format!(
            "POST http://127.0.0.2:{p}/upload HTTP/1.1\r\nHost: 127.0.0.2:{p}\r\n{headers}\r\n\r\n{body}GET /admin HTTP/1.1\r\nHost: 127.0.0.2:{p}\r\n\r\n"
        );
        let answer = ask(&s.socket, &request, None).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{headers:?}: {answer}");
        assert!(
            !answer.contains("ORIGIN SAW"),
            "nothing forwarded: {headers:?}: {answer}"
        );
        let line = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert_eq!(line.lines().count(), 1, "one line: {answer}");
        assert!(
            line.contains(named),
            "{headers:?}: {line:?} names {named:?}"
        );
    }
    // Each audited as refused, under the host the request named.
    let rows = s.log.all();
    assert_eq!(rows.len(), REFUSED.len(), "{rows:#?}");
    for (row, &(headers, _, named)) in rows.iter().zip(REFUSED) {
        assert_eq!(
            (row.verdict, row.host.as_str(), row.port, row.address),
            (AuditVerdict::Refused, "127.0.0.2", p, None),
            "{headers:?}"
        );
        assert!(row.reason.contains(named), "{headers:?}: {row:?}");
    }

    // One length, digits only (whitespace around it is the header's own):
    // the body and nothing after it.
    for headers in [
        "Content-Length: 5",
        "content-length:5",
        "Content-Length: 5 \t",
        "Content-Length: 05",
    ] {
        let request = format!(
            "POST http://127.0.0.2:{p}/upload HTTP/1.1\r\nHost: 127.0.0.2:{p}\r\n{headers}\r\n\r\nhelloGET /admin HTTP/1.1\r\n\r\n"
        );
        let answer = ask(&s.socket, &request, None).await;
        assert!(
            answer.contains("ORIGIN SAW: POST /upload HTTP/1.1\r\n"),
            "{headers:?}: {answer}"
        );
        assert!(answer.ends_with("\r\n\r\nhello"), "{headers:?}: {answer}");
    }
}
