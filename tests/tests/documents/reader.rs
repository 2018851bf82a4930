//! The document reader's limits, against stand-in readers that misbehave
//! the ways a parser can: a CPU loop, a hang, a crash, a flood of output,
//! an answer that is not JSON. Each must come back as its one-line cause,
//! with the stand-in gone; and the real reader (chatd's binary) reads.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chatd::documents::{DocKind, Failure, Limits, Reader};
use tandem_tests::harness::wait_until;

/// A shell script standing in for the reader.
fn script(dir: &Path, name: &str, body: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n"))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

fn tight() -> Limits {
    Limits {
        memory_bytes: 256 << 20,
        cpu_seconds: 1,
        wall: Duration::from_secs(8),
        output_bytes: 64 << 10,
    }
}

/// A document to hand the reader (its bytes do not matter to a stand-in).
fn doc(dir: &Path) -> anyhow::Result<std::fs::File> {
    let path = dir.join("a.pdf");
    std::fs::write(&path, b"%PDF-1.4\n")?;
    Ok(std::fs::File::open(path)?)
}

/// Whether a process runs whose command line mentions `marker`.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|cmd| String::from_utf8_lossy(&cmd).contains(marker))
}

#[tokio::test]
async fn a_reader_that_misbehaves_is_one_cause_and_is_gone() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // (name, script, what it must come to, what its process line shows)
    let cases: Vec<(&str, &str, Failure, &str)> = vec![
        // The CPU limit ends a loop (SIGXCPU).
        ("spin", "while :; do :; done", Failure::Cpu(1), "/spin"),
        // A hang costs the wall limit, then it is killed.
        (
            "hang",
            "exec /bin/sleep 613",
            Failure::Wall(Duration::from_secs(8)),
            "sleep 613",
        ),
        (
            "crash",
            "kill -SEGV $$",
            Failure::Crashed("it stopped with SIGSEGV".into()),
            "/crash",
        ),
        (
            "panic",
            "echo 'thread main panicked' >&2; exit 101",
            Failure::Crashed("it panicked".into()),
            "/panic",
        ),
        (
            "flood",
            "exec /usr/bin/yes documents-flood",
            Failure::Output(64 << 10),
            "documents-flood",
        ),
        (
            "nonsense",
            "echo 'not json'",
            Failure::Unavailable("its answer was not JSON".into()),
            "/nonsense",
        ),
    ];
    for (name, body, want, marker) in cases {
        let exe = script(dir.path(), name, body)?;
        let reader = Reader::new(exe.clone(), tight());
        let got = reader.read(doc(dir.path())?, DocKind::Pdf).await;
        assert_eq!(got, Err(want.clone()), "{name}");
        let what = format!("{name}: the stand-in reader gone");
        wait_until(&what, Duration::from_secs(5), || {
            let gone = !running(marker);
            async move { gone.then_some(()) }
        })
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn the_causes_read_as_one_line_each() {
    let lines = [
        Failure::TooLarge(62_914_560).to_string(),
        Failure::Memory(1 << 30).to_string(),
        Failure::Cpu(30).to_string(),
        Failure::Wall(Duration::from_secs(60)).to_string(),
    ];
    assert_eq!(
        lines,
        [
            "it is 62,914,560 bytes, over the 50 MiB a document may be",
            "reading it needed more than the reader's 1024 MiB of memory",
            "reading it took more than 30 s of CPU",
            "reading it took more than 60 s",
        ]
    );
}

#[tokio::test]
async fn a_document_over_50_mib_is_not_handed_to_the_reader() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // A reader that would say something else if it ran.
    let exe = script(dir.path(), "never", "echo never")?;
    let path = dir.path().join("big.pdf");
    let file = std::fs::File::create(&path)?;
    file.set_len(60 << 20)?;
    let got = Reader::new(exe, tight())
        .read(std::fs::File::open(&path)?, DocKind::Pdf)
        .await;
    assert_eq!(got, Err(Failure::TooLarge(60 << 20)));
    Ok(())
}
