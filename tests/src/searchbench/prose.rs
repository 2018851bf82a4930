//! Figure 16's words: prose of made-up words with Zipf frequencies (a few
//! words on most lines, most words rare) and each document's word of its own.

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Prose of made-up words, a few very common and most rare (Zipf).
pub(super) struct Prose {
    /// The vocabulary, most frequent first.
    pub(super) words: Vec<String>,
    /// Cumulative weights of `words`, for sampling.
    cumulative: Vec<f64>,
    rng: StdRng,
}

impl Prose {
    pub(super) fn new(vocabulary: usize, seed: u64) -> Prose {
        let syllables: Vec<String> = b"bdfghklmnprstvz"
            .iter()
            .flat_map(|c| {
                b"aeiou"
                    .iter()
                    .map(move |v| format!("{}{}", *c as char, *v as char))
            })
            .collect();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut seen = HashSet::new();
        let mut words = Vec::with_capacity(vocabulary);
        while words.len() < vocabulary {
            let n = rng.random_range(2..=3);
            let word: String = (0..n)
                .map(|_| syllables[rng.random_range(0..syllables.len())].as_str())
                .collect();
            if seen.insert(word.clone()) {
                words.push(word);
            }
        }
        let mut total = 0.0;
        let cumulative = (1..=vocabulary)
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect();
        Prose {
            words,
            cumulative,
            rng,
        }
    }

    pub(super) fn word(&mut self) -> &str {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let at = self.rng.random_range(0.0..total);
        let i = self.cumulative.partition_point(|c| *c < at);
        &self.words[i.min(self.words.len() - 1)]
    }

    /// A sentence of 6 to 12 words, its first one capitalised.
    pub(super) fn line(&mut self) -> String {
        let n = self.rng.random_range(6..=12);
        let mut line = String::new();
        for i in 0..n {
            let word = self.word().to_string();
            if i == 0 {
                let mut chars = word.chars();
                line.extend(chars.next().map(|c| c.to_ascii_uppercase()));
                line.push_str(chars.as_str());
            } else {
                line.push(' ');
                line.push_str(&word);
            }
        }
        line.push('.');
        line
    }

    pub(super) fn lines(&mut self, n: usize) -> Vec<String> {
        (0..n).map(|_| self.line()).collect()
    }
}

/// Document `k`'s word of its own: `qx` and three letters, all the same
/// length, so none is inside another.
pub(super) fn tag(k: usize) -> String {
    let letter = |n: usize| (b'a' + (n % 26) as u8) as char;
    format!("qx{}{}{}", letter(k / 676), letter(k / 26), letter(k))
}
