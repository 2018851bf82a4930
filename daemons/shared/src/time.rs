//! Times on the wire are RFC 3339 UTC strings; ids are opaque random strings.

/// Now as an RFC 3339 UTC string with millisecond precision.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Millisecond)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| jiff::Timestamp::now().to_string())
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// A new opaque id: `prefix` then 16 random hex digits.
pub fn new_id(prefix: &str) -> String {
    let bytes: [u8; 8] = rand::random();
    let mut id = String::with_capacity(prefix.len() + 16);
    id.push_str(prefix);
    for b in bytes {
        id.push_str(&format!("{b:02x}"));
    }
    id
}
