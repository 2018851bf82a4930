//! The soak's host calls: commands that put processes in the background,
//! detach them (`nohup`, `setsid`, `disown`) and double-fork, each carrying
//! its own marker (a `sleep` argument no other call uses), run straight on
//! hostexecd's API and through chatd's `bash` tool (engine-sim's tool-call
//! cue), ended by themselves, by a stop, by their time limit or by a SIGKILL
//! of hostexecd; after each, no process with its marker may be alive.

use super::*;

use tandem_tests::harness::{pids_with, wait_until, ExecStream};

use crate::hostexec::{describe, kill_all, HostexecPart, LEFT_BOUND};

/// Ways a command leaves processes behind it (`{m}`: the call's marker);
/// each starts one `sleep M` that outlives the line.
const FORMS: &[&str] = &[
    "sleep {m} &",
    "nohup sleep {m} > /dev/null 2>&1 &",
    "setsid sleep {m} &",
    "(setsid sh -c 'sleep {m} & ' &)",
    "sh -c '(sleep {m} &) &'",
    "sleep {m} & disown",
    "setsid nohup sh -c 'trap \"\" TERM HUP; sleep {m}' > /dev/null 2>&1 &",
];

/// How a call is meant to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Forks and ends at once.
    Answered,
    /// Forks and prints for a few seconds, then ends.
    Loop,
    /// Runs on until stopped.
    Stopped,
    /// Runs on past its 2 s limit.
    TimedOut,
    /// Runs on until hostexecd is SIGKILLed under it.
    Killed,
}

impl Kind {
    fn pick(rng: &mut StdRng) -> Kind {
        match rng.random_range(0..10) {
            0..=2 => Kind::Answered,
            3..=4 => Kind::Loop,
            5..=7 => Kind::Stopped,
            _ => Kind::TimedOut,
        }
    }

    /// The end it should have, in the words the totals use.
    fn expected(self) -> &'static str {
        match self {
            Kind::Answered | Kind::Loop => "answered",
            Kind::Stopped => "stopped",
            Kind::TimedOut => "timed out",
            Kind::Killed => "hostexecd SIGKILLed",
        }
    }

    fn limit(self) -> Option<u64> {
        (self == Kind::TimedOut).then_some(2)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    Api,
    Chatd,
}

impl Via {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Via::Api => "via the API",
            Via::Chatd => "via chatd's bash",
        }
    }
}

/// How hostexecd says a call ended (`killed_by` of `finished` or the audit).
fn how_of(killed_by: &Value) -> String {
    match killed_by.as_str() {
        None => "answered".into(),
        Some("stop") => "stopped".into(),
        Some("timeout") => "timed out".into(),
        Some("restart") => "hostexecd SIGKILLed".into(),
        Some(other) => format!("killed_by {other}"),
    }
}

pub(crate) struct Call {
    kind: Kind,
    marker: String,
    command: String,
    /// Processes it puts in the background (one `sleep` each).
    forked: u64,
}

impl Call {
    pub(crate) fn new(part: &HostexecPart, kind: Kind, rng: &mut StdRng) -> Call {
        let marker = part.marker();
        let forms = rng.random_range(2..=4);
        let runs_on = matches!(kind, Kind::Stopped | Kind::TimedOut | Kind::Killed);
        let mut lines = vec![format!("export SOAK_TOKEN={}", part.secret)];
        if runs_on {
            // bash itself ignores SIGTERM: only a SIGKILL ends it.
            lines.push("trap '' TERM".into());
        }
        for _ in 0..forms {
            lines.push(FORMS[rng.random_range(0..FORMS.len())].replace("{m}", &marker));
        }
        match kind {
            Kind::Answered => lines.extend(["echo forked".into(), "sleep 0.2".into()]),
            Kind::Loop => lines.push(format!(
                "for i in $(seq 1 {}); do echo tick $i; sleep 0.2; done",
                rng.random_range(3..=12)
            )),
            _ => lines.extend(["echo ready".into(), format!("sleep {marker}")]),
        }
        lock(&part.tally).forked += forms;
        Call {
            kind,
            marker,
            command: lines.join("\n"),
            forked: forms,
        }
    }

    /// `POST /exec` and its `started` event, under the lock (no kill
    /// between): the stream and the call's id; `None` if it did not start.
    pub(crate) async fn open_api(
        &self,
        part: &HostexecPart,
        shared: &Shared,
        chat: &str,
    ) -> Option<(ExecStream, String)> {
        let guard = part.hx.lock().await;
        let hx = guard.as_ref()?;
        let opened = async {
            let mut stream = hx.exec_open(chat, &self.command, self.kind.limit()).await?;
            if stream.status != 200 {
                let status = stream.status;
                let body: Value = stream.response.json().await.unwrap_or(Value::Null);
                return Ok(Err((status, body)));
            }
            let first = stream
                .read_until(Duration::from_secs(30), |e| e["event"] == "started")
                .await?;
            let id = first.last().map(|e| e["call_id"].clone());
            let id = id.and_then(|v| v.as_str().map(String::from));
            Ok::<_, anyhow::Error>(Ok((stream, id.context("the call's id")?)))
        }
        .await;
        match opened {
            Ok(Ok(started)) => Some(started),
            Ok(Err((status, body))) => {
                let kind = body["error"]["type"].as_str().unwrap_or("?").to_string();
                part.count(Via::Api, &format!("refused {status} {kind}"));
                if !matches!(kind.as_str(), "chat_busy" | "too_many_chats") {
                    shared.violate(
                        Inv::Leftovers,
                        format!("hostexecd refused a call of chat {chat} ({status}): {body}"),
                    );
                }
                None
            }
            Err(err) => {
                part.count(Via::Api, "could not start");
                shared.violate(
                    Inv::Health,
                    format!("hostexecd: a call of chat {chat} could not start: {err:#}"),
                );
                None
            }
        }
    }

    /// Reads until the command says `ready`; with `all`, also waits
    /// (bounded) until bash, its last `sleep` and every process it put in
    /// the background run. Counts what it saw running.
    pub(crate) async fn wait_running(
        &self,
        part: &HostexecPart,
        stream: &mut ExecStream,
        all: bool,
    ) -> anyhow::Result<()> {
        stream
            .read_until(Duration::from_secs(30), |e| {
                e["text"].as_str().is_some_and(|t| t.contains("ready"))
            })
            .await?;
        let want = self.forked as usize + 2;
        let mut most = pids_with(&self.marker).len();
        if all {
            let _ = wait_until("the call's processes", Duration::from_secs(10), || {
                let now = pids_with(&self.marker).len();
                most = most.max(now);
                async move { (now >= want).then_some(()) }
            })
            .await;
        }
        lock(&part.tally).seen += most as u64;
        Ok(())
    }

    /// No process with the call's marker is alive once it ended (a bounded
    /// wait, as a user would give it); else names the chat, the call, how
    /// it ended and the processes, and kills them.
    pub(crate) async fn check_left(
        &self,
        part: &HostexecPart,
        shared: &Shared,
        chat: &str,
        call_id: &str,
        via: Via,
        how: &str,
    ) {
        let marker = self.marker.as_str();
        let gone = wait_until("the call's processes to go", LEFT_BOUND, || async {
            pids_with(marker).is_empty().then_some(())
        })
        .await;
        if gone.is_ok() {
            return;
        }
        let left = pids_with(marker);
        if left.is_empty() {
            return;
        }
        lock(&part.tally).leftovers += left.len() as u64;
        shared.violate(
            Inv::Leftovers,
            format!(
                "hostexecd: chat {chat}, call {call_id} ({}, {how}): {} processes with its \
                 marker {marker} alive {LEFT_BOUND:?} after the call ended: {}",
                via.as_str(),
                left.len(),
                describe(&left)
            ),
        );
        kill_all(&left);
    }
}

/// Whether hostexecd was SIGKILLed since `kills` was read: asked under the
/// lock, which the killer holds from before the kill until it is back.
async fn killed_since(part: &HostexecPart, kills: u64) -> bool {
    let _guard = part.hx.lock().await;
    part.kills.load(Ordering::Relaxed) != kills
}

/// One chat of hostexecd's own API: calls one after another while the load lasts.
pub(crate) async fn api_worker(part: Arc<HostexecPart>, shared: Arc<Shared>, i: usize, seed: u64) {
    let chat = format!("hxsoak_{i}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    loop {
        let pause = Duration::from_secs_f64(rng.random_range(0.2..1.5));
        if !sleep_in(&mut phase, pause, |p| p == Phase::Load).await {
            return;
        }
        let kind = Kind::pick(&mut rng);
        let call = Call::new(&part, kind, &mut rng);
        let kills = part.kills.load(Ordering::Relaxed);
        let Some((mut stream, call_id)) = call.open_api(&part, &shared, &chat).await else {
            continue;
        };
        let ended = async {
            if kind == Kind::Stopped {
                call.wait_running(&part, &mut stream, true).await?;
                let guard = part.hx.lock().await;
                if let Some(hx) = guard.as_ref() {
                    hx.call("POST", &format!("/exec/{call_id}/stop"), None)
                        .await?;
                }
            } else if kind == Kind::TimedOut {
                call.wait_running(&part, &mut stream, false).await?;
            }
            let events = stream
                .read_until(Duration::from_secs(60), |e| e["event"] == "finished")
                .await?;
            Ok::<_, anyhow::Error>(events.last().map(|e| e["killed_by"].clone()))
        }
        .await;
        let how = match ended {
            Ok(killed_by) => how_of(&killed_by.unwrap_or(Value::Null)),
            Err(_) if killed_since(&part, kills).await => "hostexecd SIGKILLed".to_string(),
            Err(err) => {
                shared.violate(
                    Inv::Health,
                    format!("hostexecd: call {call_id} of chat {chat} broke with no kill: {err:#}"),
                );
                "broke".to_string()
            }
        };
        if how != kind.expected() && how != "hostexecd SIGKILLed" {
            shared.unexpected(format!(
                "hostexecd: a call meant to be {} ended {how}",
                kind.expected()
            ));
        }
        part.count(Via::Api, &how);
        call.check_left(&part, &shared, &chat, &call_id, Via::Api, &how)
            .await;
    }
}

/// A message whose answer is one host `bash` call of `command` (engine-sim's
/// cue), then a short text.
fn cue_text(command: &str, limit: Option<u64>, id: &str) -> String {
    let mut args = json!({ "command": command });
    if let Some(limit) = limit {
        args["timeout_s"] = json!(limit);
    }
    // A cue value has no spaces: JSON spells them \u0020.
    let args = args.to_string().replace(' ', "\\u0020");
    format!("host bash [sim tool_call=bash args={args} tool_steps=1 tokens=2 tps=0 id={id}]")
}

/// One chat of chatd whose engine asks for host `bash` (a tool-call cue);
/// a user's Stop ends some of them. How each call ended is hostexecd's
/// audit row for the chat.
pub(crate) async fn chatd_worker(
    part: Arc<HostexecPart>,
    shared: Arc<Shared>,
    i: usize,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phase = shared.phase.subscribe();
    // chatd may be down (its own killer): retry, bounded.
    let body = json!({"title": format!("soak host bash {i}"), "permission_mode": "auto"});
    let made = shared.new_chat(body, Duration::from_secs(60)).await;
    let chat = match made {
        Ok(chat) => chat,
        Err(err) => {
            shared.violate(
                Inv::Health,
                format!("hostexecd: no chat of chatd to call it through: {err:#}"),
            );
            return;
        }
    };
    let mut last_call = String::new();
    let mut n = 0u64;
    loop {
        let pause = Duration::from_secs_f64(rng.random_range(0.5..3.0));
        if !sleep_in(&mut phase, pause, |p| p == Phase::Load).await {
            // The load is over: one last pass over the chat's change sets.
            crate::files_trash::page_changes(&part, &shared, &chat).await;
            return;
        }
        n += 1;
        let kind = Kind::pick(&mut rng);
        let mut call = Call::new(&part, kind, &mut rng);
        // Its first line makes a file, for the file history's checks.
        let (line, made) = crate::files::made_line(&call.marker);
        call.command = format!("{line}\n{}", call.command);
        let fate = crate::files::Fate::pick(&mut rng);
        let text = cue_text(&call.command, kind.limit(), &format!("hx{i}m{n}"));
        let sent = shared.send_text(&chat, &text).await;
        let run = match sent {
            Ok((202, b)) if b["run_id"].is_string() => {
                b["run_id"].as_str().unwrap_or("").to_string()
            }
            _ => {
                part.count(Via::Chatd, "not sent (chatd down or busy)");
                continue;
            }
        };
        if kind == Kind::Stopped {
            let want = call.forked as usize + 2;
            let mut most = 0;
            let _ = wait_until("the command's processes", Duration::from_secs(30), || {
                let now = pids_with(&call.marker).len();
                most = most.max(now);
                async move { (now >= want).then_some(()) }
            })
            .await;
            lock(&part.tally).seen += most as u64;
            // The user's Stop (chatd down: a few tries).
            let stop = format!("/conversations/{chat}/stop");
            let _ = wait_until(
                "chatd to take the stop",
                Duration::from_secs(30),
                || async {
                    let sent = shared
                        .call(reqwest::Method::POST, &stop, Some(json!({})))
                        .await;
                    matches!(sent, Ok((200 | 409, _))).then_some(())
                },
            )
            .await;
        }
        let status = wait_until(
            &format!("run {run} of chat {chat} to end"),
            Duration::from_secs(120),
            || async {
                let snapshot = shared.snapshot(&chat).await.ok()?;
                let runs = snapshot["runs"].as_array()?;
                let status = runs.iter().find(|r| r["id"] == run.as_str())?["status"]
                    .as_str()?
                    .to_string();
                matches!(
                    status.as_str(),
                    "done" | "stopped" | "failed" | "interrupted"
                )
                .then_some(status)
            },
        )
        .await;
        if let Err(err) = status {
            shared.violate(
                Inv::Runs,
                format!("hostexecd's chat {chat} of chatd: {err:#}"),
            );
        }
        // The call's row, ended (chatd may answer before hostexecd wrote it).
        let row = wait_until("the call's audit row", Duration::from_secs(15), || async {
            let guard = part.hx.lock().await;
            let (_, body) = guard
                .as_ref()?
                .call("GET", &format!("/audit?chat={chat}&limit=1"), None)
                .await
                .ok()?;
            let row = body["audit"].as_array()?.first().cloned();
            match row {
                Some(r) if r["call_id"] != last_call.as_str() && r["ended"].is_string() => Some(r),
                Some(r) if r["call_id"] != last_call.as_str() => None,
                // No new call: the run ended before its tool ran.
                _ => Some(Value::Null),
            }
        })
        .await
        .unwrap_or(Value::Null);
        let (call_id, how) = match row["call_id"].as_str() {
            Some(id) => (id.to_string(), how_of(&row["killed_by"])),
            None => ("-".to_string(), "no host call (the run ended first)".into()),
        };
        if call_id != "-" {
            last_call = call_id.clone();
        }
        part.count(Via::Chatd, &how);
        call.check_left(&part, &shared, &chat, &call_id, Via::Chatd, &how)
            .await;
        if call_id != "-" {
            crate::files::check_made(&part, &shared, &chat, &made, fate).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_starts_one_process_with_the_marker() {
        for form in FORMS {
            assert_eq!(form.matches("{m}").count(), 1, "{form}");
        }
    }

    #[test]
    fn the_cue_carries_the_command_whole() {
        let command = "export A=1\ntrap '' TERM\nsh -c '(sleep 7200.1 &) &'\necho \"ready\"";
        let text = cue_text(command, Some(2), "hx0m1");
        let (_, fault) = tandem_tests::sim::parse_cues(&text)
            .expect("a valid cue")
            .expect("a cue");
        assert_eq!(fault.tool_call.as_deref(), Some("bash"));
        let args: Value = serde_json::from_str(fault.args.as_deref().expect("args")).unwrap();
        assert_eq!(args, json!({"command": command, "timeout_s": 2}));
    }
}
