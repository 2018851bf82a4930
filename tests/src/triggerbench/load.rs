//! Figure 10's stored triggers: their bodies, and all of them created
//! through triggerd's API.

use super::*;

/// The body of the `i`-th trigger the figure stores.
pub(super) fn body(i: usize, when: &str, tz: &str) -> Value {
    json!({
        "name": format!("bench {i}"),
        "when": when,
        "tz": tz,
        "prompt": format!("Bench trigger {i}: summarise the notes that changed since the last run and list what needs me."),
    })
}

/// One trigger of the stored set: its schedule, and the round it is due in
/// (`None`: not due while the figure runs).
pub(super) struct Stored {
    pub(super) when: String,
    pub(super) tz: &'static str,
    pub(super) round: Option<usize>,
}

/// The stored set: `due` triggers due in each round's minute, the rest
/// mixed schedules whose next time after `BEFORE` is over an hour after the
/// last round's minute (nothing else runs while the figure goes on).
pub(super) fn stored_set(sizes: &Sizes) -> anyhow::Result<Vec<Stored>> {
    let before = at(BEFORE);
    let (_, last) = due_minute(sizes.rounds.max(1) - 1);
    let quiet_from = last + jiff::SignedDuration::from_secs(3_600);
    let mut set = Vec::with_capacity(sizes.triggers);
    for r in 0..sizes.rounds.max(1) {
        let (mm, due) = due_minute(r);
        for i in 0..sizes.due {
            let (when, tz) = due_form(i, mm);
            let s = Schedule::parse(&when).map_err(|e| anyhow::anyhow!("{when}: {e}"))?;
            let z = schedule::zone(tz).map_err(|e| anyhow::anyhow!("{tz}: {e}"))?;
            ensure!(
                s.next_after(before, &z) == Some(due),
                "{when} in {tz:?} is not due at {due}"
            );
            set.push(Stored {
                when,
                tz,
                round: Some(r),
            });
        }
    }
    ensure!(
        set.len() <= sizes.triggers,
        "more due triggers than triggers"
    );
    let mut i = 0usize;
    while set.len() < sizes.triggers {
        ensure!(i < sizes.triggers * 4, "too few quiet schedules");
        let (when, tz, _) = mixed(i);
        i += 1;
        let s = Schedule::parse(&when).map_err(|e| anyhow::anyhow!("{when}: {e}"))?;
        let z = schedule::zone(tz).map_err(|e| anyhow::anyhow!("{tz}: {e}"))?;
        if s.next_after(before, &z).is_some_and(|t| t > quiet_from) {
            set.push(Stored {
                when,
                tz,
                round: None,
            });
        }
    }
    Ok(set)
}

/// Creates `set` through the API with `clients` at once; each create's
/// latency in completion order, and the round of each due trigger by id.
pub(super) async fn create_all(
    client: &reqwest::Client,
    set: &[Stored],
    clients: usize,
) -> anyhow::Result<(Vec<Duration>, HashMap<String, usize>)> {
    let made = futures_util::stream::iter(set.iter().enumerate())
        .map(|(i, t)| async move {
            let b = body(i, &t.when, t.tz);
            let started = Instant::now();
            let (status, answer, text) = call(
                client,
                reqwest::Method::POST,
                "/v1/chat-app/triggers",
                Some(&b),
            )
            .await?;
            let took = started.elapsed();
            ensure!(status == 201, "creating {b}: {status} {text}");
            let id = answer["id"].as_str().unwrap_or_default().to_string();
            anyhow::Ok((took, t.round.map(|r| (id, r))))
        })
        .buffer_unordered(clients.max(1))
        .collect::<Vec<_>>()
        .await;
    let mut took = Vec::with_capacity(made.len());
    let mut due = HashMap::new();
    for m in made {
        let (t, id) = m?;
        took.push(t);
        due.extend(id);
    }
    Ok((took, due))
}
