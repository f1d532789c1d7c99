//! The answer side of a request's policies: scanning, redacting and restoring what the model says.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;

/// One match in an answer: where, what to call it, and what to do.
#[derive(Debug, Clone)]
pub struct OutSpan {
    pub start: usize,
    pub end: usize,
    check: usize,
    label: String,
    action: Action,
}

impl OutSpan {
    pub fn blocks(&self) -> bool {
        self.action == Action::Block
    }
}

#[derive(Clone)]
enum OutCheck {
    Pii { entities: EntitySet, action: Action },
    Rules(Arc<[Rule]>),
}

/// The answer side of a request's policies: scans (and redacts) what the model says, and puts
/// the caller's own values back where the policy restores them. Cloned per attempt.
#[derive(Clone)]
pub struct OutputGuard {
    checks: Vec<(Arc<str>, &'static str, OutCheck)>,
    vault: Vault,
    restore: bool,
    /// Placeholders the request's own values got (only these are restored; the model's own
    /// values, redacted on the way out, stay redacted).
    restorable: usize,
    /// Matches counted per check, by label.
    counts: Vec<BTreeMap<String, u32>>,
    strongest: Vec<Option<Action>>,
}

/// An answer's match whose policy blocks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputBlocked {
    pub policy: String,
    pub guardrail: &'static str,
    pub reason: String,
}

impl OutputGuard {
    /// `None` when no policy looks at answers.
    pub fn new(policies: &[Arc<CompiledPolicy>], vault: Vault) -> Option<Self> {
        let mut checks = Vec::new();
        let mut restore = false;
        for p in policies {
            for c in &p.checks {
                match c {
                    Check::Pii { entities, action, output, restore: r } => {
                        if *output {
                            checks.push((
                                p.name.clone(),
                                "pii_redact",
                                OutCheck::Pii { entities: *entities, action: *action },
                            ));
                        }
                        restore |= *r && *action == Action::Redact;
                    }
                    Check::Regex { rules, output: true } => {
                        checks.push((p.name.clone(), "regex", OutCheck::Rules(rules.clone())));
                    }
                    _ => {}
                }
            }
        }
        let restore = restore && !vault.is_empty();
        if checks.is_empty() && !restore {
            return None;
        }
        let n = checks.len();
        let restorable = vault.len();
        Some(Self { checks, vault, restore, restorable, counts: vec![BTreeMap::new(); n], strongest: vec![None; n] })
    }

    /// Every match in `text` (found in its folded form, see [`fold`]), as byte ranges of `text`,
    /// sorted, non-overlapping (the earlier start wins).
    pub fn scan(&self, text: &str) -> Vec<OutSpan> {
        let folded = fold::fold(text);
        let text = folded.as_str();
        let mut spans: Vec<OutSpan> = Vec::new();
        for (i, (_, _, check)) in self.checks.iter().enumerate() {
            match check {
                OutCheck::Pii { entities, action } => {
                    if let Some(d) = pii::detector() {
                        spans.extend(d.find(text, *entities).into_iter().map(|s| OutSpan {
                            start: s.start,
                            end: s.end,
                            check: i,
                            label: s.entity.label().to_string(),
                            action: *action,
                        }));
                    }
                }
                OutCheck::Rules(rules) => {
                    for r in rules.iter() {
                        spans.extend(r.re.find_iter(text).map(|m| OutSpan {
                            start: m.start(),
                            end: m.end(),
                            check: i,
                            label: r.label.clone(),
                            action: r.action,
                        }));
                    }
                }
            }
        }
        spans.sort_by_key(|s| (s.start, std::cmp::Reverse(s.end)));
        let mut out: Vec<OutSpan> = Vec::with_capacity(spans.len());
        for s in spans {
            if out.last().is_none_or(|l| s.start >= l.end) {
                out.push(s);
            }
        }
        if folded.is_unchanged() {
            return out;
        }
        // Back to the original's offsets. Two values that meet inside one character that folded
        // into several map onto it both: the later one starts where the earlier ends, and is only
        // kept (empty) when it blocks.
        let mut at = 0;
        out.retain_mut(|s| {
            let (start, end) = folded.original_range(s.start, s.end);
            s.start = start.max(at);
            s.end = end.max(s.start);
            at = s.end;
            s.end > s.start || s.blocks()
        });
        out
    }

    /// Whether the guard looks for values in answers (not only restoring placeholders).
    pub fn scans(&self) -> bool {
        !self.checks.is_empty()
    }

    /// `text` (whose matches are `spans`) as the client may see it: redacted, counted, and with
    /// the caller's values restored; an error when a match blocks.
    pub fn apply(&mut self, text: &str, spans: &[OutSpan]) -> Result<String, OutputBlocked> {
        for s in spans {
            *self.counts[s.check].entry(s.label.clone()).or_default() += 1;
            self.strongest[s.check] = Some(stronger(self.strongest[s.check], s.action));
            if s.action == Action::Block {
                let (policy, guardrail, _) = &self.checks[s.check];
                return Err(OutputBlocked {
                    policy: policy.to_string(),
                    guardrail,
                    reason: format!("the answer contained {}", s.label),
                });
            }
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for s in spans {
            out.push_str(&text[at..s.start]);
            if s.action == Action::Redact {
                // Named by its folded form, as on the way in.
                out.push_str(&self.vault.placeholder(&s.label, fold::fold(&text[s.start..s.end]).as_str()));
            } else {
                out.push_str(&text[s.start..s.end]);
            }
            at = s.end;
        }
        out.push_str(&text[at..]);
        if self.restore {
            out = self.vault.restore(&out, self.restorable);
        }
        Ok(out)
    }

    /// A complete text, scanned and applied.
    pub fn text(&mut self, text: &str) -> Result<String, OutputBlocked> {
        let spans = self.scan(text);
        self.apply(text, &spans)
    }

    pub fn restores(&self) -> bool {
        self.restore
    }

    /// Longest placeholder a stream must hold back to restore it whole.
    pub fn placeholder_len(&self) -> usize {
        if self.restore {
            self.vault.longest()
        } else {
            0
        }
    }

    /// The decisions the answer's matches amount to.
    pub fn decisions(&self) -> Vec<PolicyDecision> {
        let mut out = Vec::new();
        for (i, (policy, guardrail, _)) in self.checks.iter().enumerate() {
            let Some(action) = self.strongest[i] else { continue };
            let counts = &self.counts[i];
            let verb = match action {
                Action::Redact => "redacted in the answer:",
                Action::Block => "blocked the answer:",
                Action::Flag => "found in the answer:",
            };
            out.push(PolicyDecision {
                policy: policy.to_string(),
                guardrail,
                action: action_of(action),
                stage: Stage::Output,
                reason: counts_reason(verb, counts),
                entities: counts.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            });
        }
        out
    }
}
