//! Compaction: when a chat's request reaches the line, its older part is
//! summarised by one model call and a `compacted` message takes its place in
//! later requests; the last turns are kept word for word. The result lands
//! under half the line.

use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::Runs;
use crate::context::{self, Window};
use crate::engine::Piece;
use crate::kinds::EventKind;
use crate::model::Message;
use crate::store::messages::{self, NewSummary};
use crate::store::queries::{self, Trashed};

const SUMMARY_PROMPT: &str = "You compact a conversation between a person and an assistant \
so the assistant can go on with the work. Write a summary of the conversation below for the \
assistant itself: the person's goals and requests in their words, decisions taken, files read \
or changed (with paths), facts found, what is done and what is still open. Keep names, numbers \
and paths exact. No preamble.";

/// The reason of a compaction a run makes when its request reaches the line.
pub(crate) const LINE: &str = "line";

/// What a compaction did, in prompt tokens.
#[derive(Debug, Clone, Copy)]
pub struct Compacted {
    pub before: u64,
    pub after: u64,
    /// The summary call's own size: its prompt and its answer.
    pub summary_prompt: u64,
    pub summary_tokens: u64,
    /// `false`: nothing could be cut (everything already fits in the kept turns).
    pub cut: bool,
}

impl Runs {
    /// `POST …/compact`: compacts a chat with no run, in an engine slot of
    /// its own (the summary is a model call like any other).
    pub async fn compact_now(
        &self,
        conversation_id: &str,
        model: &str,
    ) -> Result<Compacted, ApiError> {
        let _slot = self
            .inner
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("the engine slots are closed"))?;
        self.compact(conversation_id, model, "asked", None).await
    }

    /// Compacts the chat. `streaming`: the answer a run is writing, kept
    /// after the summary (it moves under the `compacted` message).
    pub(crate) async fn compact(
        &self,
        conversation_id: &str,
        model: &str,
        reason: &str,
        streaming: Option<&str>,
    ) -> Result<Compacted, ApiError> {
        let inner = &self.inner;
        let cid = conversation_id.to_string();
        let answer = streaming.map(str::to_string);
        let (history, streaming) = inner
            .store
            .read(move |conn| {
                let conversation = queries::conversation(conn, &cid, Trashed::Include)?;
                let streaming = match answer {
                    Some(id) => Some(queries::message(conn, &cid, &id)?),
                    None => None,
                };
                let leaf = match &streaming {
                    Some(m) => m.parent_id.clone(),
                    None => conversation.head_id.clone(),
                };
                Ok((queries::path_to(conn, &cid, leaf.as_deref())?, streaming))
            })
            .await?;
        let prefill = streaming.as_ref().map_or("", |m| m.text.as_str());
        let brief = self
            .brief(conversation_id, model, super::mcp::Lists::AsOpen)
            .await?;
        let sizes = brief.window;
        let (system, tools) = (&brief.system, &brief.tools);
        let before = self
            .sized(model, system, &history, tools, prefill, sizes.line)
            .await;

        let transcript = context::transcript(&history);
        // The kept turns get what is left under the target once the system
        // block, the tools and the summary are in.
        let fixed = brief.fixed_tokens();
        let summary_room = summary_room(&sizes);
        let keep = sizes
            .target()
            .saturating_sub(fixed)
            .saturating_sub(summary_room)
            .saturating_sub(context::estimate(
                &[json!({"role": "assistant", "content": prefill})],
                None,
            ));
        let cut = context::cut_point(&transcript.messages, keep);
        // At the line, a cut that keeps nothing word for word (the newest
        // turn alone is more than the kept turns may take: a long pasted
        // message) would hand the model a summary of the very question it is
        // to answer. While the request is under the ceiling (the window less
        // the answer's room; the line itself after a memory refusal) it goes
        // as it is; past that, summarising is the only way on.
        let whole = cut == transcript.messages.len() && reason == LINE;
        if cut == 0 || (whole && before <= sizes.ceiling) {
            return Ok(Compacted {
                before,
                after: before,
                summary_prompt: 0,
                summary_tokens: 0,
                cut: false,
            });
        }
        let keep_from = transcript.messages.get(cut).map(|m| m.id.clone());
        let older = &transcript.messages[..cut];
        let room_chars = chars_for(
            sizes
                .max_request()
                .saturating_sub(summary_room)
                .saturating_sub(200),
        );
        let text = context::render_for_summary(transcript.summary, older, room_chars);
        let summary_body = json!({
            "model": model,
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": summary_room,
            "messages": [
                {"role": "system", "content": format!("{SUMMARY_PROMPT}\n\n{text}")},
                {"role": "user", "content": "Write the summary now."},
            ],
        });
        let (summary_prompt, _) = self
            .inner
            .models
            .count(model, &summary_body, sizes.line)
            .await;
        // A summary call that fails (the engine away, busy, loading) writes
        // nothing: the chat keeps its history and the caller goes on without.
        let (summary, summary_tokens) = match self.summarise(conversation_id, &summary_body).await {
            Ok((text, tokens)) if !text.trim().is_empty() => (text, tokens),
            Ok(_) => (
                fallback(older.len(), "the summary call answered nothing"),
                0,
            ),
            Err(why) => {
                return Err(ApiError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "engine_unavailable",
                    format!("the summary call failed, nothing was compacted: {why}"),
                ))
            }
        };

        let cid = conversation_id.to_string();
        let leaf = history.last().map(|m| m.id.clone());
        let moved = streaming.as_ref().map(|m| m.id.clone());
        let summary_text = summary.clone();
        let marker = inner
            .store
            .write(move |ctx| {
                let summary = NewSummary {
                    leaf: leaf.as_deref(),
                    answer: moved.as_deref(),
                    text: &summary_text,
                    keep_from: keep_from.as_deref(),
                };
                messages::insert_summary(ctx, &cid, &summary)
            })
            .await?;

        let cid = conversation_id.to_string();
        let leaf = marker.id.clone();
        let history = inner
            .store
            .read(move |conn| queries::path_to(conn, &cid, Some(&leaf)))
            .await?;
        let after = self
            .sized(model, system, &history, tools, prefill, sizes.line)
            .await;
        let done = Compacted {
            before,
            after,
            summary_prompt,
            summary_tokens,
            cut: true,
        };
        let cid = conversation_id.to_string();
        let data = json!({
            "before": before,
            "after": after,
            "message_id": marker.id,
            "reason": reason,
            "summary_tokens": summary_tokens,
        });
        inner
            .store
            .write(move |ctx| Ok(ctx.emit(&cid, EventKind::Compacted, data).map(|_| ())?))
            .await?;
        tracing::info!(
            conversation = conversation_id,
            reason,
            before,
            after,
            summary_prompt,
            summary_tokens,
            summarised = cut,
            kept = transcript.messages.len() - cut,
            "[compact] before={before} after={after} summary_call={summary_prompt}+{summary_tokens}"
        );
        inner.metrics.compactions.inc();
        Ok(done)
    }

    /// The prompt tokens of a request made from `history`.
    async fn sized(
        &self,
        model: &str,
        system: &str,
        history: &[Message],
        tools: &Value,
        prefill: &str,
        line: u64,
    ) -> u64 {
        let messages = context::request_messages(
            system,
            &context::transcript(history),
            &|id, name, args| self.stub(id, name, args),
            &|_| Vec::new(),
        );
        let body = super::request_body(model, messages, tools, prefill);
        self.inner.models.count(model, &body, line).await.0
    }

    /// The summary call: its text and its completion tokens.
    async fn summarise(
        &self,
        conversation_id: &str,
        body: &Value,
    ) -> Result<(String, u64), String> {
        let session = format!("chat-{conversation_id}");
        let mut stream = self
            .inner
            .engine
            .stream(&session, super::RequestBody::of_value(body).bytes)
            .await
            .map_err(|f| f.reason())?;
        let mut text = String::new();
        let mut tokens = 0;
        loop {
            match stream.next().await {
                Ok(Some(Piece::Text(t))) => text.push_str(&t),
                Ok(Some(Piece::Usage { completion, .. })) => tokens = completion,
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(f) => return Err(f.reason()),
            }
        }
        Ok((text, tokens))
    }
}

/// The summary's room: the answer's room, at most a third of the target.
fn summary_room(sizes: &Window) -> u64 {
    sizes.answer.min(sizes.target() / 3).max(64)
}

fn chars_for(tokens: u64) -> usize {
    // The inverse of the estimate (4 characters a token, 15 % margin).
    (tokens as f64 * 4.0 / 1.15) as usize
}

/// The summary when the call failed: the chat still goes on, and says so.
fn fallback(messages: usize, why: &str) -> String {
    format!("({messages} earlier messages were set aside without a summary: {why}.)")
}
