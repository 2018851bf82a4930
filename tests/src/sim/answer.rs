//! `/tokenize` and `/v1/chat/completions`: a chat request checked, planned
//! and answered, with its stamped body.

use super::*;

/// `POST /v1/tokenize`, vLLM's shape: `{"messages", "tools"?}` or
/// `{"prompt"}` -> `{"count", "max_model_len", "tokens"}`.
pub(super) async fn tokenize(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    sim.lock().stats.tokenizes += 1;
    let req = match serde_json::from_slice::<Value>(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return bad_request(&sim, "the request body must be a JSON object"),
        Err(e) => return bad_request(&sim, &format!("malformed JSON: {e}")),
    };
    let count = if req.get("messages").is_some() {
        match checked_messages(&req) {
            Ok(messages) => count_prompt_tokens(messages, req.get("tools")),
            Err(e) => return bad_request(&sim, &e),
        }
    } else if let Some(prompt) = req.get("prompt") {
        match prompt.as_str() {
            Some(p) => (p.chars().count() / 4 + 1) as u64,
            None => return bad_request(&sim, "'prompt' must be a string"),
        }
    } else {
        return bad_request(&sim, "the body needs 'messages' (chat) or 'prompt' (text)");
    };
    Json(json!({
        "count": count,
        "max_model_len": sim.config.context_window,
        "tokens": (0..count).collect::<Vec<u64>>(),
    }))
    .into_response()
}

/// `POST /v1/chat/completions`: the answer, its body wrapped so that the
/// request log gets `done_us` when its last byte goes out.
pub(super) async fn chat(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> Response {
    let at_us = unix_micros() as u64;
    let n = sim.received.fetch_add(1, Ordering::Relaxed);
    let response = chat_answer(sim.clone(), headers, body, n, at_us).await;
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::new(Stamped {
            inner: body,
            sim,
            n,
            stamped: false,
        }),
    )
}

/// A response body that notes in the request log when its end went out
/// (its last frame handed to the connection, or its error).
pub(super) struct Stamped {
    pub(super) inner: Body,
    pub(super) sim: Arc<Sim>,
    pub(super) n: u64,
    pub(super) stamped: bool,
}

impl Stamped {
    pub(super) fn stamp(&mut self) {
        if std::mem::replace(&mut self.stamped, true) {
            return;
        }
        let done = unix_micros() as u64;
        let mut inner = self.sim.lock();
        if let Some(entry) = inner
            .log
            .iter_mut()
            .rev()
            .find(|e| e.get("n").and_then(Value::as_u64) == Some(self.n))
        {
            entry["done_us"] = json!(done);
        }
    }
}

impl hyper::body::Body for Stamped {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        use std::task::Poll;
        let this = self.get_mut();
        let polled = hyper::body::Body::poll_frame(std::pin::Pin::new(&mut this.inner), cx);
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.stamp(),
            // A body that knows it has ended is not polled again.
            Poll::Ready(Some(Ok(_))) if hyper::body::Body::is_end_stream(&this.inner) => {
                this.stamp()
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(&self.inner)
    }
}

pub(super) async fn chat_answer(
    sim: Arc<Sim>,
    headers: HeaderMap,
    body: Bytes,
    n: u64,
    at_us: u64,
) -> Response {
    sim.lock().stats.requests += 1;
    let session_id = headers
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let parsed = serde_json::from_slice::<Value>(&body);
    let counted = parsed.as_ref().ok().and_then(|req| {
        let messages = req.get("messages")?.as_array()?;
        Some(count_prompt_tokens(messages, req.get("tools")))
    });
    {
        let logged = match &parsed {
            Ok(v) => v.clone(),
            Err(_) => Value::String(String::from_utf8_lossy(&body).into_owned()),
        };
        let mut inner = sim.lock();
        if inner.log.len() >= REQUEST_LOG_MAX {
            inner.log.pop_front();
        }
        inner.log.push_back(json!({
            "session_id": session_id,
            "body": logged,
            "prompt_tokens": counted,
            "at": jiff::Timestamp::now().to_string(),
            "at_us": at_us,
            "done_us": null,
            "body_bytes": body.len(),
            "n": n,
        }));
    }
    let req = match parsed {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return bad_request(&sim, "the request body must be a JSON object"),
        Err(e) => return bad_request(&sim, &format!("malformed JSON: {e}")),
    };
    let messages = match checked_messages(&req) {
        Ok(m) => m,
        Err(e) => return bad_request(&sim, &e),
    };
    if let Some(answer) = vision_answer(&sim, &req, messages).await {
        return answer;
    }
    let stream = req.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = req
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let max_tokens = req
        .get("max_completion_tokens")
        .or_else(|| req.get("max_tokens"))
        .and_then(Value::as_u64)
        .map(|n| n as usize);

    let prompt_tokens = count_prompt_tokens(messages, req.get("tools"));

    // Continuation by prefill.
    let last = &messages[messages.len() - 1];
    let prefill = (last.get("role").and_then(Value::as_str) == Some("assistant"))
        .then(|| content_text(last))
        .filter(|t| !t.is_empty());

    // Cues in the last user message (not the last message: tool calls and
    // their results may follow it), then the queued fault.
    let last_user = messages.iter().rposition(|m| role(m) == Some("user"));
    let user_text = last_user
        .map(|i| content_text(&messages[i]))
        .unwrap_or_default();
    let tool_results = messages[last_user.map_or(0, |i| i + 1)..]
        .iter()
        .filter(|m| role(m) == Some("tool"))
        .count();
    let cue = match parse_cues(&user_text) {
        Ok(c) => c,
        Err(e) => return bad_request(&sim, &format!("engine-sim: bad cue: {e}")),
    };
    let (failure, fault, pieces, start) = {
        let mut inner = sim.lock();
        let queued = inner.take_fault(session_id.as_deref());
        let mut fault = Fault::default();
        let mut failure = None;
        if let Some((_, cf)) = &cue {
            fault.merge(cf);
        }
        if let Some(q) = &queued {
            fault.merge(q);
        }
        // A literal answer is counted in its pieces, `w{i} ` ones in tokens.
        let pieces = fault.text.as_deref().map(text_pieces);
        let start = match (&pieces, prefill.as_deref()) {
            (_, None) => 0,
            (Some(pieces), Some(p)) => text_continuation_start(pieces, p),
            (None, Some(p)) => continuation_start(p),
        };
        if let Some(q) = &queued {
            failure = failure_of(q, start);
        }
        if failure.is_none() {
            if let Some((key, cf)) = &cue {
                if let Some(f) = failure_of(cf, start) {
                    let limit = cf
                        .fail_times
                        .or(matches!(f, Failure::Refuse(_)).then_some(1));
                    let count = inner.counters.entry(key.clone()).or_insert(0);
                    if limit.is_none_or(|l| *count < l) {
                        *count += 1;
                        failure = Some(f);
                    }
                }
            }
        }
        (failure, fault, pieces, start)
    };

    match failure {
        Some(Failure::Refuse(seconds)) => {
            sim.refuse(seconds).await;
            // The engine went away mid-request: no answer; the connection is
            // closed under us.
            return std::future::pending().await;
        }
        Some(Failure::Status(status)) => {
            sim.count_status(status);
            let typ = error_type(status);
            let message = fault.message.clone().unwrap_or_else(|| match status {
                503 => {
                    "engine-sim: the engine is busy (simulated out of memory), retry later".into()
                }
                429 => "engine-sim: too many requests (simulated), retry later".into(),
                _ => format!("engine-sim: simulated error {status}"),
            });
            return error_response(status, &message, typ, fault.retry_after.as_deref());
        }
        _ => {}
    }
    let cut_after = match failure {
        Some(Failure::Cut(k)) => Some(k),
        _ => None,
    };

    if prompt_tokens > sim.config.context_window {
        sim.count_status(400);
        let body = json!({"error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt_tokens,
            "n_ctx": sim.config.context_window,
        }});
        return (StatusCode::BAD_REQUEST, Json(body)).into_response();
    }
    if let Some(limit) = sim
        .config
        .memory_limit_tokens
        .filter(|&l| prompt_tokens > l)
    {
        sim.count_status(503);
        let message = format!(
            "engine-sim: could not allocate memory for {prompt_tokens} tokens \
             (the KV cache holds {limit}), retry later"
        );
        return error_response(503, &message, error_type(503), Some("1"));
    }

    let mut calls = fault.calls();
    // Like a real engine: a request that offers no tools gets text.
    if req
        .get("tools")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        calls.clear();
    }
    if let Some(steps) = fault.tool_steps {
        let per_step = calls.len().max(1) as u64;
        if tool_results as u64 >= steps.saturating_mul(per_step) {
            calls.clear();
        }
    }
    let default_tokens = if calls.is_empty() {
        sim.config.tokens
    } else {
        0
    };
    let total = match &pieces {
        Some(p) => fault.tokens.map_or(p.len(), |t| t.min(p.len())),
        None => fault.tokens.unwrap_or(default_tokens),
    };
    let mut reasoning = if start == 0 {
        fault.reasoning.unwrap_or(0)
    } else {
        0
    };
    let mut content = total.saturating_sub(start);
    let mut finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    if let Some(max) = max_tokens {
        if reasoning + content + calls.len() > max {
            reasoning = reasoning.min(max);
            content = content.min(max - reasoning);
            finish = "length";
        }
    }
    let tps = fault.tps.unwrap_or(sim.config.tokens_per_second);
    let seq = sim.seq.fetch_add(1, Ordering::Relaxed);
    let plan = Plan {
        id: format!("chatcmpl-sim{seq:06}"),
        created: unix_secs(),
        model: sim.config.model.clone(),
        start,
        content,
        reasoning,
        tools: if finish == "tool_calls" {
            calls
                .into_iter()
                .enumerate()
                .map(|(i, c)| PlannedCall {
                    // Some engines number calls per answer, the same in every answer.
                    id: if fault.plain_ids.unwrap_or(false) {
                        format!("call_{i}")
                    } else {
                        format!("call_sim{seq:06}_{i}")
                    },
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect()
        } else {
            Vec::new()
        },
        finish,
        interval: (tps > 0.0).then(|| {
            Duration::try_from_secs_f64(1.0 / tps)
                .unwrap_or(Duration::MAX)
                .min(Duration::from_secs(3600))
        }),
        first_token: Duration::from_millis(fault.first_token_ms.unwrap_or(0)),
        cut_after,
        garbage: fault.garbage.unwrap_or(false),
        stamp: fault.stamp.unwrap_or(false),
        pieces,
        include_usage,
        prompt_tokens,
    };
    if stream {
        stream_answer(sim, plan)
    } else {
        whole_answer(sim, plan).await
    }
}
