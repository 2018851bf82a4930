//! The engine simulator (`engine-sim`) as a real process for a test.

use super::*;

/// The engine simulator as a real process.
pub struct Sim {
    child: Option<Child>,
    pub port: u16,
    args: Vec<String>,
}

impl Sim {
    /// Starts `engine-sim` on a free port with extra `args`.
    pub fn start(args: &[&str]) -> anyhow::Result<Sim> {
        let mut sim = Sim {
            child: None,
            port: 0,
            args: args.iter().map(|s| s.to_string()).collect(),
        };
        sim.spawn("127.0.0.1:0")?;
        Ok(sim)
    }

    pub(crate) fn spawn(&mut self, listen: &str) -> anyhow::Result<()> {
        let mut child = Command::new(bin_dir().join("engine-sim"))
            .arg("--listen")
            .arg(listen)
            .args(&self.args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting engine-sim")?;
        let stdout = child.stdout.take().context("engine-sim stdout")?;
        // The first line names the address; reading it blocks only until the
        // sim prints it (or exits, which ends the read).
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .trim()
            .rsplit("http://")
            .next()
            .filter(|_| line.contains("listening"))
            .with_context(|| format!("engine-sim printed {line:?}"))?;
        self.port = addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .context("engine-sim port")?;
        self.child = Some(child);
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: the engine dies as a crashed one does.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        let listen = format!("127.0.0.1:{}", self.port);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn(&listen) {
                Ok(()) => return Ok(()),
                Err(err) if Instant::now() < deadline => {
                    let _ = err;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Queues faults for the next chat requests (`POST /sim/faults`).
    pub async fn faults(&self, next: Value) -> anyhow::Result<()> {
        let response = reqwest::Client::new()
            .post(format!("{}/sim/faults", self.url()))
            .json(&json!({"next": next}))
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("sim refused the faults: {}", response.text().await?);
        }
        Ok(())
    }

    /// POSTs `body` to one of the sim's routes; answers its JSON.
    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let response = reqwest::Client::new()
            .post(format!("{}{path}", self.url()))
            .json(&body)
            .send()
            .await?;
        anyhow::ensure!(
            response.status().is_success(),
            "sim {path}: {}",
            response.status()
        );
        Ok(response.json().await?)
    }

    /// GETs one of the sim's routes; answers its JSON.
    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(reqwest::get(format!("{}{path}", self.url()))
            .await?
            .json()
            .await?)
    }

    /// The chat requests the sim received (`GET /sim/requests`).
    pub async fn requests(&self) -> anyhow::Result<Vec<Value>> {
        Ok(reqwest::get(format!("{}/sim/requests", self.url()))
            .await?
            .json()
            .await?)
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child, Duration::from_secs(2));
        }
    }
}

/// The tool names a chat request's body offered, in order.
pub fn offered_tools(body: &serde_json::Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

/// The system block of a chat request's body ("" when it has none).
pub fn system_text(body: &serde_json::Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .filter(|_| body["messages"][0]["role"] == "system")
        .unwrap_or("")
        .to_string()
}
