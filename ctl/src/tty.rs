//! What `tandem` asks a person for: secrets read without echo on a
//! terminal (or a line of stdin when it is not one), and typed confirmations.
//! A secret is never taken as an argument: it would sit in the shell's
//! history and in `ps` for anyone on the box to read.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use anyhow::{bail, Context};
use tandem_shared::secrets::Secret;

/// The largest token file read: a token is one short line.
const MAX_TOKEN_FILE: u64 = 4096;

/// Whether stdin is a terminal (a person types) rather than a pipe or a file.
pub fn stdin_is_terminal() -> bool {
    std::io::stdin().is_terminal()
}

/// A token from a file (`-`: stdin), which holds it alone on one line.
/// The error names the file and the fault, never what it holds.
pub async fn token_from_file(path: &Path, what: &str) -> anyhow::Result<Secret> {
    if path == Path::new("-") {
        return token_from_stdin(what).await;
    }
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        bail!("{} is not a file", path.display());
    }
    if meta.len() > MAX_TOKEN_FILE {
        bail!(
            "{} is {} bytes, too long for a token file (a token alone on one line)",
            path.display(),
            meta.len()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        eprintln!(
            "tandem: note: {} (mode {mode:o}) can be read by other users: chmod 600 {0}",
            path.display()
        );
    }
    one_token(&text).map_err(|fault| anyhow::anyhow!("{}: {fault}", path.display()))
}

/// A token from stdin: asked without echo on a terminal, else one line read.
pub async fn token_from_stdin(what: &str) -> anyhow::Result<Secret> {
    let line = if stdin_is_terminal() {
        read_hidden(&format!("{what} (not shown): ")).await?
    } else {
        eprintln!("tandem: reading the {what} from stdin (one line)");
        read_line()?
    };
    one_token(&line).map_err(|fault| anyhow::anyhow!("the {what} from stdin: {fault}"))
}

/// The token a text holds: trimmed, one word. The fault never quotes it.
fn one_token(text: &str) -> Result<Secret, &'static str> {
    let token = text.trim();
    if token.is_empty() {
        return Err("is empty");
    }
    if token.chars().any(char::is_whitespace) {
        return Err("holds more than one word or line (a token is one line)");
    }
    Ok(Secret::new(token.to_string()))
}

/// One line of stdin, without its end.
fn read_line() -> anyhow::Result<String> {
    let mut line = String::new();
    let n = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading stdin")?;
    if n == 0 {
        bail!("stdin ended before a line was read");
    }
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}

/// A line typed at the terminal with echo off (a newline still shows). A
/// Ctrl-C puts echo back before tandem ends.
async fn read_hidden(prompt: &str) -> anyhow::Result<String> {
    use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
    let stdin = std::io::stdin();
    let original = tcgetattr(&stdin).context("reading the terminal's settings")?;
    let mut quiet = original.clone();
    quiet.local_flags.remove(LocalFlags::ECHO);
    quiet.local_flags.insert(LocalFlags::ECHONL);
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    tcsetattr(&stdin, SetArg::TCSAFLUSH, &quiet).context("turning the terminal's echo off")?;
    let restore = || {
        let _ = tcsetattr(std::io::stdin(), SetArg::TCSAFLUSH, &original);
    };
    let reading = tokio::task::spawn_blocking(read_line);
    tokio::select! {
        read = reading => {
            restore();
            read.context("reading the terminal")?
        }
        _ = tokio::signal::ctrl_c() => {
            restore();
            // The blocked read cannot be cancelled, and the runtime would
            // wait for it on the way out: end here, as a Ctrl-C does.
            eprintln!("\ntandem: interrupted: nothing was saved");
            std::process::exit(130);
        }
    }
}

/// Asks a person to type `phrase` to go on; anything else (or no terminal)
/// refuses with `refused`, which says how else to confirm.
pub async fn confirm_phrase(warning: &str, phrase: &str, refused: &str) -> anyhow::Result<()> {
    if !stdin_is_terminal() {
        bail!("{refused}");
    }
    eprintln!("{warning}");
    eprint!("Type '{phrase}' to go on: ");
    let _ = std::io::stderr().flush();
    let typed = tokio::task::spawn_blocking(read_line)
        .await
        .context("reading the terminal")??;
    if typed.trim() != phrase {
        bail!("not confirmed: nothing was saved");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_one_trimmed_word_and_faults_never_quote_it() {
        let check = |text: &str, expect: Result<&str, &str>| {
            let got = one_token(text);
            match expect {
                Ok(token) => assert_eq!(got.map(|s| s.expose().to_string()), Ok(token.into())),
                Err(fault) => {
                    let got = got.map(|_| ()).unwrap_err();
                    assert_eq!(got, fault);
                    assert!(!got.contains("123:ABC"));
                }
            }
        };
        check("123:ABC\n", Ok("123:ABC"));
        check("  xoxb-1-2\r\n", Ok("xoxb-1-2"));
        check("\n\n", Err("is empty"));
        check(
            "123:ABC\nxapp-1\n",
            Err("holds more than one word or line (a token is one line)"),
        );
    }

    #[tokio::test]
    async fn a_token_file_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "123:ABC\n").unwrap();
        let read = token_from_file(&path, "bot token").await.unwrap();
        assert_eq!(read.expose(), "123:ABC");
        std::fs::write(&path, "123:ABC 456:DEF\n").unwrap();
        let err = token_from_file(&path, "bot token")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            !err.contains("123:ABC") && err.contains("more than one"),
            "{err}"
        );
        let err = token_from_file(&dir.path().join("none"), "bot token")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("reading "), "{err}");
    }
}
