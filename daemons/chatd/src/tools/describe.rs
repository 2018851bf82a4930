//! `describe_image`: for a chat whose model does not see images, another
//! model of the box that does describes an image file of the workspace.
//! This module holds the tool's words (its spec, its arguments, its
//! answers); the run asks the engine (`runs/describe.rs`), since the image
//! goes through the reader process and the engine, not the workspace tools.

use serde_json::json;

use super::{Args, Effect, ToolSpec};
use crate::workspace::ToolError;

/// The tool's name.
pub const NAME: &str = "describe_image";

/// What the describing model is asked when the call asks nothing.
pub const DEFAULT_QUESTION: &str = "Describe this image fully: what it shows, how it is laid \
     out, the details that matter, and every piece of text in it, word for word.";

/// The longest question passed on.
pub const MAX_QUESTION_CHARS: usize = 4_000;

/// What the call answers when no model of the box sees images.
pub const NO_MODEL: &str = "describe_image: no model of this box sees images, so nothing can \
     describe it. Tell the person: they can pick a model that sees images for this chat, or \
     the administrator can set [chatd] image_model to a vision model the engine serves.";

pub fn describe_image_spec() -> ToolSpec {
    ToolSpec {
        name: NAME,
        description: "Have a model of this box that sees images describe an image file of the \
            workspace (JPEG, PNG, WebP or GIF; attached images are under uploads/). Give \
            `question` to ask something precise (what a chart's axes say, the text of a \
            receipt); without it the image is described fully, with any text in it. You get \
            that model's words, not the image.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Image path relative to the workspace, like uploads/photo.jpg"},
                "question": {"type": "string", "description": "What to ask about the image (default: describe it fully, with any text in it)"}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
        effect: Effect::Read,
    }
}

/// A call's arguments: the path and the question to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub path: String,
    pub question: String,
}

impl Asked {
    /// The call's arguments checked; an error names the field.
    pub fn parse(arguments: &str) -> Result<Asked, ToolError> {
        let args = Args::parse(NAME, arguments)?;
        let path = args.string("path", "an image path inside the workspace")?;
        let question = args
            .opt_string("question", "what to ask about the image")?
            .map(str::trim)
            .filter(|q| !q.is_empty());
        if let Some(q) = question {
            let chars = q.chars().count();
            if chars > MAX_QUESTION_CHARS {
                return Err(args.field_error(
                    "question",
                    &format!("is {chars} characters; {MAX_QUESTION_CHARS} at most"),
                ));
            }
        }
        Ok(Asked {
            path: path.to_string(),
            question: question.unwrap_or(DEFAULT_QUESTION).to_string(),
        })
    }
}

/// Whether a file's name says it is an image the reader decodes.
pub fn is_image(name: &str) -> bool {
    crate::attachments::guess_mime(name).starts_with("image/")
}

/// The one line for a file that is not an image.
pub fn not_an_image(rel: &str) -> String {
    format!("describe_image: `{rel}` is not an image (it describes JPEG, PNG, WebP and GIF files)")
}

/// The one line for an image the reader could not decode.
pub fn unreadable(rel: &str, cause: &str) -> String {
    format!("describe_image: `{rel}` could not be read as an image: {cause}")
}

/// The one line for a describing model that did not answer.
pub fn unanswered(model: &str, why: &str) -> String {
    format!("describe_image: the model {model} did not describe it ({why}); try again later")
}

/// What the model reads: whose description of what, then the description.
pub fn result(model: &str, rel: &str, size: (u32, u32), description: &str) -> String {
    format!(
        "{model} describes {rel} (sent to it at {}×{} px):\n{}",
        size.0,
        size.1,
        description.trim()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_by_field() {
        let asked = Asked::parse(r#"{"path": "uploads/a.png"}"#).unwrap();
        assert_eq!(asked.question, DEFAULT_QUESTION);
        let asked = Asked::parse(r#"{"path": "a.png", "question": " Whose name? "}"#).unwrap();
        assert_eq!(asked.question, "Whose name?");
        let err = Asked::parse("{}").unwrap_err();
        assert_eq!(
            err.message(),
            "describe_image: \"path\" is required (an image path inside the workspace)"
        );
        let long = json!({"path": "a.png", "question": "x".repeat(4_001)}).to_string();
        let err = Asked::parse(&long).unwrap_err();
        assert_eq!(
            err.message(),
            "describe_image: \"question\" is 4001 characters; 4000 at most"
        );
    }

    #[test]
    fn only_what_the_reader_decodes_is_an_image() {
        for name in ["a.png", "b.JPG", "c.jpeg", "d.webp", "e.gif"] {
            assert!(is_image(name), "{name}");
        }
        for name in ["notes.txt", "scan.pdf", "photo", "f.heic"] {
            assert!(!is_image(name), "{name}");
        }
    }
}
