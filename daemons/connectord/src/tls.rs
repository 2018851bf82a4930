//! connectord's HTTP client to the platforms (Telegram's and Slack's APIs):
//! the shared TLS client config (`tandem_shared::tls`), a 10 s connect bound.

use std::time::Duration;

/// An HTTP client for a platform's API: this TLS, a 10 s connect bound.
pub fn client() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .tls_backend_preconfigured((*tandem_shared::tls::client_config()).clone())
        .connect_timeout(Duration::from_secs(10))
}
