//! Trigger schedules: parsing a trigger's `when` text (daily, weekdays, weekly, monthly, once, or five
//! cron fields) and finding its due instants in an IANA time zone, with jiff.
//! DST: a civil time that does not exist (spring gap) runs at the instant the gap ends; a civil time
//! that happens twice (autumn fold) runs once, at its first occurrence.

use std::fmt;

use jiff::civil::Date;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

mod cron;
#[cfg(test)]
mod tests;

use cron::{bits, parse_cron, Cron};

/// Longest `when` text accepted, in bytes.
const MAX_WHEN_LEN: usize = 200;
/// Longest time zone name accepted, in bytes (real IANA names are far shorter).
const MAX_ZONE_LEN: usize = 64;
/// How far the searches look: 8 years of days, plus a day of slack. A Feb 29 cron may wait almost
/// 8 years (2096 → 2104, since 2100 is not a leap year), so it must fit inside.
const HORIZON_DAYS: u32 = 8 * 366 + 1;
const MINUTES_PER_DAY: u16 = 24 * 60;

/// A `when` text or time zone name that was refused; the message names the problem and the limit.
/// The caller prefixes the field name (`when: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleError(pub String);

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScheduleError {}

fn err(msg: impl Into<String>) -> ScheduleError {
    ScheduleError(msg.into())
}

/// The zone a trigger's times are read in: "" is UTC, anything else an IANA name.
pub fn zone(name: &str) -> Result<TimeZone, ScheduleError> {
    if name.is_empty() {
        return Ok(TimeZone::UTC);
    }
    if name.len() > MAX_ZONE_LEN {
        return Err(err(format!(
            "time zone name is {} bytes, longer than {MAX_ZONE_LEN}",
            name.len()
        )));
    }
    TimeZone::get(name).map_err(|_| {
        err(format!(
            "unknown time zone {name:?} (an IANA name like Europe/Rome)"
        ))
    })
}

/// A parsed `when`. Times are kept as civil minutes of the day; the zone comes at evaluation, so
/// one schedule can be evaluated in any zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Daily {
        at: u16,
    },
    Weekdays {
        at: u16,
    },
    /// `days`: bit n set for weekday n, Sunday = 0 (cron's numbering).
    Weekly {
        days: u8,
        at: u16,
    },
    /// `day` 1..=31; clamped to the month's last day in shorter months.
    Monthly {
        day: i8,
        at: u16,
    },
    Once {
        date: Date,
        at: u16,
    },
    Cron(Cron),
}

const WEEKDAYS_MASK: u8 = 0b0011_1110; // Mon..=Fri with Sunday = bit 0

const DAY_NAMES: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

impl Schedule {
    /// Parses a `when` text; words are whitespace-separated and case-insensitive.
    pub fn parse(text: &str) -> Result<Schedule, ScheduleError> {
        if text.len() > MAX_WHEN_LEN {
            return Err(err(format!(
                "is {} bytes, longer than {MAX_WHEN_LEN}",
                text.len()
            )));
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        let Some(first) = words.first() else {
            return Err(err("is empty"));
        };
        let args = &words[1..];
        let kind = match first.to_ascii_lowercase().as_str() {
            "daily" => {
                let [time] = arity(args, "daily needs a time: daily 08:00")?;
                Kind::Daily {
                    at: parse_hhmm(time)?,
                }
            }
            "weekdays" => {
                let [time] = arity(args, "weekdays needs a time: weekdays 09:30")?;
                Kind::Weekdays {
                    at: parse_hhmm(time)?,
                }
            }
            "weekly" => {
                let [days, time] =
                    arity(args, "weekly needs days and a time: weekly mon,thu 09:30")?;
                Kind::Weekly {
                    days: parse_day_names(days)?,
                    at: parse_hhmm(time)?,
                }
            }
            "monthly" => {
                let [day, time] = arity(
                    args,
                    "monthly needs a day of month and a time: monthly 15 08:00",
                )?;
                Kind::Monthly {
                    day: parse_month_day(day)?,
                    at: parse_hhmm(time)?,
                }
            }
            "once" => {
                let [date, time] =
                    arity(args, "once needs a date and a time: once 2026-12-24 18:00")?;
                Kind::Once {
                    date: parse_date(date)?,
                    at: parse_hhmm(time)?,
                }
            }
            _ if words.len() == 5 => Kind::Cron(parse_cron(&words)?),
            _ if first.starts_with(|c: char| c.is_ascii_digit() || c == '*') => {
                return Err(err(format!(
                    "a cron expression needs five fields (minute hour day-of-month month \
                     day-of-week), this has {}",
                    words.len()
                )));
            }
            _ => {
                return Err(err(format!(
                    "unknown schedule word {first:?}: use daily, weekdays, weekly, monthly, once \
                     or five cron fields"
                )));
            }
        };
        Ok(Schedule { kind })
    }

    /// The first due instant strictly after `after`, in zone `tz`; None when there is none
    /// (a `once` in the past, or nothing within 8 years).
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        if let Kind::Once { date, at } = self.kind {
            return resolve(tz, date, at).filter(|&ts| ts > after);
        }
        // Resolving civil times (gap → its end, fold → first pass) never goes backwards in time,
        // and every civil time at or before the wall clock at `after` resolves to at most `after`.
        // So walk the civil candidates after that wall-clock time in order and take the first one
        // that lands after `after` (in a fold's second pass the first few land before it).
        let local = tz.to_datetime(after);
        let mut date = local.date();
        let mut floor = Some(minute_of_day(local.hour(), local.minute()));
        for _ in 0..=HORIZON_DAYS {
            let mut cur = floor;
            while let Some(m) = self.kind.next_minute_on(date, cur) {
                let ts = resolve(tz, date, m)?;
                if ts > after {
                    return Some(ts);
                }
                cur = Some(m);
            }
            date = date.tomorrow().ok()?;
            floor = None;
        }
        None
    }

    /// The LAST due instant at or before `now` and strictly after `since`, or None. Used after
    /// downtime: a missed schedule runs once, for its latest missed time.
    pub fn last_due(&self, since: Timestamp, now: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        if now <= since {
            return None;
        }
        if let Kind::Once { date, at } = self.kind {
            return resolve(tz, date, at).filter(|&ts| ts > since && ts <= now);
        }
        // Walk civil candidates backwards from the latest wall-clock time shown so far; by
        // monotonicity the first one that resolves to at most `now` is the latest due one.
        let ceiling = latest_wall_clock(tz, now);
        let since_date = tz.to_datetime(since).date();
        let mut date = ceiling.date();
        let mut upto = Some(minute_of_day(ceiling.hour(), ceiling.minute()));
        for _ in 0..=HORIZON_DAYS {
            // Civil times on earlier days are before the wall clock at `since`, so they resolve
            // to at most `since`.
            if date < since_date {
                return None;
            }
            let mut cur = upto;
            while let Some(m) = self.kind.prev_minute_on(date, cur) {
                let ts = resolve(tz, date, m)?;
                if ts <= now {
                    return (ts > since).then_some(ts);
                }
                if m == 0 {
                    break;
                }
                cur = Some(m - 1);
            }
            date = date.yesterday().ok()?;
            upto = None;
        }
        None
    }

    /// Plain English, e.g. "every day at 08:00" or "at minute 0,30 of hours 9-17, on weekdays
    /// (Mon–Fri)".
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Daily { at } => format!("every day at {}", hhmm(*at)),
            Kind::Weekdays { at } => format!("every weekday (Mon–Fri) at {}", hhmm(*at)),
            Kind::Weekly { days, at } => {
                format!("every {} at {}", day_list(*days), hhmm(*at))
            }
            Kind::Monthly { day, at } => {
                let mut s = format!("on day {day} of every month at {}", hhmm(*at));
                if *day > 28 {
                    s.push_str(" (the last day in shorter months)");
                }
                s
            }
            Kind::Once { date, at } => format!("once, on {date} at {}", hhmm(*at)),
            Kind::Cron(c) => c.describe(),
        }
    }

    /// True for a `once` schedule, which has no due time after its single one.
    pub fn is_once(&self) -> bool {
        matches!(self.kind, Kind::Once { .. })
    }
}

impl Kind {
    fn day_matches(&self, d: Date) -> bool {
        let dow = d.weekday().to_sunday_zero_offset();
        match self {
            Kind::Daily { .. } => true,
            Kind::Weekdays { .. } => WEEKDAYS_MASK & (1 << dow) != 0,
            Kind::Weekly { days, .. } => days & (1 << dow) != 0,
            Kind::Monthly { day, .. } => d.day() == (*day).min(d.days_in_month()),
            Kind::Once { date, .. } => d == *date,
            Kind::Cron(c) => c.day_matches(d),
        }
    }

    /// The first due minute of `d` strictly after `after` (None: from midnight on).
    fn next_minute_on(&self, d: Date, after: Option<u16>) -> Option<u16> {
        if !self.day_matches(d) {
            return None;
        }
        let start = after.map_or(0, |a| a + 1);
        match self {
            Kind::Daily { at }
            | Kind::Weekdays { at }
            | Kind::Weekly { at, .. }
            | Kind::Monthly { at, .. }
            | Kind::Once { at, .. } => (*at >= start).then_some(*at),
            Kind::Cron(c) => c.next_minute(start),
        }
    }

    /// The last due minute of `d` at or before `upto` (None: up to 23:59).
    fn prev_minute_on(&self, d: Date, upto: Option<u16>) -> Option<u16> {
        if !self.day_matches(d) {
            return None;
        }
        let end = upto.unwrap_or(MINUTES_PER_DAY - 1);
        match self {
            Kind::Daily { at }
            | Kind::Weekdays { at }
            | Kind::Weekly { at, .. }
            | Kind::Monthly { at, .. }
            | Kind::Once { at, .. } => (*at <= end).then_some(*at),
            Kind::Cron(c) => c.prev_minute(end),
        }
    }
}

/// The instant a civil minute of `date` names in `tz`, by the DST rules in the module header.
fn resolve(tz: &TimeZone, date: Date, minute: u16) -> Option<Timestamp> {
    let dt = date.at((minute / 60) as i8, (minute % 60) as i8, 0, 0);
    match tz.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(dt).ok(),
        AmbiguousOffset::Fold { before, after } => {
            let a = before.to_timestamp(dt).ok()?;
            let b = after.to_timestamp(dt).ok()?;
            Some(a.min(b))
        }
        AmbiguousOffset::Gap { before, after } => {
            // The gap's end is the transition instant, which lies in (dt - after, dt - before]:
            // reading dt with the later offset gives an instant before the jump, with the
            // earlier offset one at or after it (jiff's "compatible", 03:30 for a 02:30 in Rome).
            let lo = after.to_timestamp(dt).ok()?;
            let hi = before.to_timestamp(dt).ok()?;
            let (lo, hi) = (lo.min(hi), lo.max(hi));
            match tz.following(lo).next() {
                Some(t) if t.timestamp() <= hi => Some(t.timestamp()),
                // Only reachable with inconsistent zone data; `hi` is still a valid instant
                // after the gap.
                _ => Some(hi),
            }
        }
    }
}

/// The latest wall-clock time the zone has shown at any instant up to `now`. It is the wall clock
/// at `now` except in the second pass of a fold, where the clock already showed later times.
fn latest_wall_clock(tz: &TimeZone, now: Timestamp) -> jiff::civil::DateTime {
    let local = tz.to_datetime(now);
    let probe = now
        .checked_add(SignedDuration::from_nanos(1))
        .unwrap_or(now);
    let Some(tr) = tz.preceding(probe).next() else {
        return local;
    };
    let Ok(just_before) = tr.timestamp().checked_sub(SignedDuration::from_nanos(1)) else {
        return local;
    };
    let shown = tz.to_datetime(just_before);
    local.max(shown)
}

fn minute_of_day(hour: i8, minute: i8) -> u16 {
    // Both come from jiff civil times (0..=23, 0..=59) or from our own masks.
    hour as u16 * 60 + minute as u16
}

fn hhmm(m: u16) -> String {
    format!("{:02}:{:02}", m / 60, m % 60)
}

/// `[only]` out of `args`, or the usage message when there are too few or too many.
fn arity<'a, const N: usize>(args: &[&'a str], usage: &str) -> Result<[&'a str; N], ScheduleError> {
    <[&str; N]>::try_from(args).map_err(|_| err(usage))
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `HH:MM`: one or two digit hour, exactly two digit minutes.
fn parse_hhmm(s: &str) -> Result<u16, ScheduleError> {
    let bad = || err(format!("{s:?} is not a time of day (HH:MM, like 08:00)"));
    let (h, m) = s.split_once(':').ok_or_else(bad)?;
    if !all_digits(h) || h.len() > 2 || !all_digits(m) || m.len() != 2 {
        return Err(bad());
    }
    // At most two digits each, so these parse.
    let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if h > 23 {
        return Err(err(format!("hour {h} is outside 0..=23")));
    }
    if m > 59 {
        return Err(err(format!("minute {m} is outside 0..=59")));
    }
    Ok(h * 60 + m)
}

fn parse_day_names(s: &str) -> Result<u8, ScheduleError> {
    let mut mask = 0u8;
    for name in s.split(',') {
        let lower = name.to_ascii_lowercase();
        let day = DAY_NAMES
            .iter()
            .position(|full| {
                let full = full.to_ascii_lowercase();
                lower == full || lower == full[..3]
            })
            .ok_or_else(|| err(format!("{name:?} is not a day name (mon, tue, …, sun)")))?;
        mask |= 1 << day;
    }
    Ok(mask)
}

fn parse_month_day(s: &str) -> Result<i8, ScheduleError> {
    if !all_digits(s) {
        return Err(err(format!("{s:?} is not a day of month (1..=31)")));
    }
    match s.parse::<u32>() {
        Ok(d @ 1..=31) => Ok(d as i8),
        _ => Err(err(format!("day of month {s} is outside 1..=31"))),
    }
}

/// `YYYY-MM-DD`, a real calendar date.
fn parse_date(s: &str) -> Result<Date, ScheduleError> {
    let bad = || err(format!("{s:?} is not a date"));
    let parts: Vec<&str> = s.split('-').collect();
    let [y, m, d] = parts[..] else {
        return Err(err(format!(
            "{s:?} is not a date (YYYY-MM-DD, like 2026-12-24)"
        )));
    };
    if !(all_digits(y)
        && y.len() == 4
        && all_digits(m)
        && m.len() == 2
        && all_digits(d)
        && d.len() == 2)
    {
        return Err(err(format!(
            "{s:?} is not a date (YYYY-MM-DD, like 2026-12-24)"
        )));
    }
    let y: i16 = y.parse().map_err(|_| bad())?;
    let m: i8 = m.parse().map_err(|_| bad())?;
    let d: i8 = d.parse().map_err(|_| bad())?;
    Date::new(y, m, d).map_err(|_| bad())
}

/// Month names, runs of three or more as "March–June".
fn month_list(months: u16) -> String {
    let vals: Vec<u32> = bits(u64::from(months)).collect();
    let name = |m: u32| MONTH_NAMES[m as usize - 1];
    let mut parts = Vec::new();
    let mut i = 0;
    while i < vals.len() {
        let mut j = i;
        while j + 1 < vals.len() && vals[j + 1] == vals[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            parts.push(format!("{}–{}", name(vals[i]), name(vals[j])));
        } else {
            parts.extend(vals[i..=j].iter().map(|&m| name(m).to_string()));
        }
        i = j + 1;
    }
    join_and(&parts)
}

/// Weekday names Monday first: "Monday", "Monday and Thursday", "Monday, Wednesday and Friday".
fn day_list(days: u8) -> String {
    let names: Vec<String> = [1, 2, 3, 4, 5, 6, 0]
        .iter()
        .filter(|&&d| days & (1 << d) != 0)
        .map(|&d| DAY_NAMES[d].to_string())
        .collect();
    join_and(&names)
}

fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}
