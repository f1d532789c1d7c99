//! Policies compiled for use (patterns and automata built once per document version), which of
//! them apply to a request, and running them over a request's texts.

use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, LazyLock};

use regex::Regex;

use super::builtin;
use super::fold;
use super::phrases::{self, PhraseMatcher};
use super::pii::{self, EntitySet};
use super::spec::{compile_pattern, Action, Guardrail, OnError, OrgPolicy, PolicyDef, TopicMode};
use super::vault::Vault;
use super::{PolicyAction, PolicyDecision, Stage};

#[derive(Debug)]
struct Rule {
    name: String,
    /// The placeholder's type: the rule name in capitals.
    label: String,
    re: Regex,
    action: Action,
}

enum Check {
    Pii {
        entities: EntitySet,
        action: Action,
        output: bool,
        restore: bool,
    },
    Topic {
        mode: TopicMode,
        matcher: PhraseMatcher,
        names: Vec<String>,
        action: Action,
    },
    Injection {
        action: Action,
    },
    MaxTokens(u64),
    Models(Vec<String>),
    Regex {
        rules: Arc<[Rule]>,
        output: bool,
    },
    /// A guardrail that could not be built (a stored document this version no longer accepts, a
    /// policy a team names that no longer exists): it fails as its policy's `on_error` says.
    Broken {
        kind: &'static str,
        why: String,
    },
}

impl Check {
    fn kind(&self) -> &'static str {
        match self {
            Check::Pii { .. } => "pii_redact",
            Check::Topic { .. } => "topic_guard",
            Check::Injection { .. } => "prompt_injection",
            Check::MaxTokens(_) => "max_input_tokens",
            Check::Models(_) => "model_allow_list",
            Check::Regex { .. } => "regex",
            Check::Broken { kind, .. } => kind,
        }
    }
}

pub struct CompiledPolicy {
    pub name: Arc<str>,
    pub on_error: OnError,
    checks: Vec<Check>,
}

impl std::fmt::Debug for CompiledPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledPolicy").field("name", &self.name).field("checks", &self.checks.len()).finish()
    }
}

impl CompiledPolicy {
    pub fn compile(def: &PolicyDef) -> Self {
        let checks = def.guardrails.iter().map(compile_check).collect();
        Self { name: def.name.as_str().into(), on_error: def.on_error, checks }
    }

    fn broken(name: &str, why: String) -> Self {
        Self { name: name.into(), on_error: OnError::Block, checks: vec![Check::Broken { kind: "policy", why }] }
    }

    /// Whether a guardrail of the policy reads the prompt's token estimate.
    pub fn counts_tokens(&self) -> bool {
        self.checks.iter().any(|c| matches!(c, Check::MaxTokens(_)))
    }

    /// Whether a guardrail of the policy reads (and may rewrite) the input's text itself, not only
    /// its topics: pre-tokenized input, which gw cannot decode, cannot be checked by it.
    pub fn reads_input_text(&self) -> bool {
        self.checks.iter().any(|c| matches!(c, Check::Pii { .. } | Check::Regex { .. } | Check::Broken { .. }))
    }

    /// Whether every model allow-list of the policy admits `model`.
    pub fn admits_model(&self, model: &str) -> bool {
        self.checks.iter().all(|c| match c {
            Check::Models(models) => model_allowed(models, model),
            _ => true,
        })
    }

    /// Whether the policy looks at answers (output scanning or restoring placeholders).
    pub fn has_output(&self) -> bool {
        self.checks.iter().any(|c| match c {
            Check::Pii { output, restore, action, .. } => *output || (*restore && *action == Action::Redact),
            Check::Regex { output, .. } => *output,
            _ => false,
        })
    }
}

fn compile_check(g: &Guardrail) -> Check {
    match g {
        Guardrail::PiiRedact { entities, action, output, restore } => Check::Pii {
            entities: entities.iter().copied().collect(),
            action: *action,
            output: *output,
            restore: *restore,
        },
        Guardrail::TopicGuard { mode, topics, action } => {
            let phrases = topics.iter().enumerate().flat_map(|(i, t)| t.phrases.iter().map(move |p| (p.as_str(), i)));
            match PhraseMatcher::new(phrases) {
                Ok(matcher) => Check::Topic {
                    mode: *mode,
                    matcher,
                    names: topics.iter().map(|t| t.name.clone()).collect(),
                    action: *action,
                },
                Err(why) => Check::Broken { kind: "topic_guard", why },
            }
        }
        Guardrail::PromptInjection { action } => Check::Injection { action: *action },
        Guardrail::MaxInputTokens { max_tokens } => Check::MaxTokens(*max_tokens),
        Guardrail::ModelAllowList { models } => Check::Models(models.clone()),
        Guardrail::Regex { rules, output } => {
            let mut out = Vec::with_capacity(rules.len());
            for r in rules {
                match compile_pattern(&r.pattern) {
                    Ok(re) => out.push(Rule {
                        name: r.name.clone(),
                        label: r.name.to_ascii_uppercase().replace('-', "_"),
                        re,
                        action: r.action,
                    }),
                    Err(why) => return Check::Broken { kind: "regex", why: format!("rule {}: {why}", r.name) },
                }
            }
            Check::Regex { rules: out.into(), output: *output }
        }
    }
}

static BUILTINS: LazyLock<HashMap<&'static str, Arc<CompiledPolicy>>> = LazyLock::new(|| {
    builtin::NAMES
        .iter()
        .filter_map(|n| builtin::policy(n).map(|d| (*n, Arc::new(CompiledPolicy::compile(&d)))))
        .collect()
});

static INJECTION: LazyLock<Result<PhraseMatcher, String>> =
    LazyLock::new(|| PhraseMatcher::new(builtin::INJECTION_PHRASES.iter().map(|p| (*p, 0))));

/// An organization's policies, compiled: what the proxy caches per organization.
pub struct PolicySet {
    pub version: i64,
    defaults: Vec<String>,
    mandatory: Vec<String>,
    own: HashMap<String, Arc<CompiledPolicy>>,
    available: Vec<String>,
}

impl std::fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySet").field("version", &self.version).finish()
    }
}

impl PolicySet {
    pub fn compile(version: i64, doc: &OrgPolicy) -> Self {
        let own = doc.policies.iter().map(|p| (p.name.clone(), Arc::new(CompiledPolicy::compile(p)))).collect();
        Self {
            version,
            defaults: doc.defaults.clone(),
            mandatory: doc.mandatory.clone(),
            own,
            available: doc.available(),
        }
    }

    /// A document that no longer parses: every request of the organization fails closed.
    pub fn unreadable(version: i64, why: String) -> Self {
        let mut own = HashMap::new();
        own.insert("(organization policy)".to_string(), Arc::new(CompiledPolicy::broken("(organization policy)", why)));
        Self { version, defaults: vec![], mandatory: vec!["(organization policy)".into()], own, available: vec![] }
    }

    /// No document stored: the built-ins, none applied by default.
    pub fn empty() -> Self {
        Self::compile(0, &OrgPolicy::default())
    }

    pub fn get(&self, name: &str) -> Option<Arc<CompiledPolicy>> {
        self.own.get(name).or_else(|| BUILTINS.get(name)).cloned()
    }
}

/// A text of the request a guardrail reads (a message's content or part, its name, a tool call's
/// arguments, an embedding input). Topic and injection checks read user messages only: a system
/// prompt that tells the model what not to discuss must not trip the topic guard.
pub struct Segment<'a> {
    pub user: bool,
    pub text: &'a mut String,
}

/// What the request's policies made of its input.
#[derive(Debug, Default)]
pub struct InputOutcome {
    pub decisions: Vec<PolicyDecision>,
    /// Set when the request must not go on.
    pub stop: Option<Stop>,
    /// Guardrails that failed internally (metric labels: kinds, never values).
    pub failures: Vec<&'static str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A guardrail blocked the request; the reason names policy and cause, never values.
    Blocked { policy: String, guardrail: &'static str, reason: String },
    /// A guardrail failed and its policy fails closed.
    Failed { policy: String, guardrail: &'static str },
}

/// Facts about the request some guardrails need.
pub struct RequestFacts<'a> {
    pub model: &'a str,
    pub prompt_tokens: u64,
}

fn counts_reason(verb: &str, counts: &BTreeMap<String, u32>) -> String {
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} ({n})")).collect();
    format!("{verb} {}", parts.join(", "))
}

fn decision(
    policy: &CompiledPolicy,
    guardrail: &'static str,
    action: PolicyAction,
    stage: Stage,
    reason: String,
    counts: BTreeMap<String, u32>,
) -> PolicyDecision {
    PolicyDecision {
        policy: policy.name.to_string(),
        guardrail,
        action,
        stage,
        reason,
        entities: counts.into_iter().collect(),
    }
}

fn model_allowed(models: &[String], model: &str) -> bool {
    models.iter().any(|m| match m.strip_suffix('*') {
        Some(prefix) => model.starts_with(prefix),
        None => m == model,
    })
}

/// Runs every policy's input guardrails, in order, until one blocks. Redactions rewrite the
/// segments in place; placeholders come from `vault`.
pub fn run_input(
    policies: &[Arc<CompiledPolicy>],
    segments: &mut [Segment<'_>],
    facts: &RequestFacts<'_>,
    vault: &mut Vault,
) -> InputOutcome {
    let mut out = InputOutcome::default();
    // User texts folded once, for every topic and injection check.
    let mut user_texts: Option<Vec<String>> = None;
    for policy in policies {
        for check in &policy.checks {
            let result =
                catch_unwind(AssertUnwindSafe(|| run_check(policy, check, segments, facts, vault, &mut user_texts)));
            match result {
                Ok(Ok(Some(d))) => {
                    let blocked = d.action == PolicyAction::Blocked;
                    if blocked {
                        out.stop = Some(Stop::Blocked {
                            policy: d.policy.clone(),
                            guardrail: d.guardrail,
                            reason: d.reason.clone(),
                        });
                    }
                    out.decisions.push(d);
                    if blocked {
                        return out;
                    }
                }
                Ok(Ok(None)) => {}
                Ok(Err(why)) => {
                    if fail(policy, check.kind(), why, &mut out) {
                        return out;
                    }
                }
                Err(_) => {
                    if fail(policy, check.kind(), "panicked".into(), &mut out) {
                        return out;
                    }
                }
            }
        }
    }
    out
}

/// Records a guardrail failure; true when the request must stop (the policy fails closed).
fn fail(policy: &CompiledPolicy, kind: &'static str, why: String, out: &mut InputOutcome) -> bool {
    log::error!("policy '{}': guardrail {kind} failed: {why}", policy.name);
    out.failures.push(kind);
    let closed = policy.on_error == OnError::Block;
    out.decisions.push(PolicyDecision {
        policy: policy.name.to_string(),
        guardrail: kind,
        action: if closed { PolicyAction::Blocked } else { PolicyAction::Flagged },
        stage: Stage::Input,
        reason: format!("guardrail {kind} failed; the policy {}", if closed { "fails closed" } else { "fails open" }),
        entities: vec![],
    });
    if closed {
        out.stop = Some(Stop::Failed { policy: policy.name.to_string(), guardrail: kind });
    }
    closed
}

fn action_of(a: Action) -> PolicyAction {
    match a {
        Action::Redact => PolicyAction::Redacted,
        Action::Block => PolicyAction::Blocked,
        Action::Flag => PolicyAction::Flagged,
    }
}

fn run_check(
    policy: &CompiledPolicy,
    check: &Check,
    segments: &mut [Segment<'_>],
    facts: &RequestFacts<'_>,
    vault: &mut Vault,
    user_texts: &mut Option<Vec<String>>,
) -> Result<Option<PolicyDecision>, String> {
    let stage = Stage::Input;
    match check {
        Check::Broken { why, .. } => Err(why.clone()),
        Check::Pii { entities, action, .. } => {
            let detector = pii::detector().ok_or("the PII detector did not compile")?;
            let mut counts: BTreeMap<String, u32> = BTreeMap::new();
            for seg in segments.iter_mut() {
                let folded = fold::fold(seg.text);
                let spans = detector.find(folded.as_str(), *entities);
                if spans.is_empty() {
                    continue;
                }
                for s in &spans {
                    *counts.entry(s.entity.label().to_string()).or_default() += 1;
                }
                if *action == Action::Redact {
                    let ranges: Vec<(usize, usize)> = spans.iter().map(|s| (s.start, s.end)).collect();
                    // The folded value names it: one placeholder however it was spelled.
                    let text = folded.replace(&ranges, |i, v| vault.placeholder(spans[i].entity.label(), v));
                    drop(folded);
                    *seg.text = text;
                }
            }
            if counts.is_empty() {
                return Ok(None);
            }
            let verb = if *action == Action::Redact { "redacted" } else { "found" };
            Ok(Some(decision(policy, "pii_redact", action_of(*action), stage, counts_reason(verb, &counts), counts)))
        }
        Check::Regex { rules, .. } => {
            let mut counts: BTreeMap<String, u32> = BTreeMap::new();
            let mut strongest: Option<Action> = None;
            for seg in segments.iter_mut() {
                // Folded once per text, again only after a rule rewrote it.
                let mut folded = fold::fold(seg.text);
                for rule in rules.iter() {
                    let ranges: Vec<(usize, usize)> =
                        rule.re.find_iter(folded.as_str()).map(|m| (m.start(), m.end())).collect();
                    if ranges.is_empty() {
                        continue;
                    }
                    *counts.entry(rule.name.clone()).or_default() += ranges.len() as u32;
                    strongest = Some(stronger(strongest, rule.action));
                    if rule.action == Action::Redact {
                        let text = folded.replace(&ranges, |_, v| vault.placeholder(&rule.label, v));
                        drop(folded);
                        *seg.text = text;
                        folded = fold::fold(seg.text);
                    }
                }
            }
            let Some(action) = strongest else { return Ok(None) };
            let verb = if action == Action::Redact { "redacted" } else { "matched" };
            Ok(Some(decision(policy, "regex", action_of(action), stage, counts_reason(verb, &counts), counts)))
        }
        Check::Topic { mode, matcher, names, action } => {
            let texts = user_texts
                .get_or_insert_with(|| segments.iter().filter(|s| s.user).map(|s| phrases::fold(s.text)).collect());
            let mut hit: Vec<usize> = Vec::new();
            for t in texts.iter() {
                for g in matcher.groups_in_folded(t) {
                    if !hit.contains(&g) {
                        hit.push(g);
                    }
                }
            }
            hit.sort_unstable();
            let reason = match mode {
                TopicMode::Deny if !hit.is_empty() => {
                    let named: Vec<String> =
                        hit.iter().filter_map(|g| names.get(*g)).map(|n| format!("'{n}'")).collect();
                    format!("topic {} is not allowed", named.join(", "))
                }
                TopicMode::Allow if hit.is_empty() && !texts.is_empty() => {
                    format!("the request is outside the allowed topics ({})", names.join(", "))
                }
                _ => return Ok(None),
            };
            let counts = hit.iter().filter_map(|g| names.get(*g)).map(|n| (n.clone(), 1)).collect();
            Ok(Some(decision(policy, "topic_guard", action_of(*action), stage, reason, counts)))
        }
        Check::Injection { action } => {
            let matcher = INJECTION.as_ref().map_err(Clone::clone)?;
            let texts = user_texts
                .get_or_insert_with(|| segments.iter().filter(|s| s.user).map(|s| phrases::fold(s.text)).collect());
            let hits = texts.iter().filter(|t| !matcher.groups_in_folded(t).is_empty()).count();
            if hits == 0 {
                return Ok(None);
            }
            let reason = "a user message reads like a prompt injection".to_string();
            Ok(Some(decision(policy, "prompt_injection", action_of(*action), stage, reason, BTreeMap::new())))
        }
        Check::MaxTokens(max) => {
            if facts.prompt_tokens <= *max {
                return Ok(None);
            }
            let reason = format!("the prompt has about {} tokens; the policy allows {max}", facts.prompt_tokens);
            Ok(Some(decision(policy, "max_input_tokens", PolicyAction::Blocked, stage, reason, BTreeMap::new())))
        }
        Check::Models(models) => {
            if model_allowed(models, facts.model) {
                return Ok(None);
            }
            let reason =
                format!("model '{}' is not allowed by this policy", crate::openai::validate::echo(facts.model));
            Ok(Some(decision(policy, "model_allow_list", PolicyAction::Blocked, stage, reason, BTreeMap::new())))
        }
    }
}

fn stronger(a: Option<Action>, b: Action) -> Action {
    let rank = |x: Action| match x {
        Action::Flag => 0,
        Action::Redact => 1,
        Action::Block => 2,
    };
    match a {
        Some(a) if rank(a) >= rank(b) => a,
        _ => b,
    }
}

mod output;
mod resolve;
#[cfg(test)]
mod tests;
mod weight;

pub use output::{OutSpan, OutputBlocked, OutputGuard};
pub use resolve::{ResolveError, TeamPolicies, MAX_HEADER_POLICIES};
pub use weight::{compiled_size, scan_work, MAX_COMPILED_BYTES};
