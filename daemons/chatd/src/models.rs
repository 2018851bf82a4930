//! What chatd knows of the engine's models (not its records: those are
//! `model.rs`): each model's context window, whether it reads images and
//! which ones transcribe speech, as `/v1/models` last said, how a chat gets
//! at images ([`Sight`]), whether the engine counts tokens
//! (`/v1/tokenize`), and a request's prompt tokens, counted or estimated.
//! The API and the runs ask it alike.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use serde_json::Value;
use tandem_shared::sync::lock;

use crate::context;
use crate::engine::{Engine, ModelInfo};

/// How a chat's model gets at an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sight {
    /// It reads images itself.
    Direct,
    /// It does not; describe_image asks this model, which does.
    Described(String),
    /// No model of the box reads images.
    Blind,
}

/// Models by what they can do, in the engine's order.
#[derive(Debug, Default)]
struct Listed {
    vision: Vec<String>,
    transcription: Vec<String>,
}

pub struct Models {
    engine: Engine,
    /// The window chatd plans with for a model the engine names none for.
    default_window: u64,
    /// Context windows by model, from the engine, for `usage.limit`.
    windows: Mutex<HashMap<String, u64>>,
    /// The models that read images.
    vision: Mutex<HashSet<String>>,
    /// The models that read images and those that transcribe speech, in
    /// the order `/v1/models` last listed them.
    listed: Mutex<Listed>,
    /// Whether the engine counts tokens (`POST /v1/tokenize`): 0 not yet
    /// known, 1 yes, 2 no.
    tokenize: AtomicU8,
}

impl Models {
    /// Nothing known yet; `default_window` stands for a model's window
    /// until the engine says it.
    pub fn new(engine: Engine, default_window: u64) -> Models {
        Models {
            engine,
            default_window,
            windows: Mutex::new(HashMap::new()),
            vision: Mutex::new(HashSet::new()),
            listed: Mutex::new(Listed::default()),
            tokenize: AtomicU8::new(0),
        }
    }

    /// What the engine says of a model: its window, whether it reads images.
    pub fn remember(&self, model: &ModelInfo) {
        if let Some(window) = model.context_window {
            lock(&self.windows).insert(model.id.clone(), window);
        }
        let mut vision = lock(&self.vision);
        if model.vision {
            vision.insert(model.id.clone());
        } else {
            vision.remove(&model.id);
        }
    }

    /// What `/v1/models` said, in its order: each model remembered, and
    /// the first that sees images or transcribes known.
    pub fn remember_all(&self, models: &[ModelInfo]) {
        for model in models {
            self.remember(model);
        }
        let ids = |keep: fn(&ModelInfo) -> bool| {
            models
                .iter()
                .filter(|m| keep(m))
                .map(|m| m.id.clone())
                .collect()
        };
        *lock(&self.listed) = Listed {
            vision: ids(|m| m.vision),
            transcription: ids(|m| m.transcription),
        };
    }

    /// Whether `model` reads images (`/v1/models` says so).
    pub fn reads_images(&self, model: &str) -> bool {
        lock(&self.vision).contains(model)
    }

    /// The model describe_image asks for a chat on `chat_model`: the
    /// `image_model` setting, else the chat's own when it sees images, else
    /// the engine's first that does.
    pub fn describer(&self, chat_model: &str, image_model: &str) -> Option<String> {
        if !image_model.is_empty() {
            return Some(image_model.to_string());
        }
        if self.reads_images(chat_model) {
            return Some(chat_model.to_string());
        }
        lock(&self.listed).vision.first().cloned()
    }

    /// How a chat on `chat_model` gets at images.
    pub fn sight(&self, chat_model: &str, image_model: &str) -> Sight {
        if self.reads_images(chat_model) {
            return Sight::Direct;
        }
        match self.describer(chat_model, image_model) {
            Some(model) => Sight::Described(model),
            None => Sight::Blind,
        }
    }

    /// The model voice notes are transcribed with: the setting, else the
    /// engine's first that transcribes.
    pub fn transcriber(&self, transcription_model: &str) -> Option<String> {
        if !transcription_model.is_empty() {
            return Some(transcription_model.to_string());
        }
        lock(&self.listed).transcription.first().cloned()
    }

    /// What the engine says a model holds (`None`: it did not say).
    pub fn window(&self, model: &str) -> Option<u64> {
        lock(&self.windows).get(model).copied()
    }

    /// The model's window as chatd plans with it: the engine's, else the config's.
    pub fn window_or_default(&self, model: &str) -> u64 {
        self.window(model).unwrap_or(self.default_window)
    }

    /// The prompt tokens of `body`: the engine's count when it has
    /// `/v1/tokenize` and the request is near enough the chat's line to need
    /// it, else the estimate.
    pub async fn count(&self, model: &str, body: &Value, line: u64) -> (u64, bool) {
        let empty = Vec::new();
        let messages = body["messages"].as_array().unwrap_or(&empty);
        let estimate = context::estimate(messages, body.get("tools"));
        self.count_near_line(model, estimate, line, || Some(body.clone()))
            .await
    }

    /// `count` of a body made as JSON text, with the estimate made with it.
    pub async fn count_text(
        &self,
        model: &str,
        estimate: u64,
        body: &[u8],
        line: u64,
    ) -> (u64, bool) {
        self.count_near_line(model, estimate, line, || serde_json::from_slice(body).ok())
            .await
    }

    /// The engine's count of the body `value` makes, when the estimate is
    /// near the line and the engine counts; else the estimate.
    async fn count_near_line(
        &self,
        model: &str,
        estimate: u64,
        line: u64,
        value: impl FnOnce() -> Option<Value>,
    ) -> (u64, bool) {
        // Far under the line the estimate decides alike, and the count costs
        // a round trip with the whole chat. A tokenizer can find up to a
        // third more than characters/4: under half the line, no request can
        // be near it.
        if estimate < line / 2 {
            return (estimate, false);
        }
        let Some(body) = value() else {
            return (estimate, false);
        };
        let tools = body.get("tools");
        if self.tokenize.load(Ordering::Relaxed) != 2 {
            match self.engine.tokenize(model, &body["messages"], tools).await {
                Ok(Some(count)) => {
                    self.tokenize.store(1, Ordering::Relaxed);
                    return (count, true);
                }
                Ok(None) => {
                    tracing::info!(
                        "the engine has no /v1/tokenize: requests are sized by estimate"
                    );
                    self.tokenize.store(2, Ordering::Relaxed);
                }
                Err(e) => tracing::warn!(error = %e, "token count failed; using the estimate"),
            }
        }
        (estimate, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(id: &str, vision: bool, transcription: bool) -> ModelInfo {
        ModelInfo {
            id: id.into(),
            context_window: None,
            vision,
            tools: true,
            transcription,
        }
    }

    #[test]
    fn images_and_voice_go_to_the_setting_else_the_engines_first_that_can() {
        let models = Models::new(Engine::new("http://127.0.0.1:9"), 8192);
        let check = |chat: &str, setting: &str, expect: Sight| {
            assert_eq!(
                models.sight(chat, setting),
                expect,
                "{chat} with {setting:?}"
            );
        };
        check("text", "", Sight::Blind);
        assert_eq!(models.transcriber(""), None);
        models.remember_all(&[
            model("text", false, false),
            model("eye-1", true, false),
            model("eye-2", true, false),
            model("whisper", false, true),
        ]);
        check("text", "", Sight::Described("eye-1".into()));
        check("text", "eye-2", Sight::Described("eye-2".into()));
        check("eye-2", "eye-1", Sight::Direct);
        // Called anyway, on a chat whose model sees: its own model.
        assert_eq!(models.describer("eye-2", "").as_deref(), Some("eye-2"));
        assert_eq!(models.transcriber("").as_deref(), Some("whisper"));
        assert_eq!(models.transcriber("big-ear").as_deref(), Some("big-ear"));
        // The engine said otherwise since.
        models.remember_all(&[model("text", false, false)]);
        check("text", "", Sight::Blind);
        assert_eq!(models.transcriber(""), None);
    }
}
