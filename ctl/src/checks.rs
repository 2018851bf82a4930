//! The set-up checks of `tandem doctor`: a table of named checks run in
//! order, each printing one line per thing it looked at (`ok`, or `FAIL`
//! with its fix), and the count of failures at the end.

use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::daemons;
use crate::settings::Settings;

/// What the checks look at, and what they found so far.
pub struct Doctor {
    settings: Settings,
    client: reqwest::Client,
    /// Whether chatd answered: a front is only looked for when it did.
    chatd_up: bool,
    failed: usize,
}

impl Doctor {
    fn check(&mut self, ok: bool, what: String, fix: &str) {
        if ok {
            println!("ok    {what}");
        } else {
            self.failed += 1;
            println!("FAIL  {what}\n      fix: {fix}");
        }
    }
}

/// One check: it reads the settings and the box, and says what it found.
type Check = for<'a> fn(&'a mut Doctor) -> BoxFuture<'a, ()>;

/// Every check, in the order `tandem doctor` runs and prints them.
pub const CHECKS: &[(&str, Check)] = &[
    ("engine", |d| Box::pin(engine(d))),
    ("chatd", |d| Box::pin(chatd(d))),
    ("secrets", |d| Box::pin(secrets(d))),
    ("front", |d| Box::pin(front(d))),
    ("data folder", |d| Box::pin(data_folder(d))),
    ("unit", |d| Box::pin(unit(d))),
    ("lingering", |d| Box::pin(lingering(d))),
    ("container runtime", |d| Box::pin(container_runtime(d))),
    ("egressd", |d| Box::pin(egressd(d))),
    ("triggerd", |d| Box::pin(triggerd(d))),
    ("triggers forward", |d| Box::pin(triggers_forward(d))),
    ("connectord", |d| Box::pin(connectord(d))),
    ("connectors forward", |d| Box::pin(connectors_forward(d))),
    ("connectors key", |d| Box::pin(connectors_key(d))),
    ("egress rules", |d| Box::pin(egress_rules(d))),
];

/// Runs every check of [`CHECKS`]; success when none failed.
pub async fn run() -> anyhow::Result<ExitCode> {
    let mut doctor = Doctor {
        settings: Settings::load()?,
        client: reqwest::Client::new(),
        chatd_up: false,
        failed: 0,
    };
    for (_name, check) in CHECKS {
        check(&mut doctor).await;
    }
    println!();
    if doctor.failed == 0 {
        println!("all checks passed");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{} check(s) failed", doctor.failed);
        Ok(ExitCode::FAILURE)
    }
}

async fn engine(d: &mut Doctor) {
    let engine = d.settings.engine_url().to_string();
    let models = daemons::engine_answers(&d.client, &engine, Duration::from_secs(2)).await;
    d.check(
        models.is_some(),
        format!("engine answers at {engine}"),
        "start the box's engine; tandem never starts it (or set QSE_ENGINE_URL)",
    );
}

async fn chatd(d: &mut Doctor) {
    let chatd = daemons::by_name("chatd")
        .map(|daemon| d.settings.daemon_url(daemon))
        .unwrap_or_default();
    let up = daemons::health(&d.client, &chatd, Duration::from_secs(1))
        .await
        .is_some();
    d.chatd_up = up;
    d.check(
        up,
        format!("chatd answers at {chatd}"),
        "tandem chat start (and `tandem chat logs` when it will not)",
    );
}

async fn secrets(d: &mut Doctor) {
    let secrets = d.settings.chatd.secrets.clone();
    let has_key = std::fs::read_to_string(&secrets).is_ok_and(|t| {
        t.lines()
            .any(|l| l.trim_start().starts_with("QSE_FORWARD_KEY="))
    });
    d.check(
        has_key,
        format!("secrets file {} holds QSE_FORWARD_KEY", secrets.display()),
        "ops/make-secrets.sh (chatd meanwhile uses forward.key in its data folder)",
    );
    if secrets.exists() {
        let mode = tandem_shared::fsmode::mode_of(&secrets).unwrap_or(0o777);
        d.check(
            mode & 0o077 == 0,
            format!("secrets file mode {mode:o} (want 600)"),
            &format!("chmod 600 {}", secrets.display()),
        );
    }
}

async fn front(d: &mut Doctor) {
    let up = d.chatd_up;
    if let Ok(Some(front)) = d.settings.chatd.front_addr() {
        let local = if front.ip().is_unspecified() {
            std::net::SocketAddr::from(([127, 0, 0, 1], front.port()))
        } else {
            front
        };
        // The front itself says whether it asks for the admin token.
        let auth = match d
            .client
            .get(format!("http://{local}/v1/chat-app/session"))
            .timeout(Duration::from_secs(1))
            .send()
            .await
        {
            Ok(answer) => answer.json::<serde_json::Value>().await.ok(),
            Err(_) => None,
        };
        d.check(
            auth.is_some() || !up,
            format!("chatd's front answers at {front}"),
            "tandem chat restart (the front is QSE_CHAT_FRONT in run/local.env); `tandem chat logs` says why it did not bind",
        );
        let asks = match &auth {
            Some(state) => state["auth"] == "token",
            None => crate::front::admin_token_set(&d.settings),
        };
        d.check(
            asks || front.ip().is_loopback(),
            format!("the front on {front} asks for the admin token"),
            "ops/make-secrets.sh adds QSE_ADMIN_TOKEN, then tandem chat restart: without it anyone who reaches the front uses these chats",
        );
    }
}

async fn data_folder(d: &mut Doctor) {
    let data = d.settings.chatd.data_dir.clone();
    if data.exists() {
        let mode = tandem_shared::fsmode::mode_of(&data).unwrap_or(0o777);
        d.check(
            mode == 0o700,
            format!("data folder {} mode {mode:o} (want 700)", data.display()),
            &format!("chmod 700 {}", data.display()),
        );
        let db = data.join("chat.sqlite3");
        if db.exists() {
            let mode = tandem_shared::fsmode::mode_of(&db).unwrap_or(0o777);
            d.check(
                mode == 0o600,
                format!("database mode {mode:o} (want 600)"),
                &format!("chmod 600 {}", db.display()),
            );
        }
    }
}

async fn unit(d: &mut Doctor) {
    let unit = tandem_shared::secrets::home().join(".config/systemd/user/tandem-chatd.service");
    d.check(
        unit.exists(),
        format!("unit installed at {}", unit.display()),
        "ops/install.sh (or run without systemd: tandem chat start)",
    );
}

async fn lingering(d: &mut Doctor) {
    let user = std::env::var("USER").unwrap_or_default();
    let linger = Command::new("loginctl")
        .args(["show-user", &user, "-p", "Linger", "--value"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "yes");
    d.check(
        linger,
        "lingering on (user units run without a login)".into(),
        "loginctl enable-linger $USER",
    );
}

async fn container_runtime(d: &mut Doctor) {
    let socket =
        std::env::var("QSE_SANDBOX_SOCKET").unwrap_or_else(|_| "/var/run/docker.sock".into());
    d.check(std::path::Path::new(&socket).exists(), format!("container runtime socket {socket}"), "install podman and runc, then `tandem sandbox build` (docs/sandbox.md); without a runtime, a chat's bash runs on this machine through hostexecd (host_exec), or is not offered");
}

async fn egressd(d: &mut Doctor) {
    let egressd = daemons::by_name("egressd")
        .map(|daemon| d.settings.daemon_url(daemon))
        .unwrap_or_default();
    let up = daemons::health(&d.client, &egressd, Duration::from_secs(1))
        .await
        .is_some();
    d.check(
        up,
        format!("egressd answers at {egressd}"),
        "tandem egress start (and `tandem egress logs` when it will not)",
    );
}

async fn triggerd(d: &mut Doctor) {
    let triggerd = daemons::by_name("triggerd")
        .map(|daemon| d.settings.daemon_url(daemon))
        .unwrap_or_default();
    let up = daemons::health(&d.client, &triggerd, Duration::from_secs(1))
        .await
        .is_some();
    d.check(
        up,
        format!("triggerd answers at {triggerd}"),
        "tandem triggers start (and `tandem triggers logs` when it will not)",
    );
}

/// chatd forwards /v1/chat-app/triggers* to the socket it is told of, and a
/// trigger's chat works in chatd's shared workspace: both must be triggerd's.
async fn triggers_forward(d: &mut Doctor) {
    let forwards_to = d.settings.chatd.triggers_socket.clone();
    let listens_on = d.settings.triggers.socket.clone();
    d.check(
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
    let chat_workspace = d.settings.chatd.shared_workspace.clone();
    let trigger_workspace = d.settings.triggers.workspace.clone();
    d.check(
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
}

async fn connectord(d: &mut Doctor) {
    let connectord = daemons::by_name("connectord")
        .map(|daemon| d.settings.daemon_url(daemon))
        .unwrap_or_default();
    let up = daemons::health(&d.client, &connectord, Duration::from_secs(1))
        .await
        .is_some();
    d.check(
        up,
        format!("connectord answers at {connectord}"),
        "tandem connectors start (and `tandem connectors logs` when it will not)",
    );
}

/// chatd forwards /v1/chat-app/connectors* to the socket it is told of.
async fn connectors_forward(d: &mut Doctor) {
    let forwards_to = d.settings.chatd.connectors_socket.clone();
    let listens_on = d.settings.connectors.socket.clone();
    d.check(
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
}

/// The key that seals the bot tokens: connectord refuses one others can read.
async fn connectors_key(d: &mut Doctor) {
    let key = d.settings.connectors.data_dir.join("connectors.key");
    if key.exists() {
        let mode = tandem_shared::fsmode::mode_of(&key).unwrap_or(0o777);
        d.check(
            mode & 0o077 == 0,
            format!("connectors key {} mode {mode:o} (want 600)", key.display()),
            &format!("chmod 600 {}", key.display()),
        );
    }
}

async fn egress_rules(d: &mut Doctor) {
    let nft = Command::new("nft")
        .args(["list", "table", "inet", egressd::nft::TABLE])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    d.check(
        nft,
        format!(
            "nftables table inet {} (the sandbox user reaches only egressd)",
            egressd::nft::TABLE
        ),
        "sudo sandbox/install.sh (makes the sandbox user, then tandem egress rules --apply)",
    );
}
