//! Figure 9 of `bench`: chatd's sandboxes (the `bash` tool's per-chat
//! containers) on a real runtime: podman's Docker Engine API service with
//! runc and the busybox test image (`harness::Podman`), driven through
//! chatd's own `Sandboxes` and `run_command`, as the `bash` tool drives them.
//!
//! Measured, each from the bench's side of chatd's code:
//! - **cold**: a chat whose container does not exist: `ensure` (create,
//!   start) + `run_command("echo hi")` to the first output byte;
//! - **stopped**: the same chats after `stop`: `ensure` (start) + run to the
//!   first byte;
//! - **warm**: a running sandbox: `run_command("echo hi")` to the first byte
//!   and to its end, against `bash -c 'echo hi'` spawned from Rust;
//! - **per call**: `true` through the whole call (`ensure` on a running
//!   sandbox, the folders handed over, `run_command` to its end) against
//!   hostexecd's `POST /exec` of `true` to `finished` and `bash -c true`
//!   spawned from Rust. hostexecd is measured first, before any of the
//!   figure's execs, and again interleaved with the sandbox's calls at the
//!   end: podman's API keeps every exec's conmon processes for
//!   `exit_command_delay` (300 s by default), and hostexecd's walks of /proc
//!   grow with the processes on the box.
//!
//! Printed on the side: what a start is made of (create, start, the
//! inspects), a stop and a remove, a bare exec through the API (`echo hi`,
//! no wrapper, each step timed), the API's round trip (an inspect) and the
//! conmon processes podman leaves behind. Every container the
//! figure makes is removed on the way out, however it ends.

use std::collections::HashMap;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Context};
use chatd::config::{ChatdConfig, SandboxConfig};
use chatd::sandbox::exec::{run_command, Cancel};
use chatd::sandbox::{container_name, Sandboxes};
use tandem_shared::docker::Demux;
use tandem_shared::shutdown::Shutdown;

use crate::egressbench::Line;
use crate::harness::{bin_dir, Hostexecd, Podman};

/// The figure's containers are `tandem-chat-bench_…`.
const CONMON_PREFIX: &str = "-n tandem-chat-bench_";

/// Bound of any one call.
const BOUND: Duration = Duration::from_secs(60);

/// How big the figure's workload is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// New chats started cold (each then stopped and started again).
    pub cold: usize,
    /// Calls of `echo hi` in a running sandbox.
    pub warm: usize,
    /// Calls of `true` each way (sandbox, hostexecd, bash).
    pub calls: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                cold: 5,
                warm: 30,
                calls: 30,
            }
        } else {
            Sizes {
                cold: 20,
                warm: 200,
                calls: 200,
            }
        }
    }
}

/// Why the figure cannot run on this machine, if it cannot (the bench then
/// prints it and goes on): it runs podman as root, as the sandbox tests do.
pub fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some(
            "not root: the sandbox figure runs podman as root, as the sandbox tests do (CI runs as root)"
                .into(),
        );
    }
    match Command::new("podman")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "`podman --version` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("no podman on the PATH ({e})")),
    }
}

/// The shared runtime (`harness::Podman`): its service on a private socket
/// and the busybox test image, built with the `tandem` next to this binary.
pub async fn podman() -> anyhow::Result<&'static Podman> {
    let dir = bin_dir();
    for binary in ["tandem", "tandem-shim"] {
        ensure!(
            dir.join(binary).exists(),
            "{binary} is not built in {} (the test image is made with it): \
             cargo build --release --workspace",
            dir.display()
        );
    }
    // It blocks (the service's socket, `tandem sandbox build`) and panics
    // when podman cannot start: off the runtime's threads, the panic an error.
    match tokio::task::spawn_blocking(|| Podman::shared()).await {
        Ok(Some(podman)) => Ok(podman),
        Ok(None) => Err(anyhow!("podman is not available (not root)")),
        Err(e) => Err(anyhow!("podman could not start: {e}")),
    }
}

/// Samples, microseconds.
struct Dist {
    p50: i64,
    p99: i64,
    max: i64,
}

fn dist(v: &[i64]) -> Dist {
    let mut v = v.to_vec();
    v.sort_unstable();
    let at = |q: f64| {
        if v.is_empty() {
            return 0;
        }
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    };
    Dist {
        p50: at(0.5),
        p99: at(0.99),
        max: v.last().copied().unwrap_or(0),
    }
}

fn ms(us: i64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

/// A difference: `+1.00 ms`, `-0.40 ms`.
fn plus(us: i64) -> String {
    if us < 0 {
        format!("-{}", ms(-us))
    } else {
        format!("+{}", ms(us))
    }
}

fn kib(k: u64) -> String {
    format!("{:.1} MiB", k as f64 / 1024.0)
}

/// conmon processes (podman's per-container and per-exec monitors) whose
/// command line names a container starting with `prefix`: pid → memory
/// (proportional set size, KiB: shared pages counted once between them).
fn conmons_of(prefix: &str) -> HashMap<u32, u64> {
    let mut found = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim() != "conmon" {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline)
            .replace('\0', " ")
            .contains(prefix)
        {
            continue;
        }
        let rollup = std::fs::read_to_string(entry.path().join("smaps_rollup")).unwrap_or_default();
        let kib = rollup
            .lines()
            .find_map(|l| l.strip_prefix("Pss:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        found.insert(pid, kib);
    }
    found
}

fn us(d: Duration) -> i64 {
    d.as_micros() as i64
}

/// `median X / p99 Y`.
fn mp(d: &Dist) -> String {
    format!("median {} / p99 {}", ms(d.p50), ms(d.p99))
}

/// `median X / max Y`.
fn mm(d: &Dist) -> String {
    format!("median {} / max {}", ms(d.p50), ms(d.max))
}

fn ratio(a: i64, b: i64) -> f64 {
    a as f64 / b.max(1) as f64
}

fn line(
    figure: impl Into<String>,
    measured: impl Into<String>,
    baseline: Option<(String, String)>,
) -> Line {
    Line {
        figure: figure.into(),
        measured: measured.into(),
        aim: None,
        baseline,
    }
}

/// One `bash`-tool call's times, from the call's arrival.
struct Call {
    /// `ensure` answered (a lease on a running sandbox).
    ensured: Duration,
    /// The first byte of output was read (None: the command wrote nothing).
    first: Option<Duration>,
    /// `run_command` answered.
    end: Duration,
}

/// A `bash` call as chatd's tool makes it (without parsing the arguments
/// and fitting the output): `ensure`, the folders handed over, the command
/// run to its end. Checks that it exited 0 and wrote `expect`.
async fn call(
    sandboxes: &Sandboxes,
    chat: &str,
    command: &str,
    expect: &str,
) -> anyhow::Result<Call> {
    let began = Instant::now();
    let lease = tokio::time::timeout(BOUND, sandboxes.ensure(chat))
        .await
        .with_context(|| format!("{chat}: the sandbox did not start in {BOUND:?}"))?
        .map_err(|e| anyhow!("{chat}: the sandbox did not start: {e}"))?;
    let ensured = began.elapsed();
    sandboxes.hand_over_folders(chat).await;
    let (tell, first) = tokio::sync::oneshot::channel();
    let (output, ended, _) = tokio::time::timeout(
        BOUND,
        run_command(
            sandboxes,
            &lease,
            command,
            Duration::from_secs(30),
            std::future::pending::<Cancel>(),
            Some(tell),
        ),
    )
    .await
    .with_context(|| format!("{chat}: {command} did not end in {BOUND:?}"))?;
    let end = began.elapsed();
    drop(lease);
    // Sent or dropped by now: the call is over.
    let first = first.await.ok().map(|at| at.duration_since(began));
    ensure!(
        ended.exit_code == Some(0) && ended.error.is_none() && output == expect,
        "{chat}: `{command}` answered {output:?}, {ended:?}"
    );
    Ok(Call {
        ensured,
        first,
        end,
    })
}

/// One hostexecd `POST /exec` of `true`, sent to `finished` read (µs).
async fn hostexec_true(hx: &Hostexecd, i: usize) -> anyhow::Result<i64> {
    let began = Instant::now();
    let run = hx.exec("bench", "true", None, BOUND).await?;
    let took = us(began.elapsed());
    ensure!(
        run.status == 200 && run.body["exit_code"] == 0,
        "hostexecd call {i}: {run:?}"
    );
    Ok(took)
}

/// The exec sessions podman keeps on a container (`ExecIDs`): each one stays
/// until its conmon's exit command runs, `exit_command_delay` after its end.
async fn exec_sessions(
    docker: &tandem_shared::docker::Docker,
    container: &str,
) -> anyhow::Result<usize> {
    let found = docker
        .container(container)
        .await?
        .context("the warm container")?;
    Ok(found["ExecIDs"].as_array().map(Vec::len).unwrap_or(0))
}

/// Processes on the box (/proc's numbered entries).
fn processes() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .count()
        })
        .unwrap_or(0)
}

/// `bash -c <command>` spawned from Rust: (first byte of its stdout, exit).
fn plain_bash(command: &str) -> anyhow::Result<(Option<Duration>, Duration)> {
    let began = Instant::now();
    let mut child = Command::new("bash")
        .args(["-c", command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning bash")?;
    let mut first = None;
    if let Some(mut out) = child.stdout.take() {
        let mut byte = [0u8; 64];
        while let Ok(n) = out.read(&mut byte) {
            if n == 0 {
                break;
            }
            first.get_or_insert_with(|| began.elapsed());
        }
    }
    let status = child.wait()?;
    let end = began.elapsed();
    ensure!(status.success(), "bash -c {command:?}: {status}");
    Ok((first, end))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The figure. `say` prints a line as it goes; the answer is the table's rows.
pub async fn figure(
    sizes: &Sizes,
    podman: &Podman,
    say: &dyn Fn(String),
) -> anyhow::Result<Vec<Line>> {
    let dir = tempfile::tempdir()?;
    let (_trigger, shutdown) = Shutdown::new();
    let config = ChatdConfig {
        data_dir: dir.path().to_path_buf(),
        engine_url: "http://127.0.0.1:9".into(),
        sandbox: SandboxConfig {
            socket: podman.socket.clone(),
            image: podman.image.clone(),
            mem_gb: 0.5,
            floor_gb: 0.0,
            // Every cold chat stays up until the stops: no start of the
            // figure waits for another sandbox's stop (make_room).
            max_running: (sizes.cold + 4) as u32,
            ..Default::default()
        },
        ..Default::default()
    };
    let folders = chatd::folders::Folders::from_config(&config);
    let sandboxes = Sandboxes::new(&config, shutdown, folders)?;
    let status = sandboxes.probe().await;
    ensure!(
        status.installed,
        "the sandbox runtime is not usable: {}",
        status.reason.unwrap_or_default()
    );
    let mut chats: Vec<String> = (0..sizes.cold.max(1))
        .map(|i| format!("bench_cold_{i}"))
        .collect();
    chats.push("bench_warmup".into());
    chats.push("bench_warm".into());
    // What an interrupted run left under the same names.
    for chat in &chats {
        sandboxes.remove(chat).await;
    }
    let release = bin_dir().components().any(|c| c.as_os_str() == "release");
    say(format!(
        "runtime {} on {}, image {}, commands as {}; {}; load average {}; {} cold chats, \
         {} warm calls, {} calls of `true` each way",
        status.runtime.unwrap_or_default(),
        podman.socket.display(),
        podman.image,
        sandboxes.user(),
        if release {
            "release build"
        } else {
            "not a release build: the figures mean little"
        },
        loadavg(),
        sizes.cold,
        sizes.warm,
        sizes.calls
    ));
    let measured = measure(sizes, &sandboxes, &podman.image, &chats, say).await;
    for chat in &chats {
        sandboxes.remove(chat).await;
    }
    measured
}

async fn measure(
    sizes: &Sizes,
    sandboxes: &Sandboxes,
    image_ref: &str,
    chats: &[String],
    say: &dyn Fn(String),
) -> anyhow::Result<Vec<Line>> {
    let cold_chats = &chats[..chats.len() - 2];
    let (warmup, warm) = (&chats[chats.len() - 2], &chats[chats.len() - 1]);
    let docker = sandboxes.docker();
    let user = sandboxes.user();
    let conmons_before = conmons_of(CONMON_PREFIX);
    say(format!(
        "{} processes on the box at the start, {} of them conmon processes an earlier run's \
         execs left (gone 5 minutes after that run: they slow hostexecd and the warm figures)",
        processes(),
        conmons_before.len()
    ));

    // 0. hostexecd and bash on the process table as it is before any of
    // the figure's execs (each exec leaves podman's conmon processes for
    // minutes, and hostexecd's per-call walks of /proc grow with them).
    let processes_before = processes();
    let hx = Hostexecd::start("").await?;
    for _ in 0..5 {
        let run = hx.exec("bench", "true", None, BOUND).await?;
        ensure!(run.status == 200, "hostexecd warm-up: {run:?}");
        plain_bash("true")?;
    }
    let mut hostexec_clean = Vec::new();
    let mut bash_clean = Vec::new();
    for i in 0..sizes.calls {
        hostexec_clean.push(hostexec_true(&hx, i).await?);
        bash_clean.push(us(plain_bash("true")?.1));
    }

    // One cold start and call before measuring (the runtime's caches, the
    // image's layers, the client's connection).
    call(sandboxes, warmup, "echo hi", "hi\n").await?;
    sandboxes.remove(warmup).await;

    // 1. Cold: no container yet.
    let mut cold = Vec::new();
    for chat in cold_chats {
        cold.push(call(sandboxes, chat, "echo hi", "hi\n").await?);
    }
    // Stops (timed: a stop is part of the stopped figure's story).
    let mut stops = Vec::new();
    for chat in cold_chats {
        let began = Instant::now();
        sandboxes.stop(chat, "bench").await;
        stops.push(us(began.elapsed()));
    }
    for chat in cold_chats {
        let found = docker.container(&container_name(chat)).await?;
        let state = found
            .as_ref()
            .and_then(|f| f["State"]["Status"].as_str())
            .unwrap_or("gone");
        ensure!(
            state == "exited" || state == "stopped" || state == "created",
            "{chat}: after the stop its container is {state}"
        );
    }
    // 2. Stopped: the container is there, not running.
    let mut stopped = Vec::new();
    for chat in cold_chats {
        stopped.push(call(sandboxes, chat, "echo hi", "hi\n").await?);
    }
    let mut removes = Vec::new();
    for chat in cold_chats {
        let began = Instant::now();
        sandboxes.remove(chat).await;
        removes.push(us(began.elapsed()));
    }

    // 3. Warm: a running sandbox.
    call(sandboxes, warm, "echo hi", "hi\n").await?;
    for _ in 0..5 {
        call(sandboxes, warm, "echo hi", "hi\n").await?;
        plain_bash("echo hi")?;
    }
    let mut warm_first = Vec::new();
    // In call order (the sorted copy is `warm_first`).
    let mut warm_first_all = Vec::new();
    let mut warm_end = Vec::new();
    let mut warm_ensure = Vec::new();
    let mut bash_first = Vec::new();
    let mut bash_end = Vec::new();
    for _ in 0..sizes.warm {
        let c = call(sandboxes, warm, "echo hi", "hi\n").await?;
        let first = c.first.context("echo hi wrote nothing")?;
        warm_ensure.push(us(c.ensured));
        warm_first.push(us(first - c.ensured));
        warm_first_all.push(us(first - c.ensured));
        warm_end.push(us(c.end - c.ensured));
        let (first, end) = plain_bash("echo hi")?;
        bash_first.push(us(first.context("bash wrote nothing")?));
        bash_end.push(us(end));
    }
    // The API's round trips (the inspects `ensure` makes), and a bare exec
    // through the API: `echo hi`, no wrapper, no checks, each step timed:
    // create, start (to the answer's headers), the first byte, the stream's
    // end, inspect.
    let container = container_name(warm);
    let mut inspect = Vec::new();
    let mut image = Vec::new();
    for _ in 0..20 {
        let began = Instant::now();
        docker
            .container(&container)
            .await?
            .context("the warm container")?;
        inspect.push(us(began.elapsed()));
        let began = Instant::now();
        docker.image(image_ref).await?.context("the image")?;
        image.push(us(began.elapsed()));
    }
    let mut bare_first = Vec::new();
    let mut bare = Vec::new();
    let mut bare_steps: [Vec<i64>; 5] = Default::default();
    let spec = serde_json::json!({
        "Cmd": ["echo", "hi"],
        "AttachStdout": true,
        "AttachStderr": true,
        "User": user,
    });
    for _ in 0..sizes.warm {
        let began = Instant::now();
        let id = docker.exec_create(&container, &spec).await?;
        let created = began.elapsed();
        let mut response = docker.exec_start(&id).await?;
        let started = began.elapsed();
        let mut first = None;
        let mut demux = Demux::default();
        while let Some(chunk) = response.chunk().await? {
            if demux.push(&chunk).iter().any(|(_, f)| !f.is_empty()) {
                first.get_or_insert_with(|| began.elapsed());
            }
        }
        let streamed = began.elapsed();
        let state = docker.exec_inspect(&id).await?;
        let end = began.elapsed();
        ensure!(state["ExitCode"] == 0, "a bare exec of echo hi: {state}");
        let first = first.context("a bare exec of echo hi wrote nothing")?;
        bare_first.push(us(first));
        bare.push(us(end));
        for (k, (from, to)) in [
            (Duration::ZERO, created),
            (created, started),
            (started, first),
            (first, streamed),
            (streamed, end),
        ]
        .into_iter()
        .enumerate()
        {
            bare_steps[k].push(us(to - from));
        }
    }

    // 4. Per call: the sandbox's `true`, hostexecd's and bash's, interleaved
    // (hostexecd now beside the conmon processes the run's execs left).
    let leftover = conmons_of(CONMON_PREFIX)
        .keys()
        .filter(|pid| !conmons_before.contains_key(pid))
        .count();
    let sessions_before = exec_sessions(docker, &container).await?;
    let mut sandbox_true = Vec::new();
    let mut hostexec_beside = Vec::new();
    let mut bash_true = Vec::new();
    let mut sandbox_steps: [Vec<i64>; 2] = Default::default();
    for i in 0..sizes.calls {
        let c = call(sandboxes, warm, "true", "").await?;
        sandbox_true.push(us(c.end));
        sandbox_steps[0].push(us(c.ensured));
        sandbox_steps[1].push(us(c.end - c.ensured));
        hostexec_beside.push(hostexec_true(&hx, i).await?);
        bash_true.push(us(plain_bash("true")?.1));
    }
    let processes_after = processes();
    let sessions_after = exec_sessions(docker, &container).await?;
    drop(hx);

    // What a start is made of.
    let part =
        |calls: &[Call], f: &dyn Fn(&Call) -> i64| dist(&calls.iter().map(f).collect::<Vec<_>>());
    let first_of = |c: &Call| us(c.first.unwrap_or(c.end));
    let cold_first = part(&cold, &first_of);
    let cold_ensure = part(&cold, &|c| us(c.ensured));
    let cold_exec = part(&cold, &|c| first_of(c) - us(c.ensured));
    let cold_rest = part(&cold, &|c| us(c.end) - first_of(c));
    let stopped_first = part(&stopped, &first_of);
    let stopped_ensure = part(&stopped, &|c| us(c.ensured));
    let stopped_exec = part(&stopped, &|c| first_of(c) - us(c.ensured));
    let (stops, removes) = (dist(&stops), dist(&removes));
    let (warm_first, warm_end, warm_ensure) =
        (dist(&warm_first), dist(&warm_end), dist(&warm_ensure));
    let (bash_first, bash_end) = (dist(&bash_first), dist(&bash_end));
    let (bare_first, bare) = (dist(&bare_first), dist(&bare));
    let (inspect, image) = (dist(&inspect), dist(&image));
    let bare_steps: Vec<String> = bare_steps.iter().map(|v| ms(dist(v).p50)).collect();
    // Those of this run only (a run minutes before left its own).
    let conmons: Vec<u64> = conmons_of(CONMON_PREFIX)
        .into_iter()
        .filter(|(pid, _)| !conmons_before.contains_key(pid))
        .map(|(_, kib)| kib)
        .collect();
    let conmon_kib: u64 = conmons.iter().sum();
    let conmons = conmons.len();
    let (sandbox_true, hostexec_beside, bash_true) = (
        dist(&sandbox_true),
        dist(&hostexec_beside),
        dist(&bash_true),
    );
    let (hostexec_clean, bash_clean) = (dist(&hostexec_clean), dist(&bash_clean));
    let sandbox_ensure = dist(&sandbox_steps[0]);
    let tenth_calls = (sizes.calls / 10).max(1);
    let (true_early, true_late) = (
        dist(&sandbox_steps[1][..tenth_calls]),
        dist(&sandbox_steps[1][sandbox_steps[1].len() - tenth_calls..]),
    );
    let sandbox_run = dist(&sandbox_steps[1]);
    let tenth = (sizes.warm / 10).max(1);
    let (warm_early, warm_late) = (
        dist(&warm_first_all[..tenth]),
        dist(&warm_first_all[warm_first_all.len() - tenth..]),
    );
    say(format!(
        "API round trips: inspect a container (ensure makes two) {}, inspect the image \
         (ensure makes one) {}",
        mp(&inspect),
        mp(&image)
    ));
    say(format!(
        "cold ({} chats): to first byte {}; of it ensure (image and container inspect, create, \
         start, inspect) {}, \
         then the exec to its first byte median {}; first byte to the call's end median {}",
        cold.len(),
        mm(&cold_first),
        mm(&cold_ensure),
        ms(cold_exec.p50),
        ms(cold_rest.p50)
    ));
    say(format!(
        "stop (docker stop, 2 s grace): {}; stopped start to first byte {}; of it ensure \
         (image and container inspect, start, inspect) {}, then the exec median {}; remove of a running one {}",
        mm(&stops),
        mm(&stopped_first),
        mm(&stopped_ensure),
        ms(stopped_exec.p50),
        mm(&removes)
    ));
    say(format!(
        "warm `echo hi` ({} calls): first byte {} (first {tenth} calls median {}, last {tenth} \
         median {}), end {} (ensure on a running one median {}); `bash -c 'echo hi'` from Rust: \
         first byte {}, exit {}",
        sizes.warm,
        mp(&warm_first),
        ms(warm_early.p50),
        ms(warm_late.p50),
        mp(&warm_end),
        ms(warm_ensure.p50),
        mp(&bash_first),
        mp(&bash_end),
    ));
    say(format!(
        "a bare exec of `echo hi` through the API (no wrapper, no checks): first byte {}, end {}; \
         medians of its steps: create {}, start to the answer's headers {}, to the first byte {}, \
         to the stream's end {}, inspect {}",
        mp(&bare_first),
        mp(&bare),
        bare_steps[0],
        bare_steps[1],
        bare_steps[2],
        bare_steps[3],
        bare_steps[4]
    ));
    say(format!(
        "`true` per call ({n} each): hostexecd before any sandbox exec ({processes_before} \
         processes on the box) {}, `bash -c true` {}; then interleaved, with the {leftover} \
         conmon processes the run's execs had left ({processes_after} processes on the box at \
         the end): sandbox {} (ensure and handing over the folders median {}, run_command median \
         {}; first {tenth_calls} calls median {}, last {tenth_calls} median {}, while the warm \
         container's exec sessions went from {sessions_before} to {sessions_after}), hostexecd {}, \
         `bash -c true` {}",
        mp(&hostexec_clean),
        mp(&bash_clean),
        mp(&sandbox_true),
        ms(sandbox_ensure.p50),
        ms(sandbox_run.p50),
        ms(true_early.p50),
        ms(true_late.p50),
        mp(&hostexec_beside),
        mp(&bash_true),
        n = sizes.calls,
    ));
    say(format!(
        "conmon processes this run left, still there at its end: {conmons} \
         ({} PSS together): podman's API keeps each exec's conmon pair for \
         exit_command_delay (300 s by default) after the exec has ended",
        kib(conmon_kib)
    ));

    let n = cold.len();
    Ok(vec![
        line(
            format!("9. sandbox cold start to first byte, `echo hi` ({n} new chats)"),
            mm(&cold_first),
            Some((
                format!("running sandbox, first byte median {}", ms(warm_first.p50)),
                format!("×{:.1} median", ratio(cold_first.p50, warm_first.p50)),
            )),
        ),
        line(
            format!("9. sandbox stopped start to first byte ({n} chats)"),
            mm(&stopped_first),
            Some((
                format!("running sandbox, first byte median {}", ms(warm_first.p50)),
                format!("×{:.1} median", ratio(stopped_first.p50, warm_first.p50)),
            )),
        ),
        line(
            format!(
                "9. sandbox warm `echo hi` to first byte ({} calls)",
                sizes.warm
            ),
            mp(&warm_first),
            Some((
                format!(
                    "`bash -c 'echo hi'` from Rust {} / {}",
                    ms(bash_first.p50),
                    ms(bash_first.p99)
                ),
                format!(
                    "{} median / {} p99",
                    plus(warm_first.p50 - bash_first.p50),
                    plus(warm_first.p99 - bash_first.p99)
                ),
            )),
        ),
        line(
            format!(
                "9. sandbox warm `echo hi` to its end ({} calls)",
                sizes.warm
            ),
            mp(&warm_end),
            Some((
                format!(
                    "`bash -c 'echo hi'` from Rust {} / {}",
                    ms(bash_end.p50),
                    ms(bash_end.p99)
                ),
                format!(
                    "{} median / {} p99",
                    plus(warm_end.p50 - bash_end.p50),
                    plus(warm_end.p99 - bash_end.p99)
                ),
            )),
        ),
        line(
            format!("9. sandbox call of `true` ({} calls)", sizes.calls),
            mp(&sandbox_true),
            Some((
                format!(
                    "hostexecd `POST /exec` {} / {}; `bash -c true` from Rust {} / {}",
                    ms(hostexec_clean.p50),
                    ms(hostexec_clean.p99),
                    ms(bash_true.p50),
                    ms(bash_true.p99)
                ),
                format!(
                    "×{:.1} median / ×{:.1} p99 vs hostexecd; {} median vs bash",
                    ratio(sandbox_true.p50, hostexec_clean.p50),
                    ratio(sandbox_true.p99, hostexec_clean.p99),
                    plus(sandbox_true.p50 - bash_true.p50)
                ),
            )),
        ),
        line(
            format!(
                "9. hostexecd call of `true` ({} calls, before any sandbox exec)",
                sizes.calls
            ),
            mp(&hostexec_clean),
            Some((
                format!(
                    "`bash -c true` from Rust {} / {}",
                    ms(bash_clean.p50),
                    ms(bash_clean.p99)
                ),
                format!(
                    "{} median / {} p99",
                    plus(hostexec_clean.p50 - bash_clean.p50),
                    plus(hostexec_clean.p99 - bash_clean.p99)
                ),
            )),
        ),
        line(
            format!(
                "9. hostexecd call of `true` beside {leftover} leftover conmon processes \
                 ({} calls, interleaved with the sandbox's)",
                sizes.calls
            ),
            mp(&hostexec_beside),
            Some((
                format!("the same before any sandbox exec {}", mp(&hostexec_clean)),
                format!(
                    "×{:.1} median / ×{:.1} p99",
                    ratio(hostexec_beside.p50, hostexec_clean.p50),
                    ratio(hostexec_beside.p99, hostexec_clean.p99)
                ),
            )),
        ),
    ])
}
