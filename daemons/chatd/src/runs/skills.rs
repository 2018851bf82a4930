//! A chat's skills at run time: its layers read afresh for each request
//! (the workspace of the chat it works for, the owner's folder, the
//! built-in ones) less its switches, and `load_skill` calls.

use serde_json::Value;
use tandem_shared::http::ApiError;

use super::Runs;
use crate::skills::{self, prompt, Catalog, Folder, Skill};
use crate::tools::{self, Args};
use crate::workspace::Workspace;

/// A chat's skills as a request offers them.
pub(crate) struct ChatSkills {
    pub catalog: Catalog,
    /// The chat's switches (its parent's for a sub-agent).
    pub off: Vec<String>,
}

impl ChatSkills {
    /// The skills the chat can use now, by name.
    pub fn on(&self) -> Vec<&Skill> {
        self.catalog.of_chat(&self.off)
    }

    /// The skill `asked` names in this chat, or why none does: the near
    /// names first, then the chat's skills.
    pub fn find(&self, asked: &str) -> Result<&Skill, String> {
        let on = self.on();
        if let Some(skill) = on.iter().find(|s| s.name == asked) {
            return Ok(skill);
        }
        let shown: String = asked.chars().take(64).collect();
        let off = self.catalog.winner(asked).is_some();
        let near = skills::nearest(asked, on.iter().map(|s| s.name.as_str()));
        let mut why = if off {
            format!("the skill {shown:?} is switched off for this chat")
        } else {
            format!("there is no skill {shown:?} in this chat")
        };
        if let Some(first) = near.first() {
            why.push_str(&format!(". Did you mean {first}?"));
        }
        let mut names: Vec<&str> = near.iter().map(String::as_str).collect();
        for s in &on {
            if names.len() >= 40 {
                break;
            }
            if !names.contains(&s.name.as_str()) {
                names.push(&s.name);
            }
        }
        if names.is_empty() {
            why.push_str(" This chat has no skills.");
        } else {
            why.push_str(&format!(" The chat's skills: {}.", names.join(", ")));
        }
        Err(why)
    }
}

/// Reads the layers of the chat whose workspace is `home`'s. Blocking.
pub(crate) fn scan(root: &std::path::Path, owner_dir: &std::path::Path) -> Catalog {
    let workspace = Workspace::existing(root).ok();
    Catalog::scan(workspace.as_ref(), owner_dir)
}

impl Runs {
    /// Chat `id` (in the trash too).
    async fn conversation_of(&self, id: &str) -> Result<crate::model::Conversation, ApiError> {
        let cid = id.to_string();
        let trashed = crate::store::queries::Trashed::Include;
        self.inner
            .store
            .read(move |conn| crate::store::queries::conversation(conn, &cid, trashed))
            .await
    }

    /// The skills of chat `id`: its parent's for a sub-agent.
    pub(crate) async fn chat_skills_of(&self, id: &str) -> Result<ChatSkills, ApiError> {
        let conversation = self.conversation_of(id).await?;
        let home = match (&conversation.kind, &conversation.parent_id) {
            (crate::words::ChatKind::Subagent, Some(parent)) => parent.clone(),
            _ => conversation.id.clone(),
        };
        self.chat_skills(&home).await
    }

    /// Whether chat `id`'s requests offer a way to run commands.
    pub(crate) async fn can_exec(&self, id: &str) -> Result<bool, ApiError> {
        let conversation = self.conversation_of(id).await?;
        let brief = self
            .brief(id, &conversation.model, super::mcp::Lists::AsOpen)
            .await?;
        Ok(can_exec(&brief.tools))
    }

    /// The skills of chat `id` working in `home`'s workspace, with `home`'s switches.
    pub(crate) async fn chat_skills(&self, home: &str) -> Result<ChatSkills, ApiError> {
        let root = self.workspace_root(home);
        let owner_dir = self.inner.config.skills_dir.clone();
        let catalog = tokio::task::spawn_blocking(move || scan(&root, &owner_dir))
            .await
            .map_err(|_| ApiError::internal("the skills scan did not finish"))?;
        let cid = home.to_string();
        let off = self
            .inner
            .store
            .read(move |conn| Ok(crate::store::skills::off(conn, &cid)?))
            .await?;
        Ok(ChatSkills { catalog, off })
    }

    /// Takes a `load_skill` call: the skill's text (or one of its files),
    /// or why not. A skill that needs commands where the chat has none
    /// says so. (A compaction that summarizes the call away puts the skill
    /// back: `context::summarized_skills`.)
    pub(super) async fn skill_call(
        &self,
        home: &str,
        arguments: &str,
        offered: &Value,
    ) -> Result<Result<String, String>, ApiError> {
        let args = match Args::parse(tools::skill::NAME, arguments) {
            Ok(args) => args,
            Err(why) => return Ok(Err(why.message().to_string())),
        };
        let name = match args.string("name", "the skill's name, as listed") {
            Ok(name) => name.to_string(),
            Err(why) => return Ok(Err(why.message().to_string())),
        };
        let file = match args.opt_string("file", "a file of the skill's folder") {
            Ok(file) => file.map(str::to_string),
            Err(why) => return Ok(Err(why.message().to_string())),
        };
        let chat_skills = self.chat_skills(home).await?;
        let skill = match chat_skills.find(&name) {
            Ok(skill) => skill.clone(),
            Err(why) => return Ok(Err(why)),
        };
        if skill.requires_exec && !can_exec(offered) {
            return Ok(Err(format!(
                "the skill {} cannot be used here: it needs command execution (requires: \
                 [exec]), and this chat cannot run commands. Do the task without it, or tell \
                 the person.",
                skill.name
            )));
        }
        if let Some(file) = file {
            let root = self.workspace_root(home);
            return tokio::task::spawn_blocking(move || read_file(&skill, &root, &file))
                .await
                .map_err(|_| ApiError::internal("the skill's file read did not finish"));
        }
        Ok(Ok(prompt::loaded(&skill)))
    }
}

/// Whether the chat is offered a way to run commands.
pub(crate) fn can_exec(offered: &Value) -> bool {
    offered
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "bash"))
}

/// One file of a skill's folder.
fn read_file(skill: &Skill, root: &std::path::Path, file: &str) -> Result<String, String> {
    match &skill.folder {
        Folder::Builtin => Err(format!(
            "the skill {} is built in and has no files beside its instructions",
            skill.name
        )),
        Folder::Owner(folder) => {
            skills::owner::read_file(folder, file, tools::skill::MAX_FILE_BYTES)
        }
        Folder::Workspace(base) => {
            if file.split('/').any(|p| p == "..") {
                return Err(format!("{file:?} is no file of this skill"));
            }
            let ws = Workspace::existing(root).map_err(|e| e.to_string())?;
            let (_, bytes) = ws
                .read_all(
                    &format!("{base}/{}", file.trim_start_matches('/')),
                    tools::skill::MAX_FILE_BYTES,
                )
                .map_err(|e| e.message().to_string())?;
            String::from_utf8(bytes).map_err(|_| format!("{file} is not text"))
        }
    }
}
