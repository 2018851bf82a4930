//! The document reader as a child process: the chatd binary started with
//! [`SUBCOMMAND`] reads one document from its stdin and writes what it made
//! of it as JSON to its stdout. chatd gives it the file as its stdin, caps
//! its memory, CPU time, output and wall time, and reads a crash, a hang or
//! a limit as a one-line cause: a parser's fault costs that document only.

use std::fmt;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::formats::preview::{self, Preview, PreviewKind};
use super::formats::{self, DocKind, Extracted, Refusal, MAX_INPUT};
use super::images::Scaled;
use crate::tools::fit::commas;

/// The first argument that makes chatd a document reader.
pub const SUBCOMMAND: &str = "read-document";

/// What the reader answers on its stdout.
type Answer = Result<Extracted, Refusal>;

/// The argument that asks for an image made fit for a model (`images`).
pub const IMAGE: &str = "image";

/// The argument before a kind that asks for a preview (`formats::preview`)
/// rather than the text.
pub const PREVIEW: &str = "--preview";

/// The reader's side: `chatd read-document <kind>` (or `image`, or
/// `--preview <kind>`), the file on stdin; `args` are the words after
/// [`SUBCOMMAND`].
pub fn child_main(args: &[String]) -> ExitCode {
    let (kind, preview) = match args {
        [flag, kind] if flag == PREVIEW => (kind.as_str(), true),
        [kind] => (kind.as_str(), false),
        _ => {
            eprintln!("{SUBCOMMAND}: give a kind, `{IMAGE}` or `{PREVIEW} <kind>`");
            return ExitCode::from(2);
        }
    };
    let mut bytes = Vec::new();
    if std::io::stdin()
        .lock()
        .take(MAX_INPUT + 1)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return ExitCode::from(3);
    }
    let too_large = bytes.len() as u64 > MAX_INPUT;
    let refused = || Refusal::Damaged("over the size a document may be".into());
    let mut out = std::io::stdout().lock();
    let written = if preview {
        let Some(kind) = PreviewKind::parse(kind) else {
            eprintln!("{SUBCOMMAND}: unknown kind");
            return ExitCode::from(2);
        };
        let answer: Result<Preview, Refusal> = match too_large {
            true => Err(refused()),
            false => preview::preview(kind, &bytes),
        };
        serde_json::to_writer(&mut out, &answer)
    } else if kind == IMAGE {
        let answer: Result<Scaled, Refusal> = match too_large {
            true => Err(refused()),
            false => super::images::scale(&bytes),
        };
        serde_json::to_writer(&mut out, &answer)
    } else {
        let Ok(kind) = serde_json::from_value::<DocKind>(serde_json::Value::String(kind.into()))
        else {
            eprintln!("{SUBCOMMAND}: unknown kind");
            return ExitCode::from(2);
        };
        let answer: Answer = match too_large {
            true => Err(refused()),
            false => formats::extract(kind, &bytes),
        };
        serde_json::to_writer(&mut out, &answer)
    };
    let written = written.is_ok() && out.flush().is_ok();
    if written {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(4)
    }
}

/// The reader's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Its address space (RLIMIT_AS).
    pub memory_bytes: u64,
    /// CPU seconds (RLIMIT_CPU; SIGXCPU, then SIGKILL a second later).
    pub cpu_seconds: u64,
    /// From start to answer; then it is killed.
    pub wall: Duration,
    /// The most JSON it may answer with.
    pub output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory_bytes: 1 << 30,
            cpu_seconds: 30,
            wall: Duration::from_secs(60),
            // The text is cut at 8 MiB; JSON escapes may double it.
            output_bytes: 2 * formats::MAX_TEXT + (1 << 20),
        }
    }
}

/// Why the reader gave no text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    TooLarge(u64),
    Refused(Refusal),
    Memory(u64),
    Cpu(u64),
    Wall(Duration),
    Output(usize),
    Crashed(String),
    /// The reader could not be started or answered nonsense.
    Unavailable(String),
}

impl Failure {
    /// Whether the same bytes would fail the same way again (kept, not
    /// read again): not a wall-clock limit a busy box can cause.
    pub fn lasting(&self) -> bool {
        !matches!(self, Failure::Wall(_) | Failure::Unavailable(_))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::TooLarge(size) => write!(
                f,
                "it is {} bytes, over the {} MiB a document may be",
                commas(*size),
                MAX_INPUT >> 20
            ),
            Failure::Refused(refusal) => write!(f, "it {refusal}"),
            Failure::Memory(limit) => write!(
                f,
                "reading it needed more than the reader's {} MiB of memory",
                limit >> 20
            ),
            Failure::Cpu(secs) => write!(f, "reading it took more than {secs} s of CPU"),
            Failure::Wall(wall) => write!(f, "reading it took more than {} s", wall.as_secs()),
            Failure::Output(max) => write!(
                f,
                "it gave more than the {} MiB of text a document may give",
                max >> 20
            ),
            Failure::Crashed(how) => write!(f, "the reader failed on it ({how})"),
            Failure::Unavailable(why) => write!(f, "the document reader is unavailable ({why})"),
        }
    }
}

/// Starts readers, a few at a time.
#[derive(Clone)]
pub struct Reader {
    exe: PathBuf,
    limits: Limits,
    slots: Arc<tokio::sync::Semaphore>,
}

impl Reader {
    /// Readers run `exe` (chatd's own binary) with [`SUBCOMMAND`]; at most
    /// one a core at once (a large PDF keeps a core busy).
    pub fn new(exe: PathBuf, limits: Limits) -> Reader {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Reader {
            exe,
            limits,
            slots: Arc::new(tokio::sync::Semaphore::new(cores.clamp(1, 4))),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Reads `file` (its offset at 0) as a document of `kind`.
    pub async fn read(&self, file: std::fs::File, kind: DocKind) -> Result<Extracted, Failure> {
        let out = self.answer(file, &[&kind_arg(kind)]).await?;
        match serde_json::from_slice::<Answer>(&out) {
            Ok(Ok(extracted)) => Ok(extracted),
            Ok(Err(refusal)) => Err(Failure::Refused(refusal)),
            Err(_) => Err(Failure::Unavailable("its answer was not JSON".into())),
        }
    }

    /// The preview of `file` (its offset at 0), a file of `kind`.
    pub async fn preview(
        &self,
        file: std::fs::File,
        kind: PreviewKind,
    ) -> Result<Preview, Failure> {
        let out = self.answer(file, &[PREVIEW, kind.as_str()]).await?;
        match serde_json::from_slice::<Result<Preview, Refusal>>(&out) {
            Ok(Ok(preview)) => Ok(preview),
            Ok(Err(refusal)) => Err(Failure::Refused(refusal)),
            Err(_) => Err(Failure::Unavailable("its answer was not JSON".into())),
        }
    }

    /// Makes the image `file` fit for a model (`images::scale`).
    pub async fn scale_image(&self, file: std::fs::File) -> Result<Scaled, Failure> {
        let out = self.answer(file, &[IMAGE]).await?;
        match serde_json::from_slice::<Result<Scaled, Refusal>>(&out) {
            Ok(Ok(scaled)) => Ok(scaled),
            Ok(Err(refusal)) => Err(Failure::Refused(refusal)),
            Err(_) => Err(Failure::Unavailable("its answer was not JSON".into())),
        }
    }

    /// Runs a reader on `file` with `args`; what it wrote when it succeeded.
    async fn answer(&self, file: std::fs::File, args: &[&str]) -> Result<Vec<u8>, Failure> {
        let size = file
            .metadata()
            .map_err(|e| Failure::Unavailable(format!("stat: {}", e.kind())))?
            .len();
        if size > MAX_INPUT {
            return Err(Failure::TooLarge(size));
        }
        // The semaphore is never closed, so a permit always comes.
        let _slot = self.slots.acquire().await;
        let limits = self.limits;
        let mut command = tokio::process::Command::new(&self.exe);
        command
            .arg(SUBCOMMAND)
            .args(args)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(file))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: between fork and exec only async-signal-safe calls
        // (setrlimit, prctl) are made.
        unsafe {
            command.pre_exec(move || confine(limits));
        }
        let mut child = command
            .spawn()
            .map_err(|e| Failure::Unavailable(format!("start: {}", e.kind())))?;
        let (Some(mut stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(Failure::Unavailable("no pipes".into()));
        };
        // Its stderr is read beside (a panic's or the allocator's last
        // words), never waited on: a reader that floods stdout is killed
        // while its stderr is still open.
        let last_words = tokio::spawn(async move {
            let mut err = Vec::new();
            let _ = stderr.take(4096).read_to_end(&mut err).await;
            err
        });
        let cap = limits.output_bytes as u64 + 1;
        let waited = tokio::time::timeout(limits.wall, async {
            let mut out = Vec::new();
            let read = (&mut stdout).take(cap).read_to_end(&mut out).await;
            if read.is_err() || out.len() > limits.output_bytes {
                return Ok::<_, std::io::Error>((None, out));
            }
            let status = child.wait().await?;
            Ok((Some(status), out))
        })
        .await;
        let (status, out) = match waited {
            Err(_) => {
                let _ = child.kill().await;
                last_words.abort();
                return Err(Failure::Wall(limits.wall));
            }
            Ok(Err(e)) => return Err(Failure::Unavailable(format!("wait: {}", e.kind()))),
            Ok(Ok((None, _))) => {
                let _ = child.kill().await;
                last_words.abort();
                return Err(Failure::Output(limits.output_bytes));
            }
            Ok(Ok((Some(status), out))) => (status, out),
        };
        // It has ended: its stderr closes with it.
        let err = tokio::time::timeout(Duration::from_secs(1), last_words)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        if !status.success() {
            return Err(judge(status, &err, limits));
        }
        Ok(out)
    }
}

/// The kind as the reader's argument.
fn kind_arg(kind: DocKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Why a reader that did not succeed ended.
fn judge(status: std::process::ExitStatus, stderr: &[u8], limits: Limits) -> Failure {
    // Rust's allocator aborts with this line when the address space is full.
    let out_of_memory = memchr::memmem::find(stderr, b"memory allocation of").is_some();
    match status.signal() {
        Some(libc_sig) if libc_sig == nix::sys::signal::Signal::SIGXCPU as i32 => {
            Failure::Cpu(limits.cpu_seconds)
        }
        // The hard CPU limit, a second past the soft one.
        Some(sig) if sig == nix::sys::signal::Signal::SIGKILL as i32 => {
            Failure::Cpu(limits.cpu_seconds)
        }
        Some(_) if out_of_memory => Failure::Memory(limits.memory_bytes),
        Some(sig) => Failure::Crashed(match nix::sys::signal::Signal::try_from(sig) {
            Ok(signal) => format!("it stopped with {}", signal.as_str()),
            Err(_) => format!("it stopped with signal {sig}"),
        }),
        None if out_of_memory => Failure::Memory(limits.memory_bytes),
        None => match status.code() {
            Some(101) => Failure::Crashed("it panicked".into()),
            Some(code) => Failure::Crashed(format!("exit {code}")),
            None => Failure::Crashed("it ended without a status".into()),
        },
    }
}

/// The reader's limits, set in the child before it becomes the reader.
fn confine(limits: Limits) -> std::io::Result<()> {
    use nix::sys::resource::{setrlimit, Resource};
    let err = |e: nix::errno::Errno| std::io::Error::from_raw_os_error(e as i32);
    setrlimit(
        Resource::RLIMIT_AS,
        limits.memory_bytes,
        limits.memory_bytes,
    )
    .map_err(err)?;
    setrlimit(
        Resource::RLIMIT_CPU,
        limits.cpu_seconds,
        limits.cpu_seconds + 1,
    )
    .map_err(err)?;
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(err)?;
    // It writes no file.
    setrlimit(Resource::RLIMIT_FSIZE, 0, 0).map_err(err)?;
    // Gone with chatd.
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(err)?;
    Ok(())
}
