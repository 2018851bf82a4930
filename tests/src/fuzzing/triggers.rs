//! Targets for triggerd: a trigger's `when` parsed, and its next due
//! instant walked forward and backward.

use arbitrary::{Result as Built, Unstructured};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::text_of;
use super::Verdict;

/// A trigger's `when`: parsing never panics, and for a schedule it takes,
/// the forward walk and the backward walk agree: the next due instant `n`
/// after `t` is after `t`, is what comes next after one second before it,
/// and is the last due instant in (t, n].
pub(super) fn schedule(u: &mut Unstructured) -> Verdict {
    const PIECES: &[&str] = &[
        "daily",
        "weekdays",
        "weekly",
        "monthly",
        "once",
        " ",
        "  ",
        "09:00",
        "9:30",
        "23:59",
        "24:00",
        "00:00",
        "7:5",
        "mon",
        "Monday",
        "thu",
        "sun",
        "mon,thu",
        "1",
        "15",
        "29",
        "31",
        "0",
        "32",
        "2026-03-29",
        "2028-02-29",
        "2026-12-24",
        "*",
        "*/5",
        "*/0",
        "1-5",
        "5-1",
        "0,30",
        "2",
        "12",
        "7",
        ",",
        "-",
        "/",
        "\t",
    ];
    let Ok(when) = when_text(u, PIECES) else {
        return Ok(());
    };
    let Ok(schedule) = triggerd::schedule::Schedule::parse(&when) else {
        return Ok(());
    };
    let zones = [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Asia/Kolkata",
    ];
    let zone_name = u.choose(&zones).map_or("UTC", |z| *z);
    let Ok(tz) = TimeZone::get(zone_name) else {
        return Err(format!("zone {zone_name} is not in the database"));
    };
    // An instant between 2024 and 2031, to the second.
    let secs = u
        .int_in_range(1_704_067_200i64..=1_924_992_000)
        .unwrap_or(1_704_067_200);
    let Ok(after) = Timestamp::from_second(secs) else {
        return Ok(());
    };
    let Some(next) = schedule.next_after(after, &tz) else {
        return Ok(());
    };
    let say = |what: &str| format!("{when:?} in {zone_name} after {after}: {what}");
    if next <= after {
        return Err(say(&format!("next {next} is not after it")));
    }
    let before = next - SignedDuration::from_secs(1);
    if schedule.next_after(before, &tz) != Some(next) {
        return Err(say(&format!(
            "next is {next}, but the next after {before} is {:?}",
            schedule.next_after(before, &tz)
        )));
    }
    if schedule.last_due(after, next, &tz) != Some(next) {
        return Err(say(&format!(
            "next is {next}, but the last due up to it is {:?}",
            schedule.last_due(after, next, &tz)
        )));
    }
    Ok(())
}

/// A `when`: half the time one of the forms the parser takes with random
/// fields (so most of them parse and reach the walks), else random pieces.
fn when_text(u: &mut Unstructured, pieces: &[&str]) -> Built<String> {
    if u.ratio(1, 2)? {
        return Ok(text_of(u, pieces, 12));
    }
    let time = format!("{}:{:02}", u.int_in_range(0..=23)?, u.int_in_range(0..=59)?);
    let days = [
        "mon", "tue", "wed", "thu", "fri", "sat", "sun", "mon,thu", "sat,sun",
    ];
    let field = |u: &mut Unstructured, most: u32| -> Built<String> {
        Ok(match u.int_in_range(0..=3)? {
            0 => "*".to_string(),
            1 => u.int_in_range(0..=most)?.to_string(),
            2 => format!("*/{}", u.int_in_range(1..=most.max(1))?),
            _ => {
                let a = u.int_in_range(0..=most)?;
                format!("{a}-{}", u.int_in_range(a..=most)?)
            }
        })
    };
    Ok(match u.int_in_range(0..=5)? {
        0 => format!("daily {time}"),
        1 => format!("weekdays {time}"),
        2 => format!("weekly {} {time}", u.choose(&days)?),
        3 => format!("monthly {} {time}", u.int_in_range(1..=31)?),
        4 => format!(
            "once {}-{:02}-{:02} {time}",
            u.int_in_range(2024..=2031)?,
            u.int_in_range(1..=12)?,
            u.int_in_range(1..=31)?
        ),
        _ => format!(
            "{} {} {} {} {}",
            field(u, 59)?,
            field(u, 23)?,
            field(u, 31)?,
            field(u, 12)?,
            field(u, 7)?
        ),
    })
}
