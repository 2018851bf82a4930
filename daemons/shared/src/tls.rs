//! The TLS client every daemon that reaches the internet uses (chatd's web
//! tools, connectord's platforms): rustls with ring and the webpki roots,
//! HTTP/1.1, made once. Set here rather than as the process default, so no
//! other crate's choice of provider matters.

use std::sync::{Arc, OnceLock};

/// The client config, made on first use and shared after.
pub fn client_config() -> Arc<rustls::ClientConfig> {
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
            // HTTP/1.1 only: the web tools speak it through hyper's http1,
            // reqwest is built without HTTP/2, and a WebSocket handshake is HTTP/1.1.
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(config)
        })
        .clone()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_config_is_made_once_and_offers_http_1_1_only() {
        let first = super::client_config();
        assert!(std::sync::Arc::ptr_eq(&first, &super::client_config()));
        assert_eq!(first.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
