//! The known chat-completion parameters, checked for type and range as OpenAI's OpenAPI document
//! (`CreateChatCompletionRequest`) defines them, whatever provider will serve the request. A
//! problem names its `param`, with OpenAI's own wording. Unknown fields are not checked: they
//! pass through to the upstream untouched.

use serde_json::{Map, Value};

/// Why a request body is not acceptable, with the offending parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestProblem {
    pub message: String,
    pub param: Option<String>,
}

impl RequestProblem {
    pub fn new(message: impl Into<String>, param: impl Into<String>) -> Self {
        Self { message: message.into(), param: Some(param.into()) }
    }
}

/// Roles a message may carry.
pub const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool", "function"];

#[derive(Clone, Copy)]
enum Rule {
    Number {
        min: f64,
        max: f64,
    },
    Integer {
        min: i64,
        max: i64,
    },
    Bool,
    Str,
    /// A string of at most this many characters.
    ShortStr(usize),
    Enum(&'static [&'static str]),
    Object,
    /// An array of at most `max` items (each checked by `item`).
    Array {
        min: usize,
        max: usize,
        item: Item,
    },
    /// `stop`: a string, or an array of 1 to 4 strings.
    Stop,
    /// `tool_choice` / `function_call`: one of the named modes, or an object.
    ModeOrObject(&'static [&'static str]),
}

#[derive(Clone, Copy)]
enum Item {
    Object,
    Enum(&'static [&'static str]),
}

const SERVICE_TIERS: &[&str] = &["auto", "default", "flex", "scale", "priority"];
const EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];
const VERBOSITY: &[&str] = &["low", "medium", "high"];
const MODALITIES: &[&str] = &["text", "audio"];
const TOOL_CHOICE_MODES: &[&str] = &["none", "auto", "required"];
const FUNCTION_CALL_MODES: &[&str] = &["none", "auto"];
const RESPONSE_FORMATS: &[&str] = &["text", "json_object", "json_schema"];
const PROMPT_CACHE_RETENTION: &[&str] = &["in_memory", "24h"];
const AUDIO_FORMATS: &[&str] = &["wav", "aac", "mp3", "flac", "opus", "pcm16"];
const TOOL_CHOICE_TYPES: &[&str] = &["allowed_tools", "function", "custom"];
const ALLOWED_TOOLS_MODES: &[&str] = &["auto", "required"];
const CONTEXT_SIZES: &[&str] = &["low", "medium", "high"];

/// Top-level parameters and their rules. `null` is accepted for every one of them (the document
/// marks them nullable or optional) except where the check below says otherwise.
const RULES: &[(&str, Rule)] = &[
    ("temperature", Rule::Number { min: 0.0, max: 2.0 }),
    ("top_p", Rule::Number { min: 0.0, max: 1.0 }),
    ("frequency_penalty", Rule::Number { min: -2.0, max: 2.0 }),
    ("presence_penalty", Rule::Number { min: -2.0, max: 2.0 }),
    ("n", Rule::Integer { min: 1, max: 128 }),
    ("max_tokens", Rule::Integer { min: 1, max: i64::MAX }),
    ("max_completion_tokens", Rule::Integer { min: 1, max: i64::MAX }),
    ("top_logprobs", Rule::Integer { min: 0, max: 20 }),
    ("seed", Rule::Integer { min: i64::MIN, max: i64::MAX }),
    ("stream", Rule::Bool),
    ("logprobs", Rule::Bool),
    ("store", Rule::Bool),
    ("parallel_tool_calls", Rule::Bool),
    ("user", Rule::Str),
    ("safety_identifier", Rule::ShortStr(64)),
    ("prompt_cache_key", Rule::Str),
    ("prompt_cache_retention", Rule::Enum(PROMPT_CACHE_RETENTION)),
    ("service_tier", Rule::Enum(SERVICE_TIERS)),
    ("reasoning_effort", Rule::Enum(EFFORTS)),
    ("verbosity", Rule::Enum(VERBOSITY)),
    ("stop", Rule::Stop),
    ("stream_options", Rule::Object),
    ("response_format", Rule::Object),
    ("logit_bias", Rule::Object),
    ("metadata", Rule::Object),
    ("audio", Rule::Object),
    ("prediction", Rule::Object),
    ("web_search_options", Rule::Object),
    ("tools", Rule::Array { min: 0, max: usize::MAX, item: Item::Object }),
    ("functions", Rule::Array { min: 1, max: 128, item: Item::Object }),
    ("modalities", Rule::Array { min: 0, max: usize::MAX, item: Item::Enum(MODALITIES) }),
    ("tool_choice", Rule::ModeOrObject(TOOL_CHOICE_MODES)),
    ("function_call", Rule::ModeOrObject(FUNCTION_CALL_MODES)),
];

fn rule_for(param: &str) -> Option<Rule> {
    RULES.iter().find(|(name, _)| *name == param).map(|(_, rule)| *rule)
}

/// Longest piece of client input quoted back in an error message.
const MAX_ECHO: usize = 64;

/// Client text as an error message may quote it: at most [`MAX_ECHO`] characters.
pub fn echo(s: &str) -> String {
    match s.char_indices().nth(MAX_ECHO) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a decimal",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong_type(param: &str, expected: &str, got: &Value) -> RequestProblem {
    RequestProblem::new(
        format!("Invalid type for '{param}': expected {expected}, but got {} instead.", json_kind(got)),
        param,
    )
}

fn out_of_range(param: &str, kind: &str, bound: &str, value: &Value) -> RequestProblem {
    let side = if bound.starts_with('>') { "below minimum" } else { "above maximum" };
    RequestProblem::new(
        format!("Invalid '{param}': {kind} {side} value. Expected a value {bound}, but got {value} instead."),
        param,
    )
}

fn not_supported(param: &str, got: &str, allowed: &[&str]) -> RequestProblem {
    let list: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
    RequestProblem::new(
        format!("Invalid value for '{param}': '{}'. Supported values are: {}.", echo(got), list.join(", ")),
        param,
    )
}

fn check_enum(param: &str, v: &Value, allowed: &[&str]) -> Result<(), RequestProblem> {
    match v.as_str() {
        Some(s) if allowed.contains(&s) => Ok(()),
        Some(s) => Err(not_supported(param, s, allowed)),
        None => Err(wrong_type(param, "a string", v)),
    }
}

fn check(param: &str, rule: Rule, v: &Value) -> Result<(), RequestProblem> {
    match rule {
        Rule::Number { min, max } => {
            let Some(x) = v.as_f64() else { return Err(wrong_type(param, "a decimal", v)) };
            if x < min {
                return Err(out_of_range(param, "decimal", &format!(">= {min}"), v));
            }
            if x > max {
                return Err(out_of_range(param, "decimal", &format!("<= {max}"), v));
            }
        }
        Rule::Integer { min, max } => {
            let Some(x) = v.as_i64() else {
                // A u64 beyond i64 is still an integer, just out of range.
                if v.as_u64().is_some() && max == i64::MAX {
                    return Err(out_of_range(param, "integer", &format!("<= {max}"), v));
                }
                return Err(wrong_type(param, "an integer", v));
            };
            if x < min {
                return Err(out_of_range(param, "integer", &format!(">= {min}"), v));
            }
            if x > max {
                return Err(out_of_range(param, "integer", &format!("<= {max}"), v));
            }
        }
        Rule::Bool if !v.is_boolean() => return Err(wrong_type(param, "a boolean", v)),
        Rule::Str if !v.is_string() => return Err(wrong_type(param, "a string", v)),
        Rule::ShortStr(max) => match v.as_str() {
            None => return Err(wrong_type(param, "a string", v)),
            Some(s) if s.chars().count() > max => {
                return Err(RequestProblem::new(
                    format!("Invalid '{param}': string too long. Expected a string with maximum length {max}, but got a string with length {} instead.", s.chars().count()),
                    param,
                ))
            }
            Some(_) => {}
        },
        Rule::Enum(allowed) => check_enum(param, v, allowed)?,
        Rule::Object if !v.is_object() => return Err(wrong_type(param, "an object", v)),
        Rule::Array { min, max, item } => {
            let Some(items) = v.as_array() else { return Err(wrong_type(param, "an array", v)) };
            if items.len() < min {
                return Err(empty(param, min));
            }
            if items.len() > max {
                return Err(too_long(param, max, items.len()));
            }
            for (i, it) in items.iter().enumerate() {
                let p = format!("{param}[{i}]");
                match item {
                    Item::Object if !it.is_object() => return Err(wrong_type(&p, "an object", it)),
                    Item::Object => {}
                    Item::Enum(allowed) => check_enum(&p, it, allowed)?,
                }
            }
        }
        Rule::Stop => match v {
            Value::String(_) => {}
            Value::Array(items) => {
                if items.is_empty() {
                    return Err(empty(param, 1));
                }
                if items.len() > 4 {
                    return Err(too_long(param, 4, items.len()));
                }
                for (i, it) in items.iter().enumerate() {
                    if !it.is_string() {
                        return Err(wrong_type(&format!("{param}[{i}]"), "a string", it));
                    }
                }
            }
            _ => return Err(wrong_type(param, "a string or an array of strings", v)),
        },
        Rule::ModeOrObject(modes) => match v {
            Value::String(s) if !modes.contains(&s.as_str()) => return Err(not_supported(param, s, modes)),
            Value::String(_) | Value::Object(_) => {}
            _ => return Err(wrong_type(param, "a string or an object", v)),
        },
        Rule::Bool | Rule::Str | Rule::Object => {}
    }
    Ok(())
}

/// A required sub-field of an object parameter.
fn required<'a>(obj: &'a Map<String, Value>, parent: &str, field: &str) -> Result<&'a Value, RequestProblem> {
    match obj.get(field) {
        Some(v) if !v.is_null() => Ok(v),
        _ => {
            let p = format!("{parent}.{field}");
            Err(RequestProblem::new(format!("Missing required parameter: '{p}'."), p))
        }
    }
}

fn empty(param: &str, min: usize) -> RequestProblem {
    RequestProblem::new(
        format!("Invalid '{param}': empty array. Expected an array with minimum length {min}, but got an empty array instead."),
        param,
    )
}

fn too_long(param: &str, max: usize, got: usize) -> RequestProblem {
    RequestProblem::new(
        format!("Invalid '{param}': array too long. Expected an array with maximum length {max}, but got an array with length {got} instead."),
        param,
    )
}

/// Checks a parsed chat-completion body.
pub fn chat_request(body: &Map<String, Value>) -> Result<(), RequestProblem> {
    chat_request_with(body, false)
}

/// [`chat_request`]; with `prompt`, the request references a template whose messages come
/// first, so `messages` may be absent or empty.
pub fn chat_request_with(body: &Map<String, Value>, prompt: bool) -> Result<(), RequestProblem> {
    match body.get("model") {
        None | Some(Value::Null) => return Err(RequestProblem::new("Missing required parameter: 'model'.", "model")),
        Some(Value::String(s)) if s.trim().is_empty() => {
            return Err(RequestProblem::new("'model' must be a non-empty string.", "model"))
        }
        Some(Value::String(_)) => {}
        Some(v) => return Err(wrong_type("model", "a string", v)),
    }
    let none = Vec::new();
    let messages = match body.get("messages") {
        None | Some(Value::Null) if prompt => &none,
        None | Some(Value::Null) => {
            return Err(RequestProblem::new("Missing required parameter: 'messages'.", "messages"))
        }
        Some(Value::Array(m)) => m,
        Some(v) => return Err(wrong_type("messages", "an array", v)),
    };
    if messages.is_empty() && !prompt {
        return Err(RequestProblem::new(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            "messages",
        ));
    }
    for (i, m) in messages.iter().enumerate() {
        check_message(i, m)?;
    }
    // The body holds a handful of fields; look each one's rule up rather than every rule's field.
    for (param, v) in body {
        if v.is_null() {
            continue;
        }
        if let Some(rule) = rule_for(param) {
            check(param, rule, v)?;
        }
    }
    check_nested(body)
}

fn check_message(i: usize, m: &Value) -> Result<(), RequestProblem> {
    let Some(obj) = m.as_object() else { return Err(wrong_type(&format!("messages[{i}]"), "an object", m)) };
    let role_param = format!("messages[{i}].role");
    match obj.get("role") {
        None => return Err(RequestProblem::new(format!("Missing required parameter: '{role_param}'."), role_param)),
        Some(Value::String(r)) if !ROLES.contains(&r.as_str()) => return Err(not_supported(&role_param, r, ROLES)),
        Some(Value::String(_)) => {}
        Some(v) => return Err(wrong_type(&role_param, "a string", v)),
    }
    match obj.get("content") {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(parts)) => {
            for (j, p) in parts.iter().enumerate() {
                if !p.is_object() {
                    return Err(wrong_type(&format!("messages[{i}].content[{j}]"), "an object", p));
                }
            }
            Ok(())
        }
        Some(v) => Err(wrong_type(&format!("messages[{i}].content"), "a string or an array of content parts", v)),
    }
}

/// Sub-fields the document constrains inside the object parameters.
fn check_nested(body: &Map<String, Value>) -> Result<(), RequestProblem> {
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(Value::Object(opts)) = body.get("stream_options") {
        if !stream {
            return Err(RequestProblem::new(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                "stream_options",
            ));
        }
        for field in ["include_usage", "include_obfuscation"] {
            if let Some(v) = opts.get(field).filter(|v| !v.is_null()) {
                check(&format!("stream_options.{field}"), Rule::Bool, v)?;
            }
        }
    }
    if let Some(Value::Object(rf)) = body.get("response_format") {
        let ty = required(rf, "response_format", "type")?;
        check_enum("response_format.type", ty, RESPONSE_FORMATS)?;
        if ty.as_str() == Some("json_schema") {
            let schema = required(rf, "response_format", "json_schema")?;
            let Some(schema) = schema.as_object() else {
                return Err(wrong_type("response_format.json_schema", "an object", schema));
            };
            check(
                "response_format.json_schema.name",
                Rule::Str,
                required(schema, "response_format.json_schema", "name")?,
            )?;
        }
    }
    if let Some(Value::Array(tools)) = body.get("tools") {
        for (i, t) in tools.iter().enumerate() {
            let Some(t) = t.as_object() else { continue };
            let p = format!("tools[{i}]");
            let ty = required(t, &p, "type")?;
            match ty.as_str() {
                Some(kind @ ("function" | "custom")) => {
                    let inner = required(t, &p, kind)?;
                    let Some(inner) = inner.as_object() else {
                        return Err(wrong_type(&format!("{p}.{kind}"), "an object", inner));
                    };
                    check(&format!("{p}.{kind}.name"), Rule::Str, required(inner, &format!("{p}.{kind}"), "name")?)?;
                }
                _ => check_enum(&format!("{p}.type"), ty, &["function", "custom"])?,
            }
        }
    }
    if let Some(Value::Array(functions)) = body.get("functions") {
        for (i, f) in functions.iter().enumerate() {
            if let Some(f) = f.as_object() {
                let p = format!("functions[{i}]");
                check(&format!("{p}.name"), Rule::Str, required(f, &p, "name")?)?;
            }
        }
    }
    if let Some(Value::Object(fc)) = body.get("function_call") {
        check("function_call.name", Rule::Str, required(fc, "function_call", "name")?)?;
    }
    if let Some(Value::Object(tc)) = body.get("tool_choice") {
        let ty = required(tc, "tool_choice", "type")?;
        check_enum("tool_choice.type", ty, TOOL_CHOICE_TYPES)?;
        let kind = ty.as_str().unwrap_or_default();
        let inner = required(tc, "tool_choice", kind)?;
        let Some(inner) = inner.as_object() else {
            return Err(wrong_type(&format!("tool_choice.{kind}"), "an object", inner));
        };
        let p = format!("tool_choice.{kind}");
        if kind == "allowed_tools" {
            check_enum(&format!("{p}.mode"), required(inner, &p, "mode")?, ALLOWED_TOOLS_MODES)?;
            check(
                &format!("{p}.tools"),
                Rule::Array { min: 0, max: usize::MAX, item: Item::Object },
                required(inner, &p, "tools")?,
            )?;
        } else {
            check(&format!("{p}.name"), Rule::Str, required(inner, &p, "name")?)?;
        }
    }
    if let Some(Value::Object(audio)) = body.get("audio") {
        match required(audio, "audio", "voice")? {
            Value::String(_) => {}
            Value::Object(v) => check("audio.voice.id", Rule::Str, required(v, "audio.voice", "id")?)?,
            other => return Err(wrong_type("audio.voice", "a string or an object", other)),
        }
        check_enum("audio.format", required(audio, "audio", "format")?, AUDIO_FORMATS)?;
    }
    if let Some(Value::Object(prediction)) = body.get("prediction") {
        check_enum("prediction.type", required(prediction, "prediction", "type")?, &["content"])?;
        match required(prediction, "prediction", "content")? {
            Value::String(_) => {}
            Value::Array(parts) if !parts.is_empty() => {}
            other => return Err(wrong_type("prediction.content", "a string or a non-empty array", other)),
        }
    }
    if let Some(Value::Object(ws)) = body.get("web_search_options") {
        if let Some(size) = ws.get("search_context_size") {
            check_enum("web_search_options.search_context_size", size, CONTEXT_SIZES)?;
        }
        match ws.get("user_location") {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(other) => return Err(wrong_type("web_search_options.user_location", "an object", other)),
        }
    }
    if let Some(Value::Object(bias)) = body.get("logit_bias") {
        for (token, v) in bias {
            let p = format!("logit_bias.{}", echo(token));
            check(&p, Rule::Integer { min: -100, max: 100 }, v)?;
        }
    }
    if let Some(Value::Object(meta)) = body.get("metadata") {
        if meta.len() > 16 {
            return Err(RequestProblem::new(
                format!("Invalid 'metadata': too many properties. Expected at most 16, but got {}.", meta.len()),
                "metadata",
            ));
        }
        for (k, v) in meta {
            if !v.is_string() {
                return Err(wrong_type(&format!("metadata.{}", echo(k)), "a string", v));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problem(extra: Value) -> Option<RequestProblem> {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        chat_request(body.as_object().unwrap()).err()
    }

    fn param(extra: Value) -> Option<String> {
        problem(extra).and_then(|p| p.param)
    }

    #[test]
    fn the_issue_examples() {
        assert_eq!(param(json!({"temperature": "hot"})).as_deref(), Some("temperature"));
        assert_eq!(param(json!({"max_tokens": -5})).as_deref(), Some("max_tokens"));
        assert_eq!(param(json!({"top_p": 1.5})).as_deref(), Some("top_p"));
        assert_eq!(param(json!({"n": 0})).as_deref(), Some("n"));
        assert_eq!(param(json!({"stop": ["a", "b", "c", "d", "e"]})).as_deref(), Some("stop"));
        assert_eq!(param(json!({"stream": "yes"})).as_deref(), Some("stream"));
        assert_eq!(param(json!({"tools": {}})).as_deref(), Some("tools"));
        assert_eq!(param(json!({"response_format": "json"})).as_deref(), Some("response_format"));
        assert_eq!(param(json!({"max_completion_tokens": 2.5})).as_deref(), Some("max_completion_tokens"));
    }

    #[test]
    fn valid_values_and_unknowns_pass() {
        for ok in [
            json!({"temperature": 0}),
            json!({"temperature": 2}),
            json!({"top_p": null}),
            json!({"n": 1, "stop": "x", "seed": -3}),
            json!({"stop": ["a", "b", "c", "d"]}),
            json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"}),
            json!({"tool_choice": {"type": "function", "function": {"name": "f"}}}),
            json!({"response_format": {"type": "json_object"}}),
            json!({"stream": true, "stream_options": {"include_usage": true}}),
            json!({"logit_bias": {"50256": -100}}),
            json!({"x_custom": {"anything": [1, 2]}}),
        ] {
            assert_eq!(problem(ok.clone()), None, "{ok}");
        }
    }

    #[test]
    fn messages_and_model() {
        let e = chat_request(json!({"messages": []}).as_object().unwrap()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("model"));
        let e = chat_request(json!({"model": 5, "messages": []}).as_object().unwrap()).unwrap_err();
        assert!(e.message.contains("Invalid type for 'model'"), "{}", e.message);
        let e = chat_request(json!({"model": "m"}).as_object().unwrap()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        let e = chat_request(json!({"model": "m", "messages": []}).as_object().unwrap()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        let e =
            chat_request(json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]}).as_object().unwrap())
                .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = chat_request(json!({"model": "m", "messages": [{"role": "user", "content": 5}]}).as_object().unwrap())
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content"));
    }

    #[test]
    fn stream_options_need_stream() {
        assert_eq!(param(json!({"stream_options": {"include_usage": true}})).as_deref(), Some("stream_options"));
        assert_eq!(
            param(json!({"stream": true, "stream_options": {"include_usage": "y"}})).as_deref(),
            Some("stream_options.include_usage")
        );
    }

    #[test]
    fn messages_quote_client_text_bounded() {
        let long = "r".repeat(10_000);
        let p = problem(json!({"service_tier": long})).unwrap();
        assert!(p.message.len() < 300, "{}", p.message.len());
        assert_eq!(echo("short"), "short");
        assert_eq!(echo(&"é".repeat(100)).chars().count(), MAX_ECHO + 1);
    }
}
