//! Policy decisions as the request context, the `x-gw-policy-*` headers and the audit row
//! report them (the guardrails themselves arrive with the policy engine).

/// Policies a team may name as its defaults (`default_policies`); the policy engine that
/// applies them arrives later.
pub const KNOWN_POLICIES: &[&str] = &["pii_redact", "topic_guard"];

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
    pub reason: String,
}
