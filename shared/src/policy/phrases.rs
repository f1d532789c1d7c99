//! Phrase matching for topic guards and the prompt-injection heuristic: one Aho-Corasick automaton
//! over folded phrases, matched on word boundaries. Folding (NFKC, format characters such as
//! zero-width spaces dropped, lower case, runs of whitespace as one space) is applied to phrases
//! and text alike, so `Ｃａｒｄｉｎａｌ`, `CARD\u{200B}INAL` and `cardinal` are one word, and
//! `ignore   previous` matches `ignore previous`. Word boundaries keep `art` from matching inside
//! `start`.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use unicode_normalization::UnicodeNormalization;

use super::fold::is_format;

pub struct PhraseMatcher {
    ac: AhoCorasick,
    /// The group (topic) of each pattern, by pattern index.
    groups: Vec<usize>,
}

impl PhraseMatcher {
    /// Heap bytes the matcher holds.
    pub fn memory_usage(&self) -> usize {
        self.ac.memory_usage() + self.groups.len() * std::mem::size_of::<usize>()
    }
}

/// Text folded for matching.
pub fn fold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    let mut push = |c: char, out: &mut String| {
        if c.is_whitespace() {
            space = true;
            return;
        }
        if space && !out.is_empty() {
            out.push(' ');
        }
        space = false;
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else {
            out.extend(c.to_lowercase());
        }
    };
    if text.is_ascii() {
        for c in text.chars() {
            push(c, &mut out);
        }
    } else {
        for c in text.nfkc().filter(|&c| !is_format(c)) {
            push(c, &mut out);
        }
    }
    out
}

/// A character that continues a word. Scripts written without spaces between words (Chinese,
/// Japanese kana, Thai) have no word boundaries to check.
fn is_word(c: char) -> bool {
    (c.is_alphanumeric() || c == '_') && !spaceless(c)
}

fn spaceless(c: char) -> bool {
    matches!(c as u32, 0x0E00..=0x0E7F | 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF)
}

impl PhraseMatcher {
    /// `phrases`: each phrase with its group. Empty phrases (after folding) are skipped.
    pub fn new<'a>(phrases: impl IntoIterator<Item = (&'a str, usize)>) -> Result<Self, String> {
        let mut patterns = Vec::new();
        let mut groups = Vec::new();
        for (p, g) in phrases {
            let f = fold(p);
            if !f.is_empty() {
                patterns.push(f);
                groups.push(g);
            }
        }
        let ac = AhoCorasickBuilder::new()
            .match_kind(MatchKind::Standard)
            .build(&patterns)
            .map_err(|e| format!("phrase automaton: {e}"))?;
        Ok(Self { ac, groups })
    }

    /// The groups with a phrase in the (already folded) text on word boundaries, ascending,
    /// each once.
    pub fn groups_in_folded(&self, folded: &str) -> Vec<usize> {
        let mut found: Vec<usize> = Vec::new();
        for m in self.ac.find_overlapping_iter(folded) {
            let before = folded[..m.start()].chars().next_back();
            let after = folded[m.end()..].chars().next();
            let first = folded[m.start()..].chars().next();
            let last = folded[..m.end()].chars().next_back();
            // A boundary is only needed where the phrase itself starts or ends with a word char.
            let left_ok = !(first.is_some_and(is_word) && before.is_some_and(is_word));
            let right_ok = !(last.is_some_and(is_word) && after.is_some_and(is_word));
            if left_ok && right_ok {
                let g = self.groups[m.pattern().as_usize()];
                if !found.contains(&g) {
                    found.push(g);
                }
            }
        }
        found.sort_unstable();
        found
    }

    pub fn groups_in(&self, text: &str) -> Vec<usize> {
        self.groups_in_folded(&fold(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(phrases: &[(&str, usize)]) -> PhraseMatcher {
        PhraseMatcher::new(phrases.iter().copied()).unwrap()
    }

    #[test]
    fn folds_case_width_and_spacing() {
        assert_eq!(fold("  Ignore\tPREVIOUS\n\n instructions "), "ignore previous instructions");
        assert_eq!(fold("Ｃａｒｄｉｎａｌ"), "cardinal");
        assert_eq!(fold("ÉCOLE"), "école");
        assert_eq!(fold("ig\u{200B}nore pre\u{AD}vious\u{2066}"), "ignore previous");
    }

    #[test]
    fn word_boundaries() {
        let x = m(&[("art", 0), ("gun", 1)]);
        assert!(x.groups_in("start the party").is_empty());
        assert!(x.groups_in("begun").is_empty());
        assert_eq!(x.groups_in("modern ART, guns? no: a gun."), vec![0, 1]);
        assert_eq!(x.groups_in("(art)"), vec![0]);
    }

    #[test]
    fn multi_word_and_unicode() {
        let x = m(&[("stock tips", 0), ("café", 1), ("日本", 2)]);
        assert_eq!(x.groups_in("Any  STOCK\ntips today?"), vec![0]);
        assert_eq!(x.groups_in("le CAFÉ du coin"), vec![1]);
        assert_eq!(x.groups_in("日本の首都"), vec![2], "no word boundaries inside CJK runs");
    }

    #[test]
    fn overlapping_candidates_are_all_checked() {
        // The first candidate fails its boundary; a later overlapping one must still count.
        let x = m(&[("x-y", 0), ("-y z", 1)]);
        assert_eq!(x.groups_in("ax-y z"), vec![1]);
    }
}
