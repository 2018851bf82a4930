//! `getUpdates`: the long poll of the queued updates, with its offset and
//! the 409 of a second poller.

use super::*;

pub(super) async fn get_updates(shared: &Shared, params: &Params) -> Outcome {
    let offset = params.int("offset").unwrap_or(0);
    let limit = params.int("limit").unwrap_or(100).clamp(1, 100) as usize;
    let timeout = params.int("timeout").unwrap_or(0).clamp(0, 50) as u64;
    let allowed: Vec<String> = params
        .object("allowed_updates")
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let generation = {
        let mut inner = shared.lock();
        inner.poll_generation += 1;
        inner.poll_generation
    };
    shared.wake();
    let mut changed = shared.changed.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        changed.borrow_and_update();
        {
            let mut inner = shared.lock();
            if inner.poll_generation != generation {
                return Err((409, CONFLICT.into(), None));
            }
            if inner.always.contains_key("getUpdates") {
                // A fault switched on while this poll waited: ended like
                // Telegram ends it, with the fault at the next call.
                return Ok(json!([]));
            }
            // Telegram: an offset confirms every update before it; a
            // negative one keeps only the last -offset updates.
            if offset > 0 {
                inner
                    .updates
                    .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
            } else if offset < 0 {
                let keep = offset.unsigned_abs() as usize;
                while inner.updates.len() > keep {
                    inner.updates.pop_front();
                }
            }
            let ready: Vec<Value> = inner
                .updates
                .iter()
                .filter(|u| allowed.is_empty() || allowed.iter().any(|k| u.get(k).is_some()))
                .take(limit)
                .cloned()
                .collect();
            if !ready.is_empty() {
                return Ok(Value::Array(ready));
            }
        }
        tokio::select! {
            _ = changed.changed() => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(json!([])),
        }
    }
}
