//! What compiled policies cost, estimated: the memory they hold (the proxy's cache of compiled
//! sets is bounded in bytes by it) and the passes they make over a request's text (the proxy's
//! per-request scan budget is stated in bytes times passes).

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

impl Check {
    /// Passes over the input's text the check makes: one per pattern it runs. PII detection runs
    /// one pattern per entity type it looks for (phone numbers two); topics and injection phrases
    /// are one automaton each.
    fn scan_passes(&self) -> u64 {
        match self {
            Check::Regex { rules, .. } => rules.len() as u64,
            Check::Pii { entities, .. } => entities.iter().count() as u64 + 1,
            Check::Topic { .. } | Check::Injection { .. } => 1,
            Check::MaxTokens(_) | Check::Models(_) | Check::Broken { .. } => 0,
        }
    }
}

/// Most bytes one organization's compiled policies may hold, by [`PolicySet::weight`]'s estimate:
/// checked when a document is stored, so a set the proxies would have to hold is refused there.
/// A document at every other cap (20,000 phrases of 200 bytes, 200 rules sharing 64 KiB) is
/// estimated at 52 MiB (`tests.rs`: `a_document_at_every_cap_compiles_below_the_compiled_cap`),
/// mostly its phrase automata; this cap bounds what the document caps do not see.
pub const MAX_COMPILED_BYTES: usize = 64 * 1024 * 1024;

/// Whether `doc` compiles within [`MAX_COMPILED_BYTES`]; its estimated size either way.
pub fn compiled_size(doc: &crate::policy::spec::OrgPolicy) -> (bool, usize) {
    let w = PolicySet::compile(0, doc).weight();
    (w <= MAX_COMPILED_BYTES, w)
}

/// The work running `policies` over `text_bytes` bytes of input costs: bytes times passes, what
/// the proxy's scan budget is stated in.
pub fn scan_work(policies: &[std::sync::Arc<CompiledPolicy>], text_bytes: u64) -> u64 {
    let passes: u64 = policies.iter().flat_map(|p| p.checks.iter()).map(Check::scan_passes).sum();
    text_bytes.saturating_mul(passes)
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
