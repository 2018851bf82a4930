//! A `describe_image` call run: the image file opened in the chat's
//! workspace, made fit for a model by the reader process (2,048 px at
//! most, as an attached image is), sent with the question to the model
//! that describes images for this chat (`Models::describer`), and its
//! answer, bounded in time and length, made the call's result.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::Runs;
use crate::documents::images::{Scaled, MAX_SENT_BYTES};
use crate::engine::Piece;
use crate::model::Run;
use crate::tools::describe::{self, Asked};
use crate::tools::{fit, ToolOutput};
use crate::workspace::Workspace;

/// How long the describing model may take to answer, whole.
const DESCRIBE_WAIT: Duration = Duration::from_secs(180);
/// The most tokens its answer may use.
const DESCRIBE_TOKENS: u64 = 1_024;
/// The most characters of its answer kept (past its token bound anyway).
const DESCRIBE_CHARS: usize = 16_000;

/// An image as it goes to the describing model.
struct Sent {
    url: String,
    size: (u32, u32),
}

impl Runs {
    /// Runs one describe_image call of `run`, in the workspace at `root`;
    /// its result fits `budget` characters.
    pub(super) async fn describe_image(
        &self,
        run: &Run,
        arguments: &str,
        root: &Path,
        budget: usize,
    ) -> ToolOutput {
        let failed = |text: &str| ToolOutput::failed(describe::NAME, text);
        let asked = match Asked::parse(arguments) {
            Ok(asked) => asked,
            Err(e) => return failed(e.message()),
        };
        let mount = self.inner.folders.reach(&run.conversation_id);
        let mount = mount.mount().cloned();
        let (rel, image) = match self.image_for_model(root, mount, &asked.path).await {
            Ok(found) => found,
            Err(line) => return failed(&line),
        };
        let config = &self.inner.config;
        let Some(model) = self.inner.models.describer(&run.model, &config.image_model) else {
            return failed(describe::NO_MODEL);
        };
        let began = std::time::Instant::now();
        let answer = self
            .ask_describer(&run.conversation_id, &model, &asked.question, &image.url)
            .await;
        tracing::info!(run = %run.id, model = %model, ok = answer.is_ok(),
            ms = began.elapsed().as_millis() as u64, "image described");
        let description = match answer {
            Ok(text) if !text.trim().is_empty() => text,
            Ok(_) => return failed(&describe::unanswered(&model, "its answer was empty")),
            Err(why) => return failed(&describe::unanswered(&model, &why)),
        };
        let text = describe::result(&model, &rel, image.size, &description);
        let bytes = text.len() as u64;
        let summary = format!("described {rel} by {model}");
        ToolOutput::ok(fit::cut_chars(&text, budget), summary, bytes)
    }

    /// The image at `path` as a data URL a model is sent, scaled by the
    /// reader when it is too large; else the one line saying why not.
    async fn image_for_model(
        &self,
        root: &Path,
        mount: Option<crate::agent_folder::Mount>,
        path: &str,
    ) -> Result<(String, Sent), String> {
        let (root, asked) = (root.to_path_buf(), path.to_string());
        let opened = tokio::task::spawn_blocking(move || {
            let workspace = Workspace::open(&root)
                .map_err(|e| format!("the chat's workspace could not be opened: {}", e.kind()))?
                .with_mount(mount.as_ref());
            let opened = workspace
                .open_file(&asked)
                .map_err(|e| e.message().to_string())?;
            Ok::<_, String>((workspace, opened))
        })
        .await
        .map_err(|_| "describe_image: the file could not be opened".to_string())??;
        let (workspace, opened) = opened;
        let rel = opened.path.to_string();
        if !describe::is_image(&rel) {
            return Err(describe::not_an_image(&rel));
        }
        let mime = crate::attachments::guess_mime(&rel);
        let scaled = self
            .inner
            .documents
            .scale_image(opened.file)
            .await
            .map_err(|cause| describe::unreadable(&rel, &cause))?;
        let sent = match scaled {
            Scaled::Smaller {
                width,
                height,
                mime,
                data_base64,
                ..
            } => Sent {
                url: format!("data:{mime};base64,{data_base64}"),
                size: (width, height),
            },
            Scaled::AsItIs { width, height } => {
                let again = rel.clone();
                let read = tokio::task::spawn_blocking(move || {
                    workspace.read_all(&again, MAX_SENT_BYTES).map(|(_, b)| b)
                })
                .await;
                match read {
                    Ok(Ok(bytes)) => Sent {
                        url: crate::attachments::data_url(mime, &bytes),
                        size: (width, height),
                    },
                    Ok(Err(e)) => return Err(describe::unreadable(&rel, e.message())),
                    Err(_) => return Err(describe::unreadable(&rel, "the read stopped")),
                }
            }
        };
        Ok((rel, sent))
    }

    /// `model`'s answer to `question` about the image at `url`, streamed
    /// and gathered; `Err` says in a few words why there is none.
    async fn ask_describer(
        &self,
        conversation_id: &str,
        model: &str,
        question: &str,
        url: &str,
    ) -> Result<String, String> {
        let body = json!({
            "model": model,
            "stream": true,
            "max_tokens": DESCRIBE_TOKENS,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": question},
                {"type": "image_url", "image_url": {"url": url}},
            ]}],
        });
        let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        // Its own session: the describing model's cache is not the chat's.
        let session = format!("chat-{conversation_id}-describe");
        let engine = &self.inner.engine;
        let asked = async {
            let mut stream = engine
                .stream(&session, body.into())
                .await
                .map_err(|fault| fault.reason())?;
            let mut text = String::new();
            while let Some(piece) = stream.next().await.map_err(|fault| fault.reason())? {
                if let Piece::Text(more) = piece {
                    text.push_str(&more);
                    if text.len() > DESCRIBE_CHARS * 4 {
                        break;
                    }
                }
            }
            Ok(fit::cut_chars(&text, DESCRIBE_CHARS))
        };
        tokio::time::timeout(DESCRIBE_WAIT, asked)
            .await
            .map_err(|_| format!("no answer within {} s", DESCRIBE_WAIT.as_secs()))?
    }
}
