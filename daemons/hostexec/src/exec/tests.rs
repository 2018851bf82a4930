//! Output cut into text at whole UTF-8 characters.

use super::drive::{take_rest, take_text};

#[test]
fn split_characters_wait_for_their_end() {
    let mut carry = Vec::new();
    let e = "é".as_bytes();
    assert_eq!(take_text(&mut carry, &[b'a', e[0]]), "a");
    assert_eq!(carry, vec![e[0]]);
    assert_eq!(take_text(&mut carry, &[e[1], b'b']), "éb");
    assert!(carry.is_empty());
    let snow = "☃".as_bytes();
    assert_eq!(take_text(&mut carry, &snow[..2]), "");
    assert_eq!(take_rest(&mut carry), "\u{FFFD}");
    assert_eq!(take_text(&mut carry, &[0xff, b'x']), "\u{FFFD}x");
}
