//! Why a reply failed, in a word a page or a terminal can explain (docs/api.md
//! "When a reply fails"): read from the run's status and the error chatd
//! wrote for it (its own words, `engine::Fault::reason` and the run loop's),
//! with the engine's part matched on what llama.cpp and vLLM say. `detail`
//! is that error with addresses, absolute paths and key-like strings taken
//! out, safe to show and to paste into a bug report.

use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use crate::words::RunStatus;

tandem_shared::words! {
    /// The cause of a failed, interrupted or stopped reply.
    pub enum FailCause("failure cause") {
        /// The engine did not answer (refused, reset, cut) for the whole retry window.
        EngineUnreachable => "engine_unreachable",
        /// The engine does not serve the chat's model.
        ModelNotFound => "model_not_found",
        /// The request is longer than the model's window, even compacted.
        OverContext => "over_context",
        /// The engine is out of memory (KV cache or GPU).
        EngineMemory => "engine_memory",
        /// The engine took too long.
        Timeout => "timeout",
        /// The engine said it is busy (429 or 503), twice.
        EngineBusy => "engine_busy",
        /// Another server error of the engine.
        EngineError => "engine_error",
        /// The engine refused the request for another reason (a 4xx).
        Refused => "refused",
        /// Someone pressed Stop.
        Stopped => "stopped",
        /// chatd stopped or could not write mid-reply.
        ChatdStopped => "chatd_stopped",
        /// Anything else chatd wrote.
        Other => "other",
    }
}

/// A failed reply's cause and its error, cleaned for showing.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Failure {
    pub cause: FailCause,
    pub detail: String,
}

/// The failure of a run that ended `failed`, `interrupted` or `stopped`;
/// `None` for any other.
pub fn of_run(status: RunStatus, error: Option<&str>) -> Option<Failure> {
    let error = error.unwrap_or("");
    let cause = match status {
        RunStatus::Stopped => FailCause::Stopped,
        RunStatus::Failed | RunStatus::Interrupted => cause_of(error),
        _ => return None,
    };
    Some(Failure {
        cause,
        detail: scrub(error),
    })
}

fn cause_of(error: &str) -> FailCause {
    let lower = error.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if lower.starts_with("chatd stopped") || lower.starts_with("chatd could not write") {
        FailCause::ChatdStopped
    } else if has(&[
        "out of memory",
        "kv cache",
        "cuda error",
        "failed to allocate",
        "insufficient memory",
    ]) {
        FailCause::EngineMemory
    } else if has(&[
        "more than the model's window",
        "context size",
        "context length",
        "context window",
    ]) {
        FailCause::OverContext
    } else if has(&["timed out", "timeout"]) {
        FailCause::Timeout
    } else if lower.starts_with("engine refused the request (404)")
        || (has(&["model"])
            && has(&[
                "not found",
                "does not exist",
                "unknown model",
                "no such model",
            ]))
    {
        FailCause::ModelNotFound
    } else if lower.starts_with("engine unreachable") || lower.starts_with("engine stream cut") {
        FailCause::EngineUnreachable
    } else if lower.starts_with("engine busy") {
        FailCause::EngineBusy
    } else if lower.starts_with("engine error") {
        FailCause::EngineError
    } else if lower.starts_with("engine refused") {
        FailCause::Refused
    } else {
        FailCause::Other
    }
}

/// `text` without what locates or opens something on this box: URLs and
/// addresses, absolute paths, and long key-like runs of letters and digits.
pub fn scrub(text: &str) -> String {
    static URL: LazyLock<Regex> = LazyLock::new(|| {
        // A constant pattern: compiling it cannot fail.
        Regex::new(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s)\]}>'\x22]+").expect("a valid pattern")
    });
    static ADDRESS: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9a-fA-F:]+\](?::\d+)?")
            .expect("a valid pattern")
    });
    static PATH: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?:^|[\s(=:'\x22])(/[^\s)'\x22,;]+)").expect("a valid pattern")
    });
    static KEY: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\b[A-Za-z0-9_\-]{32,}\b").expect("a valid pattern"));
    let text = URL.replace_all(text, "<address>");
    let text = ADDRESS.replace_all(&text, "<address>");
    let text = PATH.replace_all(&text, |c: &regex::Captures| c[0].replace(&c[1], "<path>"));
    KEY.replace_all(&text, "<key>").into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause(status: RunStatus, error: &str) -> FailCause {
        of_run(status, Some(error)).unwrap().cause
    }

    #[test]
    fn each_cause_is_told_from_what_chatd_wrote() {
        use FailCause::*;
        let failed = RunStatus::Failed;
        let cases = [
            ("engine unreachable: connection refused", EngineUnreachable),
            ("engine stream cut: the stream ended early", EngineUnreachable),
            ("engine refused the request (404): The model `qwen3` does not exist.", ModelNotFound),
            ("engine refused the request (400): model 'x' not found", ModelNotFound),
            ("the request is 40000 tokens (estimated), more than the model's window of 32768 tokens, and compaction cannot make it smaller", OverContext),
            ("engine refused the request (400): the request exceeds the available context size", OverContext),
            ("engine busy (503): failed to allocate KV cache", EngineMemory),
            ("engine error (500): CUDA error: out of memory", EngineMemory),
            ("engine unreachable: operation timed out", Timeout),
            ("engine busy (429): too many requests", EngineBusy),
            ("engine error (502): bad gateway", EngineError),
            ("engine refused the request (422): bad temperature", Refused),
            ("chatd stopped", ChatdStopped),
            ("chatd could not write: disk full", ChatdStopped),
            ("something new", Other),
        ];
        for (error, want) in cases {
            assert_eq!(cause(failed, error), want, "{error}");
        }
        assert_eq!(
            cause(RunStatus::Interrupted, "engine unreachable: reset"),
            EngineUnreachable
        );
        assert_eq!(cause(RunStatus::Stopped, ""), Stopped);
        assert!(of_run(RunStatus::Done, None).is_none());
        assert!(of_run(RunStatus::Paused, Some("after 40 steps")).is_none());
    }

    #[test]
    fn the_detail_names_no_address_path_or_key() {
        let raw = "engine unreachable: error sending request for url (http://127.0.0.1:8000/v1/chat/completions): \
                   connect to 10.0.0.5:8000 failed; model file /home/owner/models/q.gguf; \
                   token sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD rejected";
        let clean = scrub(raw);
        for gone in [
            "127.0.0.1",
            "10.0.0.5",
            "/home/owner",
            "sk-abcdefghij",
            "8000/v1",
        ] {
            assert!(!clean.contains(gone), "{gone} in {clean}");
        }
        assert!(
            clean.starts_with("engine unreachable: error sending request for url (<address>)"),
            "{clean}"
        );
        assert!(clean.contains("model file <path>"), "{clean}");
        assert!(clean.contains("token <key> rejected"), "{clean}");
    }
}
