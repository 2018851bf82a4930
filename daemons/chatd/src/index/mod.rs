//! The search index of the chats' files (`search_files`, the page's
//! search box): every version a workspace's manifest holds is read once,
//! by its sha-256, in the background (a text file as it is, a document by
//! the reader process, a binary by its name only), into a trigram table.
//!
//! A file history scan (an upload, a file tool, a `bash` call, an undo, a
//! restore) wakes the worker; a search first waits a little for the versions
//! of its workspace still waiting, then says how many it did not see. Files
//! are found through the manifest, so a deleted file is found no more.

pub mod parts;
pub mod query;
pub mod tool;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tandem_shared::http::ApiError;
use tandem_shared::shutdown::Shutdown;
use tokio::sync::{watch, Notify};

use crate::documents::{DocKind, Documents};
use crate::history::blobs::Blobs;
use crate::store::index::{self as rows, Entry, Todo};
use crate::store::Store;
use crate::tools::fit::cut_chars;
use crate::words::IndexState;
pub use query::{Matcher, Query};

/// The index's version: what an older one kept is indexed again.
pub const INDEX_VERSION: u32 = 1;
/// A search looks at a workspace's first files (in path order) up to
/// this many …
pub const MAX_FILES: usize = 20_000;
/// … or this many bytes of their text, and says what it left out.
pub const MAX_TEXT: u64 = 64 << 20;
/// The most characters of a matching line a hit holds.
pub const LINE_CHARS: usize = 300;
/// Versions read between two commits of the index.
const BATCH: usize = 16;

/// What a search asks.
#[derive(Debug, Clone)]
pub struct Request {
    /// Made by the caller, whose field a bad query names.
    pub matcher: Matcher,
    /// A folder or file of the workspace (relative, checked); `None`: all.
    pub under: Option<String>,
    /// The most matching lines returned.
    pub max_hits: usize,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Hit {
    pub path: String,
    /// "page 3", "sheet Costs", "slide 2"; `None` in a text file.
    pub part: Option<String>,
    /// The line read_file or read_document shows it on.
    pub line: u64,
    pub text: String,
}

/// What a search found, and what it could not look at.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Found {
    pub hits: Vec<Hit>,
    /// Files whose path matches.
    pub names: Vec<String>,
    /// Whether more lines matched than `max_hits`.
    pub more_hits: bool,
    /// Files looked at.
    pub files: usize,
    /// Files not indexed yet (their names were looked at).
    pub pending: u64,
    /// Files past the limits (not looked at).
    pub beyond: usize,
}

#[derive(Clone)]
pub struct Index {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    blobs: Blobs,
    documents: Documents,
    /// Notified by the file history when a manifest changed.
    wake: Arc<Notify>,
    /// Batches committed: a search waits on it.
    done: watch::Sender<u64>,
}

impl Index {
    pub fn new(store: Store, blobs: Blobs, documents: Documents, wake: Arc<Notify>) -> Index {
        Index {
            inner: Arc::new(Inner {
                store,
                blobs,
                documents,
                wake,
                done: watch::channel(0).0,
            }),
        }
    }

    /// Starts the worker: it indexes what is waiting, then sleeps until a
    /// scan changes a manifest (or five minutes pass: a missed wake-up
    /// costs a delay, never a file).
    pub fn spawn(&self, shutdown: Shutdown) {
        let index = self.clone();
        tokio::spawn(async move {
            loop {
                let pause = match index.step().await {
                    Ok(0) => Duration::from_secs(300),
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(
                            status = e.status.as_u16(),
                            "search index: a batch failed; next try in 5 s"
                        );
                        Duration::from_secs(5)
                    }
                };
                tokio::select! {
                    _ = index.inner.wake.notified() => {}
                    _ = tokio::time::sleep(pause) => {}
                    _ = shutdown.wait() => return,
                }
            }
        });
    }

    /// Indexes one batch; how many versions it read.
    pub async fn step(&self) -> Result<usize, ApiError> {
        let todo = self
            .inner
            .store
            .read(|conn| Ok(rows::todo(conn, INDEX_VERSION, BATCH)?))
            .await?;
        if todo.is_empty() {
            return Ok(0);
        }
        let began = Instant::now();
        // A core each: the reader's children are bounded by their own
        // semaphore, a text file's read is a blocking task.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let entries: Vec<Entry> = futures_util::stream::iter(todo)
            .map(|item| {
                let index = self.clone();
                async move { index.entry_of(&item).await }
            })
            .buffered(cores)
            .collect()
            .await;
        let count = entries.len();
        let now = jiff::Timestamp::now().as_second();
        self.inner
            .store
            .write(move |ctx| {
                for entry in &entries {
                    rows::put(ctx.conn(), entry, INDEX_VERSION, now)?;
                }
                Ok(())
            })
            .await?;
        tracing::debug!(
            files = count,
            ms = began.elapsed().as_millis() as u64,
            "search index: batch kept"
        );
        self.inner.done.send_modify(|n| *n += 1);
        Ok(count)
    }

    /// What one version reads as.
    async fn entry_of(&self, item: &Todo) -> Entry {
        let sha = item.sha.clone();
        let Ok(file) = self.inner.blobs.open(&sha) else {
            return parts::names(&sha, "its kept copy could not be opened");
        };
        // CSV and TSV are text: found on the lines read_file shows.
        let document =
            DocKind::of(&item.path).filter(|k| !matches!(k, DocKind::Csv | DocKind::Tsv));
        match document {
            Some(kind) => match self
                .inner
                .documents
                .read_hashed(file, sha.clone(), kind)
                .await
            {
                Ok(doc) => parts::of_document(&sha, &doc.extracted),
                Err(cause) => parts::names(
                    &sha,
                    &format!("it cannot be read as a {}: {cause}", kind.word()),
                ),
            },
            None => {
                let read = tokio::task::spawn_blocking(move || {
                    let mut file = file;
                    parts::of_text(&sha, &mut file)
                })
                .await;
                match read {
                    Ok(Ok(entry)) => entry,
                    _ => parts::names(&item.sha, "its kept copy could not be read"),
                }
            }
        }
    }

    /// Waits up to `bound` for the versions of `workspace` still to index;
    /// how many are left.
    pub async fn settle(&self, workspace: &str, bound: Duration) -> Result<u64, ApiError> {
        let deadline = tokio::time::Instant::now() + bound;
        let mut done = self.inner.done.subscribe();
        loop {
            let key = workspace.to_string();
            let left = self
                .inner
                .store
                .read(move |conn| Ok(rows::pending(conn, &key, INDEX_VERSION)?))
                .await?;
            if left == 0 {
                return Ok(0);
            }
            self.inner.wake.notify_one();
            match tokio::time::timeout_at(deadline, done.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Ok(left),
            }
        }
    }

    /// Searches `workspace`'s files.
    pub async fn search(&self, workspace: &str, request: Request) -> Result<Found, ApiError> {
        let key = workspace.to_string();
        self.inner
            .store
            .read(move |conn| {
                let listed = rows::listed(conn, &key, INDEX_VERSION)?;
                Ok(search_listed(conn, &key, listed, &request)?)
            })
            .await
    }
}

/// The search over a workspace's files as the index lists them.
fn search_listed(
    conn: &rusqlite::Connection,
    workspace: &str,
    listed: Vec<rows::Listed>,
    request: &Request,
) -> rusqlite::Result<Found> {
    let matcher = &request.matcher;
    let mut found = Found::default();
    let mut text = 0u64;
    // The paths of each version whose text is searched.
    let mut searched: HashMap<String, Vec<String>> = HashMap::new();
    for file in listed {
        if !is_under(&file.path, request.under.as_deref()) {
            continue;
        }
        if found.files >= MAX_FILES || text + file.chars > MAX_TEXT {
            found.beyond += 1;
            continue;
        }
        found.files += 1;
        text += file.chars;
        if matcher.is_match(&file.path) {
            found.names.push(file.path.clone());
        }
        match (file.sha, file.state) {
            (Some(sha), Some(IndexState::Text)) => searched.entry(sha).or_default().push(file.path),
            (Some(_), None) => found.pending += 1,
            _ => {}
        }
    }
    if searched.is_empty() {
        return Ok(found);
    }
    let fts = matcher.fts();
    let max = request.max_hits;
    rows::candidates(conn, workspace, fts.as_deref(), |part| {
        let Some(paths) = searched.get(&part.sha) else {
            return true;
        };
        for (n, line) in part.body.lines().enumerate() {
            if !matcher.is_match(line) {
                continue;
            }
            for path in paths {
                if found.hits.len() == max {
                    found.more_hits = true;
                    return false;
                }
                found.hits.push(Hit {
                    path: path.clone(),
                    part: part.label.clone(),
                    line: part.first_line + n as u64,
                    text: cut_chars(line.trim_end(), LINE_CHARS),
                });
            }
        }
        true
    })?;
    found
        .hits
        .sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
    Ok(found)
}

/// Whether `path` is `under` or inside it (`None`: the whole workspace).
fn is_under(path: &str, under: Option<&str>) -> bool {
    match under {
        None => true,
        Some(under) => {
            path == under
                || path
                    .strip_prefix(under)
                    .is_some_and(|rest| rest.starts_with('/'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_means_the_path_or_inside_it() {
        assert!(is_under("a/b.txt", Some("a")));
        assert!(is_under("a", Some("a")));
        assert!(!is_under("ab/c.txt", Some("a")));
        assert!(is_under("x", None));
    }
}
