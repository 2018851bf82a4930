//! The skills layer: SKILL.md parsing, layer precedence and switches, near
//! names, the prompt's list room, the owner's files and built-in texts.

use super::*;

fn skill(name: &str, layer: SkillLayer) -> Skill {
    Skill {
        name: name.into(),
        description: format!("the {name} of {layer}"),
        requires_exec: false,
        layer,
        body: format!("{layer} body"),
        folder: Folder::Builtin,
        files: Vec::new(),
    }
}

#[test]
fn a_skill_md_gives_its_name_description_needs_and_procedure() {
    let text = "---\nname: review\ndescription: Check a change\n  before it ships\nrequires: [exec]\n---\n\nRead the diff.\n\n---\n\nSay what you find.\n";
    let parsed = parse(text, "folder").unwrap();
    assert_eq!(parsed.name, "review");
    assert_eq!(parsed.description, "Check a change before it ships");
    assert!(parsed.requires_exec);
    assert_eq!(parsed.body, "Read the diff.\n\n---\n\nSay what you find.");
    // The folder names it when the front matter does not.
    let parsed = parse("---\ndescription: d\n---\nbody", "notes").unwrap();
    assert_eq!(parsed.name, "notes");
}

#[test]
fn a_bad_skill_md_says_what_is_wrong() {
    let no_front = parse("just text", "x").unwrap_err();
    assert!(no_front.contains("no front matter"), "{no_front}");
    let no_description = parse("---\nname: x\n---\nbody", "x").unwrap_err();
    assert!(no_description.contains("description"), "{no_description}");
    let bad_name = parse("---\nname: Big Name\ndescription: d\n---\n", "x").unwrap_err();
    assert!(bad_name.contains("a-z 0-9"), "{bad_name}");
    let bad_need = parse("---\nname: x\ndescription: d\nrequires: [gpu]\n---\n", "x").unwrap_err();
    assert!(bad_need.contains("\"gpu\""), "{bad_need}");
    let big = format!("---\nname: x\ndescription: d\n---\n{}", "a".repeat(70_000));
    assert!(parse(&big, "x").unwrap_err().contains("65536"));
    let not_yaml = parse("---\nname: [x\ndescription: d\n---\n", "x").unwrap_err();
    assert!(not_yaml.contains("YAML"), "{not_yaml}");
}

#[test]
fn the_nearest_layer_wins_and_a_switch_lets_the_next_show_through() {
    let catalog = Catalog {
        skills: vec![
            skill("pdf", SkillLayer::Workspace),
            skill("pdf", SkillLayer::Owner),
            skill("review", SkillLayer::Owner),
            skill("pdf", SkillLayer::Builtin),
        ],
        problems: Vec::new(),
    };
    let layer_of = |off: &[&str], name: &str| {
        let off: Vec<String> = off.iter().map(|s| s.to_string()).collect();
        catalog
            .of_chat(&off)
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.layer)
    };
    assert_eq!(layer_of(&[], "pdf"), Some(SkillLayer::Workspace));
    assert_eq!(layer_of(&["pdf"], "pdf"), Some(SkillLayer::Owner));
    assert_eq!(layer_of(&["workspace:pdf"], "pdf"), Some(SkillLayer::Owner));
    assert_eq!(layer_of(&["owner:pdf"], "pdf"), Some(SkillLayer::Workspace));
    assert_eq!(
        layer_of(&["pdf", "owner:pdf"], "pdf"),
        Some(SkillLayer::Builtin)
    );
    assert_eq!(
        layer_of(&["workspace:pdf", "owner:pdf", "builtin:pdf"], "pdf"),
        None
    );
    assert_eq!(layer_of(&["review"], "review"), None);
    assert!(catalog.knows_switch("owner:review"));
    assert!(!catalog.knows_switch("builtin:review"));
}

#[test]
fn a_near_name_is_suggested_in_any_case() {
    let known = ["pdf", "pptx", "writing", "xlsx", "review"];
    assert_eq!(nearest("PDF", known.into_iter())[0], "pdf");
    assert_eq!(nearest("reveiw", known.into_iter()), vec!["review"]);
    assert_eq!(nearest("write", known.into_iter())[0], "writing");
    assert_eq!(nearest("pfd", known.into_iter())[0], "pdf");
    assert!(nearest("zzzzzz", known.into_iter()).is_empty());
}

#[test]
fn two_hundred_skills_keep_the_list_in_its_room_and_say_how_many_are_left_out() {
    let skills: Vec<Skill> = (0..200)
        .map(|i| {
            let mut s = skill(&format!("skill-{i:03}"), SkillLayer::Owner);
            s.description = "d".repeat(60);
            s
        })
        .collect();
    let refs: Vec<&Skill> = skills.iter().collect();
    let part = prompt::list_part(&refs, true).unwrap();
    let described = part.lines().filter(|l| l.starts_with("- ")).count();
    assert!(described > 10 && described < 200, "{described}");
    assert!(
        part.contains(&format!(
            "{} more skills are not described",
            200 - described
        )),
        "{part}"
    );
    assert!(part.len() < prompt::LIST_CHARS + 1_600, "{}", part.len());
    // The first left out is named.
    assert!(part.contains(&format!("skill-{described:03}")));
}

#[test]
fn a_skill_that_needs_commands_is_marked_where_there_are_none() {
    let mut s = skill("pdf", SkillLayer::Builtin);
    s.requires_exec = true;
    let part = prompt::list_part(&[&s], false).unwrap();
    assert!(part.contains(prompt::NO_EXEC), "{part}");
    let part = prompt::list_part(&[&s], true).unwrap();
    assert!(!part.contains(prompt::NO_EXEC), "{part}");
}

#[test]
fn every_built_in_skill_parses_and_the_office_ones_need_commands() {
    let all = builtin::all();
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["docx", "pdf", "pptx", "writing", "xlsx"]);
    for s in &all {
        assert_eq!(s.requires_exec, s.name != "writing", "{}", s.name);
        assert!(!s.body.is_empty());
    }
}

#[test]
fn an_owner_skill_written_reads_back_and_its_files_are_listed() {
    let dir = tempfile::tempdir().unwrap();
    let text = owner::render(
        "review",
        "Check a change: \"quoted\"",
        true,
        "Read the diff.",
    );
    owner::write(dir.path(), &dir.path().join("review"), &text).unwrap();
    std::fs::create_dir_all(dir.path().join("review/scripts")).unwrap();
    std::fs::write(dir.path().join("review/scripts/check.sh"), "echo").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("review/passwd")).unwrap();
    let mut catalog = Catalog::default();
    owner::scan(dir.path(), &mut catalog);
    let s = &catalog.skills[0];
    assert_eq!(s.description, "Check a change: \"quoted\"");
    assert!(s.requires_exec);
    assert_eq!(s.files, ["scripts/check.sh"]);
    assert_eq!(
        owner::read_file(&dir.path().join("review"), "scripts/check.sh", 100).unwrap(),
        "echo"
    );
    assert!(owner::read_file(&dir.path().join("review"), "passwd", 100_000).is_err());
    assert!(owner::read_file(&dir.path().join("review"), "../review/SKILL.md", 100).is_err());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("review/SKILL.md"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_deeply_nested_front_matter_is_refused_or_read_without_a_crash() {
    for (nest, times) in [("- ", 2_000), ("[", 2_000), ("{a: ", 1_000), ("- a: ", 800)] {
        let deep = nest.repeat(times);
        let text = format!("---\nname: x\ndescription: d\nextra: {deep}\n---\nbody");
        // In a thread with a small stack, as a blocking task would have.
        let out = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || parse(&text, "x").is_ok())
            .unwrap()
            .join();
        assert!(out.is_ok(), "{nest:?}: the parser's thread died");
    }
}
