//! Words a daemon stores and sends as text (a run's status, a message's
//! role) made into types: `words!` declares an enum whose variants are the
//! only texts that can be written, read back at one place, with the wire
//! and database spelling unchanged.

use std::fmt;

#[doc(hidden)]
pub use rusqlite as __rusqlite;
#[doc(hidden)]
pub use serde as __serde;

/// A stored or sent text that names none of a type's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownWord {
    /// What the word was to be: "run status", "role".
    pub what: &'static str,
    pub text: String,
}

impl fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} `{}`", self.what, self.text)
    }
}

impl std::error::Error for UnknownWord {}

/// What `words!` gives every type: its words and their texts.
pub trait Word: Copy + fmt::Debug + PartialEq + 'static {
    /// What one of these is, for errors: "run status".
    const WHAT: &'static str;
    /// Every word, in the order declared.
    const ALL: &'static [Self];
    /// The word's text on the wire and in the database.
    fn as_str(self) -> &'static str;
    /// The word spelled `text`, if there is one.
    fn parse(text: &str) -> Option<Self>;
}

/// Checks that every word of `W` reads back as itself: from its text, from
/// its JSON, and from its database value. For each type's unit test.
pub fn check_reads_back<W>()
where
    W: Word + serde::Serialize + serde::de::DeserializeOwned + rusqlite::types::ToSql,
    W: rusqlite::types::FromSql,
{
    use rusqlite::types::{ToSqlOutput, ValueRef};
    for &word in W::ALL {
        let text = word.as_str();
        assert_eq!(W::parse(text), Some(word), "{text}");
        let json = serde_json::to_string(&word).expect("a word serializes");
        assert_eq!(json, format!("\"{text}\""));
        let back: W = serde_json::from_str(&json).expect("a word's JSON reads back");
        assert_eq!(back, word, "{text}");
        match word.to_sql().expect("a word is a SQL value") {
            ToSqlOutput::Borrowed(ValueRef::Text(stored)) => assert_eq!(stored, text.as_bytes()),
            other => panic!("{text} is stored as {other:?}, not as its text"),
        }
        let stored = W::column_result(ValueRef::Text(text.as_bytes())).expect("a word reads back");
        assert_eq!(stored, word, "{text}");
    }
    let unknown = "no such word";
    assert_eq!(W::parse(unknown), None);
    assert!(serde_json::from_str::<W>(&format!("\"{unknown}\"")).is_err());
    assert!(W::column_result(ValueRef::Text(unknown.as_bytes())).is_err());
}

/// Declares `enum $name` with one variant per text, `as_str`, `parse`,
/// `Display`, serde (as the text) and SQLite (as TEXT; an unknown stored
/// text is a conversion error naming it, never a panic).
#[macro_export]
macro_rules! words {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($what:literal) {
            $($(#[$vmeta:meta])* $variant:ident => $text:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every word, in the order declared.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The text on the wire and in the database.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The word spelled `text`, if there is one.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl $crate::words::Word for $name {
            const WHAT: &'static str = $what;
            const ALL: &'static [$name] = $name::ALL;
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
            fn parse(text: &str) -> Option<$name> {
                $name::parse(text)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl $crate::words::__serde::Serialize for $name {
            fn serialize<S: $crate::words::__serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> $crate::words::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::words::__serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<$name, D::Error> {
                let text = <::std::borrow::Cow<'de, str> as $crate::words::__serde::Deserialize>::deserialize(deserializer)?;
                $name::parse(&text).ok_or_else(|| {
                    <D::Error as $crate::words::__serde::de::Error>::unknown_variant(
                        &text,
                        &[$($text,)*],
                    )
                })
            }
        }

        impl $crate::words::__rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> $crate::words::__rusqlite::Result<$crate::words::__rusqlite::types::ToSqlOutput<'_>> {
                Ok($crate::words::__rusqlite::types::ToSqlOutput::Borrowed(
                    $crate::words::__rusqlite::types::ValueRef::Text(self.as_str().as_bytes()),
                ))
            }
        }

        impl $crate::words::__rusqlite::types::FromSql for $name {
            fn column_result(
                value: $crate::words::__rusqlite::types::ValueRef<'_>,
            ) -> $crate::words::__rusqlite::types::FromSqlResult<$name> {
                let text = value.as_str()?;
                $name::parse(text).ok_or_else(|| {
                    $crate::words::__rusqlite::types::FromSqlError::Other(Box::new(
                        $crate::words::UnknownWord { what: $what, text: text.to_string() },
                    ))
                })
            }
        }
    };
}

crate::words! {
    /// Where a chat run stands: chatd writes these, and the daemons that
    /// start runs through chatd read them (one spelling for all).
    pub enum ChatRunStatus("run status") {
        Queued => "queued",
        Running => "running",
        /// Waiting for a person to answer a card.
        Waiting => "waiting",
        Done => "done",
        Failed => "failed",
        Stopped => "stopped",
        Interrupted => "interrupted",
        /// The step limit was reached; Continue goes on.
        Paused => "paused",
    }
}

impl ChatRunStatus {
    /// Whether the run has not ended.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            ChatRunStatus::Queued | ChatRunStatus::Running | ChatRunStatus::Waiting
        )
    }
}

#[cfg(test)]
mod tests {
    crate::words! {
        /// A test type.
        enum Colour("colour") {
            Red => "red",
            DarkBlue => "dark.blue",
        }
    }

    #[test]
    fn every_word_reads_back_as_itself() {
        super::check_reads_back::<Colour>();
        assert_eq!(Colour::DarkBlue.to_string(), "dark.blue");
    }

    #[test]
    fn every_chat_run_status_reads_back_and_three_are_active() {
        use super::ChatRunStatus;
        super::check_reads_back::<ChatRunStatus>();
        let active: Vec<_> = ChatRunStatus::ALL
            .iter()
            .filter(|s| s.is_active())
            .collect();
        assert_eq!(
            active,
            [
                &ChatRunStatus::Queued,
                &ChatRunStatus::Running,
                &ChatRunStatus::Waiting
            ]
        );
    }

    #[test]
    fn an_unknown_word_is_named_in_the_error() {
        let err = serde_json::from_str::<Colour>("\"green\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("green") && err.contains("red"), "{err}");
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let err = conn
            .query_row("SELECT 'green'", [], |r| r.get::<_, Colour>(0))
            .unwrap_err();
        assert!(err.to_string().contains("unknown colour `green`"), "{err}");
    }
}
