//! One request's placeholders: the same value gets the same placeholder everywhere in the request
//! (`[EMAIL_1]` twice for one address), numbered per type in order of appearance. The originals
//! stay in this value, in memory, for the request's life only (to restore them in the answer when
//! a policy asks); they are never logged or stored.

use std::collections::HashMap;

#[derive(Debug, Default, Clone)]
pub struct Vault {
    by_value: HashMap<(String, String), String>,
    counters: HashMap<String, u32>,
    /// placeholder → original, for restoring.
    originals: Vec<(String, String)>,
}

impl Vault {
    pub fn new() -> Self {
        Self::default()
    }

    /// The placeholder for `value` of type `label`.
    pub fn placeholder(&mut self, label: &str, value: &str) -> String {
        let key = (label.to_string(), value.to_string());
        if let Some(p) = self.by_value.get(&key) {
            return p.clone();
        }
        let n = self.counters.entry(label.to_string()).or_insert(0);
        *n += 1;
        let p = format!("[{label}_{n}]");
        self.originals.push((p.clone(), value.to_string()));
        self.by_value.insert(key, p.clone());
        p
    }

    pub fn is_empty(&self) -> bool {
        self.originals.is_empty()
    }

    /// Placeholders handed out so far.
    pub fn len(&self) -> usize {
        self.originals.len()
    }

    /// Longest placeholder handed out (what a stream must hold back to restore one whole).
    pub fn longest(&self) -> usize {
        self.originals.iter().map(|(p, _)| p.len()).max().unwrap_or(0)
    }

    /// `text` with the first `upto` placeholders handed out put back to their originals.
    pub fn restore(&self, text: &str, upto: usize) -> String {
        let originals = &self.originals[..upto.min(self.originals.len())];
        if originals.is_empty() || !text.contains('[') {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(i) = rest.find('[') {
            out.push_str(&rest[..i]);
            rest = &rest[i..];
            match originals.iter().find(|(p, _)| rest.starts_with(p.as_str())) {
                Some((p, original)) => {
                    out.push_str(original);
                    rest = &rest[p.len()..];
                }
                None => {
                    out.push('[');
                    rest = &rest[1..];
                }
            }
        }
        out.push_str(rest);
        out
    }
}

/// `text` with the byte ranges replaced (sorted, non-overlapping), each by `with(range)`.
pub fn replace_ranges(text: &str, ranges: &[(usize, usize)], mut with: impl FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for &(start, end) in ranges {
        if start < at || end > text.len() {
            continue;
        }
        out.push_str(&text[at..start]);
        out.push_str(&with(&text[start..end]));
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_value_same_placeholder() {
        let mut v = Vault::new();
        assert_eq!(v.placeholder("EMAIL", "a@x.io"), "[EMAIL_1]");
        assert_eq!(v.placeholder("EMAIL", "b@x.io"), "[EMAIL_2]");
        assert_eq!(v.placeholder("EMAIL", "a@x.io"), "[EMAIL_1]");
        assert_eq!(v.placeholder("PHONE", "+1 415 555 2671"), "[PHONE_1]");
        assert_eq!(v.restore("to [EMAIL_2] and [EMAIL_1], [EMAIL_9] [x", 3), "to b@x.io and a@x.io, [EMAIL_9] [x");
        assert_eq!(v.restore("to [EMAIL_2] and [EMAIL_1]", 1), "to [EMAIL_2] and a@x.io");
        assert_eq!(v.longest(), 9);
    }

    #[test]
    fn replaces_ranges() {
        assert_eq!(replace_ranges("abcdef", &[(1, 2), (4, 6)], |s| s.to_uppercase()), "aBcdEF");
        assert_eq!(replace_ranges("héllo", &[], |s| s.into()), "héllo");
    }
}
