//! NDJSON streams (egressd's cards, hostexecd's output) cut into their JSON
//! lines as chunks come.

use serde_json::Value;

/// An NDJSON stream cut into its JSON lines as chunks come (egressd's cards,
/// hostexecd's output).
#[derive(Default)]
pub struct Lines {
    buffer: Vec<u8>,
}

impl Lines {
    /// The whole lines `chunk` completes; a line that is not JSON is skipped.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Value> {
        self.buffer.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            if let Ok(event) = serde_json::from_slice::<Value>(&line) {
                out.push(event);
            }
        }
        // No line of these streams comes near 1 MiB: a runaway one is dropped.
        if self.buffer.len() > 1 << 20 {
            self.buffer.clear();
        }
        out
    }
}
