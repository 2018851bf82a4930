//! The box's web search settings (`GET|PUT /web-search`): which provider
//! web_search asks, a SearXNG's address and login, and what a search asks
//! for. The login's value is kept sealed (`searxng_auth_sealed`) and never
//! answered: a view says only `searxng_auth_set`.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tandem_shared::http::ApiError;

tandem_shared::words! {
    /// Who answers web_search.
    pub enum Provider("search provider") {
        DuckDuckGo => "duckduckgo",
        Searxng => "searxng",
    }
}

tandem_shared::words! {
    /// How much a provider filters.
    pub enum SafeSearch("safe search") {
        Off => "off",
        Moderate => "moderate",
        Strict => "strict",
    }
}

tandem_shared::words! {
    /// How recent the results must be.
    pub enum TimeRange("time range") {
        Day => "day",
        Week => "week",
        Month => "month",
        Year => "year",
    }
}

/// Whose the sealed login is (the seal's owner).
pub const AUTH_OWNER: &str = "web-search:auth";

/// Results a search gives by default, and the range a setting may name.
pub const DEFAULT_RESULTS: u64 = 8;
pub const RESULTS: std::ops::RangeInclusive<u64> = 1..=20;
/// Seconds a search may take by default, and the range.
pub const DEFAULT_TIMEOUT_S: u64 = 10;
pub const TIMEOUT_S: std::ops::RangeInclusive<u64> = 2..=30;
/// The longest address, header name and value, and language tag.
const MAX_URL: usize = 2048;
const MAX_HEADER_NAME: usize = 64;
pub const MAX_AUTH_VALUE: usize = 4096;
const MAX_LANGUAGE: usize = 16;

/// Header names a login may not take: chatd writes them itself.
const OWN_HEADERS: [&str; 6] = [
    "host",
    "content-length",
    "content-type",
    "proxy-authorization",
    "connection",
    "transfer-encoding",
];

/// The settings as stored (the login's value sealed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchSettings {
    pub provider: Provider,
    /// The SearXNG's search address (`https://searx.lan:8888/search`).
    pub searxng_url: String,
    /// The header its login goes in (`Authorization`), empty for none.
    pub searxng_auth_header: String,
    /// The header's value, sealed; never answered.
    pub searxng_auth_sealed: Option<String>,
    pub max_results: u64,
    pub safe_search: SafeSearch,
    /// A language tag (`en`, `de-CH`), empty for any.
    pub language: String,
    pub time_range: Option<TimeRange>,
    pub timeout_s: u64,
}

impl Default for SearchSettings {
    fn default() -> SearchSettings {
        SearchSettings {
            provider: Provider::DuckDuckGo,
            searxng_url: String::new(),
            searxng_auth_header: String::new(),
            searxng_auth_sealed: None,
            max_results: DEFAULT_RESULTS,
            safe_search: SafeSearch::Moderate,
            language: String::new(),
            time_range: None,
            timeout_s: DEFAULT_TIMEOUT_S,
        }
    }
}

impl SearchSettings {
    /// What chatd's config says (`search_engine`, `search_url`,
    /// `web_timeout_s`): the settings until the box sets its own.
    pub fn from_config(config: &crate::config::ChatdConfig) -> SearchSettings {
        let searxng = config.search_engine == "searxng";
        SearchSettings {
            provider: if searxng {
                Provider::Searxng
            } else {
                Provider::DuckDuckGo
            },
            searxng_url: if searxng {
                config.search_url.clone()
            } else {
                String::new()
            },
            timeout_s: config
                .web_timeout_s
                .clamp(*TIMEOUT_S.start(), *TIMEOUT_S.end()),
            ..SearchSettings::default()
        }
    }
}

/// What a patch does with the login's value.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthValue {
    Keep,
    Clear,
    /// A new value, to be sealed by the caller.
    Set(String),
}

impl SearchSettings {
    /// What `GET /web-search` answers: everything but the login's value.
    pub fn view(&self) -> Value {
        json!({
            "provider": self.provider,
            "searxng_url": self.searxng_url,
            "searxng_auth_header": self.searxng_auth_header,
            "searxng_auth_set": self.searxng_auth_sealed.is_some(),
            "max_results": self.max_results,
            "safe_search": self.safe_search,
            "language": self.language,
            "time_range": self.time_range,
            "timeout_s": self.timeout_s,
        })
    }

    /// These settings with `patch` laid over them (a name left out stays;
    /// `searxng_auth_value` null clears the login). A bad value is an error
    /// naming `{field}.<name>` and its limit; the login's value is never in
    /// an error.
    pub fn patched(
        &self,
        field: &str,
        patch: &Map<String, Value>,
    ) -> Result<(SearchSettings, AuthValue), ApiError> {
        let name = |n: &str| format!("{field}.{n}");
        let mut out = self.clone();
        let mut auth = AuthValue::Keep;
        for (key, value) in patch {
            match key.as_str() {
                "provider" => out.provider = word(&name(key), value)?,
                "safe_search" => out.safe_search = word(&name(key), value)?,
                "time_range" => {
                    out.time_range = match value {
                        Value::Null => None,
                        Value::String(s) if s.is_empty() || s == "any" => None,
                        v => Some(word(&name(key), v)?),
                    }
                }
                "max_results" => out.max_results = number(&name(key), value, RESULTS)?,
                "timeout_s" => out.timeout_s = number(&name(key), value, TIMEOUT_S)?,
                "searxng_url" => out.searxng_url = address(&name(key), value)?,
                "searxng_auth_header" => out.searxng_auth_header = header(&name(key), value)?,
                "language" => out.language = language(&name(key), value)?,
                "searxng_auth_value" => {
                    auth = match value {
                        Value::Null => AuthValue::Clear,
                        Value::String(s) if s.len() <= MAX_AUTH_VALUE && !has_control(s) => {
                            AuthValue::Set(s.clone())
                        }
                        _ => {
                            return Err(ApiError::bad_input(
                                &name(key),
                                format!(
                                    "must be text of at most {MAX_AUTH_VALUE} bytes with no \
                                     control characters, or null to clear it"
                                ),
                            ))
                        }
                    }
                }
                other => {
                    let shown: String = other.chars().take(64).collect();
                    return Err(ApiError::bad_input(
                        &name(&shown),
                        "is not a web search setting: provider, searxng_url, \
                         searxng_auth_header, searxng_auth_value, max_results, safe_search, \
                         language, time_range, timeout_s",
                    ));
                }
            }
        }
        if out.provider == Provider::Searxng && out.searxng_url.is_empty() {
            return Err(ApiError::bad_input(
                &name("searxng_url"),
                "is needed with provider searxng: your SearXNG's search address, like \
                 http://searx.lan:8888/search",
            ));
        }
        if auth == AuthValue::Clear {
            out.searxng_auth_sealed = None;
        }
        Ok((out, auth))
    }
}

fn word<W: tandem_shared::words::Word>(field: &str, value: &Value) -> Result<W, ApiError> {
    value.as_str().and_then(W::parse).ok_or_else(|| {
        let words: Vec<&str> = W::ALL.iter().map(|w| w.as_str()).collect();
        ApiError::bad_input(field, format!("must be one of {}", words.join(", ")))
    })
}

fn number(
    field: &str,
    value: &Value,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, ApiError> {
    value.as_u64().filter(|n| range.contains(n)).ok_or_else(|| {
        ApiError::bad_input(
            field,
            format!(
                "must be a whole number from {} to {}",
                range.start(),
                range.end()
            ),
        )
    })
}

fn has_control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

fn address(field: &str, value: &Value) -> Result<String, ApiError> {
    let text = value.as_str().unwrap_or_default();
    if text.is_empty() {
        return Ok(String::new());
    }
    let bad = |why: &str| Err(ApiError::bad_input(field, why.to_string()));
    if text.len() > MAX_URL {
        return bad("is longer than 2,048 bytes");
    }
    let Ok(url) = url::Url::parse(text) else {
        return bad("is not an address: give your SearXNG's search address, like http://searx.lan:8888/search");
    };
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return bad("must be an http or https address with a host");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return bad("must not hold a user name or password: put the login in searxng_auth_header and searxng_auth_value");
    }
    Ok(text.to_string())
}

fn header(field: &str, value: &Value) -> Result<String, ApiError> {
    let text = value.as_str().unwrap_or_default().trim();
    let token = text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if text.len() > MAX_HEADER_NAME || !token {
        return Err(ApiError::bad_input(
            field,
            "must be a header name (letters, digits and - _ .) of at most 64 bytes",
        ));
    }
    if OWN_HEADERS.contains(&text.to_ascii_lowercase().as_str()) {
        return Err(ApiError::bad_input(
            field,
            format!("{text} is a header chatd writes itself"),
        ));
    }
    Ok(text.to_string())
}

fn language(field: &str, value: &Value) -> Result<String, ApiError> {
    let text = value.as_str().unwrap_or_default().trim();
    let tag = text.len() <= MAX_LANGUAGE
        && text
            .split('-')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric()));
    if !text.is_empty() && !tag {
        return Err(ApiError::bad_input(
            field,
            "must be a language tag like en or de-CH (16 bytes at most), or empty for any",
        ));
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn a_patch_sets_what_it_names_and_keeps_the_rest() {
        let now = SearchSettings::default();
        let (next, auth) = now
            .patched(
                "web_search",
                &patch(
                    json!({"provider": "searxng", "searxng_url": "http://10.0.0.5:8888/search",
                    "searxng_auth_header": "Authorization", "searxng_auth_value": "Basic c2VjcmV0",
                    "max_results": 12, "time_range": "week", "language": "de-CH"}),
                ),
            )
            .unwrap();
        assert_eq!(next.provider, Provider::Searxng);
        assert_eq!(next.max_results, 12);
        assert_eq!(next.time_range, Some(TimeRange::Week));
        assert_eq!(next.safe_search, SafeSearch::Moderate);
        assert_eq!(auth, AuthValue::Set("Basic c2VjcmV0".into()));
        let view = next.view().to_string();
        assert!(!view.contains("c2VjcmV0"), "{view}");
        let (cleared, auth) = next
            .patched("web_search", &patch(json!({"searxng_auth_value": null})))
            .unwrap();
        assert_eq!(auth, AuthValue::Clear);
        assert_eq!(cleared.searxng_auth_sealed, None);
    }

    #[test]
    fn a_bad_value_names_its_field_and_never_echoes_the_login() {
        let now = SearchSettings::default();
        for (body, field) in [
            (json!({"max_results": 21}), "web_search.max_results"),
            (json!({"timeout_s": 1}), "web_search.timeout_s"),
            (json!({"provider": "bing"}), "web_search.provider"),
            (json!({"safe_search": "on"}), "web_search.safe_search"),
            (json!({"time_range": "decade"}), "web_search.time_range"),
            (json!({"searxng_url": "ftp://x/"}), "web_search.searxng_url"),
            (
                json!({"searxng_url": "http://me:pw@x/"}),
                "web_search.searxng_url",
            ),
            (
                json!({"searxng_auth_header": "Proxy-Authorization"}),
                "web_search.searxng_auth_header",
            ),
            (
                json!({"searxng_auth_header": "Bad Header"}),
                "web_search.searxng_auth_header",
            ),
            (json!({"language": "en_US!"}), "web_search.language"),
            (json!({"provider": "searxng"}), "web_search.searxng_url"),
            (json!({"colour": 1}), "web_search.colour"),
        ] {
            let e = now.patched("web_search", &patch(body.clone())).unwrap_err();
            assert_eq!(e.extra["field"], field, "{body}");
        }
        let secret = format!("s3cret{}", "\n");
        let e = now
            .patched("web_search", &patch(json!({"searxng_auth_value": secret})))
            .unwrap_err();
        assert!(!e.message.contains("s3cret"), "{}", e.message);
    }
}

#[cfg(test)]
mod from_config {
    use super::*;

    /// A box set up by config with its SearXNG keeps it until the box's
    /// settings are set: nothing silently goes back to DuckDuckGo.
    #[test]
    fn the_configs_engine_holds_until_the_settings_are_set() {
        let mut config = crate::config::ChatdConfig::default();
        assert_eq!(
            SearchSettings::from_config(&config).provider,
            Provider::DuckDuckGo
        );
        config.search_engine = "searxng".into();
        config.search_url = "https://searx.example.org/search".into();
        config.web_timeout_s = 60;
        let settings = SearchSettings::from_config(&config);
        assert_eq!(settings.provider, Provider::Searxng);
        assert_eq!(settings.searxng_url, "https://searx.example.org/search");
        assert_eq!(settings.timeout_s, 30);
        assert_eq!(settings.max_results, DEFAULT_RESULTS);
    }
}
