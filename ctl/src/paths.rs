//! Where tandem's binaries, data and secrets are, by the same defaults and
//! QSE_* settings the daemons use.

use std::path::PathBuf;

/// A sibling binary of this `tandem` (the build or install puts them together).
pub fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

pub fn chat_url() -> String {
    let url = std::env::var("QSE_CHAT_URL").unwrap_or_else(|_| "http://127.0.0.1:8016".into());
    if url.starts_with("http") {
        url
    } else {
        format!("http://{url}")
    }
}

pub fn engine_url() -> String {
    std::env::var("QSE_ENGINE_URL").unwrap_or_else(|_| "http://127.0.0.1:8000".into())
}

pub fn chat_data() -> PathBuf {
    std::env::var_os("QSE_CHAT_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| tandem_shared::secrets::home().join(".tandemllm/chat"))
}

pub fn secrets_file() -> PathBuf {
    std::env::var_os("QSE_SECRETS")
        .map(PathBuf::from)
        .unwrap_or_else(tandem_shared::secrets::default_secrets_path)
}
