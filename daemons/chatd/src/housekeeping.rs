//! Hourly housekeeping: a daily `VACUUM INTO backups/` copy (7 kept), chats
//! in the trash past their days removed, deleted files past their days in
//! the file trash removed for good, old `text.delta` events dropped
//! (messages keep their text), inbox entries past their 90 days dropped
//! (an insert drops them too, but the inbox may go quiet for months), and
//! documents' texts and the search index's versions no file holds any more.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tandem_shared::http::ApiError;
use tandem_shared::time::now_unix;

use crate::store::{conversations, inbox, messages};
use crate::App;

pub fn spawn(app: Arc<App>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(3600));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = app.shutdown.wait() => return,
            }
            if let Err(err) = once(&app).await {
                tracing::warn!(error = %err, "housekeeping failed; next try in an hour");
            }
        }
    });
}

/// One pass of every chore.
pub async fn once(app: &Arc<App>) -> Result<(), ApiError> {
    let backups = app.config.data_dir.join("backups");
    if let Some(path) = due_backup(&backups) {
        backup(app, &path).await?;
        prune_backups(&backups, app.config.backups_kept);
    }
    let cutoff = now_unix() - (app.config.trash_days * 86_400) as i64;
    let purged: Vec<String> = app
        .store
        .write(move |ctx| conversations::purge_trash(ctx, cutoff))
        .await?;
    for id in &purged {
        app.remove_folders(id).await;
    }
    // Deleted files past their days in the file trash go for good.
    let file_cutoff = now_unix() - (app.config.file_trash_days * 86_400) as i64;
    let chats = app
        .store
        .read(move |conn| crate::store::files::chats_with_old_deletions(conn, file_cutoff))
        .await?;
    for chat in chats {
        let place = crate::history::Place::of(&app.folders, &chat);
        // One chat's purge failing leaves the others and the rest of the
        // housekeeping to run; the next pass tries it again.
        if let Err(e) = app
            .history
            .purge(&place, &chat, None, Some(file_cutoff))
            .await
        {
            tracing::warn!(conversation = %chat, kind = e.kind, "old deleted files not purged");
        }
    }
    let delta_cutoff = now_unix() - (app.config.delta_days * 86_400) as i64;
    let dropped = app
        .store
        .write(move |ctx| messages::drop_deltas_before(ctx, delta_cutoff))
        .await?;
    // A send's key guards against a sender asking twice after a crash,
    // which comes within minutes: a week is plenty.
    let key_cutoff = now_unix() - 7 * 86_400;
    let keys_dropped = app
        .store
        .write(move |ctx| messages::drop_send_keys_before(ctx, key_cutoff))
        .await?;
    // What documents read as, of contents gone from every workspace and
    // history a day since: read again should they come back.
    let read_before = now_unix() - 86_400;
    let texts_dropped = app
        .store
        .write(move |ctx| {
            Ok(crate::store::documents::prune(
                ctx.conn(),
                read_before,
                crate::documents::READER_VERSION,
            )?)
        })
        .await?;
    // The search index's versions no workspace has held for a day.
    let indexed_dropped = app
        .store
        .write(move |ctx| {
            Ok(crate::store::index::prune(
                ctx.conn(),
                read_before,
                crate::index::INDEX_VERSION,
            )?)
        })
        .await?;
    let notifications_dropped = app
        .store
        .write(|ctx| Ok(inbox::prune(ctx.conn(), now_unix())?))
        .await?;
    tracing::info!(
        purged = purged.len(),
        deltas_dropped = dropped,
        notifications_dropped,
        keys_dropped,
        texts_dropped,
        indexed_dropped,
        "housekeeping done"
    );
    Ok(())
}

/// Today's backup path, when today has none yet.
fn due_backup(dir: &Path) -> Option<PathBuf> {
    let day = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let path = dir.join(format!("chat-{day}.sqlite3"));
    (!path.exists()).then_some(path)
}

async fn backup(app: &Arc<App>, path: &Path) -> Result<(), ApiError> {
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    tandem_shared::fsmode::private_dir(&dir)
        .map_err(|e| ApiError::internal(format!("backups folder: {e}")))?;
    let target = path.to_path_buf();
    let started = std::time::Instant::now();
    app.store
        .read(move |conn| {
            conn.execute("VACUUM INTO ?1", [target.to_string_lossy()])?;
            tandem_shared::fsmode::private_file(&target)
                .map_err(|e| ApiError::internal(format!("backup mode: {e}")))?;
            Ok(())
        })
        .await?;
    tracing::info!(path = %path.display(), ms = started.elapsed().as_millis() as u64, "backup written");
    Ok(())
}

fn prune_backups(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut names: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("chat-") && n.ends_with(".sqlite3"))
        })
        .collect();
    // Names hold the date, so their order is the days' order.
    names.sort();
    let extra = names.len().saturating_sub(keep);
    for old in names.into_iter().take(extra) {
        if let Err(err) = std::fs::remove_file(&old) {
            tracing::warn!(path = %old.display(), error = %err, "could not remove an old backup");
        }
    }
}
