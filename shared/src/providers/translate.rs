//! Reading an OpenAI chat request for a provider with another dialect: helpers the translating
//! adapters (Anthropic, Gemini) share.

use serde_json::{json, Map, Value};

use super::AdapterError;
use crate::openai::Usage;
use crate::pricing::TokenUsage;

pub(crate) fn unsupported(msg: impl Into<String>) -> AdapterError {
    AdapterError::Unsupported(msg.into())
}

/// A top-level parameter, `null` counting as absent (OpenAI treats them alike).
pub(crate) fn param<'a>(body: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|v| !v.is_null())
}

/// The texts of a message that may only hold text (system, developer, tool), non-empty ones.
pub(crate) fn text_only(m: &Value, i: usize) -> Result<Vec<String>, AdapterError> {
    match m.get("content") {
        Some(Value::String(s)) if !s.is_empty() => Ok(vec![s.clone()]),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let text = part_text(part, i, j, &["text"])?;
                if !text.is_empty() {
                    out.push(text.to_string());
                }
            }
            Ok(out)
        }
        _ => Ok(Vec::new()),
    }
}

/// The text of a content part whose type is one of `allowed`.
pub(crate) fn part_text<'a>(part: &'a Value, i: usize, j: usize, allowed: &[&str]) -> Result<&'a str, AdapterError> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
    if !allowed.contains(&kind) {
        return Err(unsupported(format!(
            "This model does not support content parts of type '{kind}' in 'messages[{i}].content[{j}]'."
        )));
    }
    // A refusal part carries its text under `refusal`.
    part.get(kind)
        .or_else(|| part.get("text"))
        .and_then(Value::as_str)
        .ok_or_else(|| unsupported(format!("'messages[{i}].content[{j}].{kind}' must be a string.")))
}

/// OpenAI's usage object, with the details its document describes.
pub(crate) fn openai_usage(t: &TokenUsage) -> Usage {
    let mut extra = Map::new();
    extra.insert("prompt_tokens_details".into(), json!({"cached_tokens": t.cached_tokens}));
    extra.insert("completion_tokens_details".into(), json!({"reasoning_tokens": t.reasoning_tokens}));
    Usage { prompt_tokens: t.prompt_tokens, completion_tokens: t.completion_tokens, total_tokens: t.total(), extra }
}

pub(crate) fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix))
}

/// The non-empty texts of an assistant message, refusals included (a refusal the model gave
/// earlier is still what it said: it is replayed as text). The deprecated `function_call` is
/// refused.
pub(crate) fn assistant_texts(m: &Value, i: usize) -> Result<Vec<&str>, AdapterError> {
    if m.get("function_call").is_some_and(|f| !f.is_null()) {
        return Err(unsupported(format!(
            "This model does not support the deprecated 'messages[{i}].function_call': use 'tool_calls'."
        )));
    }
    match m.get("content") {
        Some(Value::String(s)) if !s.is_empty() => Ok(vec![s.as_str()]),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let text = part_text(part, i, j, &["text", "refusal"])?;
                if !text.is_empty() {
                    out.push(text);
                }
            }
            Ok(out)
        }
        _ => Ok(Vec::new()),
    }
}
