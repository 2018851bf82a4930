//! Times on the wire are RFC 3339 UTC strings; ids are opaque random strings.

/// Now as an RFC 3339 UTC string with exactly three fraction digits, so
/// stored times sort as text (`08.7Z` would sort after `08.746Z`).
pub fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    let now = now.round(jiff::Unit::Millisecond).unwrap_or(now);
    now.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
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

#[cfg(test)]
mod tests {
    #[test]
    fn now_has_three_fraction_digits_so_times_sort_as_text() {
        let now = super::now_rfc3339();
        assert_eq!(now.len(), "2026-12-06T23:40:08.700Z".len(), "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[19] == b'.', "{now}");
        assert!(now.parse::<jiff::Timestamp>().is_ok(), "{now}");
    }
}
