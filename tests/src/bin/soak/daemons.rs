//! What every daemon of a soak run owes, checked the same way for all of
//! them: its RSS at the end within 20 % of its RSS after warm-up (the process
//! alive at the end, against its own warm-up), no panic and no `ERROR` line
//! without an id in its log, no secret in any log, and every SQLite file it
//! keeps passing `integrity_check`. chatd's RSS has its own warm-up (its
//! rings of recent events) in `faults.rs`; the others are sampled here.

use super::*;

/// One process of a daemon other than chatd (the first, or one started after a kill).
#[derive(Clone, Debug)]
pub(crate) struct Proc {
    pub(crate) daemon: String,
    pub(crate) pid: u32,
    /// Seconds from the start of the load.
    pub(crate) started: f64,
}

impl Shared {
    /// A part started (or restarted) one of its daemons.
    pub(crate) fn started(&self, daemon: &str, pid: u32) {
        lock(&self.procs).push(Proc {
            daemon: daemon.to_string(),
            pid,
            started: self.t(),
        });
    }

    /// When a part may kill its daemons (s from the start): after the first
    /// warm-up, and not in the last quarter, so the process measured at the
    /// end warms up under load and then runs on a while.
    pub(crate) fn kill_window(&self) -> (f64, f64) {
        (self.warm_s + 2.0, self.kill_to)
    }

    /// The process of each daemon alive now: the last one each started.
    pub(crate) fn current_procs(&self) -> Vec<Proc> {
        let procs = lock(&self.procs);
        let mut last: BTreeMap<&str, &Proc> = BTreeMap::new();
        for p in procs.iter() {
            last.insert(&p.daemon, p);
        }
        last.into_values().cloned().collect()
    }
}

/// Samples the RSS of every daemon's current process until the run is done.
pub(crate) async fn sample_daemons(shared: Arc<Shared>, every: Duration) {
    let mut phase = shared.phase.subscribe();
    loop {
        let t = shared.t();
        for p in shared.current_procs() {
            if let Some(kib) = rss_kib(p.pid) {
                lock(&shared.daemon_rss).push((p.daemon.clone(), RssSample { t, pid: p.pid, kib }));
            }
        }
        if !sleep_in(&mut phase, every, |p| p != Phase::Done).await {
            return;
        }
    }
}

/// Each daemon's RSS now (before the parts stop them), against the first
/// sample of the same process taken at least a warm-up after its start.
/// Returns a line per daemon for the summary.
pub(crate) fn check_daemons_rss(shared: &Shared) -> Vec<String> {
    let samples = lock(&shared.daemon_rss);
    let mut lines = Vec::new();
    for p in shared.current_procs() {
        let end = rss_kib(p.pid);
        // The process's warm RSS: the highest sample of its second warm-up
        // period (a daemon restarted under load is still filling its working
        // set a warm-up after its start: connectord 22.9 MiB then, 29 MiB
        // steady), else its first sample a warm-up after its start.
        let of_proc = |s: &&(String, RssSample)| s.0 == p.daemon && s.1.pid == p.pid;
        let (from, to) = (p.started + shared.warm_s, p.started + 2.0 * shared.warm_s);
        let warm = samples
            .iter()
            .filter(of_proc)
            .filter(|(_, s)| s.t >= from && s.t <= to)
            .max_by_key(|(_, s)| s.kib)
            .or_else(|| samples.iter().filter(of_proc).find(|(_, s)| s.t >= from));
        let count = lock(&shared.procs)
            .iter()
            .filter(|q| q.daemon == p.daemon)
            .count();
        let which = if count > 1 {
            format!(
                "pid {} (started at {:.1} s, after {} kills)",
                p.pid,
                p.started,
                count - 1
            )
        } else {
            format!("pid {} (the only one of the run)", p.pid)
        };
        match (warm, end) {
            (Some((_, w)), Some(end)) => {
                let change = (end as f64 - w.kib as f64) / w.kib as f64 * 100.0;
                let line = format!(
                    "{} {which}: after warm-up (t={:.1} s) {}, at the end {} ({change:+.1} %)",
                    p.daemon,
                    w.t,
                    mib(w.kib),
                    mib(end)
                );
                if change.abs() > 20.0 {
                    shared.violate(Inv::Rss, line.clone());
                }
                lines.push(line);
            }
            (None, end) => {
                let line = format!(
                    "{} {which}: no sample a warm-up ({:.0} s) after its start (at the end: {:?})",
                    p.daemon,
                    shared.warm_s,
                    end.map(mib)
                );
                shared.violate(Inv::Rss, line.clone());
                lines.push(line);
            }
            (Some(_), None) => {
                let line = format!("{} {which}: not running at the end", p.daemon);
                shared.violate(Inv::Health, line.clone());
                lines.push(line);
            }
        }
    }
    lines
}

/// One secret of the run: what it is (said in a report) and its value (never said).
pub(crate) struct Secret {
    pub(crate) what: String,
    pub(crate) value: String,
}

/// A daemon's log: no panic, no `ERROR` line without an id, none of the
/// run's secrets. Returns its WARN lines by message.
pub(crate) fn check_log(
    shared: &Shared,
    daemon: &str,
    log: &str,
    secrets: &[Secret],
) -> BTreeMap<String, u64> {
    let mut warnings: BTreeMap<String, u64> = BTreeMap::new();
    for (n, line) in log.lines().enumerate() {
        if line.contains("panicked at") {
            shared.violate(Inv::Health, format!("{daemon}: a panic: {line}"));
        }
        if error_without_id(line) {
            shared.violate(
                Inv::Health,
                format!("{daemon}: an ERROR line without an id: {line}"),
            );
        }
        for secret in secrets.iter().filter(|s| !s.value.is_empty()) {
            if line.contains(secret.value.as_str()) {
                // Named by what it is: the report never repeats any of it.
                shared.violate(
                    Inv::Secrets,
                    format!("{daemon}'s log, line {}: {}", n + 1, secret.what),
                );
            }
        }
        if line.split_whitespace().take(3).any(|w| w == "WARN") {
            // The message: after the target, before the fields.
            let message = line
                .split_once(": ")
                .map(|(_, rest)| rest)
                .unwrap_or(line)
                .split(" run=")
                .next()
                .unwrap_or("")
                .to_string();
            *warnings.entry(message).or_default() += 1;
        }
    }
    warnings
}

/// Every SQLite file under `roots` (a file, or a folder walked), found by
/// its header, passes `PRAGMA integrity_check`, opened read-only. Returns
/// the files checked.
pub(crate) fn check_databases(shared: &Shared, roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for root in roots {
        collect_sqlite(root, &mut files, 0);
    }
    files.sort();
    files.dedup();
    for file in &files {
        let result =
            rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .and_then(|db| {
                    let mut stmt = db.prepare("PRAGMA integrity_check")?;
                    let rows = stmt
                        .query_map([], |r| r.get::<_, String>(0))?
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok(rows)
                });
        match result {
            Ok(rows) if rows.len() == 1 && rows[0] == "ok" => {}
            Ok(rows) => shared.violate(
                Inv::Integrity,
                format!("{}: integrity_check says {rows:?}", file.display()),
            ),
            Err(err) => shared.violate(
                Inv::Integrity,
                format!("{}: could not check: {err}", file.display()),
            ),
        }
    }
    files
}

fn collect_sqlite(path: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_dir() {
        // Workspaces can be deep; databases are near the top of a data folder.
        if depth > 6 {
            return;
        }
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for entry in entries.flatten() {
            collect_sqlite(&entry.path(), out, depth + 1);
        }
    } else if meta.is_file() && is_sqlite(path) {
        out.push(path.to_path_buf());
    }
}

fn is_sqlite(path: &Path) -> bool {
    use std::io::Read as _;
    let mut head = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0"
}

/// What the checks of the logs and the databases found, for the summary.
pub(crate) struct Files {
    /// chatd's WARN lines by message, and the other daemons' (`daemon: message`).
    pub(crate) warnings: BTreeMap<String, u64>,
    pub(crate) part_warnings: BTreeMap<String, u64>,
    /// Every log checked, by daemon (kept when an invariant breaks).
    pub(crate) logs: Vec<(String, PathBuf)>,
    pub(crate) databases: usize,
    pub(crate) secrets: usize,
}

/// Every daemon's log (chatd's and the parts'), searched for panics, id-less
/// ERROR lines and every secret of the run; every SQLite file under chatd's
/// data folder and the parts' checked. chatd's own database must be among them.
pub(crate) fn check_files(
    shared: &Shared,
    chatd_log: &Path,
    chatd_db: &Path,
    ends: &[(PartName, PartEnd)],
) -> Files {
    let mut secrets = vec![Secret {
        what: "the forward key".into(),
        value: FORWARD_KEY.to_string(),
    }];
    for (part, end) in ends {
        for (i, value) in end.secrets.iter().enumerate() {
            secrets.push(Secret {
                what: format!("secret #{} {} was given", i + 1, part.as_str()),
                value: value.clone(),
            });
        }
    }
    let log = std::fs::read_to_string(chatd_log).unwrap_or_default();
    let warnings = check_log(shared, "chatd", &log, &secrets);
    let mut logs = vec![("chatd".to_string(), chatd_log.to_path_buf())];
    let mut part_warnings: BTreeMap<String, u64> = BTreeMap::new();
    for (daemon, path) in ends.iter().flat_map(|(_, e)| e.logs.iter()) {
        logs.push((daemon.clone(), path.clone()));
        match std::fs::read_to_string(path) {
            Ok(text) => {
                for (message, n) in check_log(shared, daemon, &text, &secrets) {
                    *part_warnings
                        .entry(format!("{daemon}: {message}"))
                        .or_default() += n;
                }
            }
            Err(err) => shared.violate(
                Inv::Health,
                format!("{daemon}'s log {} could not be read: {err}", path.display()),
            ),
        }
    }
    let mut data: Vec<PathBuf> = chatd_db
        .parent()
        .map(Path::to_path_buf)
        .into_iter()
        .collect();
    data.extend(ends.iter().flat_map(|(_, e)| e.data.iter().cloned()));
    let databases = check_databases(shared, &data);
    if !databases.iter().any(|d| d == chatd_db) {
        shared.violate(
            Inv::Integrity,
            format!("{} was not found to check", chatd_db.display()),
        );
    }
    Files {
        warnings,
        part_warnings,
        logs,
        databases: databases.len(),
        secrets: secrets.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_files_are_found_by_their_header() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a/b/kept.sqlite3");
        std::fs::create_dir_all(db.parent().unwrap()).unwrap();
        rusqlite::Connection::open(&db)
            .unwrap()
            .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
        std::fs::write(dir.path().join("a/not.sqlite3"), b"SQLite format 2").unwrap();
        let mut found = Vec::new();
        collect_sqlite(dir.path(), &mut found, 0);
        assert_eq!(found, vec![db]);
    }
}
