//! The sandbox manager without a runtime: whether a container found fits
//! (binds, settings), the folders a chat binds, the cgroup files found.

use std::path::Path;

use serde_json::{json, Value};

use super::cgroup::cgroup_files_of;
use super::lockdown::Fit;
use super::*;

/// Sandboxes for a chatd with `data` and the shared folder `shared`,
/// `c_shared` a shared chat (no runtime is asked).
fn sandboxes(data: &Path, shared: &Path) -> Sandboxes {
    let config = ChatdConfig {
        data_dir: data.to_path_buf(),
        shared_workspace: shared.to_path_buf(),
        ..ChatdConfig::default()
    };
    let folders = crate::folders::Folders::from_config(&config);
    folders.made("c_shared", "shared");
    folders.made("c_own", "own");
    Sandboxes::new(&config, Shutdown::new().1, folders).unwrap()
}

/// What a runtime's inspect says of a container made from `spec`, as
/// podman's compat API answers: `Binds` with options added, `Mounts`
/// one entry a bind, tmpfs not among them.
fn inspected(spec: &Value, image_id: &str) -> Value {
    let binds = spec["HostConfig"]["Binds"].as_array().unwrap();
    let mounts: Vec<Value> = binds
        .iter()
        .map(|b| {
            let parts: Vec<&str> = b.as_str().unwrap().split(':').collect();
            json!({"Type": "bind", "Source": parts[0], "Destination": parts[1],
                   "Mode": "", "RW": parts[2] == "rw", "Propagation": "rprivate"})
        })
        .collect();
    let mut host = spec["HostConfig"].clone();
    host["Binds"] = binds
        .iter()
        .map(|b| json!(format!("{},rprivate,rbind", b.as_str().unwrap())))
        .collect();
    json!({
        "Image": format!("sha256:{image_id}"),
        "Config": {"User": spec["User"], "Labels": spec["Labels"]},
        "HostConfig": host,
        "Mounts": mounts,
    })
}

/// A container is used as it is only when its folders are bound as now:
/// a shared chat's container made under another `shared_workspace` (or
/// one with a folder more, fewer or of another mode) is made again.
#[test]
fn a_container_made_under_other_binds_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("chat");
    let here = sandboxes(&data, &dir.path().join("workspace"));
    let fit = Fit {
        limit: here.limit(),
        image_id: "ab12".into(),
    };
    for chat in ["c_shared", "c_own"] {
        let binds = here.binds_of(chat);
        let found = inspected(&here.spec(chat, fit.limit, &binds), "ab12");
        assert!(here.fits(&found, &fit, &binds), "{chat}: {found}");
    }
    let binds = here.binds_of("c_shared");
    assert_eq!(binds[0].source, dir.path().join("workspace"));
    let made_here = inspected(&here.spec("c_shared", fit.limit, &binds), "ab12");

    // shared_workspace changed: the shared chat's container does not fit;
    // an own chat's is unchanged.
    let moved = sandboxes(&data, &dir.path().join("elsewhere"));
    let now = moved.binds_of("c_shared");
    assert_eq!(now[0].source, dir.path().join("elsewhere"));
    assert!(!moved.fits(&made_here, &fit, &now));
    let own = moved.binds_of("c_own");
    let own_found = inspected(
        &here.spec("c_own", fit.limit, &here.binds_of("c_own")),
        "ab12",
    );
    assert!(moved.fits(&own_found, &fit, &own));

    // A bind of another mode, one more, one fewer, no Mounts at all.
    let mut ro = made_here.clone();
    ro["Mounts"][0]["RW"] = json!(false);
    assert!(!here.fits(&ro, &fit, &binds));
    let mut more = made_here.clone();
    more["Mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"Type": "bind", "Source": "/etc", "Destination": "/host-etc", "RW": false}));
    assert!(!here.fits(&more, &fit, &binds));
    let mut fewer = made_here.clone();
    fewer["Mounts"].as_array_mut().unwrap().pop();
    assert!(!here.fits(&fewer, &fit, &binds));
    let mut none = made_here.clone();
    none.as_object_mut().unwrap().remove("Mounts");
    assert!(!here.fits(&none, &fit, &binds));
    // Mounts that are not binds (a runtime's tmpfs, a volume) do not count.
    let mut tmpfs = made_here.clone();
    tmpfs["Mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"Type": "tmpfs", "Source": "", "Destination": "/tmp", "RW": true}));
    assert!(here.fits(&tmpfs, &fit, &binds));
    // The other settings still count as before.
    let mut image = made_here.clone();
    image["Image"] = json!("sha256:cd34");
    assert!(!here.fits(&image, &fit, &binds));
}

/// As root: a sandbox start hands the shared workspace itself to the
/// commands' user and leaves what is in it alone; a command hands over
/// the chat's own folders with their contents, never the shared one.
#[tokio::test]
async fn as_root_the_shared_workspace_is_handed_over_as_a_folder_only() {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("chat");
    let shared = dir.path().join("workspace");
    std::fs::create_dir_all(shared.join("notes")).unwrap();
    std::fs::write(shared.join("notes/box.txt"), "the box's").unwrap();
    let here = sandboxes(&data, &shared);
    let (uid, gid) = here.inner.user;
    assert_ne!(uid, 0);
    let owner = |p: &Path| {
        let m = std::fs::symlink_metadata(p).unwrap();
        (m.uid(), m.gid())
    };

    let binds = here.prepare_folders("c_shared").unwrap();
    assert_eq!(binds[0].source, shared);
    assert_eq!(owner(&shared), (uid, gid), "the folder itself");
    assert_eq!(owner(&shared.join("notes")), (0, 0), "its contents stay");
    assert_eq!(owner(&shared.join("notes/box.txt")), (0, 0));
    let home = data.join("homes/c_shared");
    assert_eq!(owner(&home), (uid, gid));

    // chatd's tools wrote (as root) in the home and the shared folder.
    std::fs::write(home.join("by-chatd.txt"), "x").unwrap();
    std::fs::write(shared.join("by-chatd.txt"), "x").unwrap();
    here.hand_over_folders("c_shared").await;
    assert_eq!(owner(&home.join("by-chatd.txt")), (uid, gid));
    assert_eq!(owner(&shared.join("by-chatd.txt")), (0, 0));
    assert_eq!(owner(&shared.join("notes/box.txt")), (0, 0));

    // An own chat's workspace is its own: handed over whole.
    here.prepare_folders("c_own").unwrap();
    let own = data.join("workspaces/c_own");
    std::fs::write(own.join("by-chatd.txt"), "x").unwrap();
    here.hand_over_folders("c_own").await;
    assert_eq!(owner(&own.join("by-chatd.txt")), (uid, gid));
}

/// A shared chat's own folders are its home and egress folder: the
/// shared workspace is never walked and handed over as the chat's.
#[test]
fn a_shared_chat_s_own_folders_leave_out_the_shared_workspace() {
    let data = Path::new("/data");
    let here = sandboxes(data, Path::new("/box/workspace"));
    assert_eq!(
        here.own_folders_of("c_shared"),
        [data.join("homes/c_shared"), data.join("egress/c_shared")]
    );
    assert_eq!(
        here.own_folders_of("c_own"),
        [
            data.join("workspaces/c_own"),
            data.join("homes/c_own"),
            data.join("egress/c_own")
        ]
    );
}

#[test]
fn the_cgroup_files_are_found_for_either_cgroup_version() {
    let v1 = "9:name=systemd:/libpod_parent/libpod-ab\n8:pids:/libpod_parent/libpod-ab\n\
              4:memory:/libpod_parent/libpod-ab\n0::/x\n";
    let files = cgroup_files_of(v1).unwrap();
    assert_eq!(
        files.oom,
        PathBuf::from("/sys/fs/cgroup/memory/libpod_parent/libpod-ab/memory.oom_control")
    );
    assert_eq!(
        files.procs,
        PathBuf::from("/sys/fs/cgroup/pids/libpod_parent/libpod-ab/cgroup.procs")
    );
    let v2 = "0::/system.slice/docker-ab.scope\n";
    let files = cgroup_files_of(v2).unwrap();
    assert_eq!(
        files.oom,
        PathBuf::from("/sys/fs/cgroup/system.slice/docker-ab.scope/memory.events")
    );
    assert_eq!(
        files.procs,
        PathBuf::from("/sys/fs/cgroup/system.slice/docker-ab.scope/cgroup.procs")
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memory.oom_control");
    std::fs::write(&file, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n").unwrap();
    assert_eq!(read_oom_count(&file), Some(3));
}
