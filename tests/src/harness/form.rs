//! `multipart/form-data` bodies as a browser's `FormData` or `curl -F`
//! sends them: settings, then files, each a part; a large file generated
//! chunk by chunk as it is sent, so a test can upload 200 MiB it never holds.

use super::*;

const BOUNDARY: &str = "tandem-test-boundary-7d1f3c";

/// One part of a form.
pub enum FormPart {
    Setting(String, String),
    File {
        name: String,
        mime: String,
        bytes: Vec<u8>,
    },
}

impl FormPart {
    pub fn setting(name: &str, value: &str) -> FormPart {
        FormPart::Setting(name.into(), value.into())
    }

    pub fn file(name: &str, mime: &str, bytes: impl Into<Vec<u8>>) -> FormPart {
        FormPart::File {
            name: name.into(),
            mime: mime.into(),
            bytes: bytes.into(),
        }
    }
}

/// The `Content-Type` of the forms made here.
pub fn form_type() -> String {
    format!("multipart/form-data; boundary={BOUNDARY}")
}

/// The head of a file part (`field` `file`).
pub fn file_head(name: &str, mime: &str) -> Vec<u8> {
    format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: {mime}\r\n\r\n"
    )
    .into_bytes()
}

/// The end of a form.
pub fn form_end() -> Vec<u8> {
    format!("--{BOUNDARY}--\r\n").into_bytes()
}

/// The head of a file put written by hand (a slow or a cut upload): the
/// form of `length` bytes follows it.
pub fn put_head(key: &str, chat: &str, path: &str, length: u64) -> String {
    format!(
        "PUT /v1/chat-app/conversations/{chat}/files/content?path={path} HTTP/1.1\r\nHost: x\r\n\
         x-forward-key: {key}\r\nContent-Type: {}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n",
        form_type()
    )
}

/// A socket to chatd at `base` (`http://host:port`) with [`put_head`]
/// written; the test writes the body, all of it or not.
pub fn raw_put(
    base: &str,
    key: &str,
    chat: &str,
    path: &str,
    length: u64,
) -> anyhow::Result<std::net::TcpStream> {
    use std::io::Write;
    let url = reqwest::Url::parse(base)?;
    let host = url.host_str().context("chatd's host")?;
    let port = url.port().context("chatd's port")?;
    let mut socket = std::net::TcpStream::connect((host, port))?;
    socket.write_all(put_head(key, chat, path, length).as_bytes())?;
    Ok(socket)
}

/// The whole body of a form.
pub fn form_body(parts: &[FormPart]) -> Vec<u8> {
    let mut body = Vec::new();
    for part in parts {
        match part {
            FormPart::Setting(name, value) => {
                body.extend_from_slice(
                    format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}")
                        .as_bytes(),
                );
            }
            FormPart::File { name, mime, bytes } => {
                body.extend_from_slice(&file_head(name, mime));
                body.extend_from_slice(bytes);
            }
        }
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(&form_end());
    body
}

/// The bytes of chunk `i` of a generated file: 1 MiB, a random block
/// stamped with its number, so a misplaced chunk does not compare equal.
pub fn generated_chunk(i: u64) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ i.wrapping_mul(0xff51_afd7_ed55_8ccd);
    let mut chunk = vec![0u8; 1 << 20];
    for word in chunk.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        word.copy_from_slice(&state.to_le_bytes()[..word.len()]);
    }
    chunk[..8].copy_from_slice(&i.to_le_bytes());
    chunk
}

/// A form of one generated file of `mib` MiB, sent chunk by chunk.
pub fn streamed_form(settings: &[(&str, &str)], name: &str, mib: u64) -> reqwest::Body {
    let mut head = Vec::new();
    for (key, value) in settings {
        head.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{key}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    head.extend_from_slice(&file_head(name, "application/octet-stream"));
    let mut tail = b"\r\n".to_vec();
    tail.extend_from_slice(&form_end());
    let chunks = std::iter::once(head)
        .chain((0..mib).map(generated_chunk))
        .chain(std::iter::once(tail))
        .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::from(c)));
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

/// Whether the file at `path` is the generated file of `mib` MiB.
pub fn is_generated(path: &std::path::Path, mib: u64) -> bool {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..mib {
        if file.read_exact(&mut buf).is_err() || buf != generated_chunk(i) {
            return false;
        }
    }
    file.read(&mut buf).ok() == Some(0)
}

impl Client {
    /// Sends a form (`body`: whole or streamed) with `method` to `path`.
    pub async fn send_form(
        &self,
        method: reqwest::Method,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> anyhow::Result<Answer> {
        let response = self
            .http
            .request(method, self.api(path))
            .header("x-forward-key", self.key())
            .header("content-type", form_type())
            .body(body)
            .send()
            .await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await?;
        Ok(Answer {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            headers,
        })
    }
}
