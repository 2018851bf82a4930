//! Headless Chromium for the web page's tests and figure 12, driven over
//! WebDriver (Debian's `chromium` and `chromium-driver`, through `fantoccini`
//! on plain HTTP to a chromedriver on loopback).
//!
//! A [`Chromedriver`] is one driver process on a free port; each
//! [`Browser`] is one WebDriver session, which is one Chromium process with
//! a profile folder of its own (nothing shared between two browsers: two
//! devices). Every wait here is a bounded poll; every process is stopped on
//! drop, a failing test included: a browser's session is deleted (which ends
//! its Chromium), and what is still running with its profile folder is
//! killed by pid.
//!
//! Screenshots go to `<target>/test-artifacts/web/<test>/<nn>-<name>.png`
//! (`<target>` is `CARGO_TARGET_DIR` or the folder the binaries are built
//! in; `<test>` is the test's thread name), numbered in the order taken
//! across every browser of the test.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};

use crate::harness::{bin_dir, free_port};
use crate::needs;

/// The Chromium Debian installs (a launcher script; chromedriver runs it).
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's chromedriver (package `chromium-driver`).
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// What to install when either is missing.
pub const INSTALL: &str = "apt-get install -y chromium chromium-driver";

/// Whether Chromium and chromedriver are installed; if not, the test is
/// skipped or, in CI, fails (`needs`). A browser test asks first.
#[track_caller]
pub fn available() -> bool {
    let absent: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|binary| !Path::new(binary).exists())
        .collect();
    if absent.is_empty() {
        return true;
    }
    needs::missing(
        &format!(
            "{} (not installed: the web page's tests drive Debian's Chromium)",
            absent.join(" and ")
        ),
        INSTALL,
    );
    false
}

/// The key chromedriver reads as Enter in `type_into`.
pub const ENTER: &str = "\u{E007}";

/// How often the waits look again.
const POLL: Duration = Duration::from_millis(25);
/// The default bound of a wait for the page (a debug chatd on a loaded box).
pub const WAIT: Duration = Duration::from_secs(20);

/// A window size, and whether it is a phone (touch, device pixel ratio 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Viewport {
    pub width: u32,
    pub height: u32,
    pub phone: bool,
}

/// A laptop's window.
pub const DESKTOP: Viewport = Viewport {
    width: 1280,
    height: 800,
    phone: false,
};

/// A phone held upright (an iPhone 12–15's CSS size).
pub const PHONE: Viewport = Viewport {
    width: 390,
    height: 844,
    phone: true,
};

/// Where one test's screenshots go, and the next number.
struct Artifacts {
    dir: PathBuf,
    next: AtomicU32,
}

impl Artifacts {
    fn for_this_test() -> Artifacts {
        let test = std::thread::current()
            .name()
            .filter(|n| *n != "main")
            .map(|n| n.rsplit("::").next().unwrap_or(n).to_string())
            .unwrap_or_else(|| "unnamed".to_string());
        let dir = artifacts_root().join("web").join(test);
        // Last run's pictures would mix with this run's.
        let _ = std::fs::remove_dir_all(&dir);
        Artifacts {
            dir,
            next: AtomicU32::new(1),
        }
    }
}

/// `<target>/test-artifacts`.
pub fn artifacts_root() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| bin_dir().parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("test-artifacts")
}

/// One chromedriver process on a free loopback port; killed on drop.
pub struct Chromedriver {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    artifacts: Arc<Artifacts>,
}

impl Chromedriver {
    /// Starts chromedriver and waits (bounded) until its `/status` says ready.
    pub async fn start() -> anyhow::Result<Chromedriver> {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            if !Path::new(binary).exists() {
                bail!("{binary} is missing: the browser tests need Debian's Chromium ({INSTALL})");
            }
        }
        let mut driver = Chromedriver {
            child: None,
            port: 0,
            dir: tempfile::tempdir()?,
            artifacts: Arc::new(Artifacts::for_this_test()),
        };
        // A port taken between free_port and chromedriver's bind: another.
        let mut last = None;
        for _ in 0..3 {
            driver.port = free_port();
            match driver.spawn().await {
                Ok(()) => return Ok(driver),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("chromedriver did not start")))
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let log = self.dir.path().join("chromedriver.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={}", self.port))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {CHROMEDRIVER} ({INSTALL})"))?;
        self.child = Some(child);
        let http = reqwest::Client::new();
        let url = format!("{}/status", self.url());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                bail!(
                    "chromedriver exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            let ready = http
                .get(&url)
                .timeout(Duration::from_secs(1))
                .send()
                .await
                .ok()
                .map(|r| r.json::<Value>());
            if let Some(body) = ready {
                if body.await.is_ok_and(|v| v["value"]["ready"] == true) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                self.stop();
                bail!("chromedriver's /status did not say ready within 20 s");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("chromedriver.log")).unwrap_or_default()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM lets it end the browsers it started; then SIGKILL.
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let log = self.log();
        self.stop();
        // Anything Chromium left under this driver's folder (profiles live there).
        kill_processes_with(&self.dir.path().to_string_lossy());
        crate::daemon::show_log("chromedriver", &mut self.dir, &log);
    }
}

/// The pids of processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mine = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != mine)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

fn kill_processes_with(marker: &str) {
    for pid in processes_with(marker) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// One browser: a WebDriver session, a Chromium process with a fresh profile.
pub struct Browser {
    client: Option<Client>,
    session: String,
    driver_port: u16,
    profile: PathBuf,
    pub viewport: Viewport,
    artifacts: Arc<Artifacts>,
}

impl Browser {
    /// A new Chromium (new profile folder) at `viewport`.
    pub async fn open(driver: &Chromedriver, viewport: Viewport) -> anyhow::Result<Browser> {
        let profile = tempfile::Builder::new()
            .prefix("profile-")
            .tempdir_in(driver.dir.path())?
            .keep();
        let mut args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--no-default-browser-check".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            // Other tabs and windows keep running at full speed.
            "--disable-renderer-backgrounding".into(),
            "--disable-background-timer-throttling".into(),
            "--disable-backgrounding-occluded-windows".into(),
            format!("--window-size={},{}", viewport.width, viewport.height),
            format!("--user-data-dir={}", profile.display()),
        ];
        if viewport.phone {
            args.push("--touch-events=enabled".into());
        }
        let mut options = json!({"binary": CHROMIUM, "args": args});
        if viewport.phone {
            options["mobileEmulation"] = json!({"deviceMetrics": {
                "width": viewport.width, "height": viewport.height,
                "pixelRatio": 3.0, "touch": true, "mobile": true,
            }});
        }
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert("goog:chromeOptions".into(), options);
        caps.insert("pageLoadStrategy".into(), json!("normal"));
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&driver.url())
            .await
            .with_context(|| {
                format!(
                    "a new Chromium session (is {CHROMIUM} working? {INSTALL}):\n{}",
                    driver.log()
                )
            })?;
        let session = client
            .session_id()
            .await?
            .context("chromedriver named no session")?;
        Ok(Browser {
            client: Some(client),
            session,
            driver_port: driver.port,
            profile,
            viewport,
            artifacts: driver.artifacts.clone(),
        })
    }

    /// The WebDriver client, for what the helpers here do not do.
    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("this browser was closed")
    }

    /// A new browser on the page at `front` showing `chat` (or the start
    /// screen), live; with a chat, `ready` (a control of the chat's header)
    /// is visible before it answers.
    pub async fn open_chat(
        driver: &Chromedriver,
        viewport: Viewport,
        front: &str,
        chat: Option<&str>,
        ready: &str,
    ) -> anyhow::Result<Browser> {
        let b = Browser::open(driver, viewport).await?;
        let hash = chat.map(|c| format!("#/c/{c}")).unwrap_or_default();
        b.goto(&format!("{front}/{hash}")).await?;
        b.wait_state("live").await?;
        if chat.is_some() {
            b.wait_visible(ready, WAIT).await?;
        }
        Ok(b)
    }

    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.client()
            .goto(url)
            .await
            .with_context(|| format!("opening {url}"))
    }

    /// Runs `script` as a function body (`return …` gives the value);
    /// `arguments[0..]` are `args`.
    pub async fn eval_with(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        self.client()
            .execute(script, args)
            .await
            .with_context(|| format!("running {script}"))
    }

    /// Runs `script` as a function body (`return …` gives the value).
    pub async fn eval(&self, script: &str) -> anyhow::Result<Value> {
        self.eval_with(script, Vec::new()).await
    }

    /// Polls `check` every 25 ms until it answers `Ok(value)`, at most
    /// `bound`; `Err(observation)` means not yet (the last one is in the
    /// error). Errors of the driver count as not yet too (an element the
    /// page replaced meanwhile).
    pub async fn poll<T, F, Fut>(
        &self,
        what: &str,
        bound: Duration,
        mut check: F,
    ) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<Result<T, String>>>,
    {
        let deadline = Instant::now() + bound;
        loop {
            let seen = match check().await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(seen)) => seen,
                Err(err) => format!("{err:#}"),
            };
            if Instant::now() >= deadline {
                bail!("timed out after {bound:?} waiting for {what}; last seen: {seen}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the script (a function body) returns something truthy
    /// (not null, false, 0 or ""); answers that value.
    pub async fn wait_js(
        &self,
        what: &str,
        script: &str,
        bound: Duration,
    ) -> anyhow::Result<Value> {
        self.poll(what, bound, || async {
            let v = self.eval(script).await?;
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            Ok(if truthy { Ok(v) } else { Err(v.to_string()) })
        })
        .await
    }

    /// `document.body.dataset.state`, or "" before there is a body.
    pub async fn state(&self) -> anyhow::Result<String> {
        let v = self
            .eval("return document.body ? (document.body.dataset.state || '') : ''")
            .await?;
        Ok(v.as_str().unwrap_or("").to_string())
    }

    /// Waits (bounded by [`WAIT`]) until the page's state is `state`.
    pub async fn wait_state(&self, state: &str) -> anyhow::Result<()> {
        self.wait_state_within(state, WAIT).await
    }

    pub async fn wait_state_within(&self, state: &str, bound: Duration) -> anyhow::Result<()> {
        self.poll(&format!("page state {state:?}"), bound, || async {
            let now = self.state().await?;
            Ok(if now == state {
                Ok(())
            } else {
                Err(format!("state {now:?}"))
            })
        })
        .await
    }

    /// The text a person sees in the first element matching `css`: its
    /// rendered text (`innerText`), "" when it is not shown; `None` when
    /// there is no such element.
    pub async fn text_of(&self, css: &str) -> anyhow::Result<Option<String>> {
        let v = self
            .eval_with(
                "const e = document.querySelector(arguments[0]);
                 if (!e) return null;
                 if (!e.checkVisibility({visibilityProperty: true})) return '';
                 return e.innerText;",
                vec![json!(css)],
            )
            .await?;
        Ok(v.as_str().map(str::to_string))
    }

    /// [`Browser::text_of`], an error when there is no such element.
    pub async fn text(&self, css: &str) -> anyhow::Result<String> {
        self.text_of(css)
            .await?
            .with_context(|| format!("no element matches {css}"))
    }

    /// The DOM text of the first element matching `css` (`textContent`,
    /// shown or not).
    pub async fn text_content(&self, css: &str) -> anyhow::Result<String> {
        let v = self
            .eval_with(
                "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
                vec![json!(css)],
            )
            .await?;
        v.as_str()
            .map(str::to_string)
            .with_context(|| format!("no element matches {css}"))
    }

    /// Waits until the shown text of `css` satisfies `predicate`; answers it.
    pub async fn wait_text(
        &self,
        css: &str,
        predicate: impl Fn(&str) -> bool,
        bound: Duration,
    ) -> anyhow::Result<String> {
        self.poll(&format!("the text of {css}"), bound, || async {
            Ok(match self.text_of(css).await? {
                Some(t) if predicate(&t) => Ok(t),
                Some(t) => Err(format!("{css} shows {:?}", clip(&t))),
                None => Err(format!("no {css}")),
            })
        })
        .await
    }

    /// Whether an element matches `css` and is shown (not `display: none`,
    /// not `hidden`, not `visibility: hidden`, not empty of size).
    pub async fn visible(&self, css: &str) -> anyhow::Result<bool> {
        let v = self
            .eval_with(
                "const e = document.querySelector(arguments[0]);
                 if (!e || !e.checkVisibility({visibilityProperty: true})) return false;
                 const r = e.getBoundingClientRect();
                 return r.width > 0 && r.height > 0;",
                vec![json!(css)],
            )
            .await?;
        Ok(v == Value::Bool(true))
    }

    pub async fn wait_visible(&self, css: &str, bound: Duration) -> anyhow::Result<()> {
        self.poll(&format!("{css} to be shown"), bound, || async {
            Ok(if self.visible(css).await? {
                Ok(())
            } else {
                Err(format!("{css} not shown"))
            })
        })
        .await
    }

    pub async fn wait_hidden(&self, css: &str, bound: Duration) -> anyhow::Result<()> {
        self.poll(&format!("{css} to be hidden"), bound, || async {
            Ok(if self.visible(css).await? {
                Err(format!("{css} still shown"))
            } else {
                Ok(())
            })
        })
        .await
    }

    /// How many elements match `css`.
    pub async fn count(&self, css: &str) -> anyhow::Result<usize> {
        let v = self
            .eval_with(
                "return document.querySelectorAll(arguments[0]).length;",
                vec![json!(css)],
            )
            .await?;
        v.as_u64()
            .map(|n| n as usize)
            .context("querySelectorAll gave no length")
    }

    /// Waits until `count(css)` satisfies `predicate`; answers the count.
    pub async fn wait_count(
        &self,
        css: &str,
        predicate: impl Fn(usize) -> bool,
        bound: Duration,
    ) -> anyhow::Result<usize> {
        self.poll(&format!("the count of {css}"), bound, || async {
            let n = self.count(css).await?;
            Ok(if predicate(n) {
                Ok(n)
            } else {
                Err(format!("{n} × {css}"))
            })
        })
        .await
    }

    /// Clicks the first element matching `css` as a person would (WebDriver
    /// scrolls it into view and refuses what cannot be clicked), once it is
    /// shown (bounded by [`WAIT`]).
    pub async fn click(&self, css: &str) -> anyhow::Result<()> {
        self.wait_visible(css, WAIT).await?;
        self.poll(&format!("a click on {css}"), WAIT, || async {
            let element = self.client().find(Locator::Css(css)).await?;
            Ok(match element.click().await {
                Ok(()) => Ok(()),
                Err(err) => Err(err.to_string()),
            })
        })
        .await
    }

    /// Goes into the frame `css` names, once it is shown: what follows
    /// (reads, clicks, scripts) is the frame document's, whatever its
    /// origin, until [`Browser::leave_frame`].
    pub async fn enter_frame(&self, css: &str) -> anyhow::Result<()> {
        self.wait_visible(css, WAIT).await?;
        let frame = self.client().find(Locator::Css(css)).await?;
        frame.enter_frame().await?;
        Ok(())
    }

    /// Back to the document around the frame entered last.
    pub async fn leave_frame(&self) -> anyhow::Result<()> {
        self.client().enter_parent_frame().await?;
        Ok(())
    }

    /// Types `text` into the first element matching `css` (it gets the
    /// focus, as a click would give it); [`ENTER`] presses Enter.
    pub async fn type_into(&self, css: &str, text: &str) -> anyhow::Result<()> {
        self.wait_visible(css, WAIT).await?;
        let element = self.client().find(Locator::Css(css)).await?;
        element
            .send_keys(text)
            .await
            .with_context(|| format!("typing into {css}"))
    }

    /// Sets a long text into an input at once (its value, then an `input`
    /// event, as a paste does); faster than typing it key by key.
    pub async fn paste_into(&self, css: &str, text: &str) -> anyhow::Result<()> {
        self.wait_visible(css, WAIT).await?;
        self.eval_with(
            "const e = document.querySelector(arguments[0]);
             e.focus();
             e.value = arguments[1];
             e.dispatchEvent(new Event('input', {bubbles: true}));",
            vec![json!(css), json!(text)],
        )
        .await?;
        Ok(())
    }

    /// Picks `files` in the file input matching `css`, as a person choosing
    /// them in the browser's file dialog does (its `change` event fires).
    /// The input may be hidden: a page's attach button opens it.
    pub async fn choose_files(&self, css: &str, files: &[&Path]) -> anyhow::Result<()> {
        let paths: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        let element = self.client().find(Locator::Css(css)).await?;
        element
            .send_keys(&paths.join("\n"))
            .await
            .with_context(|| format!("choosing {paths:?} in {css}"))
    }

    /// Limits this browser's uploads to `bytes_per_second` (downloads and
    /// latency as they are), through chromedriver's network conditions: an
    /// upload then lasts long enough to watch its progress and cancel it.
    pub async fn throttle_uploads(&self, bytes_per_second: u64) -> anyhow::Result<()> {
        let url = format!(
            "http://127.0.0.1:{}/session/{}/chromium/network_conditions",
            self.driver_port, self.session
        );
        let body = json!({"network_conditions": {
            "offline": false, "latency": 0,
            "download_throughput": 1_000_000_000u64, "upload_throughput": bytes_per_second,
        }});
        let answer = reqwest::Client::new().post(&url).json(&body).send().await?;
        let status = answer.status();
        if !status.is_success() {
            bail!(
                "chromedriver refused network conditions: {status} {}",
                clip(&answer.text().await.unwrap_or_default())
            );
        }
        Ok(())
    }

    /// Saves a screenshot of the window as
    /// `<target>/test-artifacts/web/<test>/<nn>-<name>.png`; prints and
    /// answers the path.
    pub async fn screenshot(&self, name: &str) -> anyhow::Result<PathBuf> {
        let png = self.client().screenshot().await.context("a screenshot")?;
        let n = self.artifacts.next.fetch_add(1, Ordering::Relaxed);
        std::fs::create_dir_all(&self.artifacts.dir)?;
        let path = self.artifacts.dir.join(format!("{n:02}-{name}.png"));
        std::fs::write(&path, png)?;
        eprintln!("screenshot: {}", path.display());
        Ok(path)
    }

    /// Ends the session: the browser process goes, as a closed laptop lid
    /// ends its tabs' connections. Waits (bounded) until no process of its
    /// profile is left.
    pub async fn close(mut self) -> anyhow::Result<()> {
        if let Some(client) = self.client.take() {
            client.close().await.context("closing the session")?;
        }
        let marker = self.profile.to_string_lossy().to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !processes_with(&marker).is_empty() {
            if Instant::now() > deadline {
                kill_processes_with(&marker);
                bail!("Chromium was still running 10 s after its session ended");
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if self.client.take().is_some() {
            // No runtime to await on here (a failing test unwinds): the
            // session is deleted over a plain blocking connection.
            delete_session(self.driver_port, &self.session);
            let marker = self.profile.to_string_lossy().to_string();
            let deadline = Instant::now() + Duration::from_secs(5);
            while !processes_with(&marker).is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            kill_processes_with(&marker);
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// `DELETE /session/{id}` to chromedriver, blocking, bounded.
fn delete_session(port: u16, session: &str) {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let request = format!(
        "DELETE /session/{session} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return;
    }
    // Read the whole answer (chromedriver may keep the connection open):
    // its head, then Content-Length bytes.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return;
            }
        }
        match stream.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return,
        }
    }
}

/// At most 300 characters of `text`, for error messages.
pub fn clip(text: &str) -> String {
    let mut out: String = text.chars().take(300).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}
