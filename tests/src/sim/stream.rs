//! An answer's delivery: streamed as SSE chunks at the planned rate (with
//! its cuts and junk), or whole, or truncated.

use super::*;

/// Why an answer stopped early.
pub(super) enum Stop {
    /// Cut: by a cue, or by a refuse (engine restart).
    Cut,
    /// The client went away.
    Gone,
}

/// Sends the frames of one streamed answer.
pub(super) struct Sender {
    pub(super) tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    pub(super) cut: watch::Receiver<u64>,
    pub(super) junk: Option<Junk>,
}

impl Sender {
    pub(super) async fn send(&mut self, frame: String) -> Result<(), Stop> {
        tokio::select! {
            r = self.tx.send(Ok(Bytes::from(frame))) => r.map_err(|_| Stop::Gone),
            _ = self.cut.changed() => Err(Stop::Cut),
        }
    }

    pub(super) async fn chunk(&mut self, v: &impl Serialize) -> Result<(), Stop> {
        let text = serde_json::to_string(v).unwrap_or_default();
        self.send(format!("data: {text}\n\n")).await?;
        if let Some(junk) = &mut self.junk {
            let line = junk.next_line();
            self.send(line).await?;
        }
        Ok(())
    }

    pub(super) async fn pause(&mut self, d: Duration) -> Result<(), Stop> {
        if d.is_zero() {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => Ok(()),
            _ = self.cut.changed() => Err(Stop::Cut),
            _ = self.tx.closed() => Err(Stop::Gone),
        }
    }

    pub(super) async fn fail(&mut self) {
        let err = std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "engine-sim cut");
        let _ = self.tx.send(Err(err)).await;
    }
}

/// Junk SSE lines that a robust client must skip.
pub(super) struct Junk {
    pub(super) n: u64,
    pub(super) rng: u64,
}

impl Junk {
    pub(super) fn next_line(&mut self) -> String {
        self.n += 1;
        match self.n % 4 {
            1 => "data: {not json\n\n".into(),
            2 => ": engine-sim comment\n\n".into(),
            3 => "data: \n\n".into(),
            _ => {
                const ALPHABET: &[char] = &[
                    'a', 'Z', '7', '#', '%', '{', '}', '"', ' ', 'é', 'ß', '€', '漢', '字', '😀',
                    '\u{fffd}', '\t', '\u{7f}', '\u{1}',
                ];
                let mut s = String::from("~");
                for _ in 0..24 {
                    self.rng = self
                        .rng
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    s.push(ALPHABET[(self.rng >> 33) as usize % ALPHABET.len()]);
                }
                s.push_str("\n\n");
                s
            }
        }
    }
}

pub(super) fn stream_answer(sim: Arc<Sim>, plan: Plan) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let mut cut = sim.cut.clone();
    cut.mark_unchanged();
    let sender = Sender {
        tx,
        cut,
        junk: plan.garbage.then(|| Junk {
            n: 0,
            rng: unix_micros() as u64,
        }),
    };
    tokio::spawn(async move {
        let mut sender = sender;
        match produce_stream(&sim, &plan, &mut sender).await {
            Ok(()) => sim.lock().stats.completed += 1,
            Err(Stop::Cut) => {
                sim.lock().stats.cuts += 1;
                sender.fail().await;
            }
            Err(Stop::Gone) => {}
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

pub(super) async fn produce_stream(sim: &Sim, plan: &Plan, tx: &mut Sender) -> Result<(), Stop> {
    let count_token = || sim.lock().stats.tokens_sent += 1;
    if plan.cut_after == Some(0) {
        tx.pause(Duration::from_millis(20)).await?;
        return Err(Stop::Cut);
    }
    tx.pause(plan.first_token).await?;
    let began = Instant::now();
    let mut next_at = tokio::time::Instant::now();
    let mut role = true;
    let mut first = true;
    // Waits for the next token's slot (none before the first).
    macro_rules! pace {
        () => {
            if !first {
                if let Some(iv) = plan.interval {
                    next_at += iv;
                    let now = tokio::time::Instant::now();
                    if next_at > now {
                        tx.pause(next_at - now).await?;
                    } else {
                        next_at = now;
                    }
                }
            }
            first = false;
        };
    }
    let with_role = |role: &mut bool, mut d: DeltaOut| {
        if std::mem::take(role) {
            d.role = Some("assistant");
        }
        d
    };
    for i in 0..plan.reasoning {
        pace!();
        let d = DeltaOut {
            reasoning_content: Some(format!("r{i} ")),
            ..Default::default()
        };
        tx.chunk(&plan.delta(with_role(&mut role, d), None)).await?;
        count_token();
    }
    for n in 0..plan.content {
        pace!();
        let d = DeltaOut {
            content: Some(plan.token(plan.start + n)),
            ..Default::default()
        };
        tx.chunk(&plan.delta(with_role(&mut role, d), None)).await?;
        count_token();
        if plan.cut_after == Some(n + 1) {
            // Let the last token reach the client, then drop the stream.
            tx.pause(Duration::from_millis(20)).await?;
            return Err(Stop::Cut);
        }
    }
    // Like vLLM: per call, a first chunk with its index, id, type and name,
    // then its arguments in pieces.
    for (index, call) in plan.tools.iter().enumerate() {
        pace!();
        let d = DeltaOut {
            tool_calls: Some(json!([{"index": index, "id": call.id, "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}])),
            ..Default::default()
        };
        tx.chunk(&plan.delta(with_role(&mut role, d), None)).await?;
        for piece in Plan::arg_pieces(&call.arguments) {
            pace!();
            let d = DeltaOut {
                tool_calls: Some(json!([{"index": index, "function": {"arguments": piece}}])),
                ..Default::default()
            };
            tx.chunk(&plan.delta(d, None)).await?;
        }
    }
    if role {
        // Nothing was generated (a continuation that was already complete).
        let d = DeltaOut {
            content: Some(String::new()),
            ..Default::default()
        };
        tx.chunk(&plan.delta(with_role(&mut role, d), None)).await?;
    }
    let generating = began.elapsed();
    let completion = plan.completion_tokens();
    tx.chunk(&plan.delta(DeltaOut::default(), Some(plan.finish)))
        .await?;
    if plan.include_usage {
        let mut usage = plan.chunk(Vec::new());
        usage.usage = Some(plan.usage(completion));
        usage.timings = Some(plan.timings(completion, generating));
        tx.chunk(&usage).await?;
    }
    tx.send("data: [DONE]\n\n".into()).await?;
    Ok(())
}

pub(super) async fn whole_answer(sim: Arc<Sim>, plan: Plan) -> Response {
    let mut cut = sim.cut.clone();
    cut.mark_unchanged();
    let per = plan.interval.unwrap_or_default();
    let steps = |n: usize| per.saturating_mul(n.saturating_sub(1).try_into().unwrap_or(u32::MAX));
    let cut_at = plan.cut_after.filter(|&k| k == 0 || k <= plan.content);
    let produced = match cut_at {
        Some(0) => 0,
        Some(k) => plan.reasoning + k,
        None => plan.completion_tokens() + plan.tools.len(),
    };
    let wait = if produced > 0 {
        plan.first_token.saturating_add(steps(produced))
    } else {
        Duration::ZERO
    };
    let began = Instant::now();
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = cut.changed() => {
            sim.lock().stats.cuts += 1;
            return truncated_body(b"{\"id\":\"".to_vec(), 1024);
        }
    }
    let generating = began.elapsed().saturating_sub(plan.first_token);
    let reasoning: String = (0..plan.reasoning).map(|i| format!("r{i} ")).collect();
    let content: String = (0..plan.content)
        .map(|n| plan.token(plan.start + n))
        .collect();
    let completion = plan.completion_tokens();
    let mut message = json!({"role": "assistant", "content": content});
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if !plan.tools.is_empty() {
        if content.is_empty() {
            message["content"] = Value::Null;
        }
        let calls: Vec<Value> = plan
            .tools
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    let body = ChunkOut {
        id: &plan.id,
        object: "chat.completion",
        created: plan.created,
        model: &plan.model,
        system_fingerprint: "engine-sim",
        choices: json!([{"index": 0, "message": message, "finish_reason": plan.finish}]),
        usage: Some(plan.usage(completion)),
        timings: Some(plan.timings(completion, generating)),
    };
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    {
        let mut inner = sim.lock();
        inner.stats.tokens_sent += produced.min(completion) as u64;
        if cut_at.is_some() {
            inner.stats.cuts += 1;
        } else {
            inner.stats.completed += 1;
        }
    }
    if let Some(k) = cut_at {
        // Send part of the body, then drop the connection.
        let full = bytes.len();
        let part = if k == 0 {
            0
        } else {
            (full * k / (plan.content + 1)).min(full - 1)
        };
        return truncated_body(bytes[..part].to_vec(), full);
    }
    let mut resp = Response::new(Body::from(bytes));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A response that announces `full` bytes, sends `part`, then fails.
pub(super) fn truncated_body(part: Vec<u8>, full: usize) -> Response {
    let frames: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from(part)),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "engine-sim cut",
        )),
    ];
    let body = futures_util::stream::unfold(frames.into_iter(), |mut it| async move {
        let item = it.next()?;
        if item.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Some((item, it))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(full));
    resp
}
