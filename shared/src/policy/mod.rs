//! The policy engine: policies (named, versioned sets of guardrails) from the organization's
//! document, resolved per request, run over the request's texts and the answer; and the decisions
//! they make, as the request context, the `x-gw-policy-*` headers and the audit row report them.

pub mod answer;
pub mod builtin;
pub mod engine;
pub mod fold;
pub mod phrases;
pub mod pii;
pub mod spec;
pub mod stream;
pub mod vault;

/// What a guardrail did to a request, strongest last in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PolicyAction {
    Flagged,
    Redacted,
    Blocked,
}

impl PolicyAction {
    pub fn label(self) -> &'static str {
        match self {
            PolicyAction::Flagged => "flagged",
            PolicyAction::Redacted => "redacted",
            PolicyAction::Blocked => "blocked",
        }
    }
}

/// One guardrail decision, as the audit row and `x-gw-policy-*` report it. `reason` names
/// entity types and counts, never the values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDecision {
    pub policy: String,
    pub guardrail: &'static str,
    pub action: PolicyAction,
    pub stage: Stage,
    pub reason: String,
    /// Entity types (or rule names, or topics) and how often each matched.
    pub entities: Vec<(String, u32)>,
}

/// Whether a decision was about the prompt or the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Input,
    Output,
}

impl Stage {
    pub fn label(self) -> &'static str {
        match self {
            Stage::Input => "input",
            Stage::Output => "output",
        }
    }
}
