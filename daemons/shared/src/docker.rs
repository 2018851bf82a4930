//! A client of the Docker Engine API over its unix socket: the part chatd's
//! sandboxes and `tandem sandbox build` use. podman's API service speaks the
//! same routes (`podman system service`), so one client serves both; the
//! calls are pinned to API version 1.41, which both accept.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

/// The API version every call names.
const API: &str = "/v1.41";

/// The most a call that does not stream may take: a runtime that hangs
/// must not hold a start, a stop or the capabilities route.
const CALL_LIMIT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// Nothing answers on the socket (missing, refused, or timed out).
    #[error("no container runtime answers at {0}")]
    Unreachable(String),
    /// The runtime answered with an error.
    #[error("the container runtime refused ({status}): {message}")]
    Api { status: u16, message: String },
    /// The named image, container or exec does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The runtime's answer was not what the API promises.
    #[error("the container runtime's answer could not be read: {0}")]
    Protocol(String),
}

pub type Result<T> = std::result::Result<T, DockerError>;

/// Which runtime answers, as `/version` says.
#[derive(Debug, Clone, PartialEq)]
pub struct Runtime {
    /// `podman` or `docker`.
    pub name: String,
    pub version: String,
}

/// A container as the list route gives it.
#[derive(Debug, Clone)]
pub struct Summary {
    pub id: String,
    /// Without the leading `/` docker puts on names.
    pub name: String,
    pub state: String,
    pub labels: std::collections::BTreeMap<String, String>,
}

#[derive(Clone)]
pub struct Docker {
    client: reqwest::Client,
    socket: PathBuf,
}

impl Docker {
    pub fn new(socket: &Path) -> Result<Docker> {
        let client = reqwest::Client::builder()
            .unix_socket(socket.to_path_buf())
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| DockerError::Protocol(e.to_string()))?;
        Ok(Docker {
            client,
            socket: socket.to_path_buf(),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn url(path: &str) -> String {
        // The host part is ignored on a unix socket.
        format!("http://docker{API}{path}")
    }

    fn unreachable(&self, err: reqwest::Error) -> DockerError {
        if err.is_connect() || err.is_timeout() {
            DockerError::Unreachable(self.socket.display().to_string())
        } else {
            DockerError::Protocol(err.to_string())
        }
    }

    /// Sends a request and turns an error status into `DockerError`; `what`
    /// names the object for a 404.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
    ) -> Result<reqwest::Response> {
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        if status.is_success() || status == reqwest::StatusCode::NOT_MODIFIED {
            return Ok(response);
        }
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let message = body["message"]
            .as_str()
            .unwrap_or("no reason given")
            .to_string();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(DockerError::NotFound(format!("{what}: {message}")));
        }
        Err(DockerError::Api {
            status: status.as_u16(),
            message,
        })
    }

    async fn json(&self, request: reqwest::RequestBuilder, what: &str) -> Result<Value> {
        let response = self.send(request, what).await?;
        response
            .json()
            .await
            .map_err(|e| DockerError::Protocol(e.to_string()))
    }

    /// Which runtime answers (bounded at 3 s: a socket nobody serves must not
    /// hold a caller).
    pub async fn version(&self) -> Result<Runtime> {
        let request = self
            .client
            .get(Self::url("/version"))
            .timeout(Duration::from_secs(3));
        let value = self.json(request, "version").await?;
        let podman = value["Components"]
            .as_array()
            .map(|c| {
                c.iter()
                    .any(|c| c["Name"].as_str() == Some("Podman Engine"))
            })
            .unwrap_or(false);
        Ok(Runtime {
            name: if podman { "podman" } else { "docker" }.into(),
            version: value["Version"].as_str().unwrap_or("").to_string(),
        })
    }

    /// An image's inspection, `None` when it is not there.
    pub async fn image(&self, reference: &str) -> Result<Option<Value>> {
        let request = self
            .client
            .get(Self::url(&format!("/images/{reference}/json")))
            .timeout(CALL_LIMIT);
        match self.json(request, reference).await {
            Ok(v) => Ok(Some(v)),
            Err(DockerError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Imports a root file system tar as image `reference` (`name:tag`;
    /// podman reads the tag only from `repo`), with Dockerfile-style
    /// `changes` (`USER 1000`, `CMD [...]`, `ENV K=V`). Answers the image id.
    pub async fn import_image(
        &self,
        tar: reqwest::Body,
        reference: &str,
        changes: &[String],
    ) -> Result<String> {
        let mut query: Vec<(&str, &str)> = vec![("fromSrc", "-"), ("repo", reference)];
        for change in changes {
            query.push(("changes", change));
        }
        let request = self
            .client
            .post(Self::url("/images/create"))
            .query(&query)
            .header("Content-Type", "application/x-tar")
            .body(tar);
        let response = self.send(request, reference).await?;
        let text = response
            .text()
            .await
            .map_err(|e| DockerError::Protocol(e.to_string()))?;
        // A stream of JSON objects; an `error` in any of them is the failure.
        for line in serde_json::Deserializer::from_str(&text).into_iter::<Value>() {
            let line = line.map_err(|e| DockerError::Protocol(e.to_string()))?;
            if let Some(error) = line["error"].as_str() {
                return Err(DockerError::Api {
                    status: 500,
                    message: error.to_string(),
                });
            }
        }
        let image = self
            .image(reference)
            .await?
            .ok_or_else(|| DockerError::Protocol(format!("{reference} missing after import")))?;
        Ok(image["Id"].as_str().unwrap_or("").to_string())
    }

    /// A container's inspection, `None` when it is not there.
    pub async fn container(&self, name: &str) -> Result<Option<Value>> {
        let request = self
            .client
            .get(Self::url(&format!("/containers/{name}/json")))
            .timeout(CALL_LIMIT);
        match self.json(request, name).await {
            Ok(v) => Ok(Some(v)),
            Err(DockerError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates container `name` from `spec` (the API's create body).
    pub async fn create(&self, name: &str, spec: &Value) -> Result<String> {
        let request = self
            .client
            .post(Self::url("/containers/create"))
            .query(&[("name", name)])
            .timeout(CALL_LIMIT)
            .json(spec);
        let value = self.json(request, name).await?;
        value["Id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| DockerError::Protocol("create answered no Id".into()))
    }

    /// Starts a container (started already is fine).
    pub async fn start(&self, name: &str) -> Result<()> {
        let request = self
            .client
            .post(Self::url(&format!("/containers/{name}/start")))
            .timeout(CALL_LIMIT);
        self.send(request, name).await.map(drop)
    }

    /// Stops a container, killing it after `grace_s` (stopped already is fine).
    pub async fn stop(&self, name: &str, grace_s: u32) -> Result<()> {
        let request = self
            .client
            .post(Self::url(&format!("/containers/{name}/stop")))
            .query(&[("t", grace_s.to_string())])
            .timeout(CALL_LIMIT + Duration::from_secs(u64::from(grace_s)));
        self.send(request, name).await.map(drop)
    }

    /// Removes a container, running or not, with its anonymous volumes;
    /// `false` when there was none.
    pub async fn remove(&self, name: &str) -> Result<bool> {
        let request = self
            .client
            .delete(Self::url(&format!("/containers/{name}")))
            .query(&[("force", "1"), ("v", "1")])
            .timeout(CALL_LIMIT);
        match self.send(request, name).await {
            Ok(_) => Ok(true),
            Err(DockerError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every container (running or not) carrying label `label`.
    pub async fn list_labelled(&self, label: &str) -> Result<Vec<Summary>> {
        let filters = json!({"label": [label]}).to_string();
        let request = self
            .client
            .get(Self::url("/containers/json"))
            .query(&[("all", "1"), ("filters", filters.as_str())])
            .timeout(CALL_LIMIT);
        let value = self.json(request, "containers").await?;
        let list = value
            .as_array()
            .ok_or_else(|| DockerError::Protocol("the container list is not a list".into()))?;
        Ok(list
            .iter()
            .map(|c| Summary {
                id: c["Id"].as_str().unwrap_or("").to_string(),
                name: c["Names"][0]
                    .as_str()
                    .unwrap_or("")
                    .trim_start_matches('/')
                    .to_string(),
                state: c["State"].as_str().unwrap_or("").to_string(),
                labels: serde_json::from_value(c["Labels"].clone()).unwrap_or_default(),
            })
            .collect())
    }

    /// Creates an exec in a running container; answers its id.
    pub async fn exec_create(&self, container: &str, spec: &Value) -> Result<String> {
        let request = self
            .client
            .post(Self::url(&format!("/containers/{container}/exec")))
            .timeout(CALL_LIMIT)
            .json(spec);
        let value = self.json(request, container).await?;
        value["Id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| DockerError::Protocol("exec create answered no Id".into()))
    }

    /// Starts an exec attached: the answer's body is the multiplexed output
    /// stream (read it with `Demux`), which ends when the process does.
    pub async fn exec_start(&self, id: &str) -> Result<reqwest::Response> {
        let request = self
            .client
            .post(Self::url(&format!("/exec/{id}/start")))
            .json(&json!({"Detach": false, "Tty": false}));
        self.send(request, id).await
    }

    /// Starts an exec made with `AttachStdin` and takes the connection over
    /// (HTTP/1.1 upgrade, as `docker exec -i` does): what is written goes
    /// to the process's stdin, what is read is the multiplexed output
    /// (`Demux`); dropping it closes the stdin.
    pub async fn exec_attach(&self, id: &str) -> Result<reqwest::Upgraded> {
        let request = self
            .client
            .post(Self::url(&format!("/exec/{id}/start")))
            .header(reqwest::header::CONNECTION, "Upgrade")
            .header(reqwest::header::UPGRADE, "tcp")
            .json(&json!({"Detach": false, "Tty": false}));
        // Bounded here, not with the request's timeout, which could reach
        // past the upgrade into the stream.
        let response = tokio::time::timeout(CALL_LIMIT, request.send())
            .await
            .map_err(|_| DockerError::Unreachable(self.socket.display().to_string()))?
            .map_err(|e| self.unreachable(e))?;
        if response.status() != reqwest::StatusCode::SWITCHING_PROTOCOLS {
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let message = body["message"].as_str().unwrap_or("no reason given");
            return Err(DockerError::Api {
                status,
                message: message.to_string(),
            });
        }
        response
            .upgrade()
            .await
            .map_err(|e| DockerError::Protocol(e.to_string()))
    }

    /// An exec's state: `Running`, `ExitCode`, `Pid`.
    pub async fn exec_inspect(&self, id: &str) -> Result<Value> {
        let request = self
            .client
            .get(Self::url(&format!("/exec/{id}/json")))
            .timeout(CALL_LIMIT);
        self.json(request, id).await
    }

    /// Runs `cmd` in `container` to its end and answers (exit code, stdout
    /// and stderr together), bounded by `limit` seconds; for short helper
    /// commands, not for a person's.
    pub async fn exec_output(
        &self,
        container: &str,
        cmd: &[&str],
        user: &str,
        limit: Duration,
    ) -> Result<(i64, Vec<u8>)> {
        let work = async {
            let spec =
                json!({"Cmd": cmd, "AttachStdout": true, "AttachStderr": true, "User": user});
            let id = self.exec_create(container, &spec).await?;
            let mut response = self.exec_start(&id).await?;
            let mut demux = Demux::default();
            let mut out = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| DockerError::Protocol(e.to_string()))?
            {
                for (_, bytes) in demux.push(&chunk) {
                    if out.len() < 1 << 20 {
                        out.extend_from_slice(&bytes);
                    }
                }
            }
            let state = self.exec_inspect(&id).await?;
            Ok((state["ExitCode"].as_i64().unwrap_or(-1), out))
        };
        tokio::time::timeout(limit, work)
            .await
            .map_err(|_| DockerError::Unreachable(self.socket.display().to_string()))?
    }
}

/// Splits an attached stream into its frames: an 8-byte header (stream 1
/// stdout, 2 stderr; three zero bytes; a big-endian u32 length) then the
/// bytes. Frames may arrive split across chunks.
#[derive(Default)]
pub struct Demux {
    buffer: Vec<u8>,
}

impl Demux {
    /// Takes a chunk; answers the whole frames it completes, as (stream, bytes).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<(u8, Vec<u8>)> {
        self.buffer.extend_from_slice(chunk);
        let mut frames = Vec::new();
        let mut at = 0;
        while self.buffer.len() - at >= 8 {
            let head = &self.buffer[at..at + 8];
            let len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
            if self.buffer.len() - at - 8 < len {
                break;
            }
            frames.push((head[0], self.buffer[at + 8..at + 8 + len].to_vec()));
            at += 8 + len;
        }
        self.buffer.drain(..at);
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(stream: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![stream, 0, 0, 0];
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn frames_split_anywhere_come_out_whole() {
        let mut wire = frame(1, b"hello ");
        wire.extend(frame(2, b"oops\n"));
        wire.extend(frame(1, b""));
        wire.extend(frame(1, b"world\n"));
        for cut in 0..wire.len() {
            let mut demux = Demux::default();
            let mut frames = demux.push(&wire[..cut]);
            frames.extend(demux.push(&wire[cut..]));
            let text: Vec<(u8, Vec<u8>)> = frames.into_iter().filter(|f| !f.1.is_empty()).collect();
            assert_eq!(
                text,
                vec![
                    (1, b"hello ".to_vec()),
                    (2, b"oops\n".to_vec()),
                    (1, b"world\n".to_vec())
                ],
                "cut at {cut}"
            );
        }
    }

    #[tokio::test]
    async fn a_missing_socket_is_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let docker = Docker::new(&dir.path().join("none.sock")).unwrap();
        match docker.version().await {
            Err(DockerError::Unreachable(path)) => assert!(path.ends_with("none.sock")),
            other => panic!("expected Unreachable, got {other:?}"),
        }
    }
}
