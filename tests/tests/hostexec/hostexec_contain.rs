//! hostexecd's containment, the real binary: each call in a PID and a
//! mount namespace of its own, so that its end ends every process of it at
//! once (a fork-walker too), killing hostexecd's process group leaves no
//! command running, a command starts with no signal blocked, one chat's
//! command sees neither another chat's processes nor its folders, a broken
//! home is repaired, and the output bound counts what is sent. Run as root
//! (as here), hostexecd runs commands as `nobody`.
//!
//! Every wait has a bound; "nothing left" means no process whose command
//! line holds the test's own marker.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tandem_tests::harness::{pids_with, wait_until, ExecRun, Hostexecd, KillLeftovers};

const QUICK: Duration = Duration::from_secs(15);

/// A marker no other test uses: `600.<digits>` (a `sleep` argument).
fn marker() -> String {
    format!("600.{}", rand::random::<u32>())
}

async fn none_left_within(marker: &str, bound: Duration) {
    if let Err(e) = wait_until("no process of the call", bound, || async {
        pids_with(marker).is_empty().then_some(())
    })
    .await
    {
        panic!("{e}: left {:?}", pids_with(marker));
    }
}

fn finished(run: &ExecRun) -> &Value {
    assert_eq!(run.status, 200, "{run:?}");
    assert_eq!(run.body["event"], "finished", "{run:?}");
    &run.body
}

/// The fork loop of the attack: each generation forks and exits at once,
/// so no walk of /proc ever holds it. Each generation appends a byte to
/// `$HOME/walk-<marker>` (how a test sees it still runs) and it ends by
/// itself once `$HOME/stop-<marker>` exists (how a failed test cleans up).
fn walker(marker: &str) -> String {
    format!(
        "python3 -c 'import os\n\
         h = os.environ[\"HOME\"]\n\
         log = os.open(h + \"/walk-{marker}\", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)\n\
         while not os.path.exists(h + \"/stop-{marker}\"):\n    \
         if os.fork(): os._exit(0)\n    \
         os.write(log, b\".\")\n' &"
    )
}

/// Stops a walker left by a failed test (it reads the stop file).
struct StopWalker(std::path::PathBuf);

impl Drop for StopWalker {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "stop");
    }
}

/// Waits until the walker's file has not grown for half a second (it grows
/// by a byte a generation while the walker runs); panics past `bound`.
async fn walker_gone(file: &std::path::Path, bound: Duration) {
    let mut last: Option<(u64, Instant)> = None;
    let gone = wait_until("the fork-walker to stop", bound, || {
        let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        let now = Instant::now();
        let quiet = match last {
            Some((before, since)) if before == size => now - since >= Duration::from_millis(500),
            _ => {
                last = Some((size, now));
                false
            }
        };
        async move { quiet.then_some(()) }
    })
    .await;
    if let Err(e) = gone {
        panic!("{e}: {} still grows", file.display());
    }
}

/// Waits until the walker has written (it runs).
async fn walker_runs(file: &std::path::Path) {
    wait_until("the fork-walker to run", QUICK, || async {
        (std::fs::metadata(file).map(|m| m.len()).unwrap_or(0) > 100).then_some(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_walker_is_gone_when_its_call_ends_times_out_or_is_stopped() {
    let _not_the_bomb = crate::hostexec::shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let home = hx.home("c_walk");

    // 1. The call ends by itself (bash exits, the walker runs on behind it).
    let m = marker();
    let _stop = StopWalker(home.join(format!("stop-{m}")));
    let _left = KillLeftovers(m.clone());
    let file = home.join(format!("walk-{m}"));
    let command = format!(
        "{}\nuntil [ -s ~/walk-{m} ]; do sleep 0.01; done; echo started",
        walker(&m)
    );
    let run = hx.exec("c_walk", &command, None, QUICK).await.unwrap();
    assert_eq!(finished(&run)["exit_code"], 0, "{run:?}");
    assert_eq!(run.output(), "started\n");
    walker_gone(&file, Duration::from_secs(5)).await;
    none_left_within(&m, Duration::from_secs(1)).await;

    // 2. The time limit.
    let m = marker();
    let _stop = StopWalker(home.join(format!("stop-{m}")));
    let _left = KillLeftovers(m.clone());
    let file = home.join(format!("walk-{m}"));
    let command = format!("{}\nsleep {m}", walker(&m));
    let run = hx.exec("c_walk", &command, Some(2), QUICK).await.unwrap();
    assert_eq!(finished(&run)["killed_by"], "timeout", "{run:?}");
    assert!(std::fs::metadata(&file).is_ok_and(|m| m.len() > 0));
    walker_gone(&file, Duration::from_secs(5)).await;
    none_left_within(&m, Duration::from_secs(1)).await;

    // 3. A stop.
    let m = marker();
    let _stop = StopWalker(home.join(format!("stop-{m}")));
    let _left = KillLeftovers(m.clone());
    let file = home.join(format!("walk-{m}"));
    let command = format!("{}\necho ready; sleep {m}", walker(&m));
    let mut stream = hx.exec_open("c_walk", &command, None).await.unwrap();
    let first = stream
        .read_until(QUICK, |e| e["event"] == "output")
        .await
        .unwrap();
    let call_id = first[0]["call_id"].as_str().unwrap().to_string();
    walker_runs(&file).await;
    hx.call("POST", &format!("/exec/{call_id}/stop"), None)
        .await
        .unwrap();
    let end = stream
        .read_until(QUICK, |e| e["event"] == "finished")
        .await
        .unwrap();
    assert_eq!(end.last().unwrap()["killed_by"], "stop", "{end:?}");
    walker_gone(&file, Duration::from_secs(5)).await;
    none_left_within(&m, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_walker_is_gone_when_hostexecd_stops() {
    let _not_the_bomb = crate::hostexec::shared().await;
    let mut hx = Hostexecd::start("").await.unwrap();
    let home = hx.home("c_walkdown");
    let m = marker();
    let _stop = StopWalker(home.join(format!("stop-{m}")));
    let _left = KillLeftovers(m.clone());
    let file = home.join(format!("walk-{m}"));
    let command = format!("{}\necho ready; sleep {m}", walker(&m));
    let mut stream = hx.exec_open("c_walkdown", &command, None).await.unwrap();
    stream
        .read_until(QUICK, |e| e["event"] == "output")
        .await
        .unwrap();
    walker_runs(&file).await;
    let status = tokio::task::block_in_place(|| hx.sigterm(QUICK)).unwrap();
    assert!(status.success(), "{status}");
    walker_gone(&file, Duration::from_secs(5)).await;
    none_left_within(&m, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_hostexecds_process_group_leaves_no_command_running() {
    let _not_the_bomb = crate::hostexec::shared().await;
    let mut hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let _left = KillLeftovers(m.clone());
    let mut stream = hx
        .exec_open(
            "c_pgid",
            &format!("trap '' TERM HUP; setsid sleep {m} & sleep {m} & echo ready; sleep {m}"),
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
        (pids_with(&m).len() >= 3).then_some(())
    })
    .await
    .unwrap();
    use std::os::unix::fs::MetadataExt;
    let workspace = hx.workspace("c_pgid");
    let owner = std::fs::metadata(&hx.chat_data).unwrap().uid();
    let lent_to = std::fs::metadata(&workspace).map(|m| m.uid()).ok();
    // `kill -9 -<pgid>`: hostexecd dies at once, with whatever shares its group.
    tokio::task::block_in_place(|| hx.kill9_group()).unwrap();
    drop(stream);
    hx.spawn().unwrap();
    hx.wait_healthy().await.unwrap();
    none_left_within(&m, Duration::from_secs(3)).await;
    if Hostexecd::as_root() {
        // Lent to the commands' user for the call; the restart gave it back.
        assert_eq!(lent_to, Some(65534));
    }
    assert_eq!(std::fs::metadata(&workspace).unwrap().uid(), owner);
    let (_, body) = hx.call("GET", "/audit?chat=c_pgid", None).await.unwrap();
    assert_eq!(body["audit"][0]["call_id"], call_id.as_str(), "{body}");
    assert_eq!(body["audit"][0]["killed_by"], "restart", "{body}");
    let run = hx.exec("c_pgid", "echo again", None, QUICK).await.unwrap();
    assert_eq!(run.output(), "again\n");
}

/// Starts `sleep <marker>` detached under PID 1 (a double fork), as the
/// user commands run as, with `home` as its HOME: what an earlier
/// hostexecd's call could leave behind.
fn leave_behind(marker: &str, home: &std::path::Path) {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new("setsid");
    command
        .args(["sh", "-c", &format!("sleep {marker} > /dev/null 2>&1 &")])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .current_dir("/");
    if Hostexecd::as_root() {
        command.uid(65534).gid(65534);
    }
    let status = command.status().unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_earlier_hostexecd_left_is_swept_at_start() {
    let _not_the_bomb = crate::hostexec::shared().await;
    let mut hx = Hostexecd::start("").await.unwrap();
    hx.sigterm(QUICK).unwrap();
    let (left, other) = (marker(), marker());
    let _left = KillLeftovers(left.clone());
    let _other = KillLeftovers(other.clone());
    leave_behind(&left, &hx.home("c_old"));
    // The same user with a HOME of its own is not hostexecd's.
    leave_behind(&other, std::path::Path::new("/tmp"));
    wait_until("the leftovers to run", QUICK, || async {
        (pids_with(&left).len() == 1 && pids_with(&other).len() == 1).then_some(())
    })
    .await
    .unwrap();
    hx.spawn().unwrap();
    hx.wait_healthy().await.unwrap();
    none_left_within(&left, Duration::from_secs(3)).await;
    assert_eq!(
        pids_with(&other).len(),
        1,
        "another process of the user stays"
    );
}

/// Containment that cannot be made refuses the call: hostexecd as root
/// without CAP_SYS_ADMIN cannot make namespaces, and no command runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_cannot_be_contained_is_refused_and_nothing_runs() {
    let _not_the_bomb = crate::hostexec::shared().await;
    assert!(
        Hostexecd::as_root(),
        "this test takes a capability from hostexecd as root: run the tests as root, as CI does"
    );
    let hx = Hostexecd::start_launched(
        &[
            "setpriv",
            "--bounding-set=-sys_admin",
            "--inh-caps=-sys_admin",
            "--",
        ],
        "",
    )
    .await
    .unwrap();
    let run = hx
        .exec("c_bare", "echo ran > ran.txt; echo ran", None, QUICK)
        .await
        .unwrap();
    let end = finished(&run);
    assert_eq!(run.output(), "", "{run:?}");
    assert_eq!(end["exit_code"], Value::Null, "{end}");
    let error = end["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the command was not run: its containment could not be made"),
        "{end}"
    );
    assert!(!hx.workspace("c_bare").join("ran.txt").exists());
}

/// chatd makes its data folder 0700 (no o+x): commands still reach their
/// workspace and home (their view is their own), and hostexecd starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_chat_data_folder_keeps_no_command_out() {
    let _not_the_bomb = crate::hostexec::shared().await;
    use std::os::unix::fs::PermissionsExt;
    let mut hx = Hostexecd::start("").await.unwrap();
    let private = std::fs::Permissions::from_mode(0o700);
    std::fs::set_permissions(&hx.chat_data, private.clone()).unwrap();
    let run = hx
        .exec("c_tight", "echo ok > made.txt; cat made.txt", None, QUICK)
        .await
        .unwrap();
    assert_eq!(finished(&run)["exit_code"], 0, "{run:?}");
    assert_eq!(run.output(), "ok\n");
    hx.sigterm(QUICK).unwrap();
    hx.spawn().unwrap();
    hx.wait_healthy().await.unwrap();
    let run = hx
        .exec("c_tight", "cat made.txt", None, QUICK)
        .await
        .unwrap();
    assert_eq!(run.output(), "ok\n", "{run:?}");
    assert_eq!(
        std::fs::metadata(&hx.chat_data)
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_starts_with_no_signal_blocked_and_a_plain_kill_works() {
    let _not_the_bomb = crate::hostexec::shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let _left = KillLeftovers(m.clone());
    let run = hx
        .exec(
            "c_sig",
            &format!(
                "grep '^SigBlk' /proc/self/status; sleep {m} & kill $!; wait $!; echo \"child ended $?\""
            ),
            Some(10),
            QUICK,
        )
        .await
        .unwrap();
    let end = finished(&run);
    let out = run.output();
    assert!(out.contains("SigBlk:\t0000000000000000\n"), "{out}");
    assert!(out.contains("child ended 143\n"), "{out}");
    assert_eq!(end["exit_code"], 0, "{run:?}");
    // A trap on TERM runs when the command signals itself.
    let run = hx
        .exec(
            "c_sig",
            "trap 'echo got TERM; exit 7' TERM; kill -TERM $$; sleep 5; echo missed",
            Some(10),
            QUICK,
        )
        .await
        .unwrap();
    assert_eq!(finished(&run)["exit_code"], 7, "{run:?}");
    assert_eq!(run.output(), "got TERM\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_output_bound_counts_what_is_sent() {
    let _not_the_bomb = crate::hostexec::shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    // Invalid UTF-8: each byte is sent as U+FFFD, three bytes.
    let run = hx
        .exec(
            "c_bytes",
            "head -c 300000 /dev/zero | tr '\\0' '\\377'",
            None,
            QUICK,
        )
        .await
        .unwrap();
    let end = finished(&run);
    assert_eq!(end["truncated"], true, "{end}");
    assert_eq!(end["killed_by"], "output", "{end}");
    let sent = run.output().len();
    assert!(
        (65_536 - 4..=65_536).contains(&sent),
        "{sent} bytes of text sent"
    );
    assert!(run.output().chars().all(|c| c == '\u{FFFD}'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chats_command_sees_neither_another_chats_processes_nor_its_folders() {
    let _not_the_bomb = crate::hostexec::shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let m = marker();
    let _left = KillLeftovers(m.clone());
    let mut a = hx
        .exec_open(
            "c_a",
            &format!("echo a-secret > ~/secret; echo a-work > mine.txt; echo ready; sleep {m}"),
            None,
        )
        .await
        .unwrap();
    a.read_until(QUICK, |e| e["event"] == "output")
        .await
        .unwrap();
    let data = hx.chat_data.display();
    // The marker is put together at run time: this command's own command
    // line does not hold it.
    let (head, tail) = m.split_at(4);
    let b = hx
        .exec(
            "c_b",
            &format!(
                "ls -a {data}/homes {data}/workspaces 2>&1; \
                 cat {data}/homes/c_a/home/secret {data}/workspaces/c_a/mine.txt 2>&1; \
                 pat=\"sleep {head}\"\"{tail}\"; \
                 for p in /proc/[0-9]*; do \
                   if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -qF \"$pat\"; then \
                     echo \"found ${{p#/proc/}}\"; kill -9 ${{p#/proc/}} 2>&1; \
                   fi; \
                 done; echo looked"
            ),
            None,
            QUICK,
        )
        .await
        .unwrap();
    finished(&b);
    let out = b.output();
    assert!(out.contains("looked"), "{out}");
    assert!(
        !out.contains("a-secret") && !out.contains("a-work"),
        "{out}"
    );
    assert!(!out.contains("found"), "{out}");
    // chat A's command still runs.
    assert!(!pids_with(&m).is_empty(), "chat A's command was killed");
    let (_, health) = hx.call("GET", "/health", None).await.unwrap();
    assert_eq!(health["running"], 1, "{health}");
    drop(a);
    none_left_within(&m, Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_swapped_for_a_link_or_a_file_is_repaired_and_said() {
    let _not_the_bomb = crate::hostexec::shared().await;
    let hx = Hostexecd::start("").await.unwrap();
    let home = hx.home("c_home");
    // A command cannot swap its home: the call's view holds it in place.
    let run = hx
        .exec(
            "c_home",
            "echo kept > ~/note; cd ..; rm -rf home; ln -sfn / home; mv home elsewhere; echo tried",
            None,
            QUICK,
        )
        .await
        .unwrap();
    assert_eq!(run.output().lines().last(), Some("tried"), "{run:?}");
    let run = hx
        .exec("c_home", "cat ~/note; pwd -P", None, QUICK)
        .await
        .unwrap();
    assert!(finished(&run).get("repaired").is_none(), "{run:?}");
    assert!(home.is_dir() && !home.is_symlink());

    // A link put there from outside (an older hostexecd, a person): never
    // followed, removed, the folder made again, and the result says so.
    let outside = hx.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), "root's").unwrap();
    std::fs::remove_dir_all(&home).unwrap();
    std::os::unix::fs::symlink(&outside, &home).unwrap();
    let run = hx
        .exec("c_home", "ls -A ~; echo fine", None, QUICK)
        .await
        .unwrap();
    let end = finished(&run);
    assert_eq!(end["exit_code"], 0, "{run:?}");
    assert_eq!(run.output(), "fine\n");
    let repaired = end["repaired"].as_str().unwrap_or_default();
    assert!(repaired.contains("symbolic link"), "{end}");
    assert!(home.is_dir() && !home.is_symlink());
    assert_eq!(
        std::fs::read_to_string(outside.join("keep")).unwrap(),
        "root's"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);

    // A file there: kept inside the new home.
    std::fs::remove_dir_all(&home).unwrap();
    std::fs::write(&home, "was my home").unwrap();
    let run = hx
        .exec("c_home", "cat ~/former-home", None, QUICK)
        .await
        .unwrap();
    let end = finished(&run);
    assert_eq!(run.output(), "was my home", "{run:?}");
    assert!(
        end["repaired"]
            .as_str()
            .unwrap_or_default()
            .contains("a file"),
        "{end}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_works_in_the_chats_workspace_with_its_home_beside_it() {
    let _not_the_bomb = crate::hostexec::shared().await;
    let shared = tempfile::tempdir().unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let shared_ws = shared.path().join("workspace");
    std::fs::create_dir(&shared_ws).unwrap();
    std::fs::set_permissions(&shared_ws, std::fs::Permissions::from_mode(0o700)).unwrap();
    let hx = Hostexecd::start(&format!("shared_workspace = \"{}\"\n", shared_ws.display()))
        .await
        .unwrap();
    let workspace = hx.workspace("c_ws");
    // What chatd saved there (an upload): its own file, 0600.
    std::fs::create_dir_all(workspace.join("uploads")).unwrap();
    std::fs::write(workspace.join("uploads/notes.md"), "one\ntwo\nthree\n").unwrap();
    std::fs::set_permissions(
        workspace.join("uploads/notes.md"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::create_dir_all(workspace.join(".tandem")).unwrap();
    let owner = std::fs::metadata(&hx.chat_data).unwrap().uid();

    let run = hx
        .exec(
            "c_ws",
            "pwd; echo \"HOME=$HOME\"; wc -l < uploads/notes.md; echo made > made.txt; \
             echo tool > .tandem/mine; echo mine > ~/in-home",
            None,
            QUICK,
        )
        .await
        .unwrap();
    let end = finished(&run);
    assert_eq!(end["exit_code"], 0, "{run:?}");
    let out = run.output();
    assert!(
        out.starts_with(&format!(
            "{}\nHOME={}\n3\n",
            workspace.display(),
            hx.home("c_ws").display()
        )),
        "{out}"
    );
    // The changes are the workspace's, without chatd's .tandem/.
    assert_eq!(end["changes"]["created"], json!(["made.txt"]), "{end}");
    // Given back: what the command made belongs to chat_data's owner again.
    assert_eq!(
        std::fs::metadata(workspace.join("made.txt")).unwrap().uid(),
        owner
    );
    assert_eq!(std::fs::metadata(&workspace).unwrap().uid(), owner);
    assert_eq!(
        std::fs::metadata(workspace.join("uploads/notes.md"))
            .unwrap()
            .uid(),
        owner
    );

    // Named explicitly: the same; another chat's, or any other path: 400.
    let own = workspace.display().to_string();
    let (status, _) = post_exec(
        &hx,
        json!({"chat_id": "c_ws", "command": "true", "workspace": own}),
    )
    .await;
    assert_eq!(status, 200);
    for bad in [
        hx.workspace("c_other").display().to_string(),
        "/etc".to_string(),
        "workspaces/c_ws".to_string(),
        format!("{own}/.."),
        format!("{own}/uploads"),
    ] {
        let (status, body) = post_exec(
            &hx,
            json!({"chat_id": "c_ws", "command": "touch x", "workspace": bad}),
        )
        .await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["field"], "workspace", "{body}");
    }

    // The shared workspace: the folder is lent for the call, then given back.
    let run = hx
        .exec_in(
            "c_sh",
            &shared_ws,
            "pwd; touch from-shared; stat -c %u .",
            QUICK,
        )
        .await
        .unwrap();
    let end = finished(&run);
    assert_eq!(end["exit_code"], 0, "{run:?}");
    assert!(
        run.output()
            .starts_with(&format!("{}\n", shared_ws.display())),
        "{run:?}"
    );
    assert_eq!(end["changes"]["created"], json!(["from-shared"]), "{end}");
    assert_eq!(std::fs::metadata(&shared_ws).unwrap().uid(), owner);

    // A workspace that is a link is refused, its target left alone.
    let target = hx.dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, hx.workspace("c_link")).unwrap();
    let (status, body) = post_exec(&hx, json!({"chat_id": "c_link", "command": "touch x"})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["type"], "workspace_unusable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("symbolic link"),
        "{body}"
    );
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
}

/// `POST /exec` with a body of the test's own, read to its end.
async fn post_exec(hx: &Hostexecd, body: Value) -> (u16, Value) {
    let response = hx
        .client()
        .unwrap()
        .post("http://hostexecd/exec")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let last = text.lines().last().unwrap_or("null");
    (status, serde_json::from_str(last).unwrap_or(Value::Null))
}

/// hostexecd as a plain user (as its user unit runs it; here `nobody`,
/// started by this root test): each call gets a user namespace of its own
/// with the PID and mount namespaces in it, so a fork-walker ends with its
/// call here too and the command sees only its own processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_a_plain_user_each_call_is_contained_too() {
    let _not_the_bomb = crate::hostexec::shared().await;
    assert!(
        Hostexecd::as_root(),
        "this test starts hostexecd as nobody: run the tests as root, as CI does"
    );
    let hx = Hostexecd::start_as(65534, "").await.unwrap();
    let (status, health) = hx.curl("GET", "/health", None).await.unwrap();
    assert_eq!(status, 200, "{health}");
    let health: Value = serde_json::from_str(&health).unwrap();
    assert_eq!(
        health["containment"], "user, PID and mount namespaces",
        "{health}"
    );
    let home = hx.home("c_plain");
    let m = marker();
    let _stop = StopWalker(home.join(format!("stop-{m}")));
    let _left = KillLeftovers(m.clone());
    let command = format!(
        "{}\nuntil [ -s ~/walk-{m} ]; do sleep 0.01; done; id -u; pwd; echo $$",
        walker(&m)
    );
    let run = hx.curl_exec("c_plain", &command).await.unwrap();
    let end = finished(&run);
    assert_eq!(end["exit_code"], 0, "{run:?}");
    let out = run.output();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "65534", "{out}");
    assert_eq!(
        lines[1],
        hx.workspace("c_plain").display().to_string(),
        "{out}"
    );
    // bash is process 2 of its namespace (its init is 1).
    assert_eq!(lines[2], "2", "{out}");
    walker_gone(&home.join(format!("walk-{m}")), Duration::from_secs(5)).await;
    none_left_within(&m, Duration::from_secs(1)).await;
}
