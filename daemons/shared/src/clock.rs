//! What time it is for a daemon's schedules (triggerd's triggers, chatd's
//! loops): the system clock, or for tests a file holding an RFC 3339 time,
//! read at every check, so a test can move time across a downtime or a
//! daylight-saving change without waiting.

use std::path::PathBuf;

#[derive(Debug, Clone)]
pub enum Clock {
    System,
    File(PathBuf),
}

impl Clock {
    pub fn new(file: &std::path::Path) -> Clock {
        if file.as_os_str().is_empty() {
            Clock::System
        } else {
            Clock::File(file.to_path_buf())
        }
    }

    /// Now, in unix milliseconds. A clock file that cannot be read or
    /// parsed gives the system time and a warning: a test sees the warning
    /// in the log, a box never uses the file.
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => jiff::Timestamp::now().as_millisecond(),
            Clock::File(path) => match read(path) {
                Ok(ts) => ts.as_millisecond(),
                Err(why) => {
                    tracing::warn!(path = %path.display(), why, "clock file unreadable; using the system clock");
                    jiff::Timestamp::now().as_millisecond()
                }
            },
        }
    }

    pub fn now(&self) -> jiff::Timestamp {
        ts(self.now_ms())
    }
}

fn read(path: &std::path::Path) -> Result<jiff::Timestamp, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    text.trim()
        .parse::<jiff::Timestamp>()
        .map_err(|e| e.to_string())
}

/// Unix milliseconds as a timestamp; out of jiff's range (never from a
/// clock) gives the epoch.
pub fn ts(ms: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// Unix milliseconds as RFC 3339 UTC, to the second.
pub fn rfc3339(ms: i64) -> String {
    let t = ts(ms);
    t.round(jiff::Unit::Second).unwrap_or(t).to_string()
}
