//! The simulator's routes: the router, error answers, `/v1/models` and the
//! `/sim/*` control endpoints (faults, refusal, cache, requests, stats).

use super::*;

pub(super) fn router(sim: Arc<Sim>) -> Router {
    let mut app = Router::new();
    if sim.config.tokenize {
        app = app
            .route("/v1/tokenize", post(tokenize))
            .route("/tokenize", post(tokenize));
    }
    if sim.config.transcriptions {
        app = app.route("/v1/audio/transcriptions", post(transcriptions));
    }
    app.route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route(
            "/sim/faults",
            post(faults_push).get(faults_get).delete(faults_clear),
        )
        .route("/v1/cache/release", post(cache_release))
        .route("/sim/cache", post(cache_set).get(cache_get))
        .route("/sim/refuse", post(refuse))
        .route("/sim/requests", get(requests_get).delete(requests_clear))
        .route(
            "/sim/transcriptions",
            get(transcriptions_get).delete(transcriptions_clear),
        )
        .route("/sim/stats", get(stats))
        .route("/sim/reset", post(reset))
        .fallback(|| async {
            error_response(404, "engine-sim: no such route", "not_found_error", None)
        })
        .layer(DefaultBodyLimit::max(256 * 1024 * 1024))
        .with_state(sim)
}

pub(super) fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        501 => "not_supported_error",
        503 => "unavailable_error",
        _ => "server_error",
    }
}

pub(super) fn error_response(
    status: u16,
    message: &str,
    typ: &str,
    retry_after: Option<&str>,
) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"code": status, "message": message, "type": typ}});
    let mut resp = (code, Json(body)).into_response();
    if let Some(v) = retry_after.and_then(|v| HeaderValue::from_str(v).ok()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

pub(super) fn bad_request(sim: &Sim, message: &str) -> Response {
    sim.count_status(400);
    error_response(400, message, "invalid_request_error", None)
}

pub(super) async fn models(State(sim): State<Arc<Sim>>) -> Json<Value> {
    let c = &sim.config;
    let mut capabilities = vec!["completion", "tools"];
    if c.vision {
        capabilities.push("vision");
    }
    let entry = |id: &str, capabilities: &[&str]| {
        json!({
            "id": id,
            "object": "model",
            "created": unix_secs(),
            "owned_by": "engine-sim",
            "max_model_len": c.context_window,
            "meta": {"n_ctx_train": c.context_window},
            "capabilities": capabilities,
        })
    };
    let mut data = vec![entry(&c.model, &capabilities)];
    for id in &c.extra_models {
        data.push(entry(id, &["completion", "tools"]));
    }
    if let Some(id) = &c.vision_model {
        data.push(entry(id, &["completion", "vision"]));
    }
    if let Some(id) = &c.transcription_model {
        data.push(entry(id, &["transcription"]));
    }
    Json(json!({"object": "list", "data": data}))
}

pub(super) fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(super) fn unix_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// The most characters of a session a fault queue is kept for.
const SESSION_MAX_CHARS: usize = 200;

/// A `session` as `/sim/faults` takes it: a string of 1 to 200 characters.
fn checked_session(v: &Value) -> Result<String, String> {
    match v.as_str() {
        Some(s) if !s.is_empty() && s.chars().count() <= SESSION_MAX_CHARS => Ok(s.to_string()),
        _ => Err(format!(
            "bad session: must be a string of 1 to {SESSION_MAX_CHARS} characters (an x-session-id)"
        )),
    }
}

/// `POST /sim/faults {"next":[..]}` queues for any request;
/// `{"session":"chat-<id>","next":[..]}` for that session's requests only.
pub(super) async fn faults_push(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(&sim, &format!("malformed JSON: {e}")),
    };
    let session = match v.get("session").map(checked_session) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return bad_request(&sim, &e),
    };
    let Some(next) = v.get("next").and_then(Value::as_array) else {
        return bad_request(
            &sim,
            "body must be {\"next\":[{...fault...}]} (and maybe \"session\")",
        );
    };
    let mut faults = Vec::with_capacity(next.len());
    for f in next {
        match Fault::from_json(f) {
            Ok(f) => faults.push(f),
            Err(e) => return bad_request(&sim, &format!("bad fault: {e}")),
        }
    }
    let mut inner = sim.lock();
    match session {
        Some(session) => {
            let queue = inner.sessions.entry(session.clone()).or_default();
            queue.extend(faults);
            let queued = queue.len();
            if queued == 0 {
                inner.sessions.remove(&session);
            }
            Json(json!({"session": session, "queued": queued})).into_response()
        }
        None => {
            inner.queue.extend(faults);
            Json(json!({"queued": inner.queue.len()})).into_response()
        }
    }
}

/// `GET /sim/faults`: the global queue, `{"next":[..]}`; with
/// `?session=S`, that session's, `{"session":S,"next":[..]}`.
pub(super) async fn faults_get(
    State(sim): State<Arc<Sim>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let session = match query.get("session").map(|s| checked_session(&json!(s))) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return bad_request(&sim, &e),
    };
    let inner = sim.lock();
    let listed = |q: Option<&VecDeque<Fault>>| -> Vec<Value> {
        q.into_iter().flatten().map(Fault::to_json).collect()
    };
    match session {
        Some(session) => {
            let next = listed(inner.sessions.get(&session));
            Json(json!({"session": session, "next": next})).into_response()
        }
        None => Json(json!({"next": listed(Some(&inner.queue))})).into_response(),
    }
}

/// `DELETE /sim/faults`: clears every queue, the sessions' too.
pub(super) async fn faults_clear(State(sim): State<Arc<Sim>>) -> Json<Value> {
    let mut inner = sim.lock();
    inner.queue.clear();
    inner.sessions.clear();
    Json(json!({"queued": 0}))
}

pub(super) async fn refuse(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(&sim, &format!("malformed JSON: {e}")),
    };
    let seconds = match v.get("seconds").and_then(Value::as_f64) {
        Some(s) if s.is_finite() && (0.0..=86400.0).contains(&s) => s,
        _ => return bad_request(&sim, "body must be {\"seconds\": F} with 0 <= F <= 86400"),
    };
    sim.refuse(seconds).await;
    Json(json!({"refusing_for_s": seconds})).into_response()
}

/// `POST /v1/cache/release {"bytes"}`: frees what the cache can, up to the
/// bytes asked, and says how much.
pub(super) async fn cache_release(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(asked) = v.get("bytes").and_then(Value::as_u64) else {
        return bad_request(&sim, "body must be {\"bytes\": N}");
    };
    let freed = {
        let mut inner = sim.lock();
        let freed = asked.min(inner.can_free);
        inner.can_free -= freed;
        inner.releases.push((asked, freed));
        freed
    };
    if let (Some(path), true) = (&sim.config.meminfo, freed > 0) {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let now = text
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        write_meminfo(path, now + freed / 1024);
    }
    Json(json!({"released": freed})).into_response()
}

/// Writes a /proc/meminfo-shaped file saying `available_kb` is available.
pub fn write_meminfo(path: &std::path::Path, available_kb: u64) {
    let text = format!(
        "MemTotal:       25165824 kB\nMemFree:        {available_kb} kB\nMemAvailable:   {available_kb} kB\n"
    );
    // Written whole then renamed, so a reader never sees half a file.
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// `POST /sim/cache {"can_free"}`: what the next releases may free.
pub(super) async fn cache_set(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(can_free) = v.get("can_free").and_then(Value::as_u64) else {
        return bad_request(&sim, "body must be {\"can_free\": N}");
    };
    sim.lock().can_free = can_free;
    Json(json!({"can_free": can_free})).into_response()
}

/// `GET /sim/cache`: `{can_free, releases: [{asked, freed}]}`.
pub(super) async fn cache_get(State(sim): State<Arc<Sim>>) -> Json<Value> {
    let inner = sim.lock();
    let releases: Vec<Value> = inner
        .releases
        .iter()
        .map(|(asked, freed)| json!({"asked": asked, "freed": freed}))
        .collect();
    Json(json!({"can_free": inner.can_free, "releases": releases}))
}

pub(super) async fn requests_get(State(sim): State<Arc<Sim>>) -> Json<Value> {
    Json(Value::Array(sim.lock().log.iter().cloned().collect()))
}

pub(super) async fn requests_clear(State(sim): State<Arc<Sim>>) -> Json<Value> {
    sim.lock().log.clear();
    Json(json!({"cleared": true}))
}

pub(super) async fn stats(State(sim): State<Arc<Sim>>) -> Json<Value> {
    let inner = sim.lock();
    let s = &inner.stats;
    let statuses: Map<String, Value> = s
        .statuses
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    Json(json!({
        "requests": s.requests,
        "completed": s.completed,
        "tokens_sent": s.tokens_sent,
        "cuts": s.cuts,
        "refusals": s.refusals,
        "statuses": statuses,
        "queued_faults": inner.queued_faults(),
        "tokenize_requests": s.tokenizes,
    }))
}

pub(super) async fn reset(State(sim): State<Arc<Sim>>) -> Json<Value> {
    *sim.lock() = Inner::default();
    Json(json!({"reset": true}))
}
