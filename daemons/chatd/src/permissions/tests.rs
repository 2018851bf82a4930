//! Modes, rules and the reading of command lines: what runs, asks or is
//! refused, and the parts and keys a command line is split into.

use super::*;

fn bash<'a>(command: &'a str, inside: bool) -> Call<'a> {
    Call {
        tool: "bash",
        effect: Effect::Command,
        command: Some(command),
        inside,
        workspace_root: Some("/workspace"),
    }
}

fn tool(name: &str, effect: Effect, inside: bool) -> Call<'_> {
    Call {
        tool: name,
        effect,
        command: None,
        inside,
        workspace_root: Some("/workspace"),
    }
}

fn keys(command: &str) -> Vec<String> {
    split_command(command).into_iter().map(|p| p.key).collect()
}

fn texts(command: &str) -> Vec<String> {
    split_command(command).into_iter().map(|p| p.text).collect()
}

fn is_ask(decision: &Decision) -> bool {
    matches!(decision, Decision::Ask { .. })
}

fn is_refuse(decision: &Decision) -> bool {
    matches!(decision, Decision::Refuse { .. })
}

#[test]
fn modes_parse_and_print() {
    for mode in Mode::ALL {
        assert_eq!(Mode::parse(mode.as_str()), Ok(mode));
    }
    assert_eq!(Mode::parse(" YOLO "), Ok(Mode::Yolo));
    assert_eq!(
        Mode::parse("x"),
        Err("\"x\" is not a permission mode: use plan, ask, auto or yolo".to_string())
    );
    assert_eq!(Mode::default(), Mode::Auto);
    assert_eq!(
        serde_json::to_string(&Mode::Yolo).ok().as_deref(),
        Some("\"yolo\"")
    );
    let rule: Rule = serde_json::from_str(r#"{"tool":"bash","pattern":"ls","verdict":"deny"}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rule, Rule::deny("bash", "ls"));
    let names: Vec<&str> = [
        Approval::Auto,
        Approval::Yolo,
        Approval::User,
        Approval::Rule,
    ]
    .iter()
    .map(|a| a.as_str())
    .collect();
    assert_eq!(names, ["auto", "yolo", "user", "rule"]);
}

#[test]
fn chain_with_a_part_not_allowed_asks() {
    let rules = [Rule::allow("bash", "git status")];
    let call = bash("git status && git push", false);
    assert!(is_ask(&decide(Mode::Ask, &call, &rules)));
    assert!(is_ask(&decide(Mode::Auto, &call, &rules)));
    // Every part allowed runs by rule.
    let rules = [
        Rule::allow("bash", "git status"),
        Rule::allow("bash", "git push"),
    ];
    assert_eq!(
        decide(Mode::Ask, &call, &rules),
        Decision::Run(Approval::Rule)
    );
}

#[test]
fn deny_rule_on_one_part_refuses_in_every_mode() {
    let rules = [Rule::allow("bash", "ls"), Rule::deny("bash", "rm")];
    let call = bash("ls; rm -rf /", true);
    for mode in Mode::ALL {
        assert_eq!(
            decide(mode, &call, &rules),
            Decision::Refuse {
                reason: "denied by the rule \"rm\" for bash".to_string()
            },
            "{mode}"
        );
    }
    // Rules of other tools do not count.
    let other = [Rule::deny("sh", "rm")];
    assert!(!is_refuse(&decide(Mode::Ask, &call, &other)));
}

#[test]
fn substitution_is_never_allowed_by_a_rule() {
    let rules = [Rule::allow("bash", "echo")];
    for command in ["echo $(id)", "echo `id`", "echo \"$(id)\"", "diff <(ls) x"] {
        let call = bash(command, true);
        assert!(split_command(command)[0].substitution, "{command}");
        assert!(is_ask(&decide(Mode::Ask, &call, &rules)), "{command}");
    }
    // Single quotes keep it literal.
    let call = bash("echo '$(id)'", true);
    assert_eq!(
        decide(Mode::Ask, &call, &rules),
        Decision::Run(Approval::Rule)
    );
    // Plain arithmetic runs nothing.
    assert!(!split_command("echo $((1 + 2))")[0].substitution);
    // A deny rule on the first word still denies.
    let deny = [Rule::deny("bash", "echo")];
    assert!(is_refuse(&decide(
        Mode::Yolo,
        &bash("echo $(id)", true),
        &deny
    )));
    // And so does one on a command inside the substitution.
    let deny = [Rule::deny("bash", "curl")];
    assert!(is_refuse(&decide(
        Mode::Yolo,
        &bash("echo $(curl x)", true),
        &deny
    )));
}

#[test]
fn rm_aimed_at_protected_places_asks_even_in_yolo() {
    for command in ["rm -rf ~", "rm -rf /", "rmdir /workspace", "rm -rf $HOME/"] {
        let decision = decide(Mode::Yolo, &bash(command, true), &[]);
        assert!(is_ask(&decision), "{command}: {decision:?}");
    }
    assert_eq!(
        decide(
            Mode::Yolo,
            &bash("rm -rf /", true),
            &[Rule::allow("bash", "rm")]
        ),
        Decision::Ask {
            reason: "rm aimed at / always asks".to_string()
        }
    );
    assert_eq!(
        decide(Mode::Yolo, &bash("rm -rf build/", true), &[]),
        Decision::Run(Approval::Yolo)
    );
}

#[test]
fn protected_targets() {
    let protected = [
        "rm -rf /",
        "rm -rf /*",
        "rm -rf //",
        "rm -rf ~",
        "rm -rf ~/",
        "rm -rf ~/*",
        "rm -rf ~alice",
        "rm -rf $HOME",
        "rm -rf ${HOME}/",
        "rm -rf \"$HOME\"",
        "rm -rf /home",
        "rm -rf /home/alice/",
        "rm -rf /home/*",
        "rm -rf /root",
        "rm -rf /workspace",
        "rm -rf /workspace/",
        "rm -rf /workspace/src/..",
        "rm -rf .",
        "rm -rf ./",
        "rm -rf *",
        "rm -rf ..",
        "rm -r -- /",
        "sudo rm -rf /",
        "/bin/rm -rf /",
        "\\rm -rf /",
        "rm -rf $DIR/",
        "rm -rf $DIR/*",
        "rm -rf /h*",
        "rm -f x /",
        "cd x && rm -rf ~",
        "echo $(rm -rf /)",
        "bash -c 'rm -rf /'",
    ];
    for command in protected {
        let parts = split_command(command);
        assert!(
            parts
                .iter()
                .any(|p| aims_at_protected(p, Some("/workspace"))),
            "{command}"
        );
    }
    let fine = [
        "rm -rf build/",
        "rm -rf ./build",
        "rm -f *.o",
        "rm -rf /tmp/x",
        "rm -rf /workspace/build",
        "rm -rf ~/.cache/x",
        "rm -rf $HOME/.cache",
        "rm -rf $DIR",
        "rm -rf /home/alice/tmp",
        "rm -rf src/*",
        "ls /",
        "echo rm -rf /",
        "rm -rf '/tmp/a b'",
    ];
    for command in fine {
        let parts = split_command(command);
        assert!(
            !parts
                .iter()
                .any(|p| aims_at_protected(p, Some("/workspace"))),
            "{command}"
        );
    }
    // A deeper workspace root: its ancestors are protected too.
    let root = Some("/data/workspaces/c1");
    let part = |c: &str| split_command(c).remove(0);
    assert!(aims_at_protected(&part("rm -rf /data/workspaces"), root));
    assert!(aims_at_protected(&part("rm -rf /data/workspaces/*"), root));
    assert!(aims_at_protected(&part("rm -rf ../"), root));
    assert!(!aims_at_protected(&part("rm -rf ./x"), root));
    // Without a known root the current folder is still the root.
    assert!(aims_at_protected(&part("rm -rf ."), None));
    assert!(!aims_at_protected(&part("rm -rf x"), None));
}

#[test]
fn quotes_keep_separators_inside() {
    assert_eq!(texts("echo \"a && b\""), ["echo \"a && b\""]);
    assert_eq!(texts("grep 'x|y' f | wc -l"), ["grep 'x|y' f", "wc -l"]);
    assert_eq!(texts("echo a\\;b; ls"), ["echo a\\;b", "ls"]);
    assert_eq!(
        keys("a && b || c; d | e & f\ng"),
        ["a", "b", "c", "d", "e", "f", "g"]
    );
    assert_eq!(keys("(cd x && make) |& tee log"), ["cd", "make", "tee"]);
    assert_eq!(keys("ls; ; "), ["ls"]);
}

#[test]
fn redirections_comments_and_heredocs_do_not_split() {
    assert_eq!(keys("make 2>&1 | tee log"), ["make", "tee"]);
    assert_eq!(keys("cargo build &> out.txt"), ["cargo build"]);
    assert_eq!(keys(">out ls"), ["ls"]);
    assert_eq!(keys("ls # && rm -rf /"), ["ls"]);
    let heredoc = "cat > f.txt <<'EOF'\nrm -rf /\na && b\nEOF\nls";
    assert_eq!(keys(heredoc), ["cat", "ls"]);
    assert_eq!(
        texts(heredoc)[0],
        "cat > f.txt <<'EOF'\nrm -rf /\na && b\nEOF"
    );
    assert_eq!(
        decide(Mode::Yolo, &bash(heredoc, true), &[]),
        Decision::Run(Approval::Yolo)
    );
    // An unquoted delimiter expands substitutions in the body.
    let parts = split_command("cat <<EOF\n$(id)\nEOF");
    assert_eq!(parts.len(), 1);
    assert!(parts[0].substitution);
    assert_eq!(keys("cat <<-END\n\tx\n\tEND\npwd"), ["cat", "pwd"]);
    // Redirect-only and assignment-only parts run no command.
    assert_eq!(keys("FOO=1; > f"), ["", ""]);
}

#[test]
fn keys_skip_options_wrappers_and_paths() {
    assert_eq!(keys("git -C repo push origin"), ["git push"]);
    assert_eq!(keys("FOO=1 sudo npm install x"), ["npm install"]);
    assert_eq!(keys("/usr/bin/ls -la"), ["ls"]);
    assert_eq!(keys("/usr/bin/git push"), ["git push"]);
    assert_eq!(keys("git"), ["git"]);
    assert_eq!(keys("git --no-pager log"), ["git log"]);
    assert_eq!(keys("cargo +nightly build"), ["cargo build"]);
    assert_eq!(keys("kubectl -n prod get pods"), ["kubectl get"]);
    assert_eq!(keys("env -u X A=1 time -p make"), ["make"]);
    assert_eq!(keys("timeout 5 cargo test"), ["cargo test"]);
    assert_eq!(keys("sudo -u bob rm x"), ["rm"]);
    assert_eq!(keys("python -m pip install x"), ["python"]);
    assert_eq!(keys("if grep -q x f; then rm f; fi"), ["grep", "rm", ""]);
    assert_eq!(keys("sudo"), ["sudo"]);
    assert_eq!(keys("'ls' -l"), ["ls"]);
}

#[test]
fn one_word_rules_cover_two_word_keys() {
    let call = bash("git push && git status", false);
    assert_eq!(
        decide(Mode::Ask, &call, &[Rule::allow("bash", "git")]),
        Decision::Run(Approval::Rule)
    );
    // A two-word rule covers only its own verb.
    assert!(is_ask(&decide(
        Mode::Ask,
        &bash("git", false),
        &[Rule::allow("bash", "git push")]
    )));
    // A deny rule on a wrapper refuses what it wraps.
    assert!(is_refuse(&decide(
        Mode::Yolo,
        &bash("sudo ls", true),
        &[Rule::deny("bash", "sudo")]
    )));
    // Assignment-only parts need no rule, but some rule must match.
    assert_eq!(
        decide(
            Mode::Ask,
            &bash("X=1; ls", true),
            &[Rule::allow("bash", "ls")]
        ),
        Decision::Run(Approval::Rule)
    );
    assert!(is_ask(&decide(Mode::Ask, &bash("X=1", true), &[])));
    assert!(is_ask(&decide(
        Mode::Ask,
        &bash("ls; > f", true),
        &[Rule::allow("bash", "ls")]
    )));
}

#[test]
fn always_saves_one_rule_per_distinct_part() {
    let call = bash("git status && git push | tee x; git push", true);
    assert_eq!(
        rules_for_always(&call),
        [
            Rule::allow("bash", "git status"),
            Rule::allow("bash", "git push"),
            Rule::allow("bash", "tee"),
        ]
    );
    let call = bash("git status && git push | tee x", true);
    assert_eq!(rules_for_always(&call).len(), 3);
    // Never an any-use rule for a command.
    assert!(rules_for_always(&bash("FOO=1", true)).is_empty());
    assert_eq!(
        rules_for_always(&tool("write_file", Effect::Write, true)),
        [Rule::allow("write_file", "")]
    );
}

#[test]
fn non_command_tools_by_mode() {
    let read = tool("read_file", Effect::Read, false);
    let write_in = tool("write_file", Effect::Write, true);
    let write_out = tool("write_file", Effect::Write, false);
    assert_eq!(decide(Mode::Ask, &read, &[]), Decision::Run(Approval::Auto));
    assert!(is_ask(&decide(Mode::Ask, &write_in, &[])));
    assert_eq!(
        decide(Mode::Auto, &write_in, &[]),
        Decision::Run(Approval::Auto)
    );
    assert_eq!(
        decide(Mode::Auto, &write_out, &[]),
        Decision::Ask {
            reason: "it leaves the chat's workspace".to_string()
        }
    );
    let allow = [Rule::allow("write_file", "")];
    assert_eq!(
        decide(Mode::Ask, &write_out, &allow),
        Decision::Run(Approval::Rule)
    );
    for call in [read, write_in, write_out, bash("curl x | sh", false)] {
        assert_eq!(
            decide(Mode::Yolo, &call, &[]),
            Decision::Run(Approval::Yolo)
        );
    }
}

#[test]
fn deny_rule_for_any_use_refuses_in_yolo() {
    let deny = [Rule::deny("write_file", "")];
    let call = tool("write_file", Effect::Write, true);
    assert_eq!(
        decide(Mode::Yolo, &call, &deny),
        Decision::Refuse {
            reason: "denied by a rule for write_file".to_string()
        }
    );
    assert!(is_refuse(&decide(
        Mode::Yolo,
        &bash("ls", true),
        &[Rule::deny("bash", "")]
    )));
}

#[test]
fn commands_in_auto_follow_inside() {
    assert_eq!(
        decide(Mode::Auto, &bash("cargo test", true), &[]),
        Decision::Run(Approval::Auto)
    );
    assert!(is_ask(&decide(Mode::Auto, &bash("curl x", false), &[])));
    assert!(is_ask(&decide(Mode::Ask, &bash("ls", true), &[])));
    assert_eq!(
        decide(Mode::Auto, &bash("ls", true), &[Rule::allow("bash", "ls")]),
        Decision::Run(Approval::Rule)
    );
}

#[test]
fn odd_input_does_not_panic() {
    for command in [
        "",
        "'",
        "\"",
        "$(",
        "`",
        "\\",
        "<<",
        "cat <<",
        "a |",
        "| a",
        "$((",
        "${",
        "rm -rf ${",
        "rm -rf $",
        "é && ü",
        "x=(",
        "2>",
        "&>",
        "rm ~é/..",
    ] {
        let _ = split_command(command);
        let _ = decide(Mode::Yolo, &bash(command, true), &[Rule::deny("bash", "x")]);
    }
}

#[test]
fn the_stricter_of_two_modes_asks_more() {
    assert_eq!(Mode::Yolo.stricter(Mode::Ask), Mode::Ask);
    assert_eq!(Mode::Ask.stricter(Mode::Auto), Mode::Ask);
    assert_eq!(Mode::Auto.stricter(Mode::Yolo), Mode::Auto);
    assert_eq!(Mode::Yolo.stricter(Mode::Yolo), Mode::Yolo);
}

#[test]
fn plan_mode_runs_what_reads_and_refuses_the_rest_even_with_an_allow_rule() {
    let read = tool("read_file", Effect::Read, true);
    assert_eq!(
        decide(Mode::Plan, &read, &[]),
        Decision::Run(Approval::Auto)
    );
    let allow = [Rule::allow("write_file", ""), Rule::allow("bash", "")];
    let write = tool("write_file", Effect::Write, true);
    assert!(is_refuse(&decide(Mode::Plan, &write, &allow)));
    assert!(is_refuse(&decide(Mode::Plan, &bash("ls", true), &allow)));
    // The stricter of a sub-agent's mode and its parent's.
    assert_eq!(Mode::Yolo.stricter(Mode::Plan), Mode::Plan);
    assert_eq!(Mode::parse("Plan"), Ok(Mode::Plan));
}
