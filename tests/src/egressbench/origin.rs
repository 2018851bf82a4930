//! The origin server of figure 7: sends and takes bulk bytes on 127.0.0.2.

use super::*;

/// The origin server, on 127.0.0.2 in the bench's runtime.
pub struct Origin {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Origin {
    pub async fn start() -> anyhow::Result<Origin> {
        let listener = TcpListener::bind((ORIGIN_IP, 0))
            .await
            .with_context(|| format!("binding the origin on {ORIGIN_IP}"))?;
        let port = listener.local_addr()?.port();
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((sock, _)) => {
                        tokio::spawn(async move {
                            let _ = serve_origin(sock).await;
                        });
                    }
                    // Out of descriptors or the like: the next accept may work.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        Ok(Origin { port, task })
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(super) async fn serve_origin(mut sock: TcpStream) -> anyhow::Result<()> {
    sock.set_nodelay(true)?;
    let mut buf = vec![0u8; CHUNK];
    let mut have = 0;
    let eol = loop {
        let n = sock.read(&mut buf[have..]).await?;
        if n == 0 {
            return Ok(());
        }
        have += n;
        if let Some(eol) = buf[..have].iter().position(|b| *b == b'\n') {
            break eol;
        }
        ensure!(have < 64, "no command line");
    };
    let command = std::str::from_utf8(&buf[..eol])?.to_string();
    let already = have - eol - 1;
    match command.split_once(' ') {
        Some(("down", n)) => {
            let mut left: u64 = n.parse()?;
            while left > 0 {
                let n = left.min(CHUNK as u64) as usize;
                sock.write_all(&BLOCK[..n]).await?;
                left -= n as u64;
            }
        }
        Some(("up", n)) => {
            let want: u64 = n.parse()?;
            let mut got = already as u64;
            while got < want {
                let n = sock.read(&mut buf).await?;
                ensure!(n > 0, "the upload ended after {got} of {want} bytes");
                got += n as u64;
            }
            sock.write_all(b"ok\n").await?;
        }
        _ if command == "ping" => sock.write_all(b"pong\n").await?,
        _ => bail!("unknown command {command:?}"),
    }
    // The origin closes first (its side keeps the TIME_WAIT, not the client's ports).
    Ok(())
}

// The ways to the origin
