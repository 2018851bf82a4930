//! Figure 5: the wall time of `tandem status` with chatd, egressd and the
//! engine up, against `tandem --version`.

use super::*;

/// Figure 5: `tandem status` as a script or a prompt runs it, with chatd,
/// egressd and the engine up; baseline `tandem --version` in the same
/// environment.
pub(crate) async fn status(sizes: &Sizes, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    say("\n## 5. tandem status wall time");
    let sim = Sim::start(&[])?;
    let chatd = Chatd::start(&sim.url(), &[]).await?;
    let tandem = tandem_tests::harness::bin_dir().join("tandem");
    let home = chatd.dir.path().to_path_buf();
    let egress_proxy = format!("127.0.0.1:{}", tandem_tests::harness::free_port());
    // hostexecd as root runs commands as `nobody`, whose way to the chats'
    // folders must be open (0711 down to them).
    let hx = tempfile::tempdir()?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(hx.path(), std::fs::Permissions::from_mode(0o711))?;
    }
    let config = hx.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!("[hostexec]\nchat_data = \"{}\"\n", hx.path().display()),
    )?;
    let as_root = nix::unistd::geteuid().is_root();
    let time = |args: &'static [&'static str]| {
        let mut command = std::process::Command::new(&tandem);
        command
            .args(args)
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", home.join("run"))
            .env("QSE_ROOT", &home)
            .env("QSE_CHAT_URL", chatd.url())
            .env("QSE_ENGINE_URL", sim.url())
            .env("QSE_EGRESS_PROXY", &egress_proxy)
            .env("QSE_CONFIG", &config)
            .env("QSE_HOSTEXEC_RUN_AS", if as_root { "nobody" } else { "" })
            .env("QSE_TANDEM_MANAGER", "processes")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let started = Instant::now();
        let status = command.status();
        (
            started.elapsed(),
            status.map(|s| s.success()).unwrap_or(false),
        )
    };
    // The whole suite up: egressd, hostexecd, triggerd and connectord too (tandem
    // status says so when one is not).
    let (_, egress_up) = time(&["egress", "start"]);
    anyhow::ensure!(egress_up, "tandem egress start failed");
    let (_, hostexec_up) = time(&["hostexec", "start"]);
    anyhow::ensure!(hostexec_up, "tandem hostexec start failed");
    let (_, triggers_up) = time(&["triggers", "start"]);
    anyhow::ensure!(triggers_up, "tandem triggers start failed");
    let (_, connectors_up) = time(&["connectors", "start"]);
    anyhow::ensure!(connectors_up, "tandem connectors start failed");
    let runs = sizes.repeats * 3;
    let mut status_times = Vec::new();
    let mut version_times = Vec::new();
    for _ in 0..runs {
        let (took, ok) = time(&["status"]);
        anyhow::ensure!(
            ok,
            "tandem status failed with chatd, egressd and the engine up"
        );
        status_times.push(took);
        version_times.push(time(&["--version"]).0);
    }
    let _ = time(&["egress", "stop"]);
    let _ = time(&["hostexec", "stop"]);
    let _ = time(&["triggers", "stop"]);
    let _ = time(&["connectors", "stop"]);
    let worst = status_times.iter().max().copied().unwrap_or_default();
    let status_median = median(status_times);
    let version_median = median(version_times);
    say(format!(
        "tandem status: median {} max {} over {runs} runs; tandem --version median {}",
        ms_f(status_median),
        ms_f(worst),
        ms_f(version_median)
    ));
    rows.push(
        row(
            "5. `tandem status` wall time, chatd and engine up",
            format!("median {} / max {}", ms_f(status_median), ms_f(worst)),
        )
        .aim("< 50 ms", status_median < Duration::from_millis(50))
        .baseline(
            format!("`tandem --version` {}", ms_f(version_median)),
            format!(
                "×{:.1}",
                status_median.as_secs_f64() / version_median.as_secs_f64().max(1e-6)
            ),
        ),
    );
    Ok(())
}
