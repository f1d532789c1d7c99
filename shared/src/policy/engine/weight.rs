//! What compiled policies hold in memory, estimated: the proxy's cache of compiled sets is
//! bounded in bytes by it.

use super::{Check, CompiledPolicy, PolicySet};

/// What a compiled custom pattern is counted as holding: its program and its share of the lazy
/// DFA's cache grow with the pattern, and `regex` does not report them.
fn pattern_weight(pattern_len: usize) -> usize {
    16 * 1024 + 64 * pattern_len
}

impl Check {
    /// Bytes the check holds, estimated (see [`PolicySet::weight`]).
    fn weight(&self) -> usize {
        let strings = |v: &[String]| v.iter().map(|s| s.len() + 24).sum::<usize>();
        std::mem::size_of::<Check>()
            + match self {
                Check::Topic { matcher, names, .. } => matcher.memory_usage() + strings(names),
                Check::Models(models) => strings(models),
                Check::Regex { rules, .. } => {
                    rules.iter().map(|r| pattern_weight(r.re.as_str().len()) + r.name.len() + r.label.len()).sum()
                }
                Check::Broken { why, .. } => why.len(),
                Check::Pii { .. } | Check::Injection { .. } | Check::MaxTokens(_) => 0,
            }
    }
}

impl CompiledPolicy {
    /// Bytes the policy holds, estimated.
    pub fn weight(&self) -> usize {
        64 + self.name.len() + self.checks.iter().map(Check::weight).sum::<usize>()
    }
}

impl PolicySet {
    /// Bytes the set holds, estimated from what each check compiled to (phrase automata report
    /// their own size; a custom pattern counts 16 KiB plus 64 bytes per byte of pattern): what
    /// bounds the proxy's cache of compiled sets.
    pub fn weight(&self) -> usize {
        let names = |v: &[String]| v.iter().map(|s| s.len() + 24).sum::<usize>();
        256 + names(&self.defaults)
            + names(&self.mandatory)
            + names(&self.available)
            + self.own.iter().map(|(k, p)| k.len() + 48 + p.weight()).sum::<usize>()
    }
}
