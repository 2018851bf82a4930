//! A message on its way in, whatever carried it (a JSON send or a form):
//! its text and settings checked, the files it brought described and kept
//! as the person's change set, and the one write job that stores it and
//! starts its run, or leaves it waiting behind the run that works.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tandem_shared::http::ApiError;
use tandem_shared::time::new_id;

use crate::attachments;
use crate::kinds::EventKind;
use crate::store::messages;
use crate::store::messages::{insert_at_head, insert_message};
use crate::store::queries::{self, Trashed};
use crate::store::runs::insert_run;
use crate::words::{Origin, Role, RunMode};
use crate::workspace::Workspace;
use crate::App;

/// The most characters one message may hold.
pub const MAX_TEXT: usize = 256 * 1024;

/// The origin of the run a request starts: `user` unless it says otherwise.
pub(super) fn run_origin(origin: Option<String>) -> Result<Origin, ApiError> {
    Origin::requested(origin.as_deref())
}

pub(super) fn check_text(text: &str) -> Result<(), ApiError> {
    check_text_within(text, MAX_TEXT)
}

/// The text of an edit (of a message, or one waiting) of `message`: the
/// MCP context chatd put in front of it comes back with it, so it counts
/// beside [`MAX_TEXT`].
pub(super) fn check_edited(text: &str, attachments: Option<&Value>) -> Result<(), ApiError> {
    let with_context = attachments
        .and_then(Value::as_array)
        .is_some_and(|records| records.iter().any(|r| r["kind"] == "context"));
    let most = if with_context {
        MAX_TEXT + crate::mcp::context::MAX_LEAD_CHARS
    } else {
        MAX_TEXT
    };
    check_text_within(text, most)
}

fn check_text_within(text: &str, most: usize) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_input("text", "is empty"));
    }
    let chars = text.chars().count();
    if chars > most {
        return Err(
            ApiError::bad_input("text", format!("{chars} characters is more than {most}"))
                .with("limit", most),
        );
    }
    Ok(())
}

enum Sent {
    Run {
        message_id: String,
        run_id: String,
    },
    Pending {
        pending_id: String,
    },
    /// The key's first send answered this.
    Again(Value),
}

impl Sent {
    fn answer(&self) -> Value {
        match self {
            Sent::Run { message_id, run_id } => json!({"message_id": message_id, "run_id": run_id}),
            Sent::Pending { pending_id } => json!({"pending_id": pending_id}),
            Sent::Again(answer) => answer.clone(),
        }
    }
}

/// A message's text and settings, checked before anything is stored.
pub struct Outgoing {
    pub text: String,
    origin: Origin,
    key: Option<String>,
    /// Prompts and resources of the chat's MCP servers to put in front.
    pub context: Vec<crate::mcp::context::Asked>,
    /// The saved agent it asks for (`invoke.rs`): its record.
    invoked: Option<Value>,
    /// The skill it runs with (`skills.rs`): its record.
    skill: Option<Value>,
}

impl Outgoing {
    pub fn checked(
        text: String,
        origin: Option<String>,
        key: Option<String>,
    ) -> Result<Outgoing, ApiError> {
        check_text(&text)?;
        let origin = run_origin(origin)?;
        if let Some(key) = &key {
            if !crate::inbox::is_key(key) {
                return Err(ApiError::bad_input(
                    "key",
                    format!(
                        "must be 1 to {} of A-Z a-z 0-9 _ : . -",
                        crate::inbox::MAX_KEY
                    ),
                ));
            }
        }
        Ok(Outgoing {
            text,
            origin,
            key,
            context: Vec::new(),
            invoked: None,
            skill: None,
        })
    }

    /// With the skill it runs with (`skill`, or a `/skill NAME` or
    /// `/NAME` lead, taken off the text): checked now, before a file is
    /// saved. A trigger's prompt runs one only by its field.
    pub async fn skilled(
        mut self,
        app: &App,
        id: &str,
        field: Option<String>,
    ) -> Result<Outgoing, ApiError> {
        if self.origin == Origin::Trigger && field.is_none() {
            return Ok(self);
        }
        if let Some((record, words)) =
            super::skills::asked(app, id, field.as_deref(), &self.text).await?
        {
            self.text = words;
            self.skill = Some(record);
        }
        Ok(self)
    }

    /// With the saved agent it asks for (`agent`, or a `/agent <name>`
    /// lead, taken off the text): checked now, before a file is saved.
    pub async fn asking(
        mut self,
        app: &App,
        id: &str,
        agent: Option<String>,
    ) -> Result<Outgoing, ApiError> {
        if let Some((record, task)) = super::invoke::asked(app, id, agent, &self.text).await? {
            self.text = task;
            self.invoked = Some(record);
        }
        Ok(self)
    }

    /// With the message's `context` (checked; nothing is asked yet).
    pub fn with_context(mut self, context: Option<&[Value]>) -> Result<Outgoing, ApiError> {
        self.context = crate::mcp::context::parse_list(context.unwrap_or_default())?;
        Ok(self)
    }

    /// The first send's answer when this key was sent before (its files
    /// are then not saved again).
    pub async fn answered(&self, app: &App, id: &str) -> Result<Option<Value>, ApiError> {
        let Some(key) = self.key.clone() else {
            return Ok(None);
        };
        let cid = id.to_string();
        let before = app
            .store
            .read(move |conn| {
                queries::conversation(conn, &cid, Trashed::Exclude)?;
                messages::send_key_answer(conn, &cid, &key)
            })
            .await?;
        Ok(before.map(|b| serde_json::from_str(&b).unwrap_or(Value::Null)))
    }

    /// Stores the message (or a waiting one) with `text` (the person's and
    /// what the files add) and the files' records; starts its run.
    pub async fn store(
        self,
        app: &Arc<App>,
        id: String,
        text: String,
        records: Option<Value>,
    ) -> Result<Response, ApiError> {
        let (cid, key, origin) = (id.clone(), self.key, self.origin);
        let invoked = self.invoked;
        let records = match (records, self.skill) {
            (records, None) => records,
            (records, Some(skill)) => {
                let mut all = match records {
                    Some(Value::Array(all)) => all,
                    _ => Vec::new(),
                };
                all.push(skill);
                Some(Value::Array(all))
            }
        };
        let records = match (records, &invoked) {
            (Some(Value::Array(mut all)), Some(record)) => {
                all.push(record.clone());
                Some(Value::Array(all))
            }
            (None, Some(record)) => Some(Value::Array(vec![record.clone()])),
            (records, _) => records,
        };
        // Stored and started in a task of its own: hyper drops a request's
        // handler when its client goes away, and a run stored `queued` but
        // never started would hold its chat (and the key's answer) for good.
        let app = app.clone();
        let stored = tokio::spawn(async move {
            let sent = app
                .store
                .write(move |ctx| {
                    let conversation = queries::conversation(ctx.conn(), &cid, Trashed::Exclude)?;
                    if let Some(key) = &key {
                        let before = messages::send_key_answer(ctx.conn(), &cid, key)?;
                        if let Some(before) = before {
                            return Ok(Sent::Again(
                                serde_json::from_str(&before).unwrap_or(Value::Null),
                            ));
                        }
                    }
                    if invoked.is_some() && queries::active_run(ctx.conn(), &cid)?.is_some() {
                        return Err(super::invoke::busy());
                    }
                    let sent = send_in(ctx, &conversation, &cid, &text, records, origin)?;
                    if let Some(key) = &key {
                        messages::insert_send_key(ctx, &cid, key, &sent.answer())?;
                    }
                    Ok(sent)
                })
                .await?;
            if let Sent::Run { run_id, .. } = &sent {
                app.runs.spawn(run_id.clone(), id);
            }
            Ok::<_, ApiError>(sent)
        });
        let sent = stored
            .await
            .map_err(|_| ApiError::internal("the send did not finish"))??;
        Ok(accepted(sent.answer()))
    }
}

/// Lands a message's files under `uploads/` (under the workspace's history
/// lock, kept as the person's change set, origin `user`) and says what they
/// add to the message.
pub async fn attached(
    app: &App,
    id: &str,
    files: attachments::Incoming,
) -> Result<attachments::Saved, ApiError> {
    let cid = id.to_string();
    let conversation = app
        .store
        .read(move |conn| queries::conversation(conn, &cid, Trashed::Exclude))
        .await?;
    let room = app.runs.free_tokens(id, &conversation.model).await? / 4;
    let sight = app
        .models
        .sight(&conversation.model, &app.config.image_model);
    let author = crate::store::files::Author {
        conversation_id: id.to_string(),
        run_id: None,
        call_id: None,
        origin: crate::words::FileOrigin::User,
        undoes: Vec::new(),
    };
    let place = crate::history::Place::of(&app.folders, id);
    let max = app.config.upload_message_max_bytes;
    let root = place.root.clone();
    let (placed, _) = app
        .history
        .land(&place, &author, max, None, move |workspace, _| {
            let placed = attachments::land(workspace, files).map_err(|e| {
                ApiError::internal(format!("the attachments could not be saved: {e}"))
            })?;
            let paths = placed.iter().map(|p| p.path.clone()).collect();
            Ok((paths, placed))
        })
        .await?;
    // Documents are read outside the history lock: a long read never holds
    // up the chat's file tools.
    let workspace = Arc::new(
        Workspace::existing(&root)
            .map_err(|e| ApiError::internal(format!("the workspace could not be opened: {e}")))?,
    );
    let mut read = attachments::Readings::default();
    for (path, kind) in attachments::documents_of(&placed) {
        let text = match workspace.open_file(&path) {
            Ok(opened) => app.documents.read(opened.file, kind).await,
            Err(e) => Err(e.message().to_string()),
        };
        read.docs.insert(path, text);
    }
    // Voice notes too, each bounded in size and time: a failed one is a
    // line in the message, and the message goes on.
    let transcriber = crate::voice::Transcriber::new(
        app.engine.clone(),
        app.models.clone(),
        app.store.clone(),
        &app.config,
    );
    for (path, name) in attachments::voices_of(&placed) {
        let heard = match workspace.open_file(&path) {
            Ok(opened) => transcriber.transcribe(opened.file, &name).await,
            Err(e) => Err(crate::voice::NotTranscribed::Unreadable(
                e.message().to_string(),
            )),
        };
        read.voices.insert(path, heard);
    }
    tokio::task::spawn_blocking(move || {
        attachments::describe(&workspace, &placed, room, &sight, &read)
    })
    .await
    .map_err(|_| ApiError::internal("the attachments could not be described"))
}

/// The send itself, in the write job: a waiting message while a run works,
/// else the message and its run.
fn send_in(
    ctx: &mut crate::store::Ctx,
    conversation: &crate::model::Conversation,
    cid: &str,
    text: &str,
    records: Option<Value>,
    origin: Origin,
) -> Result<Sent, ApiError> {
    if queries::active_run(ctx.conn(), cid)?.is_some() {
        let pending_id = new_id("p_");
        messages::insert_pending(ctx, &pending_id, cid, text, records.as_ref(), None)?;
        let pending = queries::pending(ctx.conn(), cid, &pending_id)?;
        ctx.emit(cid, EventKind::PendingAdded, json!({"pending": pending}))?;
        return Ok(Sent::Pending { pending_id });
    }
    let message = match records {
        Some(records) => insert_user_with_files(ctx, cid, text, records)?,
        None => insert_message(ctx, cid, Role::User, text, None, None)?,
    };
    let run = insert_run(ctx, conversation, RunMode::Send, origin, None)?;
    Ok(Sent::Run {
        message_id: message.id,
        run_id: run.id,
    })
}

/// A user message with the files sent with it, under the head.
fn insert_user_with_files(
    ctx: &mut crate::store::Ctx,
    conversation_id: &str,
    text: &str,
    records: Value,
) -> Result<crate::model::Message, ApiError> {
    let mut message = crate::model::Message::draft(Role::User, text);
    message.attachments = Some(records);
    insert_at_head(ctx, conversation_id, message)
}

pub(super) fn accepted(body: Value) -> Response {
    (StatusCode::ACCEPTED, axum::Json(body)).into_response()
}
