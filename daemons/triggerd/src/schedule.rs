//! Trigger schedules: parsing a trigger's `when` text (daily, weekdays, weekly, monthly, once, or five
//! cron fields) and finding its due instants in an IANA time zone, with jiff.
//! DST: a civil time that does not exist (spring gap) runs at the instant the gap ends; a civil time
//! that happens twice (autumn fold) runs once, at its first occurrence.

use std::fmt;

use jiff::civil::Date;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

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

/// Bit masks of the allowed values of each cron field.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cron {
    minutes: u64,
    hours: u32,
    /// Bits 1..=31.
    doms: u32,
    /// Bits 1..=12.
    months: u16,
    /// Bits 0..=6, Sunday = 0 (a 7 in the text is folded into 0).
    dows: u8,
    /// Vixie cron decides the dom/dow OR rule by whether the field *starts with* `*` (so `*/2`
    /// counts as unrestricted), not by which values the field allows.
    dom_star: bool,
    dow_star: bool,
}

const WEEKDAYS_MASK: u8 = 0b0011_1110; // Mon..=Fri with Sunday = bit 0
const ALL_DOWS: u8 = 0b0111_1111;
const ALL_MINUTES: u64 = (1 << 60) - 1;
const ALL_HOURS: u32 = (1 << 24) - 1;
const ALL_DOMS: u32 = ((1u64 << 32) - 2) as u32; // bits 1..=31
const ALL_MONTHS: u16 = ((1u32 << 13) - 2) as u16; // bits 1..=12

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

impl Cron {
    fn day_matches(&self, d: Date) -> bool {
        if self.months & (1 << d.month()) == 0 {
            return false;
        }
        let dom = self.doms & (1 << d.day()) != 0;
        let dow = self.dows & (1 << d.weekday().to_sunday_zero_offset()) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    fn next_minute(&self, start: u16) -> Option<u16> {
        if start >= MINUTES_PER_DAY {
            return None;
        }
        let mut from = u32::from(start % 60);
        for h in u32::from(start / 60)..24 {
            if self.hours & (1 << h) != 0 {
                if let Some(m) = lowest_bit_from(self.minutes, from) {
                    return Some(minute_of_day(h as i8, m as i8));
                }
            }
            from = 0;
        }
        None
    }

    fn prev_minute(&self, end: u16) -> Option<u16> {
        let mut upto = u32::from(end % 60);
        for h in (0..=u32::from(end / 60)).rev() {
            if self.hours & (1 << h) != 0 {
                if let Some(m) = highest_bit_upto(self.minutes, upto) {
                    return Some(minute_of_day(h as i8, m as i8));
                }
            }
            upto = 59;
        }
        None
    }

    fn describe(&self) -> String {
        let mins = self.minutes.count_ones();
        let hours = self.hours.count_ones();
        let every_hour = self.hours == ALL_HOURS;
        let during = if every_hour {
            String::new()
        } else {
            format!(" during hours {}", mask_text(u64::from(self.hours), 0, 23))
        };
        // "every N minutes" only when it is true across the hour boundary too.
        let step = even_step(self.minutes, 59).filter(|s| 60 % s == 0 && self.minutes & 1 != 0);
        let time = if self.minutes == ALL_MINUTES {
            format!("every minute{during}")
        } else if let Some(s) = step {
            format!("every {s} minutes{during}")
        } else if !every_hour && mins * hours <= 4 {
            let mut times = Vec::new();
            for h in bits(u64::from(self.hours)) {
                for m in bits(self.minutes) {
                    times.push(hhmm(minute_of_day(h as i8, m as i8)));
                }
            }
            format!("at {}", join_and(&times))
        } else {
            let of = if every_hour {
                "every hour".to_string()
            } else if hours == 1 {
                format!("hour {}", mask_text(u64::from(self.hours), 0, 23))
            } else {
                format!("hours {}", mask_text(u64::from(self.hours), 0, 23))
            };
            let word = if mins == 1 { "minute" } else { "minutes" };
            format!("at {word} {} of {of}", mask_text(self.minutes, 0, 59))
        };

        let dom_some = self.doms != ALL_DOMS;
        let dow_some = self.dows != ALL_DOWS;
        let doms = || {
            let word = if self.doms.count_ones() == 1 {
                "day"
            } else {
                "days"
            };
            format!(
                "{word} {} of the month",
                mask_text(u64::from(self.doms), 1, 31)
            )
        };
        let dows = || match self.dows {
            WEEKDAYS_MASK => "weekdays (Mon–Fri)".to_string(),
            0b0100_0001 => "weekends (Sat, Sun)".to_string(),
            d => day_list(d),
        };
        let days = if !self.dom_star && !self.dow_star {
            // Vixie's OR rule: both fields restricted, either one is enough.
            (dom_some && dow_some).then(|| format!("on {} and on every {}", doms(), dows()))
        } else {
            match (dom_some, dow_some) {
                (false, false) => None,
                (false, true) => Some(format!("on {}", dows())),
                (true, false) => Some(format!("on {}", doms())),
                (true, true) => Some(format!("on {} that fall on {}", doms(), dows())),
            }
        };
        let months = (self.months != ALL_MONTHS).then(|| format!("in {}", month_list(self.months)));

        let mut out = time;
        match (days, months) {
            (None, None) if out.starts_with("at ") && !out.contains(" of ") => {
                out.push_str(", every day");
            }
            (None, None) => {}
            (None, Some(mo)) => {
                out.push_str(", every day ");
                out.push_str(&mo);
            }
            (Some(d), None) => {
                out.push_str(", ");
                out.push_str(&d);
            }
            (Some(d), Some(mo)) => {
                out.push_str(", ");
                out.push_str(&d);
                out.push(' ');
                out.push_str(&mo);
            }
        }
        out
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

fn lowest_bit_from(mask: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let m = mask & (u64::MAX << from);
    (m != 0).then(|| m.trailing_zeros())
}

fn highest_bit_upto(mask: u64, upto: u32) -> Option<u32> {
    let m = if upto >= 63 {
        mask
    } else {
        mask & ((1u64 << (upto + 1)) - 1)
    };
    (m != 0).then(|| 63 - m.leading_zeros())
}

fn bits(mask: u64) -> impl Iterator<Item = u32> {
    (0..64).filter(move |b| mask & (1 << b) != 0)
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

struct FieldSpec {
    name: &'static str,
    lo: u32,
    hi: u32,
}

const CRON_FIELDS: [FieldSpec; 5] = [
    FieldSpec {
        name: "minute",
        lo: 0,
        hi: 59,
    },
    FieldSpec {
        name: "hour",
        lo: 0,
        hi: 23,
    },
    FieldSpec {
        name: "day of month",
        lo: 1,
        hi: 31,
    },
    FieldSpec {
        name: "month",
        lo: 1,
        hi: 12,
    },
    FieldSpec {
        name: "day of week",
        lo: 0,
        hi: 7,
    },
];

fn parse_cron(fields: &[&str]) -> Result<Cron, ScheduleError> {
    if fields
        .iter()
        .any(|f| f.bytes().any(|b| b.is_ascii_alphabetic()))
    {
        return Err(err("cron fields take numbers; day names go with `weekly`"));
    }
    let mut masks = [0u64; 5];
    for ((field, spec), mask) in fields.iter().zip(&CRON_FIELDS).zip(&mut masks) {
        *mask = parse_cron_field(field, spec)?;
    }
    let [minutes, hours, doms, months, dows] = masks;
    // Masks only hold bits lo..=hi of their field, so the narrowing casts keep every bit.
    let dows = (dows | (dows >> 7)) as u8 & ALL_DOWS; // 7 is Sunday too
    let cron = Cron {
        minutes,
        hours: hours as u32,
        doms: doms as u32,
        months: months as u16,
        dows,
        dom_star: fields[2].starts_with('*'),
        dow_star: fields[4].starts_with('*'),
    };
    check_ever_matches(&cron)?;
    Ok(cron)
}

fn parse_cron_field(text: &str, spec: &FieldSpec) -> Result<u64, ScheduleError> {
    let FieldSpec { name, lo, hi } = *spec;
    let number = |s: &str| -> Result<u32, ScheduleError> {
        if !all_digits(s) {
            return Err(err(format!(
                "{s:?} is not a number ({name} field {text:?})"
            )));
        }
        match s.parse::<u32>() {
            Ok(v) if (lo..=hi).contains(&v) => Ok(v),
            _ => Err(err(format!("{name} {s} is outside {lo}..={hi}"))),
        }
    };
    let mut mask = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(err(format!("{name} field {text:?} has an empty list item")));
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                if !all_digits(step) {
                    return Err(err(format!("step {step:?} is not a number")));
                }
                match step.parse::<u32>() {
                    Ok(0) => return Err(err("step 0 is not allowed")),
                    Ok(s) if s <= hi => (range, Some(s)),
                    _ => return Err(err(format!("step {step} is larger than {hi}"))),
                }
            }
            None => (item, None),
        };
        let (a, b) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (number(a)?, number(b)?)
        } else {
            let a = number(range)?;
            // `5/10` means 5-max/10.
            (a, if step.is_some() { hi } else { a })
        };
        if a > b {
            return Err(err(format!("range {a}-{b} runs backwards")));
        }
        for v in (a..=b).step_by(step.unwrap_or(1) as usize) {
            mask |= 1 << v;
        }
    }
    Ok(mask)
}

/// Refuses a cron expression with no matching day in 8 years (like 30 February); Feb 29 passes.
fn check_ever_matches(cron: &Cron) -> Result<(), ScheduleError> {
    let mut d = jiff::civil::date(2024, 1, 1);
    for _ in 0..HORIZON_DAYS {
        if cron.day_matches(d) {
            return Ok(());
        }
        match d.tomorrow() {
            Ok(next) => d = next,
            Err(_) => break,
        }
    }
    // Only day-of-month against month can fail (every month has every weekday), so name those.
    let days = mask_text(u64::from(cron.doms), 1, 31);
    let why = if cron.doms.count_ones() == 1 && cron.months.count_ones() == 1 {
        let month = MONTH_NAMES[cron.months.trailing_zeros() as usize - 1];
        format!("{days} {month} does not exist")
    } else {
        let have = if cron.months.count_ones() == 1 {
            "has"
        } else {
            "have"
        };
        let word = if cron.doms.count_ones() == 1 {
            "day"
        } else {
            "days"
        };
        format!("{} {have} no {word} {days}", month_list(cron.months))
    };
    Err(err(format!("never matches a day ({why})")))
}

/// A mask back as normalised cron text: `*`, `*/15`, `5-59/20`, or a list like `1-5,9`.
fn mask_text(mask: u64, lo: u32, hi: u32) -> String {
    let full = ((lo..=hi).map(|b| 1u64 << b)).fold(0, |acc, b| acc | b);
    if mask == full {
        return "*".to_string();
    }
    let vals: Vec<u32> = bits(mask).collect();
    if let Some(s) = even_step(mask, hi) {
        if vals[0] == lo {
            return format!("*/{s}");
        }
        return format!("{}-{hi}/{s}", vals[0]);
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < vals.len() {
        let mut j = i;
        while j + 1 < vals.len() && vals[j + 1] == vals[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            parts.push(format!("{}-{}", vals[i], vals[j]));
        } else {
            parts.extend(vals[i..=j].iter().map(u32::to_string));
        }
        i = j + 1;
    }
    parts.join(",")
}

/// The step `s` > 1 when the mask is exactly first, first+s, ... up to the field's maximum `hi`
/// (at least three values, so a plain pair stays a list).
fn even_step(mask: u64, hi: u32) -> Option<u32> {
    let vals: Vec<u32> = bits(mask).collect();
    if vals.len() < 3 {
        return None;
    }
    let s = vals[1] - vals[0];
    let even = s > 1 && vals.windows(2).all(|w| w[1] - w[0] == s);
    let reaches_end = vals[vals.len() - 1] + s > hi;
    (even && reaches_end).then_some(s)
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

#[cfg(test)]
mod tests {
    use super::*;

    const ROME: &str = "Europe/Rome";
    const NY: &str = "America/New_York";
    const LH: &str = "Australia/Lord_Howe";
    const UTC: &str = "";

    /// `after` is an instant with an explicit offset (so fold cases can name the second pass);
    /// `expect` is the due instant as the zone's wall clock with offset, or UTC ending in `Z`,
    /// or "none".
    fn check(when: &str, tz: &str, after: &str, expect: &str) {
        let s = Schedule::parse(when).unwrap_or_else(|e| panic!("{when:?}: {e}"));
        let zone = zone(tz).unwrap();
        let after_ts: Timestamp = after.parse().unwrap_or_else(|e| panic!("{after:?}: {e}"));
        let got = s.next_after(after_ts, &zone);
        assert_eq!(
            show(got, &zone, expect.ends_with('Z')),
            expect,
            "next_after({when:?}, {tz:?}, after {after})"
        );
    }

    fn show(ts: Option<Timestamp>, zone: &TimeZone, utc: bool) -> String {
        match ts {
            None => "none".to_string(),
            Some(ts) if utc => ts.to_string(),
            Some(ts) => ts.display_with_offset(zone.to_offset(ts)).to_string(),
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn transition_dates_are_the_ones_the_tables_assume() {
        // (zone, after, first transition as wall clock after it, second)
        let cases = [
            (
                ROME,
                "2026-03-29T03:00:00+02:00",
                "2026-10-25T02:00:00+01:00",
            ),
            (NY, "2026-03-08T03:00:00-04:00", "2026-11-01T01:00:00-05:00"),
            (LH, "2026-04-05T01:30:00+10:30", "2026-10-04T02:30:00+11:00"),
        ];
        for (tz, first, second) in cases {
            let zone = zone(tz).unwrap();
            let got: Vec<String> = zone
                .following(ts("2026-01-01T00:00:00Z"))
                .take(2)
                .map(|t| t.timestamp().display_with_offset(t.offset()).to_string())
                .collect();
            assert_eq!(got, [first, second], "{tz}");
        }
    }

    #[rustfmt::skip]
    const DST: &[(&str, &str, &str, &str)] = &[
        // --- Europe/Rome, spring: 2026-03-29 02:00-02:59 does not exist (+01 → +02 at 01:00Z).
        ("daily 02:30",         ROME, "2026-03-29T00:00:00+01:00", "2026-03-29T03:00:00+02:00"),
        ("daily 02:30",         ROME, "2026-03-29T00:00:00+01:00", "2026-03-29T01:00:00Z"),
        ("daily 02:30",         ROME, "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"),
        ("daily 03:00",         ROME, "2026-03-29T00:00:00+01:00", "2026-03-29T03:00:00+02:00"),
        ("weekly sun 02:15",    ROME, "2026-03-28T12:00:00+01:00", "2026-03-29T03:00:00+02:00"),
        ("weekly sun 02:15",    ROME, "2026-03-29T03:00:00+02:00", "2026-04-05T02:15:00+02:00"),
        ("30 2 * * *",          ROME, "2026-03-29T00:00:00+01:00", "2026-03-29T03:00:00+02:00"),
        // hourly: 02:00 (gap) and 03:00 are the same instant, so it runs once.
        ("0 * * * *",           ROME, "2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00"),
        ("0 * * * *",           ROME, "2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00"),
        // every 30 min: 02:00, 02:30, 03:00 all collapse onto 03:00 +02.
        ("*/30 * * * *",        ROME, "2026-03-29T01:30:00+01:00", "2026-03-29T03:00:00+02:00"),
        ("*/30 * * * *",        ROME, "2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"),
        // --- Europe/Rome, autumn: 2026-10-25 02:00-02:59 happens twice (+02 then +01).
        ("daily 02:30",         ROME, "2026-10-25T00:00:00+02:00", "2026-10-25T02:30:00+02:00"),
        ("daily 02:30",         ROME, "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"),
        ("daily 02:30",         ROME, "2026-10-25T02:10:00+01:00", "2026-10-26T02:30:00+01:00"),
        ("weekly sun 02:30",    ROME, "2026-10-24T12:00:00+02:00", "2026-10-25T02:30:00+02:00"),
        ("weekly sun 02:30",    ROME, "2026-10-25T02:30:00+02:00", "2026-11-01T02:30:00+01:00"),
        ("0 * * * *",           ROME, "2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00"),
        ("0 * * * *",           ROME, "2026-10-25T02:00:00+02:00", "2026-10-25T03:00:00+01:00"),
        ("*/30 * * * *",        ROME, "2026-10-25T01:59:00+02:00", "2026-10-25T02:00:00+02:00"),
        ("*/30 * * * *",        ROME, "2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00"),
        ("*/30 * * * *",        ROME, "2026-10-25T02:30:00+02:00", "2026-10-25T03:00:00+01:00"),
        ("*/30 * * * *",        ROME, "2026-10-25T02:10:00+01:00", "2026-10-25T03:00:00+01:00"),
        // --- America/New_York, spring: 2026-03-08 02:00-02:59 does not exist (-05 → -04).
        ("daily 02:30",         NY,   "2026-03-08T00:00:00-05:00", "2026-03-08T03:00:00-04:00"),
        ("daily 02:30",         NY,   "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"),
        ("weekly sun 02:00",    NY,   "2026-03-07T12:00:00-05:00", "2026-03-08T03:00:00-04:00"),
        ("0 * * * *",           NY,   "2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00"),
        ("0 * * * *",           NY,   "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"),
        ("*/30 * * * *",        NY,   "2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00"),
        ("*/30 * * * *",        NY,   "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"),
        // --- America/New_York, autumn: 2026-11-01 01:00-01:59 happens twice (-04 then -05).
        ("daily 01:30",         NY,   "2026-11-01T00:00:00-04:00", "2026-11-01T01:30:00-04:00"),
        ("daily 01:30",         NY,   "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"),
        ("weekly sun 01:30",    NY,   "2026-10-31T12:00:00-04:00", "2026-11-01T01:30:00-04:00"),
        ("weekly sun 01:30",    NY,   "2026-11-01T01:30:00-04:00", "2026-11-08T01:30:00-05:00"),
        ("0 * * * *",           NY,   "2026-11-01T00:00:00-04:00", "2026-11-01T01:00:00-04:00"),
        ("0 * * * *",           NY,   "2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00"),
        ("*/30 * * * *",        NY,   "2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00"),
        ("*/30 * * * *",        NY,   "2026-11-01T01:30:00-04:00", "2026-11-01T02:00:00-05:00"),
        ("*/30 * * * *",        NY,   "2026-11-01T01:15:00-05:00", "2026-11-01T02:00:00-05:00"),
        // --- Australia/Lord_Howe, autumn: 2026-04-05 01:30-01:59 happens twice (+11 then +10:30).
        ("daily 01:45",         LH,   "2026-04-05T00:00:00+11:00", "2026-04-05T01:45:00+11:00"),
        ("daily 01:45",         LH,   "2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"),
        ("daily 01:45",         LH,   "2026-04-05T01:35:00+10:30", "2026-04-06T01:45:00+10:30"),
        ("weekly sun 01:45",    LH,   "2026-04-04T12:00:00+11:00", "2026-04-05T01:45:00+11:00"),
        ("weekly sun 01:45",    LH,   "2026-04-05T01:45:00+11:00", "2026-04-12T01:45:00+10:30"),
        ("0 * * * *",           LH,   "2026-04-05T00:30:00+11:00", "2026-04-05T01:00:00+11:00"),
        ("0 * * * *",           LH,   "2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30"),
        ("*/30 * * * *",        LH,   "2026-04-05T01:00:00+11:00", "2026-04-05T01:30:00+11:00"),
        ("*/30 * * * *",        LH,   "2026-04-05T01:30:00+11:00", "2026-04-05T02:00:00+10:30"),
        ("*/30 * * * *",        LH,   "2026-04-05T01:40:00+10:30", "2026-04-05T02:00:00+10:30"),
        // --- Australia/Lord_Howe, spring: 2026-10-04 02:00-02:29 does not exist (+10:30 → +11).
        ("daily 02:15",         LH,   "2026-10-04T00:00:00+10:30", "2026-10-04T02:30:00+11:00"),
        ("daily 02:15",         LH,   "2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"),
        ("weekly sun 02:15",    LH,   "2026-10-03T12:00:00+10:30", "2026-10-04T02:30:00+11:00"),
        ("0 * * * *",           LH,   "2026-10-04T01:00:00+10:30", "2026-10-04T02:30:00+11:00"),
        ("0 * * * *",           LH,   "2026-10-04T02:30:00+11:00", "2026-10-04T03:00:00+11:00"),
        // 02:00 (gap) and 02:30 are the same instant: one run.
        ("*/30 * * * *",        LH,   "2026-10-04T01:30:00+10:30", "2026-10-04T02:30:00+11:00"),
        ("*/30 * * * *",        LH,   "2026-10-04T02:30:00+11:00", "2026-10-04T03:00:00+11:00"),
    ];

    #[test]
    fn dst_gaps_and_folds() {
        for &(when, tz, after, expect) in DST {
            check(when, tz, after, expect);
        }
    }

    /// Chains next_after through a whole DST night and counts the runs: every civil time once,
    /// gap times collapsed onto the gap's end.
    #[test]
    fn dst_nights_run_each_civil_time_once() {
        // (when, zone, from, to, expected run count in that window)
        let cases = [
            (
                "*/30 * * * *",
                ROME,
                "2026-10-25T00:00:00+02:00",
                "2026-10-25T04:00:00+01:00",
                8,
            ),
            (
                "*/30 * * * *",
                ROME,
                "2026-03-29T00:00:00+01:00",
                "2026-03-29T04:00:00+02:00",
                6,
            ),
            (
                "0 * * * *",
                NY,
                "2026-11-01T00:00:00-04:00",
                "2026-11-01T03:00:00-05:00",
                3,
            ),
            (
                "daily 01:45",
                LH,
                "2026-04-04T12:00:00+11:00",
                "2026-04-05T12:00:00+10:30",
                1,
            ),
            (
                "daily 02:15",
                LH,
                "2026-10-03T12:00:00+10:30",
                "2026-10-04T12:00:00+11:00",
                1,
            ),
        ];
        for (when, tz, from, to, count) in cases {
            let s = Schedule::parse(when).unwrap();
            let zone = zone(tz).unwrap();
            let (mut t, end) = (ts(from), ts(to));
            let mut runs = 0;
            while let Some(next) = s.next_after(t, &zone) {
                if next > end {
                    break;
                }
                runs += 1;
                t = next;
            }
            assert_eq!(runs, count, "{when} in {tz} from {from} to {to}");
        }
    }

    /// An independent statement of the DST rules, checked minute by minute of real time across
    /// each transition: an instant is due when its wall-clock time matches and this is that
    /// time's first occurrence, or when it ends a gap that swallowed a matching time.
    fn brute_due(s: &Schedule, tz: &TimeZone, i: Timestamp) -> bool {
        let matches = |dt: jiff::civil::DateTime| {
            let m = minute_of_day(dt.hour(), dt.minute());
            s.kind.next_minute_on(dt.date(), m.checked_sub(1)) == Some(m)
        };
        let dt = tz.to_datetime(i);
        let first_occurrence = match tz.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { .. } => true,
            AmbiguousOffset::Fold { before, .. } => before.to_timestamp(dt).unwrap() == i,
            AmbiguousOffset::Gap { .. } => unreachable!("a real instant's wall clock exists"),
        };
        if first_occurrence && matches(dt) {
            return true;
        }
        let one_ns = SignedDuration::from_nanos(1);
        let Some(tr) = tz.preceding(i + one_ns).next() else {
            return false;
        };
        let gap_start = tz.to_datetime(i - one_ns);
        if tr.timestamp() != i || gap_start >= dt {
            return false;
        }
        // Every civil minute in [gap start, gap end) was skipped.
        let mut c = gap_start.round(jiff::Unit::Minute).unwrap();
        if c < gap_start {
            c += SignedDuration::from_mins(1);
        }
        while c < dt {
            if matches(c) {
                return true;
            }
            c += SignedDuration::from_mins(1);
        }
        false
    }

    #[test]
    fn dst_rules_agree_with_a_minute_by_minute_scan() {
        let whens = [
            "daily 02:30",
            "daily 02:00",
            "daily 01:45",
            "daily 02:15",
            "daily 01:30",
            "weekly sun 02:30",
            "0 * * * *",
            "*/30 * * * *",
            "*/15 * * * *",
            "45 1,2 * * *",
            "* 2 * * *",
        ];
        for tz in [ROME, NY, LH] {
            let zone = zone(tz).unwrap();
            for tr in zone.following(ts("2026-01-01T00:00:00Z")).take(4) {
                let from = tr.timestamp() - SignedDuration::from_hours(12);
                let to = tr.timestamp() + SignedDuration::from_hours(12);
                for when in whens {
                    let s = Schedule::parse(when).unwrap();
                    let mut expected = Vec::new();
                    let mut i = from;
                    while i <= to {
                        if brute_due(&s, &zone, i) {
                            expected.push(i);
                        }
                        i += SignedDuration::from_mins(1);
                    }
                    let mut got = Vec::new();
                    let mut t = from - SignedDuration::from_nanos(1);
                    while let Some(next) = s.next_after(t, &zone).filter(|&n| n <= to) {
                        got.push(next);
                        t = next;
                    }
                    assert_eq!(got, expected, "{when} in {tz} around {}", tr.timestamp());
                    // last_due from a few vantage points agrees with the same list.
                    for k in (0..=24 * 60).step_by(7) {
                        let now = from + SignedDuration::from_mins(k);
                        let since = now - SignedDuration::from_mins(95);
                        let want = expected
                            .iter()
                            .copied()
                            .filter(|&e| e > since && e <= now)
                            .max();
                        assert_eq!(
                            s.last_due(since, now, &zone),
                            want,
                            "{when} in {tz} now {now}"
                        );
                    }
                }
            }
        }
    }

    #[rustfmt::skip]
    const CALENDAR: &[(&str, &str, &str, &str)] = &[
        // monthly 31: the month's last day in shorter months.
        ("monthly 31 08:00",    UTC,  "2026-01-01T00:00:00Z",      "2026-01-31T08:00:00Z"),
        ("monthly 31 08:00",    UTC,  "2026-01-31T08:00:00Z",      "2026-02-28T08:00:00Z"),
        ("monthly 31 08:00",    UTC,  "2026-02-28T08:00:00Z",      "2026-03-31T08:00:00Z"),
        ("monthly 31 08:00",    UTC,  "2026-03-31T08:00:00Z",      "2026-04-30T08:00:00Z"),
        ("monthly 31 08:00",    UTC,  "2028-01-01T00:00:00Z",      "2028-01-31T08:00:00Z"),
        ("monthly 31 08:00",    UTC,  "2028-01-31T08:00:00Z",      "2028-02-29T08:00:00Z"),
        ("monthly 31 08:00",    UTC,  "2028-02-29T08:00:00Z",      "2028-03-31T08:00:00Z"),
        ("monthly 31 08:00",    UTC,  "2028-03-31T08:00:00Z",      "2028-04-30T08:00:00Z"),
        ("monthly 31 08:00",    ROME, "2026-03-01T00:00:00+01:00", "2026-03-31T08:00:00+02:00"),
        ("monthly 15 08:00",    UTC,  "2026-02-15T08:00:00Z",      "2026-03-15T08:00:00Z"),
        // cron dom 31 skips 30-day months instead.
        ("0 8 31 * *",          UTC,  "2026-01-31T08:00:00Z",      "2026-03-31T08:00:00Z"),
        ("0 8 31 * *",          UTC,  "2026-03-31T08:00:00Z",      "2026-05-31T08:00:00Z"),
        // Feb 29.
        ("0 12 29 2 *",         UTC,  "2026-03-01T00:00:00Z",      "2028-02-29T12:00:00Z"),
        ("0 12 29 2 *",         UTC,  "2096-03-01T00:00:00Z",      "2104-02-29T12:00:00Z"),
        ("monthly 29 10:00",    UTC,  "2027-02-01T00:00:00Z",      "2027-02-28T10:00:00Z"),
        ("monthly 29 10:00",    UTC,  "2028-02-01T00:00:00Z",      "2028-02-29T10:00:00Z"),
        // once.
        ("once 2026-12-24 18:00", ROME, "2026-01-01T00:00:00Z",    "2026-12-24T17:00:00Z"),
        ("once 2026-12-24 18:00", ROME, "2026-12-24T17:00:00Z",    "none"),
        ("once 2026-12-24 18:00", ROME, "2027-01-01T00:00:00Z",    "none"),
        ("once 2026-03-29 02:30", ROME, "2026-03-01T00:00:00Z",    "2026-03-29T03:00:00+02:00"),
        ("once 2026-10-25 02:30", ROME, "2026-10-25T00:10:00Z",    "2026-10-25T02:30:00+02:00"),
        ("once 2026-10-25 02:30", ROME, "2026-10-25T00:30:00Z",    "none"),
        // weekdays and weekly (2026-05-15 is a Friday).
        ("weekdays 09:30",      ROME, "2026-05-15T18:00:00+02:00", "2026-05-18T09:30:00+02:00"),
        ("weekdays 9:30",       ROME, "2026-05-18T08:00:00+02:00", "2026-05-18T09:30:00+02:00"),
        ("weekdays 09:30",      ROME, "2026-05-18T09:30:00+02:00", "2026-05-19T09:30:00+02:00"),
        ("weekly mon,thu 09:30", ROME, "2026-05-18T09:30:00+02:00", "2026-05-21T09:30:00+02:00"),
        ("weekly mon,thu 09:30", ROME, "2026-05-21T09:30:00+02:00", "2026-05-25T09:30:00+02:00"),
        ("WEEKLY Thursday,MON,mon 09:30", ROME, "2026-05-19T00:00:00+02:00", "2026-05-21T09:30:00+02:00"),
        ("weekly sun 23:59",    UTC,  "2026-05-15T00:00:00Z",      "2026-05-17T23:59:00Z"),
        ("daily 00:00",         UTC,  "2026-12-31T23:59:59.5Z",    "2027-01-01T00:00:00Z"),
        ("daily 08:00",         UTC,  "2026-05-15T08:00:00Z",      "2026-05-16T08:00:00Z"),
        ("daily 08:00",         UTC,  "2026-05-15T07:59:59.999Z",  "2026-05-15T08:00:00Z"),
    ];

    #[test]
    fn calendar_cases() {
        for &(when, tz, after, expect) in CALENDAR {
            check(when, tz, after, expect);
        }
    }

    #[rustfmt::skip]
    const CRON: &[(&str, &str, &str, &str)] = &[
        // lists
        ("0 8,12,18 * * *",     UTC,  "2026-05-15T08:00:00Z",      "2026-05-15T12:00:00Z"),
        ("0 8,12,18 * * *",     UTC,  "2026-05-15T18:00:00Z",      "2026-05-16T08:00:00Z"),
        ("5,10 * * * *",        UTC,  "2026-05-15T08:06:00Z",      "2026-05-15T08:10:00Z"),
        // ranges (2026-05-15 Fri, 16 Sat, 18 Mon)
        ("0 9-17 * * 1-5",      UTC,  "2026-05-15T17:00:00Z",      "2026-05-18T09:00:00Z"),
        ("0 9-17 * * 1-5",      UTC,  "2026-05-15T09:30:00Z",      "2026-05-15T10:00:00Z"),
        ("0 0 * 3-4 *",         UTC,  "2026-04-30T00:00:00Z",      "2027-03-01T00:00:00Z"),
        // steps
        ("*/15 * * * *",        UTC,  "2026-05-15T08:00:00Z",      "2026-05-15T08:15:00Z"),
        ("*/15 * * * *",        UTC,  "2026-05-15T08:45:00Z",      "2026-05-15T09:00:00Z"),
        ("1-30/10 * * * *",     UTC,  "2026-05-15T08:01:00Z",      "2026-05-15T08:11:00Z"),
        ("1-30/10 * * * *",     UTC,  "2026-05-15T08:21:00Z",      "2026-05-15T09:01:00Z"),
        ("5/20 * * * *",        UTC,  "2026-05-15T08:05:00Z",      "2026-05-15T08:25:00Z"),
        ("5/20 * * * *",        UTC,  "2026-05-15T08:45:00Z",      "2026-05-15T09:05:00Z"),
        ("0 */6 * * *",         UTC,  "2026-05-15T13:00:00Z",      "2026-05-15T18:00:00Z"),
        ("* * * * *",           UTC,  "2026-05-15T08:00:30Z",      "2026-05-15T08:01:00Z"),
        ("59 23 31 12 *",       UTC,  "2026-05-15T00:00:00Z",      "2026-12-31T23:59:00Z"),
        // dow 7 and 0 are both Sunday (2026-05-17)
        ("0 9 * * 7",           UTC,  "2026-05-15T00:00:00Z",      "2026-05-17T09:00:00Z"),
        ("0 9 * * 0",           UTC,  "2026-05-15T00:00:00Z",      "2026-05-17T09:00:00Z"),
        ("0 9 * * 5-7",         UTC,  "2026-05-16T09:00:00Z",      "2026-05-17T09:00:00Z"),
        // dom and dow both restricted: either one (13th, or a Friday)
        ("0 9 13 * 5",          UTC,  "2026-05-08T09:00:00Z",      "2026-05-13T09:00:00Z"),
        ("0 9 13 * 5",          UTC,  "2026-05-13T09:00:00Z",      "2026-05-15T09:00:00Z"),
        // both restricted, and 1-31 is not `*`: every day (16 May 2026 is a Saturday)
        ("0 9 1-31 * 1",        UTC,  "2026-05-15T09:00:00Z",      "2026-05-16T09:00:00Z"),
        // one of them `*`: both must hold (only Fridays / only the 13th)
        ("0 9 * * 5",           UTC,  "2026-05-08T09:00:00Z",      "2026-05-15T09:00:00Z"),
        ("0 9 13 * *",          UTC,  "2026-05-08T09:00:00Z",      "2026-05-13T09:00:00Z"),
        ("0 9 13 * *",          UTC,  "2026-05-13T09:00:00Z",      "2026-06-13T09:00:00Z"),
        // Vixie: a field starting with `*` counts as `*`: odd days AND Fridays (2026-05-01 Fri)
        ("0 9 */2 * 5",         UTC,  "2026-05-01T09:00:00Z",      "2026-05-15T09:00:00Z"),
        // never-on-30-Feb but OR with a weekday is fine: Mondays of February
        ("0 0 30 2 1",          UTC,  "2026-01-01T00:00:00Z",      "2026-02-02T00:00:00Z"),
    ];

    #[test]
    fn cron_cases() {
        for &(when, tz, after, expect) in CRON {
            check(when, tz, after, expect);
        }
    }

    #[test]
    fn dow_seven_is_sunday() {
        assert_eq!(Schedule::parse("0 9 * * 7"), Schedule::parse("0 9 * * 0"));
    }

    #[test]
    fn parse_is_case_insensitive_and_dedupes() {
        assert_eq!(
            Schedule::parse("  WEEKLY Monday,THU,mon  9:30 "),
            Schedule::parse("weekly mon,thu 09:30")
        );
        assert_eq!(
            Schedule::parse("Daily 08:00"),
            Schedule::parse("daily 8:00")
        );
        assert!(Schedule::parse("once 2026-12-24 18:00").unwrap().is_once());
        assert!(!Schedule::parse("daily 18:00").unwrap().is_once());
        assert!(!Schedule::parse("* * * * *").unwrap().is_once());
    }

    // (when, zone, since, now, expect)
    #[rustfmt::skip]
    const LAST_DUE: &[(&str, &str, &str, &str, &str)] = &[
        // three days down: one run, for today's 09:00
        ("daily 09:00", ROME, "2026-05-12T08:00:00+02:00", "2026-05-15T10:00:00+02:00", "2026-05-15T09:00:00+02:00"),
        // since is after the latest due time
        ("daily 09:00", ROME, "2026-05-15T09:30:00+02:00", "2026-05-15T10:00:00+02:00", "none"),
        // now exactly on a due time counts; since exactly on one does not
        ("daily 09:00", ROME, "2026-05-14T10:00:00+02:00", "2026-05-15T09:00:00+02:00", "2026-05-15T09:00:00+02:00"),
        ("daily 09:00", ROME, "2026-05-15T09:00:00+02:00", "2026-05-15T12:00:00+02:00", "none"),
        ("daily 09:00", ROME, "2026-05-15T10:00:00+02:00", "2026-05-15T08:00:00+02:00", "none"),
        ("weekly mon 09:00", UTC, "2026-04-01T00:00:00Z", "2026-05-15T00:00:00Z", "2026-05-11T09:00:00Z"),
        ("monthly 31 08:00", UTC, "2026-01-01T00:00:00Z", "2026-03-15T00:00:00Z", "2026-02-28T08:00:00Z"),
        ("0 12 29 2 *", UTC, "2020-01-01T00:00:00Z", "2027-06-01T00:00:00Z", "2024-02-29T12:00:00Z"),
        ("once 2026-12-24 18:00", ROME, "2026-12-01T00:00:00Z", "2026-12-25T00:00:00Z", "2026-12-24T17:00:00Z"),
        ("once 2026-12-24 18:00", ROME, "2026-12-24T17:00:00Z", "2026-12-25T00:00:00Z", "none"),
        // gap: the missed 02:30 ran at 03:00 +02
        ("daily 02:30", ROME, "2026-03-28T12:00:00+01:00", "2026-03-29T12:00:00+02:00", "2026-03-29T03:00:00+02:00"),
        // fold, now in the second pass: the latest run was the first-pass 02:30, not 03:00
        ("*/30 * * * *", ROME, "2026-10-25T01:00:00+02:00", "2026-10-25T02:40:00+01:00", "2026-10-25T02:30:00+02:00"),
        // ... and early in the second pass the wall clock reads 02:10, yet 02:30 (+02) is past
        ("*/30 * * * *", ROME, "2026-10-25T01:00:00+02:00", "2026-10-25T02:10:00+01:00", "2026-10-25T02:30:00+02:00"),
        ("*/30 * * * *", ROME, "2026-10-25T02:30:00+02:00", "2026-10-25T02:40:00+01:00", "none"),
        ("0 3 * * *",    ROME, "2026-10-24T00:00:00+02:00", "2026-10-25T02:59:00+01:00", "2026-10-24T03:00:00+02:00"),
        ("daily 01:45",  LH,   "2026-04-04T12:00:00+11:00", "2026-04-05T01:50:00+10:30", "2026-04-05T01:45:00+11:00"),
        ("* * * * *",    UTC,  "2026-04-15T10:00:00Z",      "2026-05-15T10:17:42Z",      "2026-05-15T10:17:00Z"),
    ];

    #[test]
    fn last_due_cases() {
        for &(when, tz, since, now, expect) in LAST_DUE {
            let s = Schedule::parse(when).unwrap();
            let zone = zone(tz).unwrap();
            let got = s.last_due(ts(since), ts(now), &zone);
            assert_eq!(
                show(got, &zone, expect.ends_with('Z')),
                expect,
                "last_due({when:?}, {tz:?}, since {since}, now {now})"
            );
        }
    }

    #[test]
    fn last_due_every_minute_over_30_days_is_one_time() {
        // Its speed is figure 10 of the benchmarks; here, that 30 days of
        // every-minute times give the one latest minute.
        let s = Schedule::parse("* * * * *").unwrap();
        let zone = zone(ROME).unwrap();
        let now = ts("2026-05-15T10:17:42Z");
        let since = ts("2026-04-15T10:17:42Z");
        assert_eq!(
            s.last_due(since, now, &zone),
            Some(ts("2026-05-15T10:17:00Z"))
        );
        assert_eq!(s.last_due(now, now, &zone), None);
    }

    #[rustfmt::skip]
    const ERRORS: &[(&str, &str)] = &[
        ("fortnightly 08:00", r#"unknown schedule word "fortnightly": use daily, weekdays, weekly, monthly, once or five cron fields"#),
        ("", "is empty"),
        ("   ", "is empty"),
        ("daily 08:61", "minute 61 is outside 0..=59"),
        ("daily 24:00", "hour 24 is outside 0..=23"),
        ("daily 8:5", r#""8:5" is not a time of day (HH:MM, like 08:00)"#),
        ("daily", "daily needs a time: daily 08:00"),
        ("daily 08:00 09:00", "daily needs a time: daily 08:00"),
        ("61 * * * *", "minute 61 is outside 0..=59"),
        ("* 24 * * *", "hour 24 is outside 0..=23"),
        ("0 0 32 * *", "day of month 32 is outside 1..=31"),
        ("0 0 0 * *", "day of month 0 is outside 1..=31"),
        ("0 0 * 13 *", "month 13 is outside 1..=12"),
        ("0 0 * * 8", "day of week 8 is outside 0..=7"),
        ("mon * * * *", "cron fields take numbers; day names go with `weekly`"),
        ("0 9 * jan *", "cron fields take numbers; day names go with `weekly`"),
        ("0 9 * * mon-fri", "cron fields take numbers; day names go with `weekly`"),
        ("*/0 * * * *", "step 0 is not allowed"),
        ("5-1 * * * *", "range 5-1 runs backwards"),
        ("1,,2 * * * *", r#"minute field "1,,2" has an empty list item"#),
        ("0 8 * *", "a cron expression needs five fields (minute hour day-of-month month day-of-week), this has 4"),
        ("weekly xyz 09:00", r#""xyz" is not a day name (mon, tue, …, sun)"#),
        ("weekly 09:00", "weekly needs days and a time: weekly mon,thu 09:30"),
        ("monthly 32 08:00", "day of month 32 is outside 1..=31"),
        ("monthly 0 08:00", "day of month 0 is outside 1..=31"),
        ("once 2026-02-30 10:00", r#""2026-02-30" is not a date"#),
        ("once 2026-12-24", "once needs a date and a time: once 2026-12-24 18:00"),
        ("once 24/12/2026 10:00", r#""24/12/2026" is not a date (YYYY-MM-DD, like 2026-12-24)"#),
        ("0 0 30 2 *", "never matches a day (30 February does not exist)"),
        ("0 0 31 2,4 *", "never matches a day (February and April have no day 31)"),
    ];

    #[test]
    fn errors() {
        for &(when, msg) in ERRORS {
            assert_eq!(
                Schedule::parse(when).map_err(|e| e.to_string()),
                Err(msg.to_string()),
                "{when:?}"
            );
        }
        let long = format!("daily 08:00{}", " ".repeat(200));
        assert_eq!(
            Schedule::parse(&long).unwrap_err().0,
            "is 211 bytes, longer than 200"
        );
        assert!(
            Schedule::parse("0 0 29 2 *").is_ok(),
            "Feb 29 exists in leap years"
        );
    }

    #[test]
    fn zones() {
        assert_eq!(zone("").unwrap(), TimeZone::UTC);
        assert!(zone("Europe/Rome").is_ok());
        assert_eq!(
            zone("Mars/Olympus").unwrap_err().to_string(),
            r#"unknown time zone "Mars/Olympus" (an IANA name like Europe/Rome)"#
        );
        assert_eq!(
            zone(&"A".repeat(65)).unwrap_err().to_string(),
            "time zone name is 65 bytes, longer than 64"
        );
    }

    #[rustfmt::skip]
    const DESCRIBE: &[(&str, &str)] = &[
        ("daily 08:00", "every day at 08:00"),
        ("weekdays 9:30", "every weekday (Mon–Fri) at 09:30"),
        ("weekly thu,mon 09:30", "every Monday and Thursday at 09:30"),
        ("weekly sun,mon,wed 07:05", "every Monday, Wednesday and Sunday at 07:05"),
        ("monthly 15 08:00", "on day 15 of every month at 08:00"),
        ("monthly 28 08:00", "on day 28 of every month at 08:00"),
        ("monthly 31 08:00", "on day 31 of every month at 08:00 (the last day in shorter months)"),
        ("once 2026-12-24 18:00", "once, on 2026-12-24 at 18:00"),
        ("* * * * *", "every minute"),
        ("*/15 * * * *", "every 15 minutes"),
        ("*/15 9-17 * * 1-5", "every 15 minutes during hours 9-17, on weekdays (Mon–Fri)"),
        ("0,30 9-17 * * 1-5", "at minutes 0,30 of hours 9-17, on weekdays (Mon–Fri)"),
        ("0 * * * *", "at minute 0 of every hour"),
        ("0 9 * * *", "at 09:00, every day"),
        ("30 8,17 * * 6,0", "at 08:30 and 17:30, on weekends (Sat, Sun)"),
        ("0 9 * * 1,4", "at 09:00, on Monday and Thursday"),
        ("0 8 1,15 * *", "at 08:00, on days 1,15 of the month"),
        ("0 8 31 * *", "at 08:00, on day 31 of the month"),
        ("0 9 13 * 5", "at 09:00, on day 13 of the month and on every Friday"),
        ("0 9 */2 * 5", "at 09:00, on days */2 of the month that fall on Friday"),
        ("0 9 1-31 * 1", "at 09:00, every day"),
        ("0 9 1-31 * *", "at 09:00, every day"),
        ("0 12 29 2 *", "at 12:00, on day 29 of the month in February"),
        ("0 0 * 1-6 *", "at 00:00, every day in January–June"),
        ("5/20 * * * *", "at minutes 5-59/20 of every hour"),
        ("1-30/10 3 * * *", "at 03:01, 03:11 and 03:21, every day"),
    ];

    #[test]
    fn describe_reads_well() {
        for &(when, text) in DESCRIBE {
            assert_eq!(Schedule::parse(when).unwrap().describe(), text, "{when:?}");
        }
    }
}
