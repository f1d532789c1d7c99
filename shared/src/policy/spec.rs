//! The policy document an organization stores, versioned, as JSON: its own named policies (each a
//! list of guardrails), the ones every request gets by default, and the mandatory ones no team or
//! request can switch off. Validated whole before it is stored; the proxy compiles it once per
//! version (`super::engine`).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::pii::Entity;

pub const MAX_POLICIES: usize = 50;
pub const MAX_GUARDRAILS: usize = 20;
pub const MAX_TOPICS: usize = 100;
/// Phrases of one topic guard, over all its topics.
pub const MAX_PHRASES: usize = 5_000;
pub const MAX_PHRASE_LEN: usize = 200;
pub const MAX_REGEX_RULES: usize = 50;
pub const MAX_PATTERN_LEN: usize = 1_000;
/// Compiled size of one custom regex: big enough for any sane rule, small enough that a rule
/// cannot cost the proxy megabytes per organization.
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Regex rules of a whole document (every policy, every guardrail): each rule is run over
/// every message of every request the policy applies to, so the total bounds one tenant's
/// share of the proxy's workers.
pub const MAX_DOC_REGEX_RULES: usize = 200;
/// Bytes of every regex pattern of a document together.
pub const MAX_DOC_PATTERN_BYTES: usize = 64 * 1024;
/// Topic phrases of a whole document.
pub const MAX_DOC_PHRASES: usize = 20_000;
pub const MAX_MODELS: usize = 500;
pub const MAX_NAME_LEN: usize = 64;
pub const MAX_DESCRIPTION_LEN: usize = 500;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrgPolicy {
    /// Policies every request of the organization gets; a request may opt out of one with
    /// `x-gw-policy: -name` unless it is also mandatory.
    #[serde(default)]
    pub defaults: Vec<String>,
    /// Policies every request gets, which neither a team nor a request can switch off.
    #[serde(default)]
    pub mandatory: Vec<String>,
    /// The organization's own policies; one named like a built-in replaces it.
    #[serde(default)]
    pub policies: Vec<PolicyDef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// What a guardrail that fails internally does: block the request (fail closed), or let it
    /// through with a `flagged` decision (fail open).
    #[serde(default)]
    pub on_error: OnError,
    pub guardrails: Vec<Guardrail>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    #[default]
    Block,
    Allow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Redact,
    Block,
    Flag,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopicMode {
    /// A request naming any of the topics is refused.
    #[default]
    Deny,
    /// A request must name at least one of the topics.
    Allow,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topic {
    pub name: String,
    /// Matched on word boundaries, ignoring case, accents' compatibility forms and spacing.
    pub phrases: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegexRule {
    /// Names the placeholder (`[<NAME>_1]`) and the reason; never the matched text.
    pub name: String,
    pub pattern: String,
    pub action: Action,
}

fn all_entities() -> Vec<Entity> {
    Entity::ALL.to_vec()
}
fn redact() -> Action {
    Action::Redact
}
fn block() -> Action {
    Action::Block
}
fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Guardrail {
    /// Personal and secret values in the prompt (and, with `output`, in the answer).
    PiiRedact {
        #[serde(default = "all_entities")]
        entities: Vec<Entity>,
        #[serde(default = "redact")]
        action: Action,
        /// Also scan the answer, streams included.
        #[serde(default = "yes")]
        output: bool,
        /// Put the caller's own values back where the answer repeats their placeholders.
        #[serde(default)]
        restore: bool,
    },
    TopicGuard {
        #[serde(default)]
        mode: TopicMode,
        topics: Vec<Topic>,
        #[serde(default = "block")]
        action: Action,
    },
    /// Phrases typical of attempts to override the system prompt, in user messages.
    PromptInjection {
        #[serde(default = "block")]
        action: Action,
    },
    /// The prompt's estimated tokens (four bytes a token).
    MaxInputTokens { max_tokens: u64 },
    /// Models (exact, or a prefix ending in `*`) the policy lets requests use.
    ModelAllowList { models: Vec<String> },
    /// The organization's own patterns (RE2 syntax: linear time, no backreferences).
    Regex {
        rules: Vec<RegexRule>,
        #[serde(default)]
        output: bool,
    },
}

impl Guardrail {
    pub fn kind(&self) -> &'static str {
        match self {
            Guardrail::PiiRedact { .. } => "pii_redact",
            Guardrail::TopicGuard { .. } => "topic_guard",
            Guardrail::PromptInjection { .. } => "prompt_injection",
            Guardrail::MaxInputTokens { .. } => "max_input_tokens",
            Guardrail::ModelAllowList { .. } => "model_allow_list",
            Guardrail::Regex { .. } => "regex",
        }
    }
}

/// Why a document was refused: the JSON path of the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub field: String,
    pub message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem { field: field.into(), message: message.into() }
}

/// Policy and rule names: what the `x-gw-policy` header can carry.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Compiles a custom pattern under the size limit (RE2 semantics: matching time is linear).
pub fn compile_pattern(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.is_empty() || pattern.len() > MAX_PATTERN_LEN {
        return Err(format!("must be 1 to {MAX_PATTERN_LEN} bytes"));
    }
    let re = regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => "compiles too big; simplify the pattern".to_string(),
            other => format!("is not a valid pattern: {}", first_line(&other.to_string())),
        })?;
    if re.is_match("") {
        return Err("matches the empty string; it would match everywhere".into());
    }
    Ok(re)
}

fn first_line(s: &str) -> String {
    s.lines().last().unwrap_or(s).trim().chars().take(200).collect()
}

/// Names of the built-in policies, which a document may refer to without defining them.
pub const BUILTIN_NAMES: &[&str] = &["pii_redact", "topic_guard", "prompt_injection"];

impl OrgPolicy {
    /// Every name the document's `defaults` and `mandatory` (and teams) may refer to.
    pub fn available(&self) -> Vec<String> {
        let mut names: Vec<String> = BUILTIN_NAMES.iter().map(|s| s.to_string()).collect();
        for p in &self.policies {
            if !names.contains(&p.name) {
                names.push(p.name.clone());
            }
        }
        names
    }

    pub fn knows(&self, name: &str) -> bool {
        BUILTIN_NAMES.contains(&name) || self.policies.iter().any(|p| p.name == name)
    }

    pub fn validate(&self) -> Result<(), Problem> {
        if self.policies.len() > MAX_POLICIES {
            return Err(problem("policies", format!("at most {MAX_POLICIES} policies")));
        }
        let mut seen = HashSet::new();
        for (i, p) in self.policies.iter().enumerate() {
            let at = format!("policies[{i}]");
            if !valid_name(&p.name) {
                return Err(problem(
                    format!("{at}.name"),
                    format!("must be 1 to {MAX_NAME_LEN} of a-z, 0-9, '_' and '-', starting with a letter or digit"),
                ));
            }
            if !seen.insert(p.name.as_str()) {
                return Err(problem(format!("{at}.name"), format!("duplicate policy name {:?}", p.name)));
            }
            if p.description.chars().count() > MAX_DESCRIPTION_LEN {
                return Err(problem(format!("{at}.description"), format!("at most {MAX_DESCRIPTION_LEN} characters")));
            }
            if p.guardrails.is_empty() || p.guardrails.len() > MAX_GUARDRAILS {
                return Err(problem(format!("{at}.guardrails"), format!("must have 1 to {MAX_GUARDRAILS} guardrails")));
            }
            for (j, g) in p.guardrails.iter().enumerate() {
                validate_guardrail(g, &format!("{at}.guardrails[{j}]"))?;
            }
        }
        self.within_document_caps()?;
        for (field, list) in [("defaults", &self.defaults), ("mandatory", &self.mandatory)] {
            if list.len() > MAX_POLICIES {
                return Err(problem(field, format!("at most {MAX_POLICIES} names")));
            }
            let mut seen = HashSet::new();
            for name in list {
                if !self.knows(name) {
                    return Err(problem(
                        field,
                        format!("unknown policy {name:?}; available: {}", self.available().join(", ")),
                    ));
                }
                if !seen.insert(name) {
                    return Err(problem(field, format!("{name:?} is listed twice")));
                }
            }
        }
        Ok(())
    }
}

impl OrgPolicy {
    /// The caps on the whole document: regex rules, their pattern bytes, topic phrases.
    fn within_document_caps(&self) -> Result<(), Problem> {
        let (mut rules, mut bytes, mut phrases) = (0usize, 0usize, 0usize);
        for g in self.policies.iter().flat_map(|p| &p.guardrails) {
            match g {
                Guardrail::Regex { rules: r, .. } => {
                    rules += r.len();
                    bytes += r.iter().map(|x| x.pattern.len()).sum::<usize>();
                }
                Guardrail::TopicGuard { topics, .. } => {
                    phrases += topics.iter().map(|t| t.phrases.len()).sum::<usize>()
                }
                _ => {}
            }
        }
        if rules > MAX_DOC_REGEX_RULES {
            return Err(problem(
                "policies",
                format!("at most {MAX_DOC_REGEX_RULES} regex rules in the whole document (this one has {rules})"),
            ));
        }
        if bytes > MAX_DOC_PATTERN_BYTES {
            return Err(problem("policies", format!("at most {MAX_DOC_PATTERN_BYTES} bytes of regex patterns in the whole document (this one has {bytes})")));
        }
        if phrases > MAX_DOC_PHRASES {
            return Err(problem(
                "policies",
                format!("at most {MAX_DOC_PHRASES} topic phrases in the whole document (this one has {phrases})"),
            ));
        }
        Ok(())
    }
}

fn validate_guardrail(g: &Guardrail, at: &str) -> Result<(), Problem> {
    match g {
        Guardrail::PiiRedact { entities, .. } => {
            if entities.is_empty() {
                return Err(problem(format!("{at}.entities"), "name at least one entity type"));
            }
        }
        Guardrail::TopicGuard { topics, action, .. } => {
            if *action == Action::Redact {
                return Err(problem(format!("{at}.action"), "a topic guard blocks or flags; it cannot redact"));
            }
            if topics.is_empty() || topics.len() > MAX_TOPICS {
                return Err(problem(format!("{at}.topics"), format!("must have 1 to {MAX_TOPICS} topics")));
            }
            let mut phrases = 0;
            for (k, t) in topics.iter().enumerate() {
                let at = format!("{at}.topics[{k}]");
                if t.name.trim().is_empty() || t.name.chars().count() > MAX_NAME_LEN {
                    return Err(problem(format!("{at}.name"), format!("must be 1 to {MAX_NAME_LEN} characters")));
                }
                if t.phrases.is_empty() {
                    return Err(problem(format!("{at}.phrases"), "name at least one phrase"));
                }
                for ph in &t.phrases {
                    let len = ph.trim().chars().count();
                    if len == 0 || len > MAX_PHRASE_LEN {
                        return Err(problem(
                            format!("{at}.phrases"),
                            format!("each phrase must be 1 to {MAX_PHRASE_LEN} characters"),
                        ));
                    }
                }
                phrases += t.phrases.len();
            }
            if phrases > MAX_PHRASES {
                return Err(problem(format!("{at}.topics"), format!("at most {MAX_PHRASES} phrases in all")));
            }
        }
        Guardrail::PromptInjection { action } => {
            if *action == Action::Redact {
                return Err(problem(format!("{at}.action"), "prompt injection blocks or flags; it cannot redact"));
            }
        }
        Guardrail::MaxInputTokens { max_tokens } => {
            if *max_tokens == 0 {
                return Err(problem(format!("{at}.max_tokens"), "must be at least 1"));
            }
        }
        Guardrail::ModelAllowList { models } => {
            if models.is_empty() || models.len() > MAX_MODELS {
                return Err(problem(format!("{at}.models"), format!("must have 1 to {MAX_MODELS} models")));
            }
            if models.iter().any(|m| m.is_empty() || m.len() > 256) {
                return Err(problem(format!("{at}.models"), "each model must be 1 to 256 bytes"));
            }
        }
        Guardrail::Regex { rules, .. } => {
            if rules.is_empty() || rules.len() > MAX_REGEX_RULES {
                return Err(problem(format!("{at}.rules"), format!("must have 1 to {MAX_REGEX_RULES} rules")));
            }
            for (k, r) in rules.iter().enumerate() {
                let at = format!("{at}.rules[{k}]");
                if !valid_name(&r.name) {
                    return Err(problem(format!("{at}.name"), "must be 1 to 64 of a-z, 0-9, '_' and '-'"));
                }
                compile_pattern(&r.pattern).map_err(|m| problem(format!("{at}.pattern"), m))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod caps_tests {
    use super::*;

    fn regex_policy(name: &str, rules: usize, pattern: &str) -> PolicyDef {
        serde_json::from_value(serde_json::json!({
            "name": name,
            "guardrails": [{"type": "regex", "rules": (0..rules).map(|i| serde_json::json!({
                "name": format!("r{i}"), "pattern": pattern, "action": "block"})).collect::<Vec<_>>()}]
        }))
        .unwrap()
    }

    #[test]
    fn a_document_holds_at_most_its_caps_of_rules() {
        let policies: Vec<PolicyDef> = (0..4).map(|i| regex_policy(&format!("p{i}"), MAX_REGEX_RULES, "abc")).collect();
        let doc = OrgPolicy { policies, ..Default::default() };
        assert!(doc.validate().is_ok(), "{:?}", doc.validate());
        let mut over = doc.clone();
        over.policies.push(regex_policy("p4", 1, "abc"));
        let e = over.validate().unwrap_err();
        assert_eq!(e.field, "policies");
        assert!(e.message.contains("at most 200 regex rules"), "{}", e.message);
    }

    #[test]
    fn a_document_holds_at_most_its_cap_of_pattern_bytes() {
        let long = "a".repeat(MAX_PATTERN_LEN);
        let policies: Vec<PolicyDef> = (0..2).map(|i| regex_policy(&format!("p{i}"), 40, &long)).collect();
        let e = OrgPolicy { policies, ..Default::default() }.validate().unwrap_err();
        assert!(e.message.contains("bytes of regex patterns"), "{}", e.message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(json: serde_json::Value) -> Result<OrgPolicy, String> {
        serde_json::from_value::<OrgPolicy>(json).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_with_defaults_filled() {
        let d = doc(serde_json::json!({
            "defaults": ["pii_redact"],
            "policies": [{"name": "cards", "guardrails": [{"type": "pii_redact", "entities": ["credit_card"]}]}]
        }))
        .unwrap();
        d.validate().unwrap();
        match &d.policies[0].guardrails[0] {
            Guardrail::PiiRedact { entities, action, output, restore } => {
                assert_eq!(entities, &[Entity::CreditCard]);
                assert_eq!(*action, Action::Redact);
                assert!(*output);
                assert!(!*restore);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(d.policies[0].on_error, OnError::Block);
    }

    #[test]
    fn unknown_fields_and_types_are_refused() {
        assert!(doc(serde_json::json!({"default": []})).is_err());
        assert!(doc(serde_json::json!({"policies": [{"name": "a", "guardrails": [{"type": "nope"}]}]})).is_err());
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |json: serde_json::Value| doc(json).unwrap().validate().unwrap_err().field;
        assert_eq!(bad(serde_json::json!({"defaults": ["nope"]})), "defaults");
        assert_eq!(bad(serde_json::json!({"mandatory": ["pii_redact", "pii_redact"]})), "mandatory");
        assert_eq!(
            bad(serde_json::json!({"policies": [{"name": "Bad Name", "guardrails": [{"type": "prompt_injection"}]}]})),
            "policies[0].name"
        );
        assert_eq!(bad(serde_json::json!({"policies": [{"name": "a", "guardrails": []}]})), "policies[0].guardrails");
        assert_eq!(
            bad(serde_json::json!({"policies": [{"name": "a", "guardrails": [
                {"type": "regex", "rules": [{"name": "r", "pattern": "(a", "action": "block"}]}]}]})),
            "policies[0].guardrails[0].rules[0].pattern"
        );
        assert_eq!(
            bad(serde_json::json!({"policies": [{"name": "a", "guardrails": [
                {"type": "topic_guard", "action": "redact", "topics": [{"name": "t", "phrases": ["x"]}]}]}]})),
            "policies[0].guardrails[0].action"
        );
    }

    #[test]
    fn patterns_are_bounded() {
        assert!(compile_pattern("a*").is_err(), "matches empty");
        assert!(compile_pattern(&"a".repeat(MAX_PATTERN_LEN + 1)).is_err());
        assert!(compile_pattern(r"\w{1000}\w{1000}\w{1000}").is_err(), "too big");
        // Backreferences and lookaround do not exist in RE2 syntax.
        assert!(compile_pattern(r"(a)\1").is_err());
        assert!(compile_pattern(r"(?=a)").is_err());
        assert!(compile_pattern(r"\bMRN[:#]?\s*\d{6,10}\b").is_ok());
    }

    #[test]
    fn names() {
        assert!(valid_name("pii_redact"));
        assert!(valid_name("pci-2"));
        assert!(!valid_name(""));
        assert!(!valid_name("-x"));
        assert!(!valid_name("Upper"));
        assert!(!valid_name(&"a".repeat(65)));
    }
}
