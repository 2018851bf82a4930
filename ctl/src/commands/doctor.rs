//! `tandem doctor`: each line a check, with the fix when it fails.

use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use crate::daemons;
use crate::settings::Settings;

pub const LONG_ABOUT: &str = "\
Checks what tandem needs on this box, one line each, with the fix for each
failure: the engine, the secrets file, file modes, the units, lingering, the
container runtime, chatd's front when one is set (and that a front on the
network asks for the admin token), egressd, triggerd and connectord (and
that chatd forwards to each), the connectors' key file and the egress rules. Exits 0
when every check passes.

Example:
  tandem doctor";

pub async fn exec() -> anyhow::Result<ExitCode> {
    let settings = Settings::load()?;
    let mut failed = 0;
    let mut check = |ok: bool, what: String, fix: &str| {
        if ok {
            println!("ok    {what}");
        } else {
            failed += 1;
            println!("FAIL  {what}\n      fix: {fix}");
        }
    };
    let client = reqwest::Client::new();
    let engine = settings.engine_url().to_string();
    let models = daemons::engine_answers(&client, &engine, Duration::from_secs(2)).await;
    check(
        models.is_some(),
        format!("engine answers at {engine}"),
        "start the box's engine; tandem never starts it (or set QSE_ENGINE_URL)",
    );
    let chatd = daemons::by_name("chatd")
        .map(|d| settings.daemon_url(d))
        .unwrap_or_default();
    let up = daemons::health(&client, &chatd, Duration::from_secs(1))
        .await
        .is_some();
    check(
        up,
        format!("chatd answers at {chatd}"),
        "tandem chat start (and `tandem chat logs` when it will not)",
    );

    let secrets = &settings.chatd.secrets;
    let has_key = std::fs::read_to_string(secrets).is_ok_and(|t| {
        t.lines()
            .any(|l| l.trim_start().starts_with("QSE_FORWARD_KEY="))
    });
    check(
        has_key,
        format!("secrets file {} holds QSE_FORWARD_KEY", secrets.display()),
        "ops/make-secrets.sh (chatd meanwhile uses forward.key in its data folder)",
    );
    if secrets.exists() {
        let mode = tandem_shared::fsmode::mode_of(secrets).unwrap_or(0o777);
        check(
            mode & 0o077 == 0,
            format!("secrets file mode {mode:o} (want 600)"),
            &format!("chmod 600 {}", secrets.display()),
        );
    }
    if let Ok(Some(front)) = settings.chatd.front_addr() {
        let local = if front.ip().is_unspecified() {
            std::net::SocketAddr::from(([127, 0, 0, 1], front.port()))
        } else {
            front
        };
        // The front itself says whether it asks for the admin token.
        let auth = match client
            .get(format!("http://{local}/v1/chat-app/session"))
            .timeout(Duration::from_secs(1))
            .send()
            .await
        {
            Ok(answer) => answer.json::<serde_json::Value>().await.ok(),
            Err(_) => None,
        };
        check(
            auth.is_some() || !up,
            format!("chatd's front answers at {front}"),
            "tandem chat restart (the front is QSE_CHAT_FRONT in run/local.env); `tandem chat logs` says why it did not bind",
        );
        let asks = match &auth {
            Some(state) => state["auth"] == "token",
            None => crate::front::admin_token_set(&settings),
        };
        check(
            asks || front.ip().is_loopback(),
            format!("the front on {front} asks for the admin token"),
            "ops/make-secrets.sh adds QSE_ADMIN_TOKEN, then tandem chat restart: without it anyone who reaches the front uses these chats",
        );
    }
    let data = &settings.chatd.data_dir;
    if data.exists() {
        let mode = tandem_shared::fsmode::mode_of(data).unwrap_or(0o777);
        check(
            mode == 0o700,
            format!("data folder {} mode {mode:o} (want 700)", data.display()),
            &format!("chmod 700 {}", data.display()),
        );
        let db = data.join("chat.sqlite3");
        if db.exists() {
            let mode = tandem_shared::fsmode::mode_of(&db).unwrap_or(0o777);
            check(
                mode == 0o600,
                format!("database mode {mode:o} (want 600)"),
                &format!("chmod 600 {}", db.display()),
            );
        }
    }
    let unit = tandem_shared::secrets::home().join(".config/systemd/user/tandem-chatd.service");
    check(
        unit.exists(),
        format!("unit installed at {}", unit.display()),
        "ops/install.sh (or run without systemd: tandem chat start)",
    );
    let user = std::env::var("USER").unwrap_or_default();
    let linger = Command::new("loginctl")
        .args(["show-user", &user, "-p", "Linger", "--value"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "yes");
    check(
        linger,
        "lingering on (user units run without a login)".into(),
        "loginctl enable-linger $USER",
    );
    let socket =
        std::env::var("QSE_SANDBOX_SOCKET").unwrap_or_else(|_| "/var/run/docker.sock".into());
    check(std::path::Path::new(&socket).exists(), format!("container runtime socket {socket}"), "install podman and runc, then `tandem sandbox build` (docs/sandbox.md); without a runtime, a chat's bash runs on this machine through hostexecd (host_exec), or is not offered");
    let egressd = daemons::by_name("egressd")
        .map(|d| settings.daemon_url(d))
        .unwrap_or_default();
    let up = daemons::health(&client, &egressd, Duration::from_secs(1))
        .await
        .is_some();
    check(
        up,
        format!("egressd answers at {egressd}"),
        "tandem egress start (and `tandem egress logs` when it will not)",
    );
    let triggerd = daemons::by_name("triggerd")
        .map(|d| settings.daemon_url(d))
        .unwrap_or_default();
    let up = daemons::health(&client, &triggerd, Duration::from_secs(1))
        .await
        .is_some();
    check(
        up,
        format!("triggerd answers at {triggerd}"),
        "tandem triggers start (and `tandem triggers logs` when it will not)",
    );
    // chatd forwards /v1/chat-app/triggers* to the socket it is told of, and
    // a trigger's chat works in chatd's shared workspace: both must be triggerd's.
    let (forwards_to, listens_on) = (&settings.chatd.triggers_socket, &settings.triggers.socket);
    check(
        forwards_to == listens_on,
        format!(
            "chatd forwards triggers to {}, where triggerd listens",
            forwards_to.display()
        ),
        &format!(
            "set [chatd] triggers_socket and [triggers] socket to one path (triggerd listens on {})",
            listens_on.display()
        ),
    );
    let (chat_workspace, trigger_workspace) = (
        &settings.chatd.shared_workspace,
        &settings.triggers.workspace,
    );
    check(
        chat_workspace == trigger_workspace,
        format!(
            "chatd's shared workspace {} is the one triggerd watches",
            chat_workspace.display()
        ),
        &format!(
            "set [chatd] shared_workspace and [triggers] workspace to one folder (triggerd watches {})",
            trigger_workspace.display()
        ),
    );
    let connectord = daemons::by_name("connectord")
        .map(|d| settings.daemon_url(d))
        .unwrap_or_default();
    let up = daemons::health(&client, &connectord, Duration::from_secs(1))
        .await
        .is_some();
    check(
        up,
        format!("connectord answers at {connectord}"),
        "tandem connectors start (and `tandem connectors logs` when it will not)",
    );
    // chatd forwards /v1/chat-app/connectors* to the socket it is told of.
    let (forwards_to, listens_on) = (
        &settings.chatd.connectors_socket,
        &settings.connectors.socket,
    );
    check(
        forwards_to == listens_on,
        format!(
            "chatd forwards connectors to {}, where connectord listens",
            forwards_to.display()
        ),
        &format!(
            "set [chatd] connectors_socket and [connectors] socket to one path (connectord listens on {})",
            listens_on.display()
        ),
    );
    // The key that seals the bot tokens: connectord refuses one others can read.
    let key = settings.connectors.data_dir.join("connectors.key");
    if key.exists() {
        let mode = tandem_shared::fsmode::mode_of(&key).unwrap_or(0o777);
        check(
            mode & 0o077 == 0,
            format!("connectors key {} mode {mode:o} (want 600)", key.display()),
            &format!("chmod 600 {}", key.display()),
        );
    }
    let nft = Command::new("nft")
        .args(["list", "table", "inet", egressd::nft::TABLE])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    check(
        nft,
        format!(
            "nftables table inet {} (the sandbox user reaches only egressd)",
            egressd::nft::TABLE
        ),
        "sudo sandbox/install.sh (makes the sandbox user, then tandem egress rules --apply)",
    );
    println!();
    if failed == 0 {
        println!("all checks passed");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{failed} check(s) failed");
        Ok(ExitCode::FAILURE)
    }
}
