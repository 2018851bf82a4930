//! The devices: each attaches and drops at random, keeps its last seq and
//! reconnects with it, rebuilds every message's text from the snapshot and
//! the deltas, and at the end catches up and compares with the stored text.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Stays attached (reconnecting only when chatd dies); measures latency.
    Steady,
    /// Attaches for a while, drops, comes back with its last seq.
    Roaming,
    /// Reads 512 bytes every 100 ms through a 4 KiB receive buffer.
    Slow,
}

pub(crate) struct Device {
    pub(crate) index: usize,
    pub(crate) chat: String,
    pub(crate) role: Role,
    /// The last seq this device applied (-1: no snapshot yet).
    pub(crate) last_seq: i64,
    pub(crate) need_snapshot: bool,
    /// Message id → the text this device rebuilt.
    pub(crate) texts: HashMap<String, String>,
    pub(crate) caught_up: bool,
    /// Seconds from the start of the catch-up until it had the final seq.
    pub(crate) caught_up_s: f64,
    pub(crate) connections: u64,
    pub(crate) resets: u64,
    /// Relay latencies (µs) of stamped tokens, steady devices only.
    pub(crate) latencies: Vec<i64>,
}

/// What the device does after a frame.
pub(crate) enum After {
    Go,
    /// A `reset`: reload the snapshot and reconnect from its seq.
    Reload,
}

/// Keeps the count of attached devices right however a connection ends.
pub(crate) struct Attached<'a>(&'a AtomicI64);

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Device {
    pub(crate) fn name(&self) -> String {
        format!(
            "device {} ({:?}, chat {})",
            self.index, self.role, self.chat
        )
    }

    pub(crate) async fn load_snapshot(&mut self, shared: &Shared) -> bool {
        let asked = Instant::now();
        let snapshot = match shared.snapshot(&self.chat).await {
            Ok(snapshot) => snapshot,
            Err(err) => {
                // Refused while chatd is down is expected; anything else is told.
                let refused = err
                    .downcast_ref::<reqwest::Error>()
                    .is_some_and(|e| e.is_connect());
                if !refused {
                    shared.unexpected(format!(
                        "snapshot failed after {:.1} s in {:?}: {err:#}",
                        asked.elapsed().as_secs_f64(),
                        shared.phase()
                    ));
                }
                return false;
            }
        };
        let Some(seq) = snapshot["seq"].as_i64() else {
            shared.unexpected("snapshot without seq".into());
            return false;
        };
        if seq < self.last_seq {
            shared.violate(
                Inv::Seqs,
                format!(
                    "{}: the snapshot has seq {seq}, but the device already saw {}",
                    self.name(),
                    self.last_seq
                ),
            );
        }
        self.texts = snapshot["messages"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .map(|m| {
                        (
                            m["id"].as_str().unwrap_or("").to_string(),
                            m["text"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.last_seq = seq;
        self.need_snapshot = false;
        inc(&shared.c.snapshots);
        true
    }

    /// Applies one frame; checks its seq as it comes.
    pub(crate) fn apply(&mut self, shared: &Shared, frame: &[u8], at: i64, measure: bool) -> After {
        let text = String::from_utf8_lossy(frame);
        let mut id: Option<i64> = None;
        let mut kind = "message";
        let mut data = String::new();
        for line in text.split('\n') {
            if let Some(v) = line.strip_prefix("id:") {
                id = v.trim().parse().ok();
            } else if let Some(v) = line.strip_prefix("event:") {
                kind = v.trim();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if id.is_none() && data.is_empty() {
            return After::Go; // `: keepalive`
        }
        inc(&shared.c.events);
        if kind == "reset" {
            self.resets += 1;
            inc(&shared.c.resets);
            self.need_snapshot = true;
            return After::Reload;
        }
        let Some(seq) = id else {
            shared.violate(
                Inv::Seqs,
                format!("{}: a {kind} event without an id", self.name()),
            );
            return After::Go;
        };
        if seq != self.last_seq + 1 {
            shared.violate(
                Inv::Seqs,
                format!(
                    "{}: after seq {} came {seq} ({kind}): {}",
                    self.name(),
                    self.last_seq,
                    if seq <= self.last_seq {
                        "a repeat"
                    } else {
                        "a gap"
                    }
                ),
            );
            if seq <= self.last_seq {
                return After::Go; // not applied twice
            }
        }
        self.last_seq = seq;
        let data: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
        match kind {
            "message.created" => {
                let m = &data["message"];
                let mid = m["id"].as_str().unwrap_or("").to_string();
                let stored = m["text"].as_str().unwrap_or("");
                match self.texts.get(&mid) {
                    Some(known) if known != stored => shared.violate(
                        Inv::Live,
                        format!(
                            "{}: message.created (seq {seq}) for {mid}, which it already knew with other text",
                            self.name()
                        ),
                    ),
                    Some(_) => {}
                    None => {
                        self.texts.insert(mid, stored.to_string());
                    }
                }
            }
            "text.delta" => {
                let mid = data["message_id"].as_str().unwrap_or("");
                let piece = data["text"].as_str().unwrap_or("");
                match self.texts.get_mut(mid) {
                    Some(t) => t.push_str(piece),
                    None => {
                        shared.violate(
                            Inv::Live,
                            format!(
                                "{}: text.delta (seq {seq}) for {mid}, a message it never saw created",
                                self.name()
                            ),
                        );
                        self.texts.insert(mid.to_string(), piece.to_string());
                    }
                }
                if measure {
                    if let Some(stamp) = stamp_of(piece) {
                        self.latencies.push(at - stamp);
                    }
                }
            }
            "message.updated" => {
                let m = &data["message"];
                let mid = m["id"].as_str().unwrap_or("");
                let stored = m["text"].as_str().unwrap_or("");
                match self.texts.get(mid) {
                    Some(known) if known == stored => {}
                    Some(known) => shared.violate(
                        Inv::Live,
                        format!(
                            "{}: message.updated (seq {seq}) for {mid}: {}",
                            self.name(),
                            difference(known, stored)
                        ),
                    ),
                    None => shared.violate(
                        Inv::Live,
                        format!(
                            "{}: message.updated (seq {seq}) for {mid}, a message it never saw created",
                            self.name()
                        ),
                    ),
                }
            }
            _ => {}
        }
        After::Go
    }

    pub(crate) fn open_failed(&mut self, shared: &Shared, error: OpenError) {
        inc(&shared.c.open_failed);
        if let OpenError::Status(status, body) = error {
            if status == 400 && body.contains("past the last event") {
                // Events this device saw are no longer in chatd's log.
                shared.violate(
                    Inv::Seqs,
                    format!(
                        "{}: at seq {} but chatd says that is past its last event: {}",
                        self.name(),
                        self.last_seq,
                        body.trim()
                    ),
                );
                self.need_snapshot = true;
            } else {
                shared.unexpected(format!("events → {status}"));
            }
        }
    }

    /// One connection's life: attach (after a snapshot if needed), read for
    /// a while, drop. `false` when it could not attach.
    pub(crate) async fn roam(
        &mut self,
        shared: &Shared,
        rng: &mut StdRng,
        phase: &mut watch::Receiver<Phase>,
    ) -> bool {
        if (self.need_snapshot || self.last_seq < 0) && !self.load_snapshot(shared).await {
            return false;
        }
        let slow = self.role == Role::Slow;
        let by_query = rng.random_bool(0.2);
        let mut sse =
            match Sse::open(shared.chatd_port, &self.chat, self.last_seq, by_query, slow).await {
                Ok(sse) => sse,
                Err(error) => {
                    self.open_failed(shared, error);
                    return false;
                }
            };
        self.connections += 1;
        inc(&shared.c.connections);
        shared.c.devices_up.fetch_add(1, Ordering::Relaxed);
        let _attached = Attached(&shared.c.devices_up);
        let hold = match self.role {
            Role::Steady => Duration::from_secs(24 * 3600),
            Role::Roaming => Duration::from_secs_f64(rng.random_range(1.0..20.0)),
            Role::Slow => Duration::from_secs_f64(rng.random_range(10.0..40.0)),
        };
        let deadline = tokio::time::Instant::now() + hold;
        loop {
            // Frames first: the first ones may have come with the headers.
            let at = now_micros();
            let measure = self.role == Role::Steady && live(shared.phase());
            for frame in sse.frames() {
                if let After::Reload = self.apply(shared, &frame, at, measure) {
                    return true;
                }
            }
            if slow {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let max = if slow { 512 } else { usize::MAX };
            tokio::select! {
                read = sse.read(max) => {
                    if !matches!(read, Ok(true)) {
                        return true;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return true,
                changed = phase.changed() => {
                    if changed.is_err() || !live(*phase.borrow()) {
                        return true;
                    }
                }
            }
        }
    }

    /// Reads until the device has the chat's final seq (or the phase ends).
    pub(crate) async fn catch_up(&mut self, shared: &Shared, phase: &mut watch::Receiver<Phase>) {
        let Some(target) = lock(&shared.targets).get(&self.chat).copied() else {
            return;
        };
        let started = Instant::now();
        let mut failures = 0u32;
        while *phase.borrow() == Phase::CatchUp {
            if (self.need_snapshot || self.last_seq < 0) && !self.load_snapshot(shared).await {
                failures += 1;
                tokio::time::sleep(backoff(failures)).await;
                continue;
            }
            if self.last_seq >= target {
                self.caught_up = true;
                self.caught_up_s = started.elapsed().as_secs_f64();
                return;
            }
            let mut sse =
                match Sse::open(shared.chatd_port, &self.chat, self.last_seq, false, false).await {
                    Ok(sse) => sse,
                    Err(error) => {
                        self.open_failed(shared, error);
                        failures += 1;
                        tokio::time::sleep(backoff(failures)).await;
                        continue;
                    }
                };
            self.connections += 1;
            inc(&shared.c.connections);
            'read: loop {
                for frame in sse.frames() {
                    if let After::Reload = self.apply(shared, &frame, now_micros(), false) {
                        break 'read;
                    }
                }
                if self.last_seq >= target {
                    break 'read;
                }
                tokio::select! {
                    read = sse.read(usize::MAX) => {
                        if !matches!(read, Ok(true)) {
                            break 'read;
                        }
                    }
                    changed = phase.changed() => {
                        if changed.is_err() || *phase.borrow() != Phase::CatchUp {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Every stored message: known to the device, with the same text.
    pub(crate) fn compare(&self, shared: &Shared, snapshot: &Value) {
        if !self.caught_up {
            shared.violate(
                Inv::Text,
                format!(
                    "{}: did not catch up to seq {} (stopped at {})",
                    self.name(),
                    snapshot["seq"],
                    self.last_seq
                ),
            );
            return;
        }
        for m in snapshot["messages"].as_array().into_iter().flatten() {
            let mid = m["id"].as_str().unwrap_or("");
            let stored = m["text"].as_str().unwrap_or("");
            match self.texts.get(mid) {
                None => shared.violate(
                    Inv::Text,
                    format!("{}: never saw message {mid} ({})", self.name(), m["role"]),
                ),
                Some(text) if text != stored => shared.violate(
                    Inv::Text,
                    format!(
                        "{}: message {mid} ({}, {}): {}",
                        self.name(),
                        m["role"],
                        m["status"],
                        difference(text, stored)
                    ),
                ),
                Some(_) => {}
            }
        }
    }
}

/// A short view of a text for a report: its length and both ends.
pub(crate) fn excerpt(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 60 {
        return format!("{text:?} ({} chars)", chars.len());
    }
    let head: String = chars[..28].iter().collect();
    let tail: String = chars[chars.len() - 28..].iter().collect();
    format!("{head:?}…{tail:?} ({} chars)", chars.len())
}

/// Where two texts part: the first differing character, with a little of
/// both around it.
pub(crate) fn difference(rebuilt: &str, stored: &str) -> String {
    let a: Vec<char> = rebuilt.chars().collect();
    let b: Vec<char> = stored.chars().collect();
    let at = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let around = |v: &[char]| -> String {
        let from = at.saturating_sub(20);
        let to = (at + 20).min(v.len());
        v[from..to].iter().collect()
    };
    format!(
        "they part at char {at} of {} / {}: rebuilt …{:?}… stored …{:?}…",
        a.len(),
        b.len(),
        around(&a),
        around(&b)
    )
}

/// The engine's stamp in a token `w{i}:{unix µs} `.
pub(crate) fn stamp_of(piece: &str) -> Option<i64> {
    let (_, stamp) = piece.trim().split_once(':')?;
    stamp.parse().ok()
}

pub(crate) fn backoff(failures: u32) -> Duration {
    Duration::from_millis((100u64 << failures.min(5)).min(2_000))
}

pub(crate) async fn run_device(shared: Arc<Shared>, mut device: Device, seed: u64) -> Device {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    // The first attaches spread over three seconds.
    let first = Duration::from_millis(rng.random_range(0..3_000));
    sleep_in(&mut phase, first, live).await;
    let mut failures = 0u32;
    loop {
        let now = *phase.borrow_and_update();
        match now {
            Phase::Load | Phase::Drain => {
                let attached = device.roam(&shared, &mut rng, &mut phase).await;
                let off = if attached {
                    failures = 0;
                    match device.role {
                        Role::Steady => Duration::ZERO,
                        Role::Roaming => Duration::from_secs_f64(rng.random_range(0.1..4.0)),
                        Role::Slow => Duration::from_secs_f64(rng.random_range(0.5..3.0)),
                    }
                } else {
                    failures += 1;
                    // Jittered, so 500 devices do not come back in one wave.
                    backoff(failures).mul_f64(rng.random_range(0.5..1.5))
                };
                sleep_in(&mut phase, off, live).await;
            }
            Phase::CatchUp => {
                device.catch_up(&shared, &mut phase).await;
                return device;
            }
            Phase::Done => return device,
        }
    }
}
