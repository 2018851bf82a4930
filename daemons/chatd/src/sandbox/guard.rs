//! The memory guard: the engine on this box needs its memory more than any
//! sandbox does. A sandbox starts only while MemAvailable minus its limit
//! stays at the floor; running sandboxes are stopped when MemAvailable falls
//! under 3 GiB (the least recently used idle one) or 2 GiB (all of them).

use std::path::Path;

pub const GIB: u64 = 1 << 30;

/// Under this, the least recently used idle sandbox stops.
pub const STOP_ONE_UNDER: u64 = 3 * GIB;
/// Under this, every sandbox stops.
pub const STOP_ALL_UNDER: u64 = 2 * GIB;

/// MemAvailable in bytes, from a /proc/meminfo-shaped file; `None` when it
/// cannot be read (the guard then lets the start go on: the runtime's own
/// limit still holds).
pub fn available(meminfo: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(meminfo).ok()?;
    parse_available(&text)
}

fn parse_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let number: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => number.checked_mul(1024),
        _ => None,
    }
}

/// The bytes the engine must give back for a sandbox of `limit` to start
/// with `floor` left; 0 when it may start now.
pub fn shortfall(available: u64, limit: u64, floor: u64) -> u64 {
    (limit + floor).saturating_sub(available)
}

/// What the monitor does at `available` bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Pressure {
    None,
    StopOneIdle,
    StopAll,
}

pub fn pressure(available: u64) -> Pressure {
    if available < STOP_ALL_UNDER {
        Pressure::StopAll
    } else if available < STOP_ONE_UNDER {
        Pressure::StopOneIdle
    } else {
        Pressure::None
    }
}

/// "4 GiB", "1.5 GiB", "64 MiB": for messages a person reads.
pub fn size(bytes: u64) -> String {
    if bytes >= GIB {
        let gib = bytes as f64 / GIB as f64;
        if (gib - gib.round()).abs() < 0.05 {
            format!("{} GiB", gib.round())
        } else {
            format!("{gib:.1} GiB")
        }
    } else {
        format!("{} MiB", bytes.div_ceil(1 << 20))
    }
}

/// GiB from the settings as bytes.
pub fn bytes_of_gb(gb: f64) -> u64 {
    (gb * GIB as f64).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_kilobytes() {
        let text = "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:    8388608 kB\n";
        assert_eq!(parse_available(text), Some(8 * GIB));
        assert_eq!(parse_available("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_available("MemAvailable: lots kB\n"), None);
    }

    #[test]
    fn a_start_needs_the_limit_and_the_floor() {
        assert_eq!(shortfall(10 * GIB, 4 * GIB, 4 * GIB), 0);
        assert_eq!(shortfall(8 * GIB, 4 * GIB, 4 * GIB), 0);
        assert_eq!(shortfall(6 * GIB, 4 * GIB, 4 * GIB), 2 * GIB);
        assert_eq!(pressure(4 * GIB), Pressure::None);
        assert_eq!(pressure(3 * GIB - 1), Pressure::StopOneIdle);
        assert_eq!(pressure(2 * GIB - 1), Pressure::StopAll);
    }

    #[test]
    fn sizes_read_like_a_person_writes_them() {
        assert_eq!(size(4 * GIB), "4 GiB");
        assert_eq!(size(3 * GIB / 2), "1.5 GiB");
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(bytes_of_gb(0.0625), 64 << 20);
    }
}
