//! triggerd's API on `triggers.sock` (0600, callers of triggerd's own uid
//! only), under the same paths chatd forwards from its front door:
//!
//! - `GET|POST /v1/chat-app/triggers`: the list, a new trigger (201).
//! - `GET|PUT|DELETE /v1/chat-app/triggers/{id}`: read, replace, delete.
//! - `POST …/{id}/enable`, `…/{id}/disable`, `…/{id}/run` (202 the run).
//! - `GET …/{id}/runs?limit=`: newest first.
//! - `GET …/preview?when=&tz=&count=`: the next times and what the text means.
//! - `GET /health`, `GET /metrics`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::sync::lock;
use tandem_shared::time::new_id;

use crate::clock::{rfc3339, ts};
use crate::scheduler::{new_run, Entry};
use crate::status::RunStatus;
use crate::store::{self, Kind, Trigger};
use crate::triggers::{self, Checked};
use crate::Triggerd;

/// The largest body axum reads (chatd forwards at most 1 MiB); a body over
/// `triggers::MAX_BODY` is refused by the route with the contract's error.
pub const READ_LIMIT: usize = 2 << 20;

pub fn router(td: Arc<Triggerd>) -> Router {
    let triggers = Router::new()
        .route("/preview", get(preview))
        .route("/{id}", get(read).put(replace).delete(remove))
        .route("/{id}/enable", post(enable))
        .route("/{id}/disable", post(disable))
        .route("/{id}/run", post(run_now))
        .route("/{id}/runs", get(runs));
    Router::new()
        .route("/health", get(health))
        .route("/v1/chat-app/triggers", get(list).post(create))
        .nest("/v1/chat-app/triggers", triggers)
        .merge(tandem_shared::metrics::router(td.registry.clone()))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(axum::extract::DefaultBodyLimit::max(READ_LIMIT))
        .with_state(td)
}

fn internal(err: anyhow::Error) -> ApiError {
    tracing::error!(error = %format!("{err:#}"), "store error");
    ApiError::internal("the trigger store failed; triggerd's log has the details")
}

async fn health(State(td): State<Arc<Triggerd>>) -> Json<Value> {
    let (total, enabled, running) = {
        let live = lock(&td.live);
        (live.entries.len(), live.enabled(), live.running.len())
    };
    let queued = td
        .store
        .call(|conn| store::count_with_status(conn, RunStatus::Queued))
        .await
        .ok();
    Json(json!({
        "ok": true,
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "uptime_s": td.started.elapsed().as_secs(),
        "triggers": total,
        "enabled": enabled,
        "running": running,
        "queued": queued,
        "max_runs": td.config.max_runs,
        "now": rfc3339(td.clock.now_ms()),
        "checks": td.checks.load(std::sync::atomic::Ordering::Relaxed),
    }))
}

/// A trigger's view from what the checks hold.
fn view_of(td: &Triggerd, id: &str) -> Option<Value> {
    let live = lock(&td.live);
    let e = live.entries.get(id)?;
    Some(triggers::view(
        &e.trigger,
        e.schedule.as_ref(),
        e.next_ms,
        live.running.contains_key(id),
    ))
}

async fn list(State(td): State<Arc<Triggerd>>) -> Result<Json<Value>, ApiError> {
    // Copied under the lock, shown outside it: the checks never wait on a
    // list of 10,000 being written out.
    let mut entries: Vec<(
        Trigger,
        Option<crate::schedule::Schedule>,
        Option<i64>,
        bool,
    )> = {
        let live = lock(&td.live);
        live.entries
            .values()
            .map(|e| {
                (
                    e.trigger.clone(),
                    e.schedule.clone(),
                    e.next_ms,
                    live.running.contains_key(&e.trigger.id),
                )
            })
            .collect()
    };
    // 10,000 views are a few hundred ms of work: not on the async workers,
    // which /health and the checks share.
    let list = tokio::task::spawn_blocking(move || {
        entries.sort_by(|a, b| (a.0.created_ms, &a.0.id).cmp(&(b.0.created_ms, &b.0.id)));
        let list: Vec<Value> = entries
            .iter()
            .map(|(t, schedule, next, running)| {
                triggers::view(t, schedule.as_ref(), *next, *running)
            })
            .collect();
        json!({ "triggers": list })
    })
    .await
    .map_err(|e| internal(e.into()))?;
    Ok(Json(list))
}

async fn read(
    State(td): State<Arc<Triggerd>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    view_of(&td, &id)
        .map(Json)
        .ok_or_else(|| ApiError::not_found("trigger", &id))
}

/// A file trigger's folder as it is now: its files start nothing.
async fn baseline(td: &Arc<Triggerd>, trigger: &Trigger) -> Result<(), ApiError> {
    if trigger.kind != Kind::File || !trigger.enabled {
        return Ok(());
    }
    let folder = td.workspace.join(&trigger.folder);
    let scanned = tokio::task::spawn_blocking(move || crate::folders::scan(&folder))
        .await
        .map_err(|e| internal(e.into()))?
        .map_err(|e| ApiError::bad_input("folder", format!("cannot be read: {e}")))?;
    let (id, now) = (trigger.id.clone(), trigger.enabled_ms);
    td.store
        .call(move |conn| {
            let rows: Vec<store::FileState> = scanned
                .files
                .into_iter()
                .map(|(path, version)| store::FileState {
                    path,
                    ran_version: Some(version.clone()),
                    version,
                    seen_ms: now,
                    ran_ms: None,
                })
                .collect();
            let tx = conn.transaction()?;
            store::clear_files(&tx, &id)?;
            store::put_files(&tx, &id, &rows, &[])?;
            tx.commit()
        })
        .await
        .map_err(internal)
}

fn fill(t: &mut Trigger, c: Checked) {
    t.name = c.name;
    t.kind = c.kind;
    t.when = c.when;
    t.tz = c.tz;
    t.folder = c.folder;
    t.quiet_seconds = c.quiet_seconds;
    t.min_gap_seconds = c.min_gap_seconds;
    t.prompt = c.prompt;
    t.model = c.model;
    t.agent_id = c.agent_id;
    t.daily_cap = c.daily_cap;
    t.enabled = c.enabled;
}

/// A trigger naming a saved agent names one chatd has, and one that can
/// run it (`triggers::agent_unfit`: its folder).
async fn check_agent(td: &Arc<Triggerd>, trigger: &Trigger) -> Result<(), ApiError> {
    let agent = &trigger.agent_id;
    if agent.is_empty() {
        return Ok(());
    }
    match td.chat.agent(agent).await {
        Ok(Some(found)) => match triggers::agent_unfit(trigger, &found) {
            None => Ok(()),
            Some(why) => Err(ApiError::bad_input("agent_id", why)),
        },
        Ok(None) => Err(ApiError::bad_input(
            "agent_id",
            format!("chatd has no saved agent {agent:?}"),
        )),
        Err(err) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "chatd_unavailable",
            format!("the agent cannot be checked: {err}"),
        )),
    }
}

/// Takes `trigger`'s baseline afresh, then stores it (`save`): for a new
/// trigger, or one switched on or moved to another schedule or folder.
async fn save_from_now(td: &Arc<Triggerd>, trigger: Trigger) -> Result<Value, ApiError> {
    baseline(td, &trigger).await?;
    save(td, trigger).await
}

/// Stores `trigger` and puts it in the checks; its baseline stays.
async fn save(td: &Arc<Triggerd>, trigger: Trigger) -> Result<Value, ApiError> {
    let stored = trigger.clone();
    td.store
        .call(move |conn| store::put_trigger(conn, &stored))
        .await
        .map_err(internal)?;
    let id = trigger.id.clone();
    {
        let mut live = lock(&td.live);
        live.entries
            .insert(id.clone(), Entry::new(trigger, &td.workspace));
        td.metrics.enabled.set(live.enabled() as i64);
    }
    crate::sync_watches(td);
    // No check is woken: a schedule saved now is due after now, and a
    // folder's files are its baseline.
    view_of(td, &id).ok_or_else(|| ApiError::internal("the trigger vanished"))
}

async fn create(State(td): State<Arc<Triggerd>>, body: Bytes) -> Result<Response, ApiError> {
    let body = triggers::parse_body(&body)?;
    let now = td.clock.now_ms();
    let checked = triggers::check(body, &td.workspace, now)?;
    let count = lock(&td.live).entries.len();
    if count >= td.config.max_triggers {
        return Err(ApiError::conflict(
            "too_many_triggers",
            format!(
                "there are {count} triggers, the most triggerd keeps (max_triggers {}): delete one first",
                td.config.max_triggers
            ),
        )
        .with("limit", td.config.max_triggers));
    }
    let mut trigger = Trigger {
        id: new_id("t_"),
        name: String::new(),
        kind: Kind::Schedule,
        when: String::new(),
        tz: String::new(),
        folder: String::new(),
        quiet_seconds: 0,
        min_gap_seconds: 0,
        prompt: String::new(),
        model: String::new(),
        agent_id: String::new(),
        daily_cap: 0,
        enabled: true,
        enabled_ms: now,
        checked_ms: now,
        disabled_reason: None,
        created_ms: now,
        updated_ms: now,
    };
    fill(&mut trigger, checked);
    check_agent(&td, &trigger).await?;
    let view = save_from_now(&td, trigger).await?;
    tracing::info!(trigger = %view["id"].as_str().unwrap_or(""), kind = %view["kind"].as_str().unwrap_or(""), "trigger created");
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

fn current(td: &Triggerd, id: &str) -> Result<Trigger, ApiError> {
    lock(&td.live)
        .entries
        .get(id)
        .map(|e| e.trigger.clone())
        .ok_or_else(|| ApiError::not_found("trigger", id))
}

async fn replace(
    State(td): State<Arc<Triggerd>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let mut trigger = current(&td, &id)?;
    let body = triggers::parse_body(&body)?;
    let now = td.clock.now_ms();
    let checked = triggers::check(body, &td.workspace, now)?;
    let was = trigger.clone();
    fill(&mut trigger, checked);
    check_agent(&td, &trigger).await?;
    trigger.updated_ms = now;
    let switched_on = trigger.enabled && !was.enabled;
    let moved = trigger.when != was.when || trigger.tz != was.tz || trigger.folder != was.folder;
    if switched_on || moved {
        // Nothing due before now runs for the new schedule or folder.
        trigger.enabled_ms = now;
        trigger.checked_ms = now;
    }
    if trigger.enabled {
        trigger.disabled_reason = None;
    }
    let view = if switched_on || moved {
        save_from_now(&td, trigger).await?
    } else {
        save(&td, trigger).await?
    };
    tracing::info!(trigger = %id, "trigger replaced");
    Ok(Json(view))
}

async fn remove(
    State(td): State<Arc<Triggerd>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    current(&td, &id)?;
    let tid = id.clone();
    td.store
        .call(move |conn| store::delete_trigger(conn, &tid))
        .await
        .map_err(internal)?;
    let stopping = {
        let mut live = lock(&td.live);
        live.entries.remove(&id);
        td.metrics.enabled.set(live.enabled() as i64);
        // Its running run ends too (queued ones went with the trigger).
        live.cancels
            .get(&id)
            .map(|bell| bell.notify_one())
            .is_some()
    };
    crate::sync_watches(&td);
    tracing::info!(trigger = %id, stopping, "trigger deleted");
    Ok(StatusCode::NO_CONTENT)
}

async fn enable(
    State(td): State<Arc<Triggerd>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let mut trigger = current(&td, &id)?;
    if trigger.enabled {
        return view_of(&td, &id)
            .map(Json)
            .ok_or_else(|| ApiError::not_found("trigger", &id));
    }
    if trigger.kind == Kind::File || !trigger.folder.is_empty() {
        crate::folders::resolve(&td.workspace, &trigger.folder)
            .map_err(|e| ApiError::bad_input("folder", e))?;
    }
    let now = td.clock.now_ms();
    trigger.enabled = true;
    trigger.enabled_ms = now;
    trigger.checked_ms = now;
    trigger.disabled_reason = None;
    trigger.updated_ms = now;
    check_agent(&td, &trigger).await?;
    let view = save_from_now(&td, trigger).await?;
    tracing::info!(trigger = %id, "trigger switched on");
    Ok(Json(view))
}

async fn disable(
    State(td): State<Arc<Triggerd>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let mut trigger = current(&td, &id)?;
    if !trigger.enabled {
        return view_of(&td, &id)
            .map(Json)
            .ok_or_else(|| ApiError::not_found("trigger", &id));
    }
    trigger.enabled = false;
    trigger.updated_ms = td.clock.now_ms();
    let view = save(&td, trigger).await?;
    tracing::info!(trigger = %id, "trigger switched off");
    Ok(Json(view))
}

async fn run_now(
    State(td): State<Arc<Triggerd>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let trigger = current(&td, &id)?;
    let now = td.clock.now_ms();
    let tid = id.clone();
    let run = td
        .store
        .call(move |conn| {
            let waiting: i64 = conn.query_row(
                "SELECT COUNT(*) FROM runs WHERE trigger_id = ?1 AND status IN (?2, ?3)",
                rusqlite::params![tid, RunStatus::Queued, RunStatus::Running],
                |r| r.get(0),
            )?;
            if waiting > 0 {
                return Ok(None);
            }
            let mut run = new_run(&tid, &trigger.name, String::new(), "manual", now, None, now);
            run.due_key = format!("{tid}:manual:{}", run.id);
            store::queue_run(conn, &run)
        })
        .await
        .map_err(internal)?;
    let Some(run) = run else {
        return Err(ApiError::conflict(
            "run_active",
            "a run of this trigger is queued or running: wait for it to end",
        ));
    };
    td.wake.notify_one();
    tracing::info!(trigger = %id, run = %run.id, "trigger run asked for");
    Ok((StatusCode::ACCEPTED, Json(triggers::run_view(&run))).into_response())
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RunsQuery {
    limit: Option<String>,
}

/// The most runs one answer lists.
pub const MAX_RUNS_LISTED: usize = 1000;

async fn runs(
    State(td): State<Arc<Triggerd>>,
    Path(id): Path<String>,
    Query(q): Query<RunsQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = match q.limit.as_deref() {
        None => 50,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_RUNS_LISTED).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_input(
                    "limit",
                    format!("{text:?} is not a number in 1..={MAX_RUNS_LISTED}"),
                ))
            }
        },
    };
    let known = lock(&td.live).entries.contains_key(&id);
    let tid = id.clone();
    let runs = td
        .store
        .call(move |conn| store::runs_of(conn, &tid, limit))
        .await
        .map_err(internal)?;
    if !known && runs.is_empty() {
        return Err(ApiError::not_found("trigger", &id));
    }
    let list: Vec<Value> = runs.iter().map(triggers::run_view).collect();
    Ok(Json(json!({ "runs": list })))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PreviewQuery {
    when: Option<String>,
    tz: Option<String>,
    count: Option<String>,
}

async fn preview(
    State(td): State<Arc<Triggerd>>,
    Query(q): Query<PreviewQuery>,
) -> Result<Json<Value>, ApiError> {
    let when = q.when.unwrap_or_default();
    let tz = q.tz.unwrap_or_default();
    let count = match q.count.as_deref() {
        None => 5,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=50).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_input(
                    "count",
                    format!("{text:?} is not a number in 1..=50"),
                ))
            }
        },
    };
    let zone = crate::schedule::zone(&tz).map_err(|e| ApiError::bad_input("tz", e))?;
    if when.trim().is_empty() {
        return Err(ApiError::bad_input("when", "is empty"));
    }
    let schedule = crate::schedule::Schedule::parse(when.trim())
        .map_err(|e| ApiError::bad_input("when", e))?;
    let now = td.clock.now();
    let mut next = Vec::new();
    let mut after = now;
    while next.len() < count {
        let Some(at) = schedule.next_after(after, &zone) else {
            break;
        };
        let local = at.to_zoned_datetime(zone.clone());
        next.push(json!({
            "at": at.to_string(),
            "local": local.strftime("%a %Y-%m-%d %H:%M %Z").to_string(),
        }));
        after = at;
    }
    if next.is_empty() {
        return Err(ApiError::bad_input(
            "when",
            format!(
                "{:?} is in the past (it is {} in {})",
                when.trim(),
                now.to_zoned_datetime(zone.clone())
                    .strftime("%Y-%m-%d %H:%M"),
                if tz.is_empty() { "UTC" } else { &tz }
            ),
        ));
    }
    Ok(Json(json!({
        "when": when.trim(),
        "tz": if tz.is_empty() { "UTC" } else { &tz },
        "description": schedule.describe(),
        "now": ts(now.as_millisecond()).to_string(),
        "next": next,
    })))
}
