//! Reading the agent's Markdown, the parts both platforms' converters
//! (Telegram's MarkdownV2, Slack's mrkdwn) scan the same way.

/// The length of the run of `c` starting at `i`.
pub fn run_len(s: &[char], i: usize, c: char) -> usize {
    s[i..].iter().take_while(|&&x| x == c).count()
}

/// The start of a run of exactly `n` backticks at or after `from`: the end
/// of a code span opened by `n` backticks.
pub fn code_close(s: &[char], from: usize, n: usize) -> Option<usize> {
    let mut j = from;
    while j < s.len() {
        if s[j] == '`' {
            let m = run_len(s, j, '`');
            if m == n {
                return Some(j);
            }
            j += m;
        } else {
            j += 1;
        }
    }
    None
}

/// A thematic break: three or more of one of `-`, `*`, `_`, spaces aside.
pub fn is_rule(line: &str) -> bool {
    let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    compact.chars().count() >= 3
        && ['-', '*', '_']
            .iter()
            .any(|&m| compact.chars().all(|c| c == m))
}
