//! Figure 10's in-process part: triggerd's `schedule` finding every next due
//! time, against as many `daily 09:00` in UTC.

use super::*;

/// Part (a) in-process: the mixed schedules against `daily 09:00` UTC and
/// against bare zone conversions.
pub(super) fn in_process(sizes: &Sizes, say: &dyn Fn(String)) -> anyhow::Result<Vec<Line>> {
    let n = sizes.triggers;
    let after = at(BEFORE);
    let mixed_pairs: Vec<(String, &str)> = (0..n)
        .map(|i| {
            let (w, z, _) = mixed(i);
            (w, z)
        })
        .collect();
    let floor_pairs: Vec<(String, &str)> =
        (0..n).map(|_| ("daily 09:00".to_string(), "")).collect();
    // A warm-up of each: the zone files are read and cached on first use.
    plan_all(&mixed_pairs, after)?;
    plan_all(&floor_pairs, after)?;
    let zones: Vec<TimeZone> = mixed_pairs
        .iter()
        .map(|(_, z)| schedule::zone(z).expect("a known zone"))
        .collect();
    let instants: Vec<Timestamp> = (0..n)
        .map(|i| after + jiff::SignedDuration::from_secs(i as i64 * 997))
        .collect();
    let (mut mixed_runs, mut floor_runs, mut conversions) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..sizes.reps.max(1) {
        mixed_runs.push(plan_all(&mixed_pairs, after)?);
        floor_runs.push(plan_all(&floor_pairs, after)?);
        let started = Instant::now();
        for (t, z) in instants.iter().zip(&zones) {
            black_box(z.to_datetime(*t));
        }
        conversions.push(started.elapsed());
    }
    let pick =
        |runs: &[Planned], f: fn(&Planned) -> Duration| median_d(runs.iter().map(f).collect());
    let (total, parse, zone, next) = (
        pick(&mixed_runs, |p| p.total),
        pick(&mixed_runs, |p| p.parse),
        pick(&mixed_runs, |p| p.zone),
        pick(&mixed_runs, |p| p.next),
    );
    let floor = pick(&floor_runs, |p| p.total);
    let floor_next = pick(&floor_runs, |p| p.next);
    let conv = median_d(conversions);
    say(format!(
        "in-process, {n} mixed schedules (median of {}): total {} ({} each); parse {}, zone lookup {}, next_after {}",
        sizes.reps,
        ms_d(total),
        us_each(total, n),
        ms_d(parse),
        ms_d(zone),
        ms_d(next)
    ));
    say(format!(
        "in-process, {n} × `daily 09:00` UTC: total {} ({} each), of it next_after {}; {n} zone conversions (Timestamp → civil, the mixed zones): {} ({} each)",
        ms_d(floor),
        us_each(floor, n),
        ms_d(floor_next),
        ms_d(conv),
        us_each(conv, n)
    ));
    // next_after per form and per zone, for what dominates.
    let mut by_form = vec![(Duration::ZERO, 0usize); FORMS.len()];
    let mut by_zone = vec![(Duration::ZERO, 0usize); ZONES.len()];
    for i in 0..n {
        let (w, z, form) = mixed(i);
        let s = Schedule::parse(&w).expect("parsed above");
        let tz = schedule::zone(z).expect("looked up above");
        let started = Instant::now();
        black_box(s.next_after(after, &tz));
        let took = started.elapsed();
        by_form[form].0 += took;
        by_form[form].1 += 1;
        let zi = i % ZONES.len();
        by_zone[zi].0 += took;
        by_zone[zi].1 += 1;
    }
    say(format!(
        "next_after by form (mean): {}",
        FORMS
            .iter()
            .zip(&by_form)
            .map(|(f, (d, c))| format!("{f} {}", us_each(*d, *c)))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    say(format!(
        "next_after by zone (mean): {}",
        ZONES
            .iter()
            .zip(&by_zone)
            .map(|(z, (d, c))| format!(
                "{} {}",
                if z.is_empty() { "UTC" } else { z },
                us_each(*d, *c)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(vec![with_baseline(
        line(
            format!(
                "10. next due times of {n} mixed schedules, in-process (parse + zone + next_after)"
            ),
            format!(
                "{} total, {} per trigger (parse {}, zone {}, next_after {})",
                ms_d(total),
                us_each(total, n),
                ms_d(parse),
                ms_d(zone),
                ms_d(next)
            ),
        ),
        format!(
            "{n} × `daily 09:00` UTC {} ({} each); {n} zone conversions {}",
            ms_d(floor),
            us_each(floor, n),
            ms_d(conv)
        ),
        format!(
            "{} the daily floor, {} the conversions",
            ratio(total, floor),
            ratio(total, conv)
        ),
    )])
}

// The real triggerd
