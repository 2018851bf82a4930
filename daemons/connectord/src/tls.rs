//! TLS to the platforms (Telegram's and Slack's APIs, Slack's WebSocket):
//! rustls with ring and the webpki roots, made once. Set here rather than
//! as the process default, so no other crate's choice of provider matters.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub fn config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring offers TLS 1.2 and 1.3")
                .with_root_certificates(roots)
                .with_no_client_auth();
            // HTTP/1.1 only: reqwest is built without HTTP/2 here, and the
            // WebSocket handshake is HTTP/1.1.
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(config)
        })
        .clone()
}

/// An HTTP client for a platform's API: this TLS, a 10 s connect bound.
pub fn client() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .tls_backend_preconfigured((*config()).clone())
        .connect_timeout(Duration::from_secs(10))
}
