//! Targets for chatd: the command-line permission rules and the engine's
//! streamed answer read line by line.

use arbitrary::Unstructured;

use super::text_of;
use crate::Verdict;

/// A command line under the permission rules: splitting it and deciding on
/// it in every mode never panics, and "Always on this instance" (a rule for
/// exactly that line) never lets another line run by rule.
pub(super) fn bash_rules(u: &mut Unstructured) -> Verdict {
    use chatd::permissions::{decide, split_command, Approval, Call, Decision, Effect, Mode, Rule};
    const PIECES: &[&str] = &[
        "ls",
        "rm",
        "-rf",
        " ",
        "/",
        "~",
        "..",
        "git",
        "push",
        "status",
        "|",
        "||",
        "&&",
        "&",
        ";",
        "\n",
        "$(",
        ")",
        "`",
        "'",
        "\"",
        "\\",
        ">",
        ">>",
        "<",
        "<(",
        "2>&1",
        "FOO=1",
        "#",
        "*",
        "cd",
        "sudo",
        "python3",
        "-c",
        "/workspace",
        "/etc/passwd",
        "$HOME",
        "{",
        "}",
        "(",
    ];
    let command = text_of(u, PIECES, 40);
    let _ = split_command(&command);
    let inside = u.arbitrary().unwrap_or(true);
    let rules = [Rule::exact("bash", &command)];
    let other = format!("{} x", command.trim());
    for mode in [Mode::Ask, Mode::Auto, Mode::Yolo] {
        for line in [&command, &other] {
            let call = Call {
                tool: "bash",
                effect: Effect::Command,
                command: Some(line),
                inside,
                workspace_root: Some("/workspace"),
            };
            let decision = decide(mode, &call, &rules);
            if line == &other && decision == Decision::Run(Approval::Rule) {
                return Err(format!(
                    "a rule for exactly {command:?} let {other:?} run in {mode:?}"
                ));
            }
        }
    }
    Ok(())
}
