//! Five cron fields: parsed into bit masks (names, ranges, steps, Vixie
//! cron's dom/dow rule), refused when they can never match, searched minute
//! by minute within a day, and described in words.

use super::{
    all_digits, day_list, hhmm, join_and, minute_of_day, month_list, HORIZON_DAYS, MINUTES_PER_DAY,
    MONTH_NAMES, WEEKDAYS_MASK,
};
use super::{err, ScheduleError};
use jiff::civil::Date;

/// Bit masks of the allowed values of each cron field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cron {
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

const ALL_DOWS: u8 = 0b0111_1111;
const ALL_MINUTES: u64 = (1 << 60) - 1;
const ALL_HOURS: u32 = (1 << 24) - 1;
const ALL_DOMS: u32 = ((1u64 << 32) - 2) as u32; // bits 1..=31
const ALL_MONTHS: u16 = ((1u32 << 13) - 2) as u16; // bits 1..=12

impl Cron {
    pub(super) fn day_matches(&self, d: Date) -> bool {
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

    pub(super) fn next_minute(&self, start: u16) -> Option<u16> {
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

    pub(super) fn prev_minute(&self, end: u16) -> Option<u16> {
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

    pub(super) fn describe(&self) -> String {
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

pub(super) fn bits(mask: u64) -> impl Iterator<Item = u32> {
    (0..64).filter(move |b| mask & (1 << b) != 0)
}

pub(super) struct FieldSpec {
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

pub(super) fn parse_cron(fields: &[&str]) -> Result<Cron, ScheduleError> {
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
