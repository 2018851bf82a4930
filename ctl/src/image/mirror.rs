//! The Debian mirror of this machine's apt sources (one-line and deb822
//! files), else deb.debian.org.

use std::fs;
use std::path::PathBuf;

use super::{DEFAULT_MIRROR, SUITE};

/// The Debian mirror of this machine's apt sources, else deb.debian.org.
pub(super) fn host_mirror() -> String {
    let list = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    let mut deb822 = Vec::new();
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            let text = fs::read_to_string(&path).unwrap_or_default();
            match path.extension().and_then(|e| e.to_str()) {
                Some("sources") => deb822.push(text),
                // One-line entries in a .list file read like sources.list.
                Some("list") => deb822.push(one_line_as_deb822(&text)),
                _ => {}
            }
        }
    }
    let mut all = vec![one_line_as_deb822(&list)];
    all.extend(deb822);
    mirror_from(&all).unwrap_or_else(|| DEFAULT_MIRROR.to_string())
}

/// `deb [options] URI SUITE COMPONENTS…` lines as deb822 paragraphs.
pub(super) fn one_line_as_deb822(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        if words.next() != Some("deb") {
            continue;
        }
        let mut word = words.next();
        if word.is_some_and(|w| w.starts_with('[')) {
            // Options: skip to the word that closes them.
            while let Some(w) = word {
                word = words.next();
                if w.ends_with(']') {
                    break;
                }
            }
        }
        let (Some(uri), Some(suite)) = (word, words.next()) else {
            continue;
        };
        out.push_str(&format!("Types: deb\nURIs: {uri}\nSuites: {suite}\n\n"));
    }
    out
}

/// The first `deb` source naming suite bookworm, else the first that is
/// not a security archive.
pub(super) fn mirror_from(texts: &[String]) -> Option<String> {
    let mut sources: Vec<(String, Vec<String>)> = Vec::new();
    for text in texts {
        for paragraph in text.split("\n\n") {
            let mut types = Vec::new();
            let mut uris = Vec::new();
            let mut suites = Vec::new();
            let mut enabled = true;
            for line in paragraph.lines() {
                if line.trim_start().starts_with('#') {
                    continue;
                }
                let Some((key, value)) = line.split_once(':') else {
                    continue;
                };
                let words = value.split_whitespace().map(str::to_string);
                match key.trim().to_ascii_lowercase().as_str() {
                    "types" => types.extend(words),
                    "uris" => uris.extend(words),
                    "suites" => suites.extend(words),
                    "enabled" => enabled = value.trim() != "no",
                    _ => {}
                }
            }
            if !enabled || !types.iter().any(|t| t == "deb") {
                continue;
            }
            for uri in uris {
                if uri.starts_with("http://")
                    || uri.starts_with("https://")
                    || uri.starts_with("file:")
                {
                    sources.push((uri.trim_end_matches('/').to_string(), suites.clone()));
                }
            }
        }
    }
    let named = sources
        .iter()
        .find(|(_, suites)| suites.iter().any(|s| s == SUITE));
    let plain = || {
        sources.iter().find(|(uri, suites)| {
            !uri.contains("security") && !suites.iter().any(|s| s.ends_with("-security"))
        })
    };
    named.or_else(plain).map(|(uri, _)| uri.clone())
}
