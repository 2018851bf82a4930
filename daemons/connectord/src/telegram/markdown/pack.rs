//! Units packed into parts of at most the limit, each valid on its own: a
//! code block cut at a part boundary is closed there and reopened with its
//! language in the next part.

use super::units::{Kind, Unit};

/// Units into parts of at most `limit`: (the sent text, its plain text).
/// A part with nothing but blanks in its sent text is left out.
pub(super) fn pack(units: &[Unit], limit: usize) -> Vec<(String, String)> {
    let mut parts = Vec::new();
    let mut i = 0;
    // The Open unit of the block units[i] is inside, if any.
    let mut open: Option<usize> = None;
    while i < units.len() {
        if open.is_none() && units[i].kind == Kind::Blank {
            i += 1;
            continue;
        }
        if open.is_some() && units[i].kind == Kind::Close {
            // The block ended exactly at the cut: nothing to reopen.
            open = None;
            i += 1;
            continue;
        }
        let start_open = open;
        let mut cost = start_open.map_or(0, |o| units[o].len);
        // (index after the unit, block open after it, cost so far)
        let mut taken: Vec<(usize, Option<usize>, usize)> = Vec::new();
        let mut paragraph: Option<usize> = None;
        let mut j = i;
        while j < units.len() {
            let unit = &units[j];
            let sep = usize::from(start_open.is_some() || !taken.is_empty());
            let after = match unit.kind {
                Kind::Open { .. } => Some(j),
                Kind::Close => None,
                _ => taken.last().map_or(start_open, |t| t.1),
            };
            let reserve = after.map_or(0, |o| 1 + close_of(&units[o]).len());
            if !taken.is_empty() && cost + sep + unit.len + reserve > limit {
                break;
            }
            let outside = taken.last().map_or(start_open, |t| t.1).is_none();
            // Before a block or after a blank line: a good place to cut.
            if outside
                && !taken.is_empty()
                && (unit.kind == Kind::Blank || matches!(unit.kind, Kind::Open { .. }))
                && cost * 2 >= limit
            {
                paragraph = Some(taken.len());
            }
            cost += sep + unit.len;
            taken.push((j + 1, after, cost));
            j += 1;
        }
        let mut keep = if j < units.len() {
            paragraph.unwrap_or(taken.len())
        } else {
            taken.len()
        };
        // Never end a part on a block's opening line.
        while keep > 1 && matches!(units[taken[keep - 1].0 - 1].kind, Kind::Open { .. }) {
            keep -= 1;
        }
        let (end, end_open, _) = taken[keep - 1];
        parts.push(render_part(units, i, end, start_open, end_open));
        i = end;
        open = end_open;
    }
    parts.retain(|(out, _)| !out.trim().is_empty());
    parts
}

fn close_of(unit: &Unit) -> &str {
    match &unit.kind {
        Kind::Open { close } => close,
        _ => "",
    }
}

fn render_part(
    units: &[Unit],
    start: usize,
    mut end: usize,
    reopen: Option<usize>,
    still_open: Option<usize>,
) -> (String, String) {
    if still_open.is_none() {
        while end > start && units[end - 1].kind == Kind::Blank {
            end -= 1;
        }
    }
    let mut out: Vec<&str> = Vec::new();
    let mut plain: Vec<&str> = Vec::new();
    if let Some(o) = reopen {
        out.push(&units[o].out);
    }
    for unit in &units[start..end] {
        out.push(&unit.out);
        if let Some(p) = &unit.plain {
            plain.push(p);
        }
    }
    if let Some(o) = still_open {
        out.push(close_of(&units[o]));
    }
    (out.join("\n"), plain.join("\n"))
}
