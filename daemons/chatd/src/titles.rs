//! Titles made by chatd: a chat nobody named is called after the first line
//! of its first message.

/// The most characters a title made from a message holds.
pub const FROM_MESSAGE: usize = 80;

/// The first non-empty line of `text`, control characters and runs of
/// spaces made one space, at most [`FROM_MESSAGE`] characters (cut with "…").
pub fn from_message(text: &str) -> Option<String> {
    let line = text
        .lines()
        .map(|l| {
            l.chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect::<String>()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .find(|l| !l.is_empty())?;
    if line.chars().count() <= FROM_MESSAGE {
        return Some(line);
    }
    let mut cut: String = line.chars().take(FROM_MESSAGE - 1).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    Some(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_names_the_chat() {
        let table = [
            (
                "Plan the trip to Lyon\nwith the kids",
                Some("Plan the trip to Lyon"),
            ),
            (
                "\n\n   \n  Summarise\tthis  \u{7}report ",
                Some("Summarise this report"),
            ),
            ("   \n\t", None),
            ("", None),
        ];
        for (text, expect) in table {
            assert_eq!(from_message(text).as_deref(), expect, "{text:?}");
        }
        let long = "word ".repeat(40);
        let title = from_message(&long).expect("a title");
        assert_eq!(title.chars().count(), 80, "{title}");
        assert!(title.ends_with("word…"), "{title}");
    }
}
