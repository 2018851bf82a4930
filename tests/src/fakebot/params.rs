//! A Bot API call's parameters, from the query, a form, JSON or multipart.

use super::*;

/// A request's parameters (JSON, a form, multipart or the query) and its
/// uploaded file, if any.
pub(super) struct Params {
    pub(super) fields: Map<String, Value>,
    pub(super) file: Option<(String, String, Bytes)>,
}

impl Params {
    pub(super) fn parse(
        headers: &HeaderMap,
        query: Option<String>,
        body: &Bytes,
    ) -> Result<Params, String> {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut params = Params {
            fields: Map::new(),
            file: None,
        };
        if let Some(query) = query {
            form_fields(&query, &mut params.fields);
        }
        if body.is_empty() {
            return Ok(params);
        }
        if content_type.starts_with("application/json") {
            match serde_json::from_slice::<Value>(body) {
                Ok(Value::Object(map)) => params.fields.extend(map),
                _ => return Err("Bad Request: can't parse JSON".into()),
            }
        } else if content_type.starts_with("multipart/form-data") {
            multipart(&content_type, body, &mut params)?;
        } else if content_type.starts_with("application/x-www-form-urlencoded") {
            form_fields(&String::from_utf8_lossy(body), &mut params.fields);
        }
        Ok(params)
    }

    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        self.fields.get(key)
    }

    /// A field as a string (numbers as their digits).
    pub(super) fn string(&self, key: &str) -> Option<String> {
        match self.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    pub(super) fn int(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// A field holding JSON (a form sends objects as JSON text).
    pub(super) fn object(&self, key: &str) -> Option<Value> {
        match self.get(key)? {
            Value::String(s) => serde_json::from_str(s).ok(),
            other => Some(other.clone()),
        }
    }
}

pub(super) fn form_fields(text: &str, fields: &mut Map<String, Value>) {
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        fields.insert(percent_decode(k), Value::String(percent_decode(v)));
    }
}

pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// multipart/form-data: text fields into `fields`, the one file (if any)
/// into `file` as (field, file name, bytes).
pub(super) fn multipart(
    content_type: &str,
    body: &[u8],
    params: &mut Params,
) -> Result<(), String> {
    let boundary = content_type
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .map(|b| b.trim_matches('"').to_string())
        .ok_or("Bad Request: no multipart boundary")?;
    let delimiter = format!("--{boundary}").into_bytes();
    let mut rest = body;
    let Some(first) = find(rest, &delimiter) else {
        return Err("Bad Request: a broken multipart body".into());
    };
    rest = &rest[first + delimiter.len()..];
    loop {
        if rest.starts_with(b"--") {
            return Ok(());
        }
        rest = rest.strip_prefix(b"\r\n").unwrap_or(rest);
        let Some(end) = find(rest, &delimiter) else {
            return Err("Bad Request: a broken multipart body".into());
        };
        let part = &rest[..end];
        let part = part.strip_suffix(b"\r\n").unwrap_or(part);
        let Some(split) = find(part, b"\r\n\r\n") else {
            return Err("Bad Request: a multipart part without headers".into());
        };
        let head = String::from_utf8_lossy(&part[..split]).into_owned();
        let content = &part[split + 4..];
        let disposition = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition"))
            .unwrap_or("");
        let name = quoted(disposition, "name=").unwrap_or_default();
        match quoted(disposition, "filename=") {
            Some(file_name) => {
                params.file = Some((name, file_name, Bytes::copy_from_slice(content)));
            }
            None => {
                params.fields.insert(
                    name,
                    Value::String(String::from_utf8_lossy(content).into_owned()),
                );
            }
        }
        rest = &rest[end + delimiter.len()..];
    }
}

pub(super) fn quoted(header: &str, key: &str) -> Option<String> {
    header.split(';').find_map(|p| {
        let p = p.trim();
        p.strip_prefix(key).map(|v| v.trim_matches('"').to_string())
    })
}

pub(super) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
