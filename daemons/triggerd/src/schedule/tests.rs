//! Schedules as tables of `when`, zone, instant and the next time expected,
//! across DST gaps and folds, checked against a minute-by-minute scan.

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
