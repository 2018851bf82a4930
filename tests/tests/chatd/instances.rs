//! One daemon per data folder: a second chatd, egressd or hostexecd on the
//! same data exits non-zero at once with one line naming the pid that holds
//! the lock, and the first goes on answering with nothing of the second
//! written (its socket, its port, the lock's pid are the first one's).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use tandem_tests::harness::{write_private, Chatd, Egressd, Ended, Hostexecd, Sim, FORWARD_KEY};

/// How long a refused second instance may take to end (it ends at start).
const REFUSED_WITHIN: Duration = Duration::from_secs(10);

/// The second ended with a failure and said, in one line, which pid holds
/// which lock; the lock file still names the first.
fn assert_refused(second: &Ended, daemon: &str, lock: &Path, first_pid: u32) {
    assert!(
        !second.status.success(),
        "a second {daemon} ended with {}:\n{}",
        second.status,
        second.stderr
    );
    let line = format!(
        "{daemon}: another {daemon} (pid {first_pid}) holds {}: one {daemon} per data folder",
        lock.display()
    );
    assert!(
        second.stderr.lines().any(|l| l == line),
        "a second {daemon} did not say {line:?}; its stderr:\n{}",
        second.stderr
    );
    assert_eq!(
        std::fs::read_to_string(lock).unwrap().trim(),
        first_pid.to_string(),
        "{} no longer names the first {daemon}",
        lock.display()
    );
}

/// The socket's inode: another one there means a second process bound it.
fn inode(socket: &Path) -> u64 {
    std::fs::metadata(socket)
        .unwrap_or_else(|e| panic!("{}: {e}", socket.display()))
        .ino()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_chatd_on_the_same_data_is_refused() {
    let sim = Sim::start(&[]).unwrap();
    let chatd = Chatd::start(&sim.url(), &[]).await.unwrap();
    let first_pid = chatd.pid().unwrap();
    let chat = chatd.client().create_chat().await.unwrap();

    let second = chatd.run_second(REFUSED_WITHIN).await.unwrap();

    let lock = chatd.data_dir().join("chatd.lock");
    assert_refused(&second, "chatd", &lock, first_pid);
    // It stopped before its own port was bound (another one than the
    // first's, so only the data could stop it) and before it logged serving.
    assert!(
        !second.stderr.contains("chatd serving"),
        "the second chatd got as far as serving:\n{}",
        second.stderr
    );
    let health = reqwest::get(format!("{}/health", chatd.url()))
        .await
        .unwrap();
    assert!(health.status().is_success(), "{}", health.status());
    let snapshot = chatd.client().snapshot(&chat).await.unwrap();
    assert!(snapshot["seq"].as_i64().is_some(), "{snapshot}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_egressd_on_the_same_data_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let chat_data = dir.path().join("chat");
    std::fs::create_dir_all(&chat_data).unwrap();
    let secrets = dir.path().join("secrets.env");
    write_private(&secrets, &format!("QSE_FORWARD_KEY={FORWARD_KEY}\n")).unwrap();
    let egressd = Egressd::start(&chat_data, &secrets, "").await.unwrap();
    let first_pid = egressd.pid().unwrap();
    let (status, _) = egressd
        .call(
            "PUT",
            "/chats/c_first/egress",
            Some(serde_json::json!({"preset": "off"})),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    let chat_socket = chat_data.join("egress/c_first/proxy.sock");
    let api_before = inode(&egressd.socket);
    let chat_before = inode(&chat_socket);

    let second = egressd.run_second(REFUSED_WITHIN).await.unwrap();

    let lock = egressd.dir.path().join("data/egressd.lock");
    assert_refused(&second, "egressd", &lock, first_pid);
    assert_eq!(
        inode(&egressd.socket),
        api_before,
        "the API socket was replaced"
    );
    assert_eq!(
        inode(&chat_socket),
        chat_before,
        "the chat's socket was replaced"
    );
    let (status, health) = egressd.call("GET", "/health", None).await.unwrap();
    assert_eq!(status, 200, "{health}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_hostexecd_on_the_same_data_is_refused() {
    let hx = Hostexecd::start("").await.unwrap();
    let first_pid = hx.pid().unwrap();
    let before = inode(&hx.socket);

    let second = hx.run_second(REFUSED_WITHIN).await.unwrap();

    let lock = hx.dir.path().join("data/hostexecd.lock");
    assert_refused(&second, "hostexecd", &lock, first_pid);
    assert_eq!(inode(&hx.socket), before, "the API socket was replaced");
    let (status, health) = hx.call("GET", "/health", None).await.unwrap();
    assert_eq!(status, 200, "{health}");
}
