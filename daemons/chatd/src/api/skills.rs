//! Skills (docs/api.md "Skills"): the layers listed, the owner's written,
//! a chat's switches, and a message sent with a skill (`skill`, `/skill
//! <name> …` or `/<name> …`), which carries the skill's text as it was sent
//! so a regenerate runs it again.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tandem_shared::http::ApiError;

use super::Json;
use crate::runs::ChatSkills;
use crate::skills::{self, owner, Catalog, Skill};
use crate::store::queries::{self, Trashed};
use crate::words::SkillLayer;
use crate::App;

#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    conversation_id: Option<String>,
}

/// `GET /skills[?conversation_id=]`: every layer's skills, each with what
/// shadows it; with a chat, whether each is on there and its switches.
pub async fn list(
    State(app): State<Arc<App>>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let view = match query.conversation_id {
        Some(id) => {
            check_chat(&app, &id).await?;
            view(&app.runs.chat_skills_of(&id).await?, &app)
        }
        None => {
            let catalog = scan(&app).await?;
            view(
                &ChatSkills {
                    catalog,
                    off: Vec::new(),
                },
                &app,
            )
        }
    };
    Ok(axum::Json(view).into_response())
}

fn view(chat: &ChatSkills, app: &App) -> Value {
    let on = chat.on();
    let skills: Vec<Value> = chat
        .catalog
        .skills
        .iter()
        .map(|s| {
            let mut out = s.json(false);
            let serving = on.iter().any(|o| o.id() == s.id());
            out["on"] = json!(serving);
            if let Some(winner) = chat.catalog.winner(&s.name).filter(|w| w.id() != s.id()) {
                out["shadowed_by"] = json!(winner.id());
            }
            out
        })
        .collect();
    let problems: Vec<Value> = chat
        .catalog
        .problems
        .iter()
        .map(|p| json!({"layer": p.layer, "folder": p.folder, "why": p.why}))
        .collect();
    json!({
        "skills": skills,
        "on": on.len(),
        "off": chat.off,
        "problems": problems,
        "owner_dir": app.config.skills_dir.display().to_string(),
    })
}

/// `GET /skills/{name}[?conversation_id=]`: the skill that serves the
/// name (in the chat, or with no switch), with its text.
pub async fn get(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let found = match query.conversation_id {
        Some(id) => {
            check_chat(&app, &id).await?;
            let chat = app.runs.chat_skills_of(&id).await?;
            chat.find(&name).cloned().map_err(|_| not_found(&name))?
        }
        None => {
            let catalog = scan(&app).await?;
            catalog
                .winner(&name)
                .cloned()
                .ok_or_else(|| not_found(&name))?
        }
    };
    let mut out = found.json(true);
    out["files"] = json!(found.files);
    Ok(axum::Json(out).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    requires: Option<Vec<String>>,
}

/// `POST /skills {name, description, body, requires?}`: a skill of the
/// owner's layer (a built-in one of the same name is shadowed by it).
pub async fn create(
    State(app): State<Arc<App>>,
    Json(body): Json<SkillBody>,
) -> Result<Response, ApiError> {
    let Some(name) = body.name.clone() else {
        return Err(ApiError::bad_input("name", "is required"));
    };
    skills::check_name(&name).map_err(|why| ApiError::bad_input("name", why))?;
    let catalog = scan(&app).await?;
    let folder = app.config.skills_dir.join(&name);
    if owners(&catalog, &name).is_some() || std::fs::symlink_metadata(&folder).is_ok() {
        return Err(ApiError::conflict(
            "exists",
            format!(
                "the owner's skill {name} (or a folder of that name) exists: PUT /skills/{name} \
                 changes a skill"
            ),
        ));
    }
    let text = checked_text(&name, &body, None)?;
    write(&app, folder, text).await?;
    tracing::info!(skill = %name, "skill written");
    let made = scan(&app).await?;
    let skill = owners(&made, &name).ok_or_else(|| not_found(&name))?;
    Ok((StatusCode::CREATED, axum::Json(skill.json(true))).into_response())
}

/// `PUT /skills/{name} {description?, body?, requires?}`: changes the
/// owner's skill; what is left out stays.
pub async fn update(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Json(body): Json<SkillBody>,
) -> Result<Response, ApiError> {
    if body.name.as_ref().is_some_and(|n| *n != name) {
        return Err(ApiError::bad_input(
            "name",
            "a skill is not renamed: make the new one, then delete this one",
        ));
    }
    let catalog = scan(&app).await?;
    let Some(before) = owners(&catalog, &name).cloned() else {
        return Err(only_owners(&catalog, &name));
    };
    let text = checked_text(&name, &body, Some(&before))?;
    let skills::Folder::Owner(folder) = before.folder.clone() else {
        return Err(only_owners(&catalog, &name));
    };
    write(&app, folder, text).await?;
    tracing::info!(skill = %name, "skill changed");
    let made = scan(&app).await?;
    let skill = owners(&made, &name).ok_or_else(|| not_found(&name))?;
    Ok(axum::Json(skill.json(true)).into_response())
}

/// `DELETE /skills/{name}`: the owner's skill's folder goes to the
/// layer's `.trash/`; 204.
pub async fn remove(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let catalog = scan(&app).await?;
    let Some(skill) = owners(&catalog, &name) else {
        return Err(only_owners(&catalog, &name));
    };
    let skills::Folder::Owner(folder) = skill.folder.clone() else {
        return Err(only_owners(&catalog, &name));
    };
    let dir = app.config.skills_dir.clone();
    let now = tandem_shared::time::now_unix() * 1000;
    tokio::task::spawn_blocking(move || owner::remove(&dir, &folder, now))
        .await
        .map_err(|_| ApiError::internal("the delete did not finish"))?
        .map_err(|e| ApiError::internal(format!("cannot move the skill to the trash: {e}")))?;
    tracing::info!(skill = %name, "skill deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffBody {
    off: Vec<String>,
}

/// `PUT /conversations/{id}/skills {off}`: replaces the chat's switches
/// (a skill's name, or `layer:name`); one that names no skill refuses the
/// whole body. Answers as `GET /skills?conversation_id=`.
pub async fn set_off(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<OffBody>,
) -> Result<Response, ApiError> {
    check_chat(&app, &id).await?;
    let known = app.runs.chat_skills_of(&id).await?;
    let off = check_off("off", body.off, &known.catalog)?;
    let cid = id.clone();
    let count = off.len();
    app.store
        .write(move |ctx| {
            queries::conversation(ctx.conn(), &cid, Trashed::Exclude)?;
            crate::store::skills::set_off(ctx.conn(), &cid, &off)?;
            Ok(())
        })
        .await?;
    tracing::info!(conversation = %id, off = count, "chat's skills switched");
    Ok(axum::Json(view(&app.runs.chat_skills_of(&id).await?, &app)).into_response())
}

/// A chat's skill switches as `catalog` knows them (a skill's name, or
/// `layer:name`), sorted, once each; one that names no skill refuses them all.
pub fn check_off(
    field: &str,
    mut off: Vec<String>,
    catalog: &skills::Catalog,
) -> Result<Vec<String>, ApiError> {
    let most = crate::store::skills::MAX_OFF;
    if off.len() > most {
        return Err(ApiError::bad_input(
            field,
            format!(
                "names {} skills; a chat switches off {most} at most",
                off.len()
            ),
        ));
    }
    if let Some(long) = off.iter().find(|s| s.len() > 2 * skills::MAX_NAME) {
        return Err(ApiError::bad_input(
            field,
            format!(
                "an entry of {} bytes names no skill: a name is {} at most, layer:name {} more",
                long.len(),
                skills::MAX_NAME,
                "builtin:".len()
            ),
        ));
    }
    for switch in &off {
        if !catalog.knows_switch(switch) {
            let near = skills::nearest(switch, catalog.skills.iter().map(|s| s.name.as_str()));
            let hint = near
                .first()
                .map(|n| format!("; did you mean {n}?"))
                .unwrap_or_default();
            return Err(ApiError::bad_input(
                field,
                format!(
                    "{:?} names no skill (a name, or layer:name){hint}",
                    switch.chars().take(80).collect::<String>()
                ),
            ));
        }
    }
    off.sort();
    off.dedup();
    Ok(off)
}

/// The skill a message asks for: the `skill` field, `/skill <name> …`, or
/// `/<name> …` where `name` is one of the chat's skills (a registry
/// command wins a name). `(record, the person's words)`, or `None`.
pub async fn asked(
    app: &App,
    id: &str,
    field: Option<&str>,
    text: &str,
) -> Result<Option<(Value, String)>, ApiError> {
    let lead = text.trim_start();
    let (word, rest, from_field) = match field {
        Some(name) if name.len() > skills::MAX_NAME => {
            return Err(ApiError::bad_input(
                "skill",
                format!(
                    "is {} bytes; a skill's name is {} at most",
                    name.len(),
                    skills::MAX_NAME
                ),
            ))
        }
        Some(name) => (name.to_string(), text.to_string(), true),
        None => {
            let Some(after) = lead.strip_prefix('/') else {
                return Ok(None);
            };
            let (first, rest) = split_word(after);
            if first.eq_ignore_ascii_case("skill") {
                let (name, rest) = split_word(rest);
                if name.is_empty() {
                    return Err(ApiError::bad_input(
                        "text",
                        "write /skill NAME and your words",
                    ));
                }
                (name.to_string(), rest.to_string(), true)
            } else if skills::check_name(&first.to_lowercase()).is_ok() {
                // `/PDF …` runs pdf, as `/HELP` runs help.
                (first.to_lowercase(), rest.to_string(), false)
            } else {
                return Ok(None);
            }
        }
    };
    let chat = app.runs.chat_skills_of(id).await?;
    let skill = match chat.find(&word) {
        Ok(skill) => skill.clone(),
        // `/something` that names no skill is a message like any other;
        // one that names a skill switched off here says so.
        Err(_) if !from_field && chat.catalog.winner(&word).is_none() => return Ok(None),
        Err(why) if !from_field => {
            return Err(ApiError::bad_input(
                "skill",
                format!(
                    "{why} (switch it on in the chat's Skills menu, or tandem skill on {word} \
                     --chat {id}); nothing was sent"
                ),
            ))
        }
        Err(why) => return Err(ApiError::bad_input("skill", why)),
    };
    if skill.requires_exec && !app.runs.can_exec(id).await? {
        return Err(ApiError::bad_input(
            "skill",
            format!(
                "the skill {} needs command execution (requires: [exec]), and this chat cannot \
                 run commands",
                skill.name
            ),
        ));
    }
    let words = if rest.trim().is_empty() {
        format!("/{}", skill.name)
    } else {
        rest.trim().to_string()
    };
    let record = json!({"kind": "skill", "name": skill.name, "layer": skill.layer,
                        "body": skill.body});
    Ok(Some((record, words)))
}

/// The first word of `text` and what follows it (trimmed).
fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim_start()),
        None => (text.trim_end(), ""),
    }
}

/// A new `SKILL.md`'s text from a body (over `before` for a change), held
/// to a skill's size.
fn checked_text(name: &str, body: &SkillBody, before: Option<&Skill>) -> Result<String, ApiError> {
    let description = match (&body.description, before) {
        (Some(d), _) => d.clone(),
        (None, Some(b)) => b.description.clone(),
        (None, None) => return Err(ApiError::bad_input("description", "is required")),
    };
    tandem_shared::http::check_chars(
        "description",
        description.trim(),
        1,
        skills::MAX_DESCRIPTION,
    )?;
    if description.contains('\n') {
        return Err(ApiError::bad_input("description", "is one line"));
    }
    let text = match (&body.body, before) {
        (Some(t), _) => t.clone(),
        (None, Some(b)) => b.body.clone(),
        (None, None) => return Err(ApiError::bad_input("body", "is required")),
    };
    if text.trim().is_empty() {
        return Err(ApiError::bad_input("body", "is empty: write the procedure"));
    }
    let requires_exec = match (&body.requires, before) {
        (Some(needs), _) => {
            for need in needs {
                if need != "exec" {
                    return Err(ApiError::bad_input(
                        "requires",
                        format!(
                            "{:?} is no need chatd knows: the one need is exec",
                            need.chars().take(40).collect::<String>()
                        ),
                    ));
                }
            }
            !needs.is_empty()
        }
        (None, Some(b)) => b.requires_exec,
        (None, None) => false,
    };
    let rendered = owner::render(name, description.trim(), requires_exec, &text);
    let most = skills::MAX_SKILL_BYTES;
    if rendered.len() as u64 > most {
        return Err(ApiError::bad_input(
            "body",
            format!(
                "makes a SKILL.md of {} bytes; a skill holds at most {most}",
                rendered.len()
            ),
        ));
    }
    // What was written must read back as the same skill.
    skills::parse(&rendered, name).map_err(|why| ApiError::bad_input("body", why))?;
    Ok(rendered)
}

async fn write(app: &App, folder: std::path::PathBuf, text: String) -> Result<(), ApiError> {
    let dir = app.config.skills_dir.clone();
    tokio::task::spawn_blocking(move || owner::write(&dir, &folder, &text))
        .await
        .map_err(|_| ApiError::internal("the write did not finish"))?
        .map_err(|e| ApiError::internal(format!("cannot write the skill: {e}")))
}

/// Every layer but a chat's workspace.
async fn scan(app: &App) -> Result<Catalog, ApiError> {
    let dir = app.config.skills_dir.clone();
    tokio::task::spawn_blocking(move || Catalog::scan(None, &dir))
        .await
        .map_err(|_| ApiError::internal("the skills scan did not finish"))
}

fn owners<'a>(catalog: &'a Catalog, name: &str) -> Option<&'a Skill> {
    catalog
        .skills
        .iter()
        .find(|s| s.layer == SkillLayer::Owner && s.name == name)
}

fn only_owners(catalog: &Catalog, name: &str) -> ApiError {
    match catalog.winner(name) {
        Some(s) => ApiError::bad_input(
            "name",
            format!(
                "the skill {name} is {}: only the owner's skills are written here (POST one of \
                 the same name to put yours in front of it)",
                match s.layer {
                    SkillLayer::Builtin => "built in",
                    _ => "a workspace's, in its .skills folder",
                }
            ),
        ),
        None => not_found(name),
    }
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found("skill", &name.chars().take(64).collect::<String>())
}

async fn check_chat(app: &App, id: &str) -> Result<(), ApiError> {
    let cid = id.to_string();
    app.store
        .read(move |conn| queries::conversation(conn, &cid, Trashed::Exclude).map(|_| ()))
        .await
}
