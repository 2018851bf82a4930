//! The skills compiled into chatd: office procedures that read with
//! `read_document` and build in a sandbox (so they need commands), and one
//! on writing. Written for tandem's tools; each is a `SKILL.md` as a person
//! would write it, parsed like theirs.

use super::{parse, Folder, Skill};
use crate::words::SkillLayer;

const TEXTS: [(&str, &str); 5] = [
    ("docx", include_str!("builtin/docx.md")),
    ("pdf", include_str!("builtin/pdf.md")),
    ("pptx", include_str!("builtin/pptx.md")),
    ("writing", include_str!("builtin/writing.md")),
    ("xlsx", include_str!("builtin/xlsx.md")),
];

/// The built-in layer, by name.
pub fn all() -> Vec<Skill> {
    TEXTS
        .iter()
        .map(|(folder, text)| {
            // A unit test parses every text: one that fails cannot ship.
            let parsed = parse(text, folder).expect("a built-in skill parses");
            Skill {
                name: parsed.name,
                description: parsed.description,
                requires_exec: parsed.requires_exec,
                layer: SkillLayer::Builtin,
                body: parsed.body,
                folder: Folder::Builtin,
                files: Vec::new(),
            }
        })
        .collect()
}
