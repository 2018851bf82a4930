//! One answer of a run: the request sized (the chat compacted first at
//! its line, or when the engine finds it over the window or refuses it for
//! memory), streamed into the assistant message as deltas, its tool calls
//! merged from their chunks and kept, and retried on engine faults within
//! the retry window.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::sync::lock;
use tokio::sync::watch;

use super::compaction;
use super::kept::KeptPath;
use super::{EndRequest, Outcome, Runs, Step};
use crate::engine::{Fault, Piece};
use crate::kinds::EventKind;
use crate::model::{Conversation, Message, Run};
use crate::store::{self, messages, Delta};

/// Where one answer is written: its run, its chat and its assistant message.
#[derive(Clone, Copy)]
struct Answering<'a> {
    run: &'a Run,
    conversation: &'a Conversation,
    message: &'a Message,
}

impl Answering<'_> {
    /// A delta of this answer's text (not its reasoning) holding `text`.
    fn delta(&self, text: String) -> Delta {
        Delta {
            conversation_id: self.conversation.id.clone(),
            run_id: self.run.id.clone(),
            message_id: self.message.id.clone(),
            reasoning: false,
            text,
        }
    }
}

/// What an answer's requests have received so far, kept across retries.
struct Received {
    /// The answer's text: the message's stored text, then what streamed.
    text: String,
    /// When the current streak of engine faults began (the retry window).
    streak_started: Option<Instant>,
    /// The last request's tool calls, merged from their chunks.
    tool_calls: Vec<Value>,
}

impl Runs {
    /// One model request and its stream into `message`, with retries. The
    /// request is sized first and the chat compacted at the line. `Ok(true)`:
    /// the answer ended in tool calls. `Err((outcome, error))` ends the run.
    pub(super) async fn answer(
        &self,
        run: &Run,
        conversation: &Conversation,
        message: &Message,
        step: Step,
        kept: &mut KeptPath,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<bool, (Outcome, Option<String>)> {
        let inner = &self.inner;
        let session = self.session_of(conversation).await;
        let answering = Answering {
            run,
            conversation,
            message,
        };
        let mut received = Received {
            text: message.text.clone(),
            streak_started: None,
            tool_calls: Vec::new(),
        };
        let mut wait = Duration::from_secs(1);
        let mut busy_retried = false;
        let mut compacted_for_memory = false;
        let mut compacted_for_size = false;
        let mut line_checked = false;
        let mut attempt = 0u32;
        let window = Duration::from_secs(inner.config.retry_window_s);
        let store_err = |e: ApiError| {
            (
                Outcome::Interrupted,
                Some(format!("chatd could not write: {}", e.message)),
            )
        };
        loop {
            let mut request = self
                .request(
                    &conversation.id,
                    &run.model,
                    message,
                    &received.text,
                    step,
                    kept,
                )
                .await
                .map_err(store_err)?;
            let sizes = request.window;
            if request.tokens >= sizes.line && !line_checked {
                line_checked = true;
                if self
                    .compact_during(run, message, compaction::LINE, stop)
                    .await?
                    .is_some_and(|c| c.cut)
                {
                    request = self
                        .request(
                            &conversation.id,
                            &run.model,
                            message,
                            &received.text,
                            step,
                            kept,
                        )
                        .await
                        .map_err(store_err)?;
                }
            }
            if request.tokens > sizes.window {
                let how = if request.exact {
                    "counted by the engine"
                } else {
                    "estimated"
                };
                return Err((
                    Outcome::Failed,
                    Some(format!(
                        "the request is {} tokens ({how}), more than the model's window of {} tokens, and compaction cannot make it smaller",
                        request.tokens, sizes.window
                    )),
                ));
            }
            let fault = tokio::select! {
                result = self.stream_once(&session, &request.body.bytes, &answering, &mut received, sizes.window) => {
                    match result {
                        Ok(()) => return Ok(!received.tool_calls.is_empty()),
                        Err(fault) => fault,
                    }
                }
                _ = stop.wait_for(|r| *r == EndRequest::Stop) => return Err((Outcome::Stopped, None)),
                _ = inner.shutdown.wait() => return Err((Outcome::Interrupted, Some("chatd stopped".into()))),
            };
            let reason = fault.reason();
            // Over the window by the engine's count: compact and send once
            // more if that made the request smaller.
            if fault.is_over_context() {
                if !compacted_for_size {
                    compacted_for_size = true;
                    let compacted = self
                        .compact_during(run, message, "over the window", stop)
                        .await?;
                    if compacted.is_some_and(|c| c.cut && c.after < c.before) {
                        continue;
                    }
                }
                return Err((Outcome::Failed, Some(reason)));
            }
            let wait_for = match &fault {
                Fault::Rejected { .. } => return Err((Outcome::Failed, Some(reason))),
                Fault::Busy {
                    retry_after,
                    status,
                    ..
                } => {
                    if busy_retried {
                        // Refused twice for memory: compact, send again, and
                        // from now on compact at 80 % of the refused size.
                        if *status == 503 && !compacted_for_memory {
                            compacted_for_memory = true;
                            let before = lock(&inner.refused)
                                .insert(conversation.id.clone(), request.tokens);
                            let compacted =
                                self.compact_during(run, message, "memory", stop).await?;
                            if compacted.is_some_and(|c| c.cut) {
                                continue;
                            }
                            // Nothing compacted (the summary call failed too):
                            // the refusal is not taken as the chat's size.
                            let mut refused = lock(&inner.refused);
                            match before {
                                Some(b) => refused.insert(conversation.id.clone(), b),
                                None => refused.remove(&conversation.id),
                            };
                        }
                        return Err((Outcome::Failed, Some(reason)));
                    }
                    busy_retried = true;
                    Duration::from_secs(retry_after.unwrap_or(1).clamp(1, 120))
                }
                Fault::Unreachable(_) | Fault::Cut(_) | Fault::Server { .. } => {
                    let began = *received.streak_started.get_or_insert_with(Instant::now);
                    if began.elapsed() >= window {
                        return Err((Outcome::Interrupted, Some(reason)));
                    }
                    let this = wait.min(window.saturating_sub(began.elapsed()));
                    wait = (wait * 2).min(Duration::from_secs(inner.config.retry_max_wait_s));
                    this
                }
            };
            attempt += 1;
            inner.metrics.engine_retries.inc();
            tracing::warn!(run = %run.id, attempt, wait_s = wait_for.as_secs_f64(), fault = fault_kind(&fault), "engine fault, retrying");
            let cid = conversation.id.clone();
            let data = json!({"run_id": run.id, "attempt": attempt, "wait_s": wait_for.as_secs_f64(), "reason": reason});
            inner
                .store
                .write(move |ctx| Ok(ctx.emit(&cid, EventKind::RunRetrying, data).map(|_| ())?))
                .await
                .map_err(store_err)?;
            tokio::select! {
                _ = tokio::time::sleep(wait_for) => {}
                _ = stop.wait_for(|r| *r == EndRequest::Stop) => return Err((Outcome::Stopped, None)),
                _ = inner.shutdown.wait() => return Err((Outcome::Interrupted, Some("chatd stopped".into()))),
            }
        }
    }

    /// A compaction inside a run, ended by a stop or chatd's shutdown (then
    /// nothing is written). `Ok(None)`: it failed; the run goes on without.
    async fn compact_during(
        &self,
        run: &Run,
        message: &Message,
        reason: &str,
        stop: &mut watch::Receiver<EndRequest>,
    ) -> Result<Option<compaction::Compacted>, (Outcome, Option<String>)> {
        tokio::select! {
            compacted = self.compact(&run.conversation_id, &run.model, reason, Some(&message.id)) => {
                match compacted {
                    Ok(c) => Ok(Some(c)),
                    Err(e) => {
                        tracing::warn!(run = %run.id, reason, error = %e.message, "compaction failed");
                        Ok(None)
                    }
                }
            }
            _ = stop.wait_for(|r| *r == EndRequest::Stop) => Err((Outcome::Stopped, None)),
            _ = self.inner.shutdown.wait() => Err((Outcome::Interrupted, Some("chatd stopped".into()))),
        }
    }

    /// One request. Text received is appended to `received.text` and
    /// written as deltas; `received.tool_calls` holds this answer's calls.
    async fn stream_once(
        &self,
        session: &str,
        body: &bytes::Bytes,
        answering: &Answering<'_>,
        received: &mut Received,
        limit: u64,
    ) -> Result<(), Fault> {
        let inner = &self.inner;
        let Answering {
            run,
            conversation,
            message,
        } = *answering;
        let Received {
            text,
            streak_started,
            tool_calls,
        } = received;
        tool_calls.clear();
        let mut stream = inner.engine.stream(session, body.clone()).await?;
        let result = loop {
            let piece = match stream.next().await {
                Ok(Some(piece)) => piece,
                Ok(None) => break Ok(()),
                Err(fault) => break Err(fault),
            };
            match piece {
                Piece::Text(t) | Piece::Reasoning(t) if t.is_empty() => {}
                Piece::Text(t) => {
                    *streak_started = None;
                    text.push_str(&t);
                    self.answer_delta(answering, t).await;
                }
                Piece::Reasoning(t) => {
                    *streak_started = None;
                    self.reasoning_delta(answering, t).await;
                }
                Piece::ToolCall {
                    index,
                    id,
                    name,
                    arguments,
                } => merge_tool_call(tool_calls, index, id, name, &arguments),
                Piece::Usage {
                    prompt,
                    completion,
                    tokens_per_second,
                    prompt_ms,
                } => {
                    let mut data = json!({"run_id": run.id, "model": run.model, "used": prompt + completion, "limit": limit, "completion": completion});
                    if let Some(tps) = tokens_per_second {
                        data["tokens_per_second"] = json!(tps);
                    }
                    if let Some(ms) = prompt_ms {
                        data["prompt_ms"] = json!(ms);
                    }
                    let cid = conversation.id.clone();
                    let rid = run.id.clone();
                    let usage = data.clone();
                    let _ = inner
                        .store
                        .write(move |ctx| {
                            store::runs::set_usage(ctx, &rid, &usage)?;
                            Ok(ctx.emit(&cid, EventKind::Usage, data).map(|_| ())?)
                        })
                        .await;
                }
                Piece::Finish(_) => {}
            }
        };
        if stream.garbage > 0 {
            inner.metrics.engine_garbage_lines.inc_by(stream.garbage);
            tracing::warn!(run = %run.id, lines = stream.garbage, "skipped lines of the engine stream that were not chunks");
        }
        if result.is_ok() && !tool_calls.is_empty() {
            // Every call gets an id of chatd's own, unique in the chat: some
            // engines number calls per answer (`call_0`), and a card or a
            // result found by a repeated id would answer the wrong call.
            for (i, call) in tool_calls.iter_mut().enumerate() {
                call["id"] = json!(format!("call_{}_{i}", message.id.trim_start_matches("m_")));
            }
            let mid = message.id.clone();
            let calls = Value::Array(tool_calls.clone()).to_string();
            let saved = inner
                .store
                .write(move |ctx| messages::set_tool_calls(ctx, &mid, &calls))
                .await;
            if let Err(e) = saved {
                return Err(Fault::Cut(format!(
                    "chatd could not keep the tool calls: {}",
                    e.message
                )));
            }
        }
        result
    }

    /// A piece of the answer's text, appended to the message.
    async fn answer_delta(&self, answering: &Answering<'_>, text: String) {
        self.write_delta(answering.delta(text)).await;
    }

    /// A piece of the model's reasoning, sent to devices only.
    async fn reasoning_delta(&self, answering: &Answering<'_>, text: String) {
        let delta = Delta {
            reasoning: true,
            ..answering.delta(text)
        };
        self.write_delta(delta).await;
    }

    async fn write_delta(&self, delta: Delta) {
        let run_id = delta.run_id.clone();
        if self.inner.store.delta(delta).await.is_err() {
            tracing::warn!(run = %run_id, "delta not written: the store is closing");
        }
    }
}

fn fault_kind(fault: &Fault) -> &'static str {
    match fault {
        Fault::Unreachable(_) => "unreachable",
        Fault::Cut(_) => "cut",
        Fault::Busy { .. } => "busy",
        Fault::Server { .. } => "server",
        Fault::Rejected { .. } => "rejected",
    }
}

fn merge_tool_call(
    calls: &mut Vec<Value>,
    index: u64,
    id: Option<String>,
    name: Option<String>,
    arguments: &str,
) {
    // The index comes from the engine: a wild one must not make chatd
    // allocate without end. No model calls this many tools in one step.
    const MAX_CALLS: u64 = 64;
    if index >= MAX_CALLS {
        tracing::warn!(
            index,
            "engine sent a tool call index past {MAX_CALLS}; ignored"
        );
        return;
    }
    let index = index as usize;
    while calls.len() <= index {
        calls
            .push(json!({"id": "", "type": "function", "function": {"name": "", "arguments": ""}}));
    }
    let call = &mut calls[index];
    if let Some(id) = id {
        call["id"] = json!(id);
    }
    if let Some(name) = name {
        call["function"]["name"] = json!(name);
    }
    // Appended in place: a long argument streamed piece by piece must not
    // be copied whole at every piece.
    match &mut call["function"]["arguments"] {
        Value::String(args) => args.push_str(arguments),
        other => *other = json!(arguments),
    }
}
