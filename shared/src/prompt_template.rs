//! Prompt templates: chat messages whose contents are MiniJinja templates over typed variables.
//! A template is checked when a version is saved (every message compiles, every variable it uses
//! is declared) and rendered with the caller's variables, each checked against its declared type
//! first, so a missing or ill-typed variable is an error naming it (`docs/prompt-templates.md`).
//!
//! Rendering has no loader (no `include`, `import` or `extends`: a template sees only its
//! variables), strict undefined values, no auto-escaping (the output is message text, put into
//! JSON by serde, never spliced into markup or JSON by hand) and bounded work (fuel and output
//! size), so a template cannot loop for long or grow without limit.

use std::collections::BTreeMap;

use minijinja::{Environment, UndefinedBehavior};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Messages in one template at most.
pub const MAX_MESSAGES: usize = 100;
/// Characters of one message's template at most.
pub const MAX_CONTENT_CHARS: usize = 100_000;
/// Declared variables at most.
pub const MAX_VARIABLES: usize = 100;
/// Bytes a rendering may produce at most (all messages).
pub const MAX_RENDERED_BYTES: usize = 1_000_000;
/// MiniJinja's fuel for one message: bounds loops and filters.
const FUEL: u64 = 200_000;

/// The roles a template's messages may have (OpenAI's chat roles that carry text).
pub const ROLES: [&str; 4] = ["system", "developer", "user", "assistant"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateMessage {
    /// `system`, `developer`, `user` or `assistant`.
    pub role: String,
    /// A MiniJinja template: `{{ name }}` inserts a variable, `{% if %}`/`{% for %}` work.
    pub content: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VarType {
    String,
    Number,
    Integer,
    Boolean,
    Array,
    Object,
}

impl VarType {
    fn label(self) -> &'static str {
        match self {
            VarType::String => "a string",
            VarType::Number => "a number",
            VarType::Integer => "an integer",
            VarType::Boolean => "a boolean",
            VarType::Array => "an array",
            VarType::Object => "an object",
        }
    }

    fn admits(self, v: &Value) -> bool {
        match self {
            VarType::String => v.is_string(),
            VarType::Number => v.is_number(),
            VarType::Integer => v.is_i64() || v.is_u64(),
            VarType::Boolean => v.is_boolean(),
            VarType::Array => v.is_array(),
            VarType::Object => v.is_object(),
        }
    }
}

/// A declared variable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Variable {
    #[serde(rename = "type")]
    pub var_type: VarType,
    /// Default true; an optional variable without a default renders as if absent (test it with
    /// `{% if name is defined %}`).
    #[serde(default = "yes")]
    pub required: bool,
    /// Used when the caller sends none (must be of the variable's type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

fn yes() -> bool {
    true
}

/// What a version holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Content {
    pub messages: Vec<TemplateMessage>,
    pub variables: BTreeMap<String, Variable>,
}

/// A problem with a template or its variables, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct TemplateError {
    pub field: String,
    pub message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> TemplateError {
    TemplateError { field: field.into(), message: message.into() }
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(50);
    env
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

impl Content {
    /// Checks a version before it is saved: roles, sizes, every message compiles, every variable
    /// it uses is declared, names and defaults are sound.
    pub fn validate(&self) -> Result<(), TemplateError> {
        if self.messages.is_empty() || self.messages.len() > MAX_MESSAGES {
            return Err(problem("messages", format!("must have 1 to {MAX_MESSAGES} messages")));
        }
        if self.variables.len() > MAX_VARIABLES {
            return Err(problem("variables", format!("at most {MAX_VARIABLES} variables")));
        }
        for (name, v) in &self.variables {
            let at = format!("variables.{name}");
            if !valid_name(name) {
                return Err(problem(at, "a variable name is a letter or _ then letters, digits or _ (at most 64)"));
            }
            if let Some(d) = &v.default {
                if !v.var_type.admits(d) {
                    return Err(problem(format!("{at}.default"), format!("must be {}", v.var_type.label())));
                }
            }
            if v.description.as_ref().is_some_and(|d| d.chars().count() > 500) {
                return Err(problem(format!("{at}.description"), "at most 500 characters"));
            }
        }
        let env = environment();
        for (i, m) in self.messages.iter().enumerate() {
            if !ROLES.contains(&m.role.as_str()) {
                return Err(problem(format!("messages[{i}].role"), format!("must be one of {}", ROLES.join(", "))));
            }
            let at = format!("messages[{i}].content");
            if m.content.chars().count() > MAX_CONTENT_CHARS {
                return Err(problem(at, format!("at most {MAX_CONTENT_CHARS} characters")));
            }
            let t = env.template_from_str(&m.content).map_err(|e| problem(&at, syntax(&e)))?;
            let mut used: Vec<String> = t.undeclared_variables(false).into_iter().collect();
            used.sort();
            if let Some(unknown) = used.iter().find(|u| !self.variables.contains_key(*u)) {
                return Err(problem(at, format!("uses {unknown:?}, which is not a declared variable")));
            }
        }
        Ok(())
    }

    /// The SHA-256 of the version's content as canonical JSON (sorted keys), hex.
    pub fn hash(&self) -> String {
        let canonical = serde_json::to_value(self).map(|v| v.to_string()).unwrap_or_default();
        hex::encode(Sha256::digest(canonical.as_bytes()))
    }

    /// The messages with `given` variables: each declared one checked against its type (a missing
    /// required one refused), defaults filled in, then every message rendered. Variables the
    /// version does not declare are ignored, so callers keep working when a label moves to a
    /// version that uses fewer. Errors name `variables.<name>` or the message.
    pub fn render(&self, given: &Map<String, Value>) -> Result<Vec<TemplateMessage>, TemplateError> {
        let mut ctx: BTreeMap<&str, &Value> = BTreeMap::new();
        for (name, v) in &self.variables {
            let at = format!("variables.{name}");
            match given.get(name).filter(|x| !x.is_null()).or(v.default.as_ref()) {
                Some(x) if v.var_type.admits(x) => {
                    ctx.insert(name, x);
                }
                Some(_) => return Err(problem(at, format!("must be {}", v.var_type.label()))),
                None if v.required => return Err(problem(at, "is required")),
                None => {}
            }
        }
        let env = environment();
        let mut out = Vec::with_capacity(self.messages.len());
        let mut size = 0;
        for (i, m) in self.messages.iter().enumerate() {
            let at = format!("messages[{i}].content");
            let t = env.template_from_str(&m.content).map_err(|e| problem(&at, syntax(&e)))?;
            let text = t.render(&ctx).map_err(|e| problem(&at, format!("does not render: {}", syntax(&e))))?;
            size += text.len();
            if size > MAX_RENDERED_BYTES {
                return Err(problem("messages", format!("the rendered messages exceed {MAX_RENDERED_BYTES} bytes")));
            }
            out.push(TemplateMessage { role: m.role.clone(), content: text });
        }
        Ok(out)
    }
}

/// How a request names a version: a number, a label, or the latest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionRef {
    Number(i32),
    Label(String),
    Latest,
}

/// A chat request's reference to a template (`"prompt": {"id", "version", "variables"}`,
/// following OpenAI's `prompt` reference): which version to render, with what.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptRef {
    pub id: uuid::Uuid,
    pub version: VersionRef,
    pub variables: Map<String, Value>,
}

impl PromptRef {
    /// Reads the `prompt` member of a request body; errors name the parameter (`prompt.id`).
    /// `version` is a number (or a string of digits: OpenAI's is a string), else a label;
    /// absent or null: the latest version.
    pub fn parse(v: &Value) -> Result<Self, TemplateError> {
        let Some(obj) = v.as_object() else { return Err(problem("prompt", "must be an object")) };
        for k in obj.keys() {
            if !["id", "version", "variables"].contains(&k.as_str()) {
                return Err(problem(format!("prompt.{}", bounded(k)), "is not a known parameter"));
            }
        }
        let id = match obj.get("id") {
            None | Some(Value::Null) => return Err(problem("prompt.id", "is required")),
            Some(Value::String(s)) => {
                s.parse::<uuid::Uuid>().map_err(|_| problem("prompt.id", "must be a prompt template's id (a UUID)"))?
            }
            Some(_) => return Err(problem("prompt.id", "must be a string")),
        };
        let version = match obj.get("version") {
            None | Some(Value::Null) => VersionRef::Latest,
            Some(Value::Number(n)) => match n.as_i64().and_then(|n| i32::try_from(n).ok()).filter(|n| *n >= 1) {
                Some(n) => VersionRef::Number(n),
                None => return Err(problem("prompt.version", "must be a version number (1 or more) or a label")),
            },
            Some(Value::String(s)) if !s.is_empty() && s.len() <= 64 => match s.parse::<i32>() {
                Ok(n) if n >= 1 => VersionRef::Number(n),
                Ok(_) => return Err(problem("prompt.version", "must be a version number (1 or more) or a label")),
                Err(_) => VersionRef::Label(s.clone()),
            },
            Some(Value::String(_)) => return Err(problem("prompt.version", "must be 1 to 64 characters")),
            Some(_) => return Err(problem("prompt.version", "must be a string or an integer")),
        };
        let variables = match obj.get("variables") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(problem("prompt.variables", "must be an object")),
        };
        Ok(Self { id, version, variables })
    }
}

/// A client-given name, cut short for an error message.
fn bounded(s: &str) -> String {
    s.chars().take(64).collect()
}

/// MiniJinja's message without the template's source echoed back at length.
fn syntax(e: &minijinja::Error) -> String {
    let mut text = e.to_string();
    if text.len() > 300 {
        let mut cut = 300;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn content(messages: Value, variables: Value) -> Content {
        Content {
            messages: serde_json::from_value(messages).unwrap(),
            variables: serde_json::from_value(variables).unwrap(),
        }
    }

    fn greeting() -> Content {
        content(
            json!([{"role": "system", "content": "You answer in {{ language }}."},
                   {"role": "user", "content": "{% for q in questions %}- {{ q }}\n{% endfor %}{% if tone is defined %}({{ tone }}){% endif %}"}]),
            json!({"language": {"type": "string"}, "questions": {"type": "array"},
                   "tone": {"type": "string", "required": false}}),
        )
    }

    #[test]
    fn a_prompt_reference_reads_numbers_labels_and_the_latest() {
        let id = uuid::Uuid::nil();
        let p = PromptRef::parse(&json!({"id": id.to_string(), "version": "3", "variables": {"a": 1}})).unwrap();
        assert_eq!((p.version, p.variables["a"].clone()), (VersionRef::Number(3), json!(1)));
        let p = PromptRef::parse(&json!({"id": id.to_string(), "version": 4})).unwrap();
        assert_eq!(p.version, VersionRef::Number(4));
        let p = PromptRef::parse(&json!({"id": id.to_string(), "version": "production"})).unwrap();
        assert_eq!(p.version, VersionRef::Label("production".into()));
        assert_eq!(PromptRef::parse(&json!({"id": id.to_string()})).unwrap().version, VersionRef::Latest);
        let field = |v: Value| PromptRef::parse(&v).unwrap_err().field;
        assert_eq!(field(json!("x")), "prompt");
        assert_eq!(field(json!({})), "prompt.id");
        assert_eq!(field(json!({"id": "nope"})), "prompt.id");
        assert_eq!(field(json!({"id": id.to_string(), "version": 0})), "prompt.version");
        assert_eq!(field(json!({"id": id.to_string(), "version": "-2"})), "prompt.version");
        assert_eq!(field(json!({"id": id.to_string(), "version": true})), "prompt.version");
        assert_eq!(field(json!({"id": id.to_string(), "variables": []})), "prompt.variables");
        assert_eq!(field(json!({"id": id.to_string(), "extra": 1})), "prompt.extra");
    }

    #[test]
    fn a_template_renders_its_typed_variables() {
        let c = greeting();
        c.validate().unwrap();
        let vars = json!({"language": "French", "questions": ["a?", "b?"]});
        let out = c.render(vars.as_object().unwrap()).unwrap();
        assert_eq!(out[0].content, "You answer in French.");
        assert_eq!(out[1].content, "- a?\n- b?\n");
        let vars = json!({"language": "French", "questions": [], "tone": "<b>\"formal\"</b>"});
        assert_eq!(c.render(vars.as_object().unwrap()).unwrap()[1].content, "(<b>\"formal\"</b>)", "no escaping");
    }

    #[test]
    fn missing_and_ill_typed_variables_are_named() {
        let c = greeting();
        let render = |v: Value| c.render(v.as_object().unwrap()).unwrap_err();
        assert_eq!(render(json!({"questions": []})), problem("variables.language", "is required"));
        assert_eq!(render(json!({"language": 3, "questions": []})), problem("variables.language", "must be a string"));
        let extra = json!({"language": "x", "questions": [], "extra": 1});
        assert_eq!(c.render(extra.as_object().unwrap()).unwrap()[0].content, "You answer in x.", "extras ignored");
    }

    #[test]
    fn saving_checks_syntax_declarations_roles_and_defaults() {
        let bad = content(json!([{"role": "user", "content": "{{ name"}]), json!({"name": {"type": "string"}}));
        assert_eq!(bad.validate().unwrap_err().field, "messages[0].content");
        let undeclared = content(json!([{"role": "user", "content": "{{ who }}"}]), json!({}));
        assert_eq!(
            undeclared.validate().unwrap_err(),
            problem("messages[0].content", "uses \"who\", which is not a declared variable")
        );
        let role = content(json!([{"role": "tool", "content": "x"}]), json!({}));
        assert_eq!(role.validate().unwrap_err().field, "messages[0].role");
        let default =
            content(json!([{"role": "user", "content": "{{ n }}"}]), json!({"n": {"type": "integer", "default": "1"}}));
        assert_eq!(default.validate().unwrap_err(), problem("variables.n.default", "must be an integer"));
        let name = content(json!([{"role": "user", "content": "x"}]), json!({"1x": {"type": "string"}}));
        assert_eq!(name.validate().unwrap_err().field, "variables.1x");
    }

    #[test]
    fn templates_cannot_reach_files_or_run_forever() {
        let include = content(json!([{"role": "user", "content": "{% include 'x' %}"}]), json!({}));
        include.validate().unwrap();
        assert!(include.render(&Map::new()).is_err(), "no loader: nothing to include");
        let spin = content(
            json!([{"role": "user", "content": "{% for a in range(10000) %}{% for b in range(10000) %}x{% endfor %}{% endfor %}"}]),
            json!({}),
        );
        assert!(spin.render(&Map::new()).is_err(), "out of fuel");
    }

    #[test]
    fn the_hash_follows_the_content() {
        let a = greeting();
        let mut b = greeting();
        assert_eq!(a.hash(), b.hash());
        b.messages[0].content.push('!');
        assert_ne!(a.hash(), b.hash());
        assert_eq!(a.hash().len(), 64);
    }
}
