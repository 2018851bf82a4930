//! Figure 14, file history: what keeping every change costs a tool call.
//! In-process through chatd's own `FileHistory` on a real SQLite store and a
//! real workspace: a 4 KB `write_file` with its two scans (before and after)
//! against the same write alone; a `bash` call in a workspace of 10,000
//! files with its two whole-workspace scans against the same command alone;
//! and the disk the blobs take per MiB changed.

use chatd::history::{FileHistory, Place, Scope};
use chatd::store::files::Author;
use chatd::words::FileOrigin;
use chatd::workspace::Workspace;

use super::measure::{ms, quantile};
use super::*;
use tandem_tests::harness::du;

fn author(chat: &str, origin: FileOrigin) -> Author {
    Author {
        conversation_id: chat.to_string(),
        run_id: None,
        call_id: None,
        origin,
        undoes: Vec::new(),
    }
}

fn spread(mut us: Vec<i64>) -> (i64, i64) {
    us.sort_unstable();
    (quantile(&us, 0.5), quantile(&us, 0.99))
}

fn random_text(n: usize) -> Vec<u8> {
    (0..n).map(|_| b'a' + rand::random::<u8>() % 26).collect()
}

pub(crate) async fn figure(quick: bool, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 14. files: the cost of keeping every change");
    let dir = tempfile::tempdir()?;
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(chatd::metrics::Metrics::new(&mut registry));
    let store = chatd::store::Store::open(
        &dir.path().join("chat.sqlite3"),
        chatd::events::Hub::default(),
        metrics,
    )?;
    let chat = store
        .write(|ctx| {
            let new = chatd::store::conversations::NewConversation {
                title: "bench".into(),
                model: "m".into(),
                settings: Default::default(),
                permission_mode: Default::default(),
                origin: chatd::words::Origin::User,
                workspace: "own".into(),
                agent_id: None,
            };
            chatd::store::conversations::insert(ctx, &new)
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let history = FileHistory::new(store.clone(), dir.path());
    let root = dir.path().join("workspaces").join(&chat);
    let workspace = Workspace::open(&root)?;
    let place = Place {
        key: chat.clone(),
        root: root.clone(),
    };
    let outside = author(&chat, FileOrigin::Outside);
    let tool = author(&chat, FileOrigin::Tool);
    let command = author(&chat, FileOrigin::Command);
    let sync = |scope: Scope, who: &Author| {
        let (history, place, who) = (&history, &place, who.clone());
        async move {
            history
                .sync(place, scope, &who)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))
        }
    };

    // A 4 KB write_file: the write alone, then with both scans of its path.
    let writes = if quick { 50 } else { 500 };
    let mut plain = Vec::with_capacity(writes);
    let mut kept = Vec::with_capacity(writes);
    for i in 0..writes {
        let path = format!("notes/n{}.md", i % 20);
        let body = random_text(4096);
        let began = Instant::now();
        workspace
            .write_file(&path, &body)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        plain.push(began.elapsed().as_micros() as i64);
        let body = random_text(4096);
        let scope = Scope::Paths(vec![path.clone()]);
        let began = Instant::now();
        sync(scope.clone(), &outside).await?;
        workspace
            .write_file(&path, &body)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        sync(scope, &tool).await?;
        kept.push(began.elapsed().as_micros() as i64);
    }
    let (p50, p99) = spread(plain);
    let (k50, k99) = spread(kept);
    say(format!(
        "  4 KB write_file ×{writes}: alone p50 {} p99 {}; kept p50 {} p99 {}",
        ms(p50),
        ms(p99),
        ms(k50),
        ms(k99)
    ));
    rows.push(
        row(
            "14. a 4 KB write kept, p50 / p99",
            format!("{} / {}", ms(k50), ms(k99)),
        )
        .baseline(
            format!("the write alone {} / {}", ms(p50), ms(p99)),
            format!("+{} per call (p50)", ms(k50 - p50)),
        ),
    );

    // A bash call in a workspace of 10,000 files.
    let files = if quick { 2_000 } else { 10_000 };
    for i in 0..files {
        let path = root.join(format!("tree/d{}/f{i}.txt", i % 100));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, random_text(200))?;
    }
    let began = Instant::now();
    sync(Scope::All, &outside).await?;
    let first_scan = began.elapsed();
    let calls = if quick { 5 } else { 40 };
    let run = |i: usize| {
        let status = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("echo {i} > out.txt"))
            .current_dir(&root)
            .status();
        anyhow::ensure!(status.is_ok_and(|s| s.success()), "bash failed");
        Ok(())
    };
    let mut plain = Vec::with_capacity(calls);
    let mut kept = Vec::with_capacity(calls);
    for i in 0..calls {
        let began = Instant::now();
        run(i)?;
        plain.push(began.elapsed().as_micros() as i64);
        let began = Instant::now();
        sync(Scope::All, &outside).await?;
        run(i + calls)?;
        sync(Scope::All, &command).await?;
        kept.push(began.elapsed().as_micros() as i64);
    }
    let (p50, p99) = spread(plain);
    let (k50, k99) = spread(kept);
    say(format!(
        "  bash in {files} files ×{calls}: alone p50 {} p99 {}; kept p50 {} p99 {} (the first scan, which keeps every file: {:.0} ms)",
        ms(p50),
        ms(p99),
        ms(k50),
        ms(k99),
        first_scan.as_secs_f64() * 1000.0
    ));
    rows.push(
        row(
            format!("14. a bash call in {files} files kept, p50 / p99"),
            format!("{} / {}", ms(k50), ms(k99)),
        )
        .baseline(
            format!("the call alone {} / {}", ms(p50), ms(p99)),
            format!("+{} per call (p50)", ms(k50 - p50)),
        ),
    );

    // Disk: MiB-sized changes, each a new version of one of a few files.
    let blobs_before = du(&dir.path().join("blobs"));
    let changes = if quick { 8 } else { 64 };
    let mut changed = 0u64;
    for i in 0..changes {
        let path = format!("big/b{}.bin", i % 4);
        let body = random_text(1024 * 1024);
        changed += body.len() as u64;
        let scope = Scope::Paths(vec![path.clone()]);
        sync(scope.clone(), &outside).await?;
        workspace
            .write_file(&path, &body)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        sync(scope, &tool).await?;
    }
    let kept_bytes = du(&dir.path().join("blobs")) - blobs_before;
    let per_mib = kept_bytes as f64 / (changed as f64 / (1024.0 * 1024.0));
    say(format!(
        "  {changes} changes of 1 MiB: {:.1} MiB of blobs, {:.0} KiB kept per MiB changed",
        kept_bytes as f64 / (1024.0 * 1024.0),
        per_mib / 1024.0
    ));
    rows.push(
        row(
            "14. disk kept per MiB changed",
            format!("{:.0} KiB", per_mib / 1024.0),
        )
        .baseline(
            "1,024 KiB (one whole copy)",
            format!("{:.2}×", per_mib / (1024.0 * 1024.0)),
        ),
    );
    store.close().await;
    Ok(())
}
