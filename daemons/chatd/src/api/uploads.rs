//! Uploads that fit real files (docs/files.md "Uploads"): a message sent as
//! `multipart/form-data` (`text`, `origin`, `key`, then its files) and
//! `PUT …/files/content?path=` (`base`, then one file). Files are streamed
//! to the workspace (`form.rs`); a request that fails part-way takes back
//! what it wrote, so bad input changes nothing.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::files::FileParams;
use super::form::{self, FilePart, Form, Part};
use super::outgoing::{accepted, attached, Outgoing, MAX_TEXT};
use crate::attachments::{self, names, Incoming, Staged, MAX_FILES, UPLOADS};
use crate::history::Place;
use crate::store::files::Author;
use crate::store::queries::{self, Trashed};
use crate::words::FileOrigin;
use crate::workspace::{staging_path, Workspace};
use crate::App;

/// A message form's settings and their largest size in bytes.
const MESSAGE_SETTINGS: &[(&str, u64)] = &[
    ("text", 4 * MAX_TEXT as u64),
    ("origin", 64),
    ("key", 256),
    ("context", 64 * 1024),
    ("agent", 200),
    ("skill", 80),
];
/// A file put's one setting: the version it replaces.
const PUT_SETTINGS: &[(&str, u64)] = &[("base", 32)];

/// What a request that has not ended yet wrote: files at their staging
/// names, and the folders it made for them (shallow first). Taken back on an error ([`Written::take_back`])
/// or when the request is dropped, unless it [`Written::keep`]s them.
struct Written {
    root: PathBuf,
    staged: Vec<Staged>,
    folders: Vec<String>,
}

impl Written {
    /// Notes the folders of `path` that are not there yet.
    fn new(root: PathBuf, workspace: &Workspace, path: &str) -> Written {
        let mut folders = Vec::new();
        let mut prefix = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            if matches!(workspace.lstat(&prefix), Ok(None)) {
                folders.push(prefix.clone());
            }
        }
        Written {
            root,
            staged: Vec::new(),
            folders,
        }
    }

    /// The staged files, now the history's to land: nothing is taken back.
    fn keep(mut self) -> Vec<Staged> {
        self.folders.clear();
        std::mem::take(&mut self.staged)
    }

    /// Takes back what was written, before the answer goes out.
    async fn take_back(mut self) {
        if let Some(job) = self.remover() {
            let _ = tokio::task::spawn_blocking(job).await;
        }
    }

    fn remover(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        if self.staged.is_empty() && self.folders.is_empty() {
            return None;
        }
        let root = self.root.clone();
        let paths: Vec<String> = self.staged.drain(..).map(|p| p.staged).collect();
        let folders = std::mem::take(&mut self.folders);
        Some(move || {
            let Ok(workspace) = Workspace::open(&root) else {
                return;
            };
            for path in paths {
                let _ = workspace.remove_file(&path);
            }
            for folder in folders.iter().rev() {
                let _ = workspace.remove_empty_dir(folder);
            }
        })
    }
}

impl Drop for Written {
    fn drop(&mut self) {
        let Some(job) = self.remover() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn_blocking(job)),
            Err(_) => job(),
        }
    }
}

async fn live(app: &App, id: &str) -> Result<(), ApiError> {
    let cid = id.to_string();
    app.store
        .read(move |conn| queries::conversation(conn, &cid, Trashed::Exclude))
        .await?;
    Ok(())
}

/// `POST …/messages` as a form: settings first, then up to 20 files, each
/// saved under `uploads/` as it arrives.
pub async fn send_form(app: Arc<App>, id: String, request: Request) -> Result<Response, ApiError> {
    live(&app, &id).await?;
    app.folders.check_reach(&id)?;
    let limits = form::Limits {
        body: app.config.upload_message_max_bytes,
        file: app.config.upload_file_max_bytes,
        settings: MESSAGE_SETTINGS,
    };
    let mut form = Form::open(request, &limits)?;
    let root = app.runs.workspace_root(&id);
    let mut written = Written::new(root.clone(), &open(&root)?, &format!("{UPLOADS}/x"));
    let outgoing = match read_message(&app, &id, &mut form, &mut written).await {
        Ok(Ok(outgoing)) => outgoing,
        Ok(Err(again)) => return Ok(accepted(again)),
        Err(e) => {
            written.take_back().await;
            return Err(e);
        }
    };
    // Asked of the servers before the files are kept: a refusal keeps none.
    let context = match super::mcp_context::expand(&app, &id, &outgoing.context).await {
        Ok(context) => context,
        Err(e) => {
            written.take_back().await;
            return Err(e);
        }
    };
    let mut records = context.records;
    let mut text = context.text;
    text.push_str(&outgoing.text);
    if !written.staged.is_empty() {
        let saved = attached(&app, &id, Incoming::Staged(written.keep())).await?;
        text.push_str(&saved.text);
        records.extend(saved.records);
    }
    let records = (!records.is_empty()).then_some(Value::Array(records));
    outgoing.store(&app, id, text, records).await
}

/// Reads a message form to its end: the checked message, or the answer of
/// the send its key already made (`Err`, nothing saved).
async fn read_message(
    app: &App,
    id: &str,
    form: &mut Form,
    written: &mut Written,
) -> Result<Result<Outgoing, Value>, ApiError> {
    let mut settings: Vec<(&str, String)> = Vec::new();
    let mut outgoing: Option<Outgoing> = None;
    while let Some(part) = form.next().await? {
        let file = match part {
            Part::Setting(name, _) if outgoing.is_some() => {
                return Err(ApiError::bad_input(name, "must come before the files"));
            }
            Part::Setting(name, value) => {
                settings.push((name, value));
                continue;
            }
            Part::File(file) => file,
        };
        if outgoing.is_none() {
            let (checked, agent, skill) = checked(std::mem::take(&mut settings))?;
            // A send already answered saves no file again.
            if let Some(again) = checked.answered(app, id).await? {
                return Ok(Err(again));
            }
            let asking = checked.asking(app, id, agent).await?;
            outgoing = Some(asking.skilled(app, id, skill).await?);
        }
        if written.staged.len() == MAX_FILES {
            return Err(attachments::too_many(MAX_FILES + 1));
        }
        let staged = save_part(&written.root, file).await?;
        written.staged.push(staged);
    }
    match outgoing {
        Some(outgoing) => Ok(Ok(outgoing)),
        None => {
            let (checked, agent, skill) = checked(settings)?;
            match checked.answered(app, id).await? {
                Some(again) => Ok(Err(again)),
                None => {
                    let asking = checked.asking(app, id, agent).await?;
                    Ok(Ok(asking.skilled(app, id, skill).await?))
                }
            }
        }
    }
}

/// The message's settings, checked as a JSON send's are: with the agent
/// and the skill it names.
#[allow(clippy::type_complexity)]
fn checked(
    settings: Vec<(&str, String)>,
) -> Result<(Outgoing, Option<String>, Option<String>), ApiError> {
    let (mut text, mut origin, mut key, mut context) = (None, None, None, None);
    let (mut agent, mut skill) = (None, None);
    for (name, value) in settings {
        let slot = match name {
            "text" => &mut text,
            "origin" => &mut origin,
            "context" => &mut context,
            "agent" => &mut agent,
            "skill" => &mut skill,
            _ => &mut key,
        };
        if slot.replace(value).is_some() {
            return Err(ApiError::bad_input(name, "is given twice"));
        }
    }
    let text = text.ok_or_else(|| ApiError::bad_input("text", "is missing"))?;
    // A form's `context` is the JSON list a JSON send gives.
    let context: Option<Vec<Value>> = match context {
        None => None,
        Some(json) => Some(serde_json::from_str(&json).map_err(|e| {
            ApiError::bad_input(
                "context",
                format!("is not a JSON list of prompts and resources: {e}"),
            )
        })?),
    };
    Ok((
        Outgoing::checked(text, origin, key)?.with_context(context.as_deref())?,
        agent,
        skill,
    ))
}

/// One file of a message, streamed to a staging name under `uploads/`.
async fn save_part(root: &std::path::Path, file: Box<FilePart>) -> Result<Staged, ApiError> {
    let name = names::free_base(&file.name).ok_or_else(|| {
        ApiError::bad_input(&format!("{}.filename", file.label), "is not a file name")
    })?;
    let mime = file
        .mime
        .clone()
        .filter(|m| m != "application/octet-stream")
        .unwrap_or_else(|| names::guess_mime(&name).to_string());
    let staged = staging_path(&format!("{UPLOADS}/{name}"));
    let size = file.write_to(root.to_path_buf(), staged.clone()).await?;
    Ok(Staged {
        staged,
        name,
        mime,
        size,
    })
}

fn open(root: &std::path::Path) -> Result<Workspace, ApiError> {
    crate::history::open_workspace(root)
}

/// `PUT …/files/content?path=` (a form: `base`, then one file; parts after
/// it are not read): the file at
/// `path`, made or replaced. A file already there is replaced only when
/// `base` names its newest change set; else the upload is kept beside it
/// (`notes (2).md`) and the answer says `conflict_of`.
pub async fn put_content(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    params: Result<Query<FileParams>, QueryRejection>,
    request: Request,
) -> Result<Response, ApiError> {
    let (asked, _) = super::files::path_param(params)?;
    live(&app, &id).await?;
    let place = Place::of(&app.folders, &id);
    let workspace = open(&place.root)?;
    // One spelling of the path (`./a//b.md` is `a/b.md`) for the history.
    let path = workspace
        .resolve(&asked)
        .map_err(|e| ApiError::bad_input("path", e.message()))?;
    if path.is_root() {
        return Err(ApiError::bad_input(
            "path",
            "`.` is the workspace folder; give a file path",
        ));
    }
    let path = path.to_string();
    let there = workspace
        .lstat(&path)
        .map_err(|e| ApiError::bad_input("path", e.message()))?;
    if there.is_some_and(|e| e.node != tandem_shared::tree::Node::File) {
        return Err(ApiError::bad_input(
            "path",
            format!("`{path}` is a folder or not a regular file; give a file path"),
        ));
    }
    let limits = form::Limits {
        body: app.config.upload_file_max_bytes + (64 << 10),
        file: app.config.upload_file_max_bytes,
        settings: PUT_SETTINGS,
    };
    let mut form = Form::open(request, &limits)?;
    let mut base = None;
    let file = loop {
        match form.next().await? {
            Some(Part::Setting(_, value)) => base = Some(parse_base(&value)?),
            Some(Part::File(file)) => break file,
            None => return Err(ApiError::bad_input("file", "is missing: one file part")),
        }
    };
    let staged = staging_path(&path);
    let mut written = Written::new(place.root.clone(), &workspace, &staged);
    let size = match file.write_to(place.root.clone(), staged.clone()).await {
        Ok(size) => size,
        Err(e) => {
            written.take_back().await;
            return Err(e);
        }
    };
    written.staged.push(Staged {
        staged: staged.clone(),
        name: String::new(),
        mime: String::new(),
        size,
    });
    // Under the history's lock: a hand edit since is kept first, `base` is
    // held to the newest set then, and the move is the last step.
    let user = author(&id, FileOrigin::User);
    let target = path.clone();
    let landed = app
        .history
        .land(
            &place,
            &user,
            app.config.upload_file_max_bytes,
            Some(path.clone()),
            move |workspace, newest| {
                let exists = matches!(
                    workspace.lstat(&target),
                    Ok(Some(e)) if e.node == tandem_shared::tree::Node::File
                );
                let replaces = exists && base.is_some() && base == newest;
                let (folder, name) = target.rsplit_once('/').unwrap_or(("", &target));
                let landed = if replaces {
                    workspace
                        .rename_file_with(&staged, &target, true)
                        .map(|_| target.clone())
                } else {
                    names::land_free(workspace, &staged, folder, name)
                };
                let landed = landed.map_err(|e| {
                    ApiError::internal(format!(
                        "the upload could not be put in place: {}",
                        e.message()
                    ))
                })?;
                Ok((vec![landed.clone()], (landed, replaces)))
            },
        )
        .await;
    let ((landed, replaced), kept) = match landed {
        Ok(done) => done,
        Err(e) => {
            written.take_back().await;
            return Err(e);
        }
    };
    written.keep();
    let mut answer = json!({
        "path": landed,
        "bytes": size,
        "rev": kept.as_ref().map(|k| k.rev),
        "card": kept.as_ref().map(|k| k.card()),
    });
    if landed != path {
        answer["conflict_of"] = json!(path);
    }
    let status = if replaced {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, axum::Json(answer)).into_response())
}

fn parse_base(value: &str) -> Result<i64, ApiError> {
    value
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|r| *r > 0)
        .ok_or_else(|| {
            ApiError::bad_input(
                "base",
                "must be the change set (rev) of the version this file replaces, 1 or more",
            )
        })
}

fn author(id: &str, origin: FileOrigin) -> Author {
    Author {
        conversation_id: id.to_string(),
        run_id: None,
        call_id: None,
        origin,
        undoes: Vec::new(),
    }
}
