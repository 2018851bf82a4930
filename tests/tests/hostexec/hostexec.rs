//! hostexecd, the real binary: a command's environment, limits and user,
//! nothing of it left running when it ends, times out, is stopped or
//! hostexecd dies, the calls refused with their numbers, the audit, and a
//! caller of another uid refused at the socket. Run as root (as here),
//! hostexecd runs commands as `nobody`.
//!
//! Every wait has a bound; "nothing left" means no process whose command
//! line holds the test's own marker (`sleep 600.<random>`).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tandem_tests::harness::{wait_until, Hostexecd};
use tandem_tests::needs;

const QUICK: Duration = Duration::from_secs(15);

/// The fork bomb test fills nobody's process count: it runs alone, apart
/// from every test of this binary that runs hostexecd (each holds `shared`).
static ALONE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

pub(crate) async fn shared() -> tokio::sync::RwLockReadGuard<'static, ()> {
    ALONE.read().await
}

/// A `sleep` argument no other test uses: `600.<digits>`.
fn marker() -> String {
    format!("600.{}", rand::random::<u32>())
}

/// A running call of `chat` with three `sleep`s (one `setsid`, bash
/// trapping TERM) that all run: the marker, the call's stream, its id.
async fn three_sleeps(
    hx: &Hostexecd,
    chat: &str,
) -> (String, tandem_tests::harness::ExecStream, String) {
    let m = marker();
    let mut stream = hx
        .exec_open(
            chat,
            &format!("trap '' TERM; setsid sleep {m} & sleep {m} & echo ready; sleep {m}"),
            None,
        )
        .await
        .unwrap();
    let first = stream
        .read_until(QUICK, |e| e["event"] == "output")
        .await
        .unwrap();
    let call_id = first[0]["call_id"].as_str().unwrap().to_string();
    wait_until("the call's processes", QUICK, || async {
        (with_marker(&m).len() >= 3).then_some(())
    })
    .await
    .unwrap();
    (m, stream, call_id)
}

/// Pids whose command line holds `marker`.
fn with_marker(marker: &str) -> Vec<i32> {
    tandem_tests::harness::pids_with(marker)
}

async fn none_left_within(marker: &str, bound: Duration) {
    if let Err(e) = wait_until("no process of the call", bound, || async {
        with_marker(marker).is_empty().then_some(())
    })
    .await
    {
        panic!("{e}: left {:?}", with_marker(marker));
    }
}

fn finished(run: &tandem_tests::harness::ExecRun) -> &Value {
    assert_eq!(run.status, 200, "{run:?}");
    assert_eq!(run.body["event"], "finished", "{run:?}");
    &run.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_is_exactly_four_variables_in_the_workspace() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let run = hx
        .exec(
            "c_env",
            "tr '\\0' '\\n' < /proc/$$/environ | sort; echo --; env | sort; \
             echo cwd=$(pwd); echo uid=$(id -u); \
             ulimit -c; echo saved > out.txt; mkdir notes; echo kept > notes/a; \
             echo private > ~/note; echo err >&2",
            None,
            QUICK,
        )
        .await
        .unwrap();
    let end = finished(&run);
    assert_eq!(end["exit_code"], 0, "{run:?}");
    assert!(end["call_id"].as_str().unwrap().starts_with("hx_"));
    assert_eq!(run.events[0]["event"], "started");
    assert_eq!(run.events[0]["call_id"], end["call_id"]);
    let out = run.output();
    let workspace = hx.workspace("c_env");
    let home = format!("HOME={}", hx.home("c_env").display());
    let given = vec![
        home.as_str(),
        "LANG=C.UTF-8",
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "TZ=UTC",
    ];
    // What bash was started with: these four and nothing else.
    let env: Vec<&str> = out.lines().take_while(|l| *l != "--").collect();
    assert_eq!(env, given, "{out}");
    // What bash exports: the same, and only its own PWD, SHLVL and _.
    let exported: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "--")
        .skip(1)
        .take_while(|l| !l.starts_with("cwd="))
        .collect();
    let (bash_own, rest): (Vec<&str>, Vec<&str>) = exported
        .iter()
        .partition(|l| l.starts_with("PWD=") || l.starts_with("SHLVL=") || l.starts_with("_="));
    assert_eq!(rest, given, "{out}");
    assert_eq!(bash_own.len(), 3, "{out}");
    assert!(
        out.contains(&format!("cwd={}", workspace.display())),
        "{out}"
    );
    assert!(out.contains("\n0\n"), "core files are off: {out}");
    assert!(out.contains("err\n"), "stderr is in the output: {out}");
    if Hostexecd::as_root() {
        assert!(out.contains("uid=65534"), "{out}");
    }
    // The workspace's changes; the home is not listed.
    assert_eq!(
        end["changes"]["created"],
        json!(["notes/", "notes/a", "out.txt"])
    );
    assert_eq!(end["changes"]["more"], 0);
    assert_eq!(end["bytes"].as_u64().unwrap(), out.len() as u64);
    // A second call sees the file changed and deleted.
    let run = hx
        .exec("c_env", "echo more >> out.txt; rm notes/a", None, QUICK)
        .await
        .unwrap();
    let end = finished(&run);
    assert_eq!(end["changes"]["changed"], json!(["out.txt"]));
    assert_eq!(end["changes"]["deleted"], json!(["notes/a"]));
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&workspace), 0o700);
    assert_eq!(mode(&hx.home("c_env")), 0o700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_and_detached_processes_are_gone_when_the_call_ends() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    for form in [
        "sleep M &",
        "nohup sleep M > /dev/null 2>&1 &",
        "setsid sleep M &",
        "(setsid sh -c 'sleep M & ' &)",
        "sh -c '(sleep M &) &'",
        "sleep M & disown; echo started",
    ] {
        let m = marker();
        let command = format!("{}\nsleep 0.2", form.replace('M', &m));
        let run = hx.exec("c_bg", &command, None, QUICK).await.unwrap();
        let end = finished(&run);
        assert_eq!(end["exit_code"], 0, "{form}: {run:?}");
        assert_eq!(end["killed_by"], Value::Null, "{form}");
        none_left_within(&m, Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_term_trapping_and_stopped_processes_too() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let command = format!(
        "trap '' TERM; sleep {m} & setsid sh -c 'trap \"\" TERM; sleep {m}' & \
         sleep {m} & kill -STOP $!; (setsid sh -c 'sleep {m} &' &); sleep {m}"
    );
    let started = Instant::now();
    let run = hx.exec("c_to", &command, Some(1), QUICK).await.unwrap();
    let end = finished(&run);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(end["killed_by"], "timeout");
    assert_eq!(end["timed_out"], true);
    assert_eq!(end["exit_code"], Value::Null);
    assert_eq!(end["signal"], "KILL");
    none_left_within(&m, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_kills_the_whole_tree_and_an_unknown_call_is_404() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let command = format!(
        "trap '' TERM; sleep {m} & kill -STOP $!; setsid sleep {m} & \
         sh -c '(sleep {m} &) &'; echo ready; sleep {m}"
    );
    let mut stream = hx.exec_open("c_stop", &command, None).await.unwrap();
    assert_eq!(stream.status, 200);
    let first = stream
        .read_until(QUICK, |e| {
            e["text"].as_str().is_some_and(|t| t.contains("ready"))
        })
        .await
        .unwrap();
    let call_id = first[0]["call_id"].as_str().unwrap().to_string();
    wait_until("the call's processes", QUICK, || async {
        (with_marker(&m).len() >= 4).then_some(())
    })
    .await
    .unwrap();
    let (status, body) = hx
        .call("POST", &format!("/exec/{call_id}/stop"), None)
        .await
        .unwrap();
    assert_eq!((status, &body["stopped"]), (200, &json!(true)), "{body}");
    let stopped = Instant::now();
    let rest = stream
        .read_until(QUICK, |e| e["event"] == "finished")
        .await
        .unwrap();
    let end = rest.last().unwrap();
    assert_eq!(end["killed_by"], "stop", "{end}");
    none_left_within(&m, Duration::from_secs(1)).await;
    assert!(stopped.elapsed() < Duration::from_secs(2));
    let (status, body) = hx
        .call("POST", &format!("/exec/{call_id}/stop"), None)
        .await
        .unwrap();
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["type"], "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_goes_away_stops_its_call() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let mut stream = hx
        .exec_open(
            "c_gone",
            &format!("sleep {m} & echo ready; sleep {m}"),
            None,
        )
        .await
        .unwrap();
    stream
        .read_until(QUICK, |e| e["event"] == "output")
        .await
        .unwrap();
    drop(stream);
    none_left_within(&m, Duration::from_secs(2)).await;
    let rows = wait_until("the audit row", QUICK, || async {
        let (_, body) = hx.call("GET", "/audit?chat=c_gone", None).await.ok()?;
        let row = body["audit"].as_array()?.first()?.clone();
        row["ended"].is_string().then_some(row)
    })
    .await
    .unwrap();
    assert_eq!(rows["killed_by"], "stop");
}

/// A caller that goes away while its call is still starting: every call
/// that began ends, with its audit row finished and its processes gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_gone_during_the_start_leaves_no_open_row() {
    use tokio::io::AsyncWriteExt;
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let body = format!(r#"{{"chat_id":"c_quick","command":"sleep {m}"}}"#);
    let request = format!(
        "POST /exec HTTP/1.1\r\nHost: hostexecd\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    for round in 0..20 {
        let mut s = tokio::net::UnixStream::connect(&hx.socket).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        // Gone at once, or after letting the runtime turn a few times.
        for _ in 0..(round % 5) {
            tokio::task::yield_now().await;
        }
        drop(s);
        // One call at a time per chat: the next round waits for this one.
        wait_until("the chat to be free", QUICK, || async {
            let (_, health) = hx.call("GET", "/health", None).await.ok()?;
            (health["running"].as_u64()? == 0).then_some(())
        })
        .await
        .unwrap();
    }
    let (_, body) = hx
        .call("GET", "/audit?chat=c_quick&limit=100", None)
        .await
        .unwrap();
    let rows = body["audit"].as_array().cloned().unwrap_or_default();
    assert!(
        rows.iter().all(|r| r["ended"].is_string()),
        "every begun call ended: {rows:?}"
    );
    none_left_within(&m, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grandchild_holding_stdout_does_not_hold_the_call() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    // bash exits at once; the subshell keeps the output pipe open.
    let m = marker();
    let started = Instant::now();
    let run = hx
        .exec(
            "c_pipe",
            &format!("(sleep {m}; echo late) & echo now"),
            None,
            QUICK,
        )
        .await
        .unwrap();
    let end = finished(&run);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(end["exit_code"], 0);
    assert_eq!(run.output(), "now\n");
    none_left_within(&m, Duration::from_secs(1)).await;
    // bash waits past its deadline on a child that holds the pipe and
    // ignores TERM: the deadline still ends it.
    let m = marker();
    let started = Instant::now();
    let run = hx
        .exec(
            "c_pipe",
            &format!("(trap '' TERM; sleep {m}) & sleep {m}"),
            Some(1),
            QUICK,
        )
        .await
        .unwrap();
    assert_eq!(finished(&run)["killed_by"], "timeout");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    none_left_within(&m, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostexecd_killed_mid_call_leaves_nothing_and_the_audit_says_restart() {
    let _g = shared().await;
    let mut hx = Hostexecd::start("").await.unwrap();
    let (m, stream, call_id) = three_sleeps(&hx, "c_crash").await;
    hx.kill9();
    none_left_within(&m, Duration::from_secs(2)).await;
    drop(stream);
    hx.spawn().unwrap();
    hx.wait_healthy().await.unwrap();
    let (status, body) = hx.call("GET", "/audit?chat=c_crash", None).await.unwrap();
    assert_eq!(status, 200);
    let row = &body["audit"][0];
    assert_eq!(row["call_id"], call_id.as_str(), "{body}");
    assert_eq!(row["killed_by"], "restart", "{body}");
    assert!(row["ended"].is_string(), "{body}");
    assert!(hx
        .log()
        .contains(&format!("[host-exec] call {call_id} ended by a restart")));
    // The chat runs again.
    let run = hx.exec("c_crash", "echo again", None, QUICK).await.unwrap();
    assert_eq!(run.output(), "again\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_flood_is_cut_at_64_kib_within_a_second() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let started = Instant::now();
    let run = hx.exec("c_yes", "yes", None, QUICK).await.unwrap();
    let end = finished(&run);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(end["killed_by"], "output");
    assert_eq!(end["truncated"], true);
    assert_eq!(run.output().len(), 65_536);
    assert!(end["bytes"].as_u64().unwrap() >= 65_536);
    assert!(end["duration_ms"].as_u64().unwrap() < 1000);
    let (_, metrics) = (200, {
        let client = hx.client().unwrap();
        client
            .get("http://hostexecd/metrics")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    assert!(
        metrics.contains("tandem_hostexec_commands_total{ended=\"output\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_is_held_by_the_process_limit_and_cleared_after() {
    if !needs::root("the bomb runs as nobody") {
        return;
    }
    let _alone = ALONE.write().await;
    let hx = Hostexecd::start("max_processes = 64\n").await.unwrap();
    let m = marker();
    let mut stream = hx
        .exec_open(
            "c_bomb",
            &format!("(b() {{ b | b & }}; b) 2>/dev/null; echo bombed; sleep {m}"),
            Some(5),
        )
        .await
        .unwrap();
    stream
        .read_until(QUICK, |e| {
            e["text"].as_str().is_some_and(|t| t.contains("bombed"))
        })
        .await
        .unwrap();
    // While it runs at its limit: the box starts a process at once,
    // hostexecd answers, and nobody has no more processes than the limit allows.
    wait_until("the bomb to reach its limit", QUICK, || async {
        (nobody_tasks() >= 32).then_some(())
    })
    .await
    .unwrap();
    for _ in 0..5 {
        let t = Instant::now();
        let ok = std::process::Command::new("true")
            .status()
            .unwrap()
            .success();
        assert!(
            ok && t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        let t = Instant::now();
        let (status, _) = hx.call("GET", "/health", None).await.unwrap();
        assert!(status == 200 && t.elapsed() < Duration::from_secs(1));
        assert!(nobody_tasks() <= 64 + 8, "{} tasks", nobody_tasks());
    }
    let (status, body) = hx.call("GET", "/audit?chat=c_bomb", None).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let call_id = body["audit"][0]["call_id"].as_str().unwrap().to_string();
    // (bash may have given up forking `sleep` by now: then it ended alone.)
    hx.call("POST", &format!("/exec/{call_id}/stop"), None)
        .await
        .unwrap();
    stream
        .read_until(QUICK, |e| e["event"] == "finished")
        .await
        .unwrap();
    wait_until(
        "nobody's processes gone",
        Duration::from_secs(2),
        || async { (nobody_tasks() == 0).then_some(()) },
    )
    .await
    .unwrap();
}

/// Processes of uid 65534 (nobody).
fn nobody_tasks() -> usize {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
        })
        .filter(|e| e.metadata().map(|m| m.uid() == 65534).unwrap_or(false))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_nobody_cannot_read_a_private_file_of_root() {
    if !needs::root("hostexecd as root runs commands as another user") {
        return;
    }
    let _g = shared().await;
    let hx = Hostexecd::start("run_as = \"nobody\"\n").await.unwrap();
    let secret = hx.dir.path().join("secret");
    std::fs::write(&secret, "root's secret").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let run = hx
        .exec(
            "c_user",
            &format!(
                "id -u; id -g; grep Cap /proc/$$/status; grep NoNewPrivs /proc/$$/status; cat {}",
                secret.display()
            ),
            None,
            QUICK,
        )
        .await
        .unwrap();
    let end = finished(&run);
    let out = run.output();
    assert!(out.starts_with("65534\n65534\n"), "{out}");
    assert!(out.contains("Permission denied"), "{out}");
    assert!(!out.contains("root's secret"), "{out}");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            out.contains(&format!("{set}:\t0000000000000000")),
            "{set} not empty: {out}"
        );
    }
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert_ne!(end["exit_code"], 0);
    let (_, health) = hx.call("GET", "/health", None).await.unwrap();
    assert_eq!(health["run_as"], "nobody");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_root_without_run_as_it_refuses_to_start_and_says_why() {
    if !needs::root("hostexecd as root runs commands as another user") {
        return;
    }
    for (extra, why) in [
        ("run_as = \"\"\n", "it never runs a command as root"),
        ("run_as = \"root\"\n", "has uid 0"),
        ("run_as = \"no_such_user_x\"\n", "there is no user"),
    ] {
        let err = match Hostexecd::start(extra).await {
            Ok(_) => panic!("hostexecd started with {extra:?}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("exited (exit status: 1)"), "{err}");
        assert!(err.contains(why), "{extra:?}: {err}");
        assert!(
            err.contains("hostexec.run_as") || err.contains("run_as"),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_per_chat_and_four_chats_at_once_refused_with_the_numbers() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let mut open = Vec::new();
    for chat in ["c_a", "c_b", "c_c", "c_d"] {
        let mut s = hx
            .exec_open(chat, &format!("sleep {m}"), None)
            .await
            .unwrap();
        assert_eq!(s.status, 200);
        s.read_until(QUICK, |e| e["event"] == "started")
            .await
            .unwrap();
        open.push(s);
    }
    let (status, body) = hx
        .call(
            "POST",
            "/exec",
            Some(json!({"chat_id": "c_a", "command": "true"})),
        )
        .await
        .unwrap();
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["type"], "chat_busy");
    assert_eq!(
        body["error"]["message"],
        "this chat already runs a command: one at a time"
    );
    assert_eq!(body["error"]["limit"], 1);
    let (status, body) = hx
        .call(
            "POST",
            "/exec",
            Some(json!({"chat_id": "c_e", "command": "true"})),
        )
        .await
        .unwrap();
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "too_many_chats");
    assert_eq!(
        body["error"]["message"],
        "4 chats are running commands, the most at once"
    );
    assert_eq!(
        (&body["error"]["running"], &body["error"]["limit"]),
        (&json!(4), &json!(4))
    );
    let (_, health) = hx.call("GET", "/health", None).await.unwrap();
    assert_eq!(health["running"], 4);
    drop(open);
    none_left_within(&m, Duration::from_secs(2)).await;
    wait_until("the places to free", QUICK, || async {
        let (_, h) = hx.call("GET", "/health", None).await.ok()?;
        (h["running"] == 0).then_some(())
    })
    .await
    .unwrap();
    let run = hx.exec("c_e", "true", None, QUICK).await.unwrap();
    assert_eq!(finished(&run)["exit_code"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_naming_the_field_and_the_audit_keeps_4_kib() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    for (body, field) in [
        (json!({"chat_id": "../x", "command": "true"}), "chat_id"),
        (
            json!({"chat_id": "a".repeat(65), "command": "true"}),
            "chat_id",
        ),
        (json!({"chat_id": "c", "command": ""}), "command"),
        (
            json!({"chat_id": "c", "command": "x".repeat(65_537)}),
            "command",
        ),
        (
            json!({"chat_id": "c", "command": "true", "timeout_s": 0}),
            "timeout_s",
        ),
        (
            json!({"chat_id": "c", "command": "true", "timeout_s": 1801}),
            "timeout_s",
        ),
        (json!({"chat_id": "c"}), "body"),
    ] {
        let (status, answer) = hx.call("POST", "/exec", Some(body)).await.unwrap();
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    let long = format!("echo {} > /dev/null", "a".repeat(5000));
    let run = hx.exec("c_audit", &long, None, QUICK).await.unwrap();
    assert_eq!(finished(&run)["exit_code"], 0);
    hx.exec("c_audit", "exit 3", None, QUICK).await.unwrap();
    let (_, body) = hx
        .call("GET", "/audit?chat=c_audit&limit=10", None)
        .await
        .unwrap();
    let rows = body["audit"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["command"], "exit 3", "newest first");
    assert_eq!(rows[0]["exit_code"], 3);
    assert_eq!(rows[1]["command"].as_str().unwrap().len(), 4096);
    for key in [
        "at",
        "chat",
        "call_id",
        "duration_ms",
        "timed_out",
        "killed_by",
        "bytes",
        "signal",
    ] {
        assert!(rows[1].get(key).is_some(), "{key} in {}", rows[1]);
    }
    // The log has one line per command, without the command's text.
    let log = hx.log();
    assert_eq!(log.matches("[host-exec] call").count(), 2, "{log}");
    assert!(!log.contains("aaaaaaaaaa"), "{log}");
    let (status, _) = hx.call("GET", "/audit?limit=0", None).await.unwrap();
    assert_eq!(status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_of_another_uid_is_refused_at_the_socket() {
    if !needs::root("to connect as nobody") {
        return;
    }
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    use std::os::unix::fs::PermissionsExt;
    // Let anyone reach and connect to the socket: the uid check alone stands.
    std::fs::set_permissions(
        hx.socket.parent().unwrap(),
        std::fs::Permissions::from_mode(0o711),
    )
    .unwrap();
    std::fs::set_permissions(&hx.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let socket = hx.socket.clone();
    let answered = tokio::task::spawn_blocking(move || connect_as_nobody(&socket))
        .await
        .unwrap();
    assert_eq!(
        answered, 0,
        "nobody got {answered} bytes back (255: could not connect)"
    );
    wait_until("the refusal in the log", QUICK, || async {
        hx.log()
            .contains("API caller of another uid refused")
            .then_some(())
    })
    .await
    .unwrap();
    // Root (the owner of chat_data) is still served.
    let (status, _) = hx.call("GET", "/health", None).await.unwrap();
    assert_eq!(status, 200);
}

/// Forks a child that becomes nobody, connects to `socket`, sends a request
/// and counts the bytes it gets back (its exit code; 255 when it could not
/// connect). Between fork and exit the child makes raw system calls only.
fn connect_as_nobody(socket: &std::path::Path) -> i32 {
    use nix::sys::socket::{connect, socket as make, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd;
    let addr = UnixAddr::new(socket).unwrap();
    let request = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    // SAFETY: the child only makes system calls and exits.
    match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => unsafe {
            if libc_setid() != 0 {
                libc_exit(254);
            }
            let Ok(fd) = make(
                AddressFamily::Unix,
                SockType::Stream,
                SockFlag::empty(),
                None,
            ) else {
                libc_exit(255)
            };
            if connect(fd.as_raw_fd(), &addr).is_err() {
                libc_exit(255);
            }
            let _ = nix::unistd::write(&fd, request);
            let mut total = 0usize;
            let mut buf = [0u8; 512];
            loop {
                match nix::unistd::read(&fd, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n,
                }
            }
            libc_exit(total.min(250) as i32)
        },
        nix::unistd::ForkResult::Parent { child } => {
            match nix::sys::wait::waitpid(child, None).unwrap() {
                nix::sys::wait::WaitStatus::Exited(_, code) => code,
                other => panic!("the child ended {other:?}"),
            }
        }
    }
}

unsafe fn libc_setid() -> i32 {
    let gid = nix::unistd::Gid::from_raw(65534);
    let uid = nix::unistd::Uid::from_raw(65534);
    if nix::unistd::setgroups(&[gid]).is_err()
        || nix::unistd::setresgid(gid, gid, gid).is_err()
        || nix::unistd::setresuid(uid, uid, uid).is_err()
    {
        return -1;
    }
    0
}

unsafe fn libc_exit(code: i32) -> ! {
    // SAFETY: _exit skips the parent's atexit handlers and buffers.
    nix::libc::_exit(code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_running_calls_as_shutdown() {
    let _g = shared().await;
    let mut hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let mut stream = hx
        .exec_open(
            "c_down",
            &format!("sleep {m} & echo ready; sleep {m}"),
            None,
        )
        .await
        .unwrap();
    stream
        .read_until(QUICK, |e| e["event"] == "output")
        .await
        .unwrap();
    let pid = hx.pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let end = stream
        .read_until(QUICK, |e| e["event"] == "finished")
        .await
        .unwrap();
    assert_eq!(end.last().unwrap()["killed_by"], "shutdown");
    let status = tokio::task::block_in_place(|| hx.wait_exit(QUICK)).unwrap();
    assert!(status.success(), "{status}");
    none_left_within(&m, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_killed_outright_leaves_its_processes_to_hostexecd_which_kills_them() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let mut stream = hx
        .exec_open(
            "c_keeper",
            &format!("setsid sleep {m} & sleep {m} & echo ready; sleep {m}"),
            None,
        )
        .await
        .unwrap();
    stream
        .read_until(QUICK, |e| e["event"] == "output")
        .await
        .unwrap();
    wait_until("the call's processes", QUICK, || async {
        (with_marker(&m).len() >= 3).then_some(())
    })
    .await
    .unwrap();
    let keeper = keeper_of(hx.pid().unwrap());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(keeper),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let end = stream
        .read_until(QUICK, |e| e["event"] == "finished")
        .await
        .unwrap();
    let end = end.last().unwrap();
    assert!(end["error"].as_str().is_some(), "{end}");
    none_left_within(&m, Duration::from_secs(1)).await;
    let run = hx.exec("c_keeper", "echo fine", None, QUICK).await.unwrap();
    assert_eq!(run.output(), "fine\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_whose_main_thread_exited_is_killed_with_its_threads() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    // The main thread calls pthread_exit: /proc shows the process `Z` while
    // its other thread sleeps, then forks a `sleep` of its own.
    let python = format!(
        "import ctypes,threading,time,subprocess\n\
         def later():\n    time.sleep(1); subprocess.Popen(['sleep', '{m}']); time.sleep({m})\n\
         threading.Thread(target=later).start(); ctypes.CDLL(None).pthread_exit(None)"
    );
    let command = format!("python3 -c \"{python}\" &\nsleep 0.3");
    let run = hx.exec("c_zthread", &command, None, QUICK).await.unwrap();
    let end = finished(&run);
    assert_eq!(end["exit_code"], 0, "{run:?}");
    // The python process (its threads carry the marker too) is gone, so
    // nothing of it can fork later.
    none_left_within(&m, Duration::from_secs(1)).await;
}

/// The call's keeper: the child of hostexecd (`parent`) named `hostexecd --keeper`.
fn keeper_of(parent: u32) -> i32 {
    let parent = parent.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .find(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(1));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(parent.as_str()) && cmdline.starts_with(b"hostexecd\0--keeper")
        })
        .expect("the call's keeper")
}

fn sigstop(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_keeper_does_not_hold_a_stop_and_its_processes_go() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let (m, mut stream, call_id) = three_sleeps(&hx, "c_kstop").await;
    // What a command of the keeper's uid could do: `kill -STOP $PPID`.
    sigstop(keeper_of(hx.pid().unwrap()));
    let stopped = Instant::now();
    hx.call("POST", &format!("/exec/{call_id}/stop"), None)
        .await
        .unwrap();
    let end = stream
        .read_until(QUICK, |e| e["event"] == "finished")
        .await
        .unwrap();
    assert!(
        stopped.elapsed() < Duration::from_secs(3),
        "{:?}",
        stopped.elapsed()
    );
    assert_eq!(end.last().unwrap()["killed_by"], "stop", "{end:?}");
    none_left_within(&m, Duration::from_secs(1)).await;
    let run = hx.exec("c_kstop", "echo fine", None, QUICK).await.unwrap();
    assert_eq!(run.output(), "fine\n");
}

/// A keeper stopped by someone, then hostexecd killed: the keeper's process
/// group is orphaned with a stopped process in it, so the kernel continues
/// it (SIGHUP, SIGCONT) and it ends its call; the restart writes the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_keeper_still_ends_its_call_when_hostexecd_dies() {
    let _g = shared().await;
    let mut hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let _left = tandem_tests::harness::KillLeftovers(m.clone());
    let mut stream = hx
        .exec_open(
            "c_kold",
            &format!("setsid sleep {m} & sleep {m} & echo ready; sleep {m}"),
            None,
        )
        .await
        .unwrap();
    stream
        .read_until(QUICK, |e| e["event"] == "output")
        .await
        .unwrap();
    wait_until("the call's processes", QUICK, || async {
        (with_marker(&m).len() >= 3).then_some(())
    })
    .await
    .unwrap();
    let keeper = keeper_of(hx.pid().unwrap());
    sigstop(keeper);
    // Stopped, not just sent the signal: the kernel continues only a group
    // that holds a stopped process when it is orphaned.
    wait_until("the keeper to stop", QUICK, || async {
        std::fs::read_to_string(format!("/proc/{keeper}/stat"))
            .is_ok_and(|s| s.contains(") T "))
            .then_some(())
    })
    .await
    .unwrap();
    hx.kill9();
    drop(stream);
    none_left_within(&m, Duration::from_secs(2)).await;
    hx.spawn().unwrap();
    hx.wait_healthy().await.unwrap();
    let (_, body) = hx.call("GET", "/audit?chat=c_kold", None).await.unwrap();
    assert_eq!(body["audit"][0]["killed_by"], "restart", "{body}");
    assert!(
        std::fs::read_to_string(format!("/proc/{keeper}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true),
        "the old keeper is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlinked_homes_folder_is_refused_and_its_target_left_alone() {
    let _g = shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    use std::os::unix::fs::PermissionsExt;
    let elsewhere = hx.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, hx.chat_data.join("homes")).unwrap();
    let run = hx.exec("c_link", "true", None, QUICK).await.unwrap();
    assert_eq!(run.status, 409, "{run:?}");
    assert_eq!(run.body["error"]["type"], "workspace_unusable", "{run:?}");
    let message = run.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("homes is a symbolic link"), "{run:?}");
    let mode = std::fs::metadata(&elsewhere).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755, "the link's target was not touched");
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
}
