//! The create body that locks a sandbox down whatever the runtime's defaults,
//! the folders it binds, and whether a container found was made that way
//! (settings, image, binds); one that was not is made again.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::{SandboxError, Sandboxes, CHAT_LABEL, DATA_LABEL};

/// Settings in force differ from the container's: it is made again.
pub(super) struct Fit {
    pub(super) limit: u64,
    pub(super) image_id: String,
}

/// Where a saved agent's folder is inside its chats' sandboxes.
pub(super) const AGENT_FOLDER: &str = "/workspace/folder";

/// One folder bound into a sandbox: this side's path, where it is inside,
/// and whether the sandbox may write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bind {
    pub(super) source: PathBuf,
    pub(super) inside: &'static str,
    pub(super) writable: bool,
}

impl Bind {
    /// As the create body's `Binds` says it.
    pub(super) fn spec(&self) -> String {
        let mode = if self.writable { "rw" } else { "ro" };
        format!("{}:{}:{mode}", self.source.display(), self.inside)
    }
}

/// Whether a container's bind mounts are exactly `binds`: read from its
/// `Mounts` (source, destination, RW), since runtimes add their own options
/// to `HostConfig.Binds` (podman: `…:rw,rprivate,rbind`). A container made
/// with another workspace folder (`shared_workspace` changed) or another
/// data folder does not match.
fn binds_match(found: &Value, binds: &[Bind]) -> bool {
    let Some(mounts) = found["Mounts"].as_array() else {
        return false;
    };
    let mut have: Vec<(String, String, bool)> = mounts
        .iter()
        .filter(|m| m["Type"].as_str() == Some("bind"))
        .map(|m| {
            (
                m["Source"].as_str().unwrap_or("").to_string(),
                m["Destination"].as_str().unwrap_or("").to_string(),
                m["RW"].as_bool().unwrap_or(true),
            )
        })
        .collect();
    let mut want: Vec<(String, String, bool)> = binds
        .iter()
        .map(|b| {
            (
                b.source.to_string_lossy().into_owned(),
                b.inside.to_string(),
                b.writable,
            )
        })
        .collect();
    have.sort();
    want.sort();
    have == want
}

impl Sandboxes {
    /// What a container must have been made with to be used as it is.
    pub(super) async fn fit(&self) -> Result<Fit, SandboxError> {
        let image = &self.inner.settings.image;
        let found = self.inner.docker.image(image).await?.ok_or_else(|| {
            SandboxError::Unavailable(format!(
                "the image {image} is not there: `tandem sandbox build` makes it"
            ))
        })?;
        Ok(Fit {
            limit: self.limit(),
            image_id: found["Id"].as_str().unwrap_or("").to_string(),
        })
    }

    /// Whether an existing container was made under the current settings,
    /// from the current image and with the chat's folders bound as now.
    pub(super) fn fits(&self, found: &Value, fit: &Fit, binds: &[Bind]) -> bool {
        let host = &found["HostConfig"];
        let id = |v: &Value| {
            v.as_str()
                .unwrap_or("")
                .trim_start_matches("sha256:")
                .to_string()
        };
        host["Memory"].as_u64() == Some(fit.limit)
            && host["PidsLimit"].as_u64() == Some(u64::from(self.inner.settings.pids))
            && host["NanoCpus"].as_u64() == Some((self.inner.cpus * 1e9) as u64)
            && host["ReadonlyRootfs"].as_bool() == Some(true)
            && found["Config"]["User"].as_str() == Some(self.user().as_str())
            && found["Config"]["Labels"][DATA_LABEL].as_str()
                == Some(self.inner.data_dir.to_string_lossy().as_ref())
            && !fit.image_id.is_empty()
            && id(&found["Image"]) == id(&json!(fit.image_id))
            && binds_match(found, binds)
    }

    /// The create body: everything locked down, whatever the runtime's defaults.
    pub(super) fn spec(&self, chat: &str, limit: u64, binds: &[Bind]) -> Value {
        let binds: Vec<String> = binds.iter().map(Bind::spec).collect();
        json!({
            "Image": self.inner.settings.image,
            "User": self.user(),
            "WorkingDir": "/workspace",
            "Env": ["HOME=/home/sandbox"],
            "Labels": {
                CHAT_LABEL: chat,
                DATA_LABEL: self.inner.data_dir.to_string_lossy(),
            },
            "HostConfig": {
                "NetworkMode": "none",
                "ReadonlyRootfs": true,
                "CapDrop": ["ALL"],
                "CapAdd": [],
                "SecurityOpt": ["no-new-privileges"],
                "Privileged": false,
                "Memory": limit,
                // No swap past the limit: a command over it is killed.
                "MemorySwap": limit,
                "NanoCpus": (self.inner.cpus * 1e9) as u64,
                "PidsLimit": self.inner.settings.pids,
                "Devices": [],
                "Tmpfs": {"/tmp": "rw,nosuid,nodev,size=256m,mode=1777"},
                "Binds": binds,
                "RestartPolicy": {"Name": "no"},
                "IpcMode": "private",
            }
        })
    }

    /// The chat's folders bound into its sandbox: the workspace (its own,
    /// or the box's shared folder), the home and the egress folder, and the
    /// folder its saved agent keeps it to, at `/workspace/folder` (read
    /// only when the agent may only read it).
    pub(super) fn binds_of(&self, chat: &str) -> Vec<Bind> {
        let mut binds = vec![
            Bind {
                source: self.inner.folders.workspace(chat),
                inside: "/workspace",
                writable: true,
            },
            Bind {
                source: self.inner.data_dir.join("homes").join(chat),
                inside: "/home/sandbox",
                writable: true,
            },
            Bind {
                source: self.inner.data_dir.join("egress").join(chat),
                inside: "/run/tandem-egress",
                writable: false,
            },
        ];
        if let Some(mount) = self.inner.folders.reach(chat).mount() {
            binds.push(Bind {
                source: mount.path.clone(),
                inside: AGENT_FOLDER,
                writable: !mount.read_only,
            });
        }
        binds
    }
}
