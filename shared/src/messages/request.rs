//! An Anthropic Messages request as the OpenAI chat request gw's pipeline runs: the same
//! conversation, tools and limits, so policies, limits, the cache and every adapter apply
//! unchanged.

use serde_json::{json, Map, Value};

use crate::openai::validate::RequestProblem;

fn problem(message: impl Into<String>, param: &str) -> RequestProblem {
    RequestProblem::new(message, param)
}

/// Largest `max_tokens` accepted (Anthropic's models stay far below it).
const MAX_TOKENS: u64 = 1 << 24;

/// The OpenAI chat body for a Messages request body. `count_only`: a `count_tokens` request
/// (no `max_tokens`, never streamed).
pub fn chat_body(body: &Map<String, Value>, count_only: bool) -> Result<Map<String, Value>, RequestProblem> {
    let mut out = Map::new();
    let model = match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => return Err(problem("model: Input should be a valid string", "model")),
        None => return Err(problem("model: Field required", "model")),
    };
    out.insert("model".into(), Value::String(model));
    if !count_only {
        match body.get("max_tokens").map(|v| (v, v.as_u64())) {
            // `max_completion_tokens`: OpenAI's reasoning models refuse `max_tokens`, and every
            // adapter and the limits' estimate read it first.
            Some((_, Some(n))) if (1..=MAX_TOKENS).contains(&n) => {
                out.insert("max_completion_tokens".into(), n.into());
            }
            Some((_, Some(_))) => {
                return Err(problem(format!("max_tokens: must be between 1 and {MAX_TOKENS}"), "max_tokens"))
            }
            Some(_) => return Err(problem("max_tokens: Input should be a valid integer", "max_tokens")),
            None => return Err(problem("max_tokens: Field required", "max_tokens")),
        }
    }
    let mut messages = Vec::new();
    match body.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            for (i, b) in blocks.iter().enumerate() {
                if b.get("type").and_then(Value::as_str) != Some("text") {
                    return Err(problem(format!("system.{i}: only text blocks are accepted"), "system"));
                }
                let Some(t) = b.get("text").and_then(Value::as_str) else {
                    return Err(problem(format!("system.{i}.text: Field required"), "system"));
                };
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(t);
            }
            messages.push(json!({"role": "system", "content": text}));
        }
        Some(_) => return Err(problem("system: Input should be a valid string or list of text blocks", "system")),
    }
    let Some(Value::Array(input)) = body.get("messages") else {
        return Err(problem("messages: Field required", "messages"));
    };
    if input.is_empty() && !count_only {
        return Err(problem("messages: at least one message is required", "messages"));
    }
    for (i, m) in input.iter().enumerate() {
        translate_message(m, i, &mut messages)?;
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(v) = body.get("stop_sequences").filter(|v| !v.is_null()) {
        let Some(seqs) = v.as_array().filter(|a| a.iter().all(Value::is_string)) else {
            return Err(problem("stop_sequences: Input should be a valid list of strings", "stop_sequences"));
        };
        if seqs.len() > 4 {
            // OpenAI's `stop` holds four; more cannot be carried to every provider.
            return Err(problem("stop_sequences: at most 4 are supported", "stop_sequences"));
        }
        if !seqs.is_empty() {
            out.insert("stop".into(), Value::Array(seqs.clone()));
        }
    }
    for name in ["temperature", "top_p"] {
        match body.get(name) {
            None | Some(Value::Null) => {}
            Some(v) if v.as_f64().is_some_and(|x| (0.0..=1.0).contains(&x)) => {
                out.insert(name.into(), v.clone());
            }
            Some(_) => return Err(problem(format!("{name}: must be a number between 0 and 1"), name)),
        }
    }
    if let Some(user) = body.get("metadata").and_then(|m| m.get("user_id")).and_then(Value::as_str) {
        out.insert("user".into(), Value::String(user.to_string()));
    }
    if let Some(tools) = body.get("tools").filter(|v| !v.is_null()) {
        let Some(tools) = tools.as_array() else {
            return Err(problem("tools: Input should be a valid list", "tools"));
        };
        let mut converted = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            converted.push(translate_tool(t, i)?);
        }
        if !converted.is_empty() {
            out.insert("tools".into(), Value::Array(converted));
        }
    }
    if let Some(choice) = body.get("tool_choice").filter(|v| !v.is_null()) {
        let (choice, parallel) = translate_tool_choice(choice)?;
        out.insert("tool_choice".into(), choice);
        if let Some(p) = parallel {
            out.insert("parallel_tool_calls".into(), Value::Bool(p));
        }
    }
    if let Some(thinking) = body.get("thinking").filter(|v| !v.is_null()) {
        match thinking.get("type").and_then(Value::as_str) {
            Some("enabled") => {
                let budget = thinking
                    .get("budget_tokens")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| problem("thinking.enabled.budget_tokens: Field required", "thinking"))?;
                out.insert("reasoning_effort".into(), Value::String(effort(budget).into()));
            }
            // Adaptive thinking (the model decides) has no counterpart a translated request can
            // carry to every provider: left to the model's default.
            Some("disabled") | Some("adaptive") => {}
            _ => return Err(problem("thinking: type must be 'enabled', 'adaptive' or 'disabled'", "thinking")),
        }
    }
    if !count_only && body.get("stream").and_then(Value::as_bool) == Some(true) {
        out.insert("stream".into(), Value::Bool(true));
        // Usage arrives in the stream's last chunk: `message_delta` reports it.
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(out)
}

/// OpenAI's reasoning effort closest to a thinking budget (the adapters turn it back into a
/// budget for models that take one).
fn effort(budget: u64) -> &'static str {
    match budget {
        0..=2048 => "low",
        2049..=8192 => "medium",
        _ => "high",
    }
}

fn translate_message(m: &Value, i: usize, out: &mut Vec<Value>) -> Result<(), RequestProblem> {
    let role = m.get("role").and_then(Value::as_str);
    let content = m.get("content");
    match (role, content) {
        (Some("user") | Some("assistant") | Some("system"), Some(Value::String(s))) => {
            out.push(json!({"role": role, "content": s}));
            Ok(())
        }
        // A system turn inside the conversation (Claude Code sends them): its text blocks.
        (Some("system"), Some(Value::Array(blocks))) => {
            let mut text = String::new();
            for (j, b) in blocks.iter().enumerate() {
                let part = text_part(b, &format!("messages.{i}.content.{j}"))?;
                text.push_str(part["text"].as_str().unwrap_or_default());
            }
            out.push(json!({"role": "system", "content": text}));
            Ok(())
        }
        (Some("user"), Some(Value::Array(blocks))) => user_blocks(blocks, i, out),
        (Some("assistant"), Some(Value::Array(blocks))) => assistant_blocks(blocks, i, out),
        (Some("user") | Some("assistant") | Some("system"), _) => Err(problem(
            format!("messages.{i}.content: Input should be a valid string or list of content blocks"),
            "messages",
        )),
        _ => Err(problem(format!("messages.{i}.role: Input should be 'user', 'assistant' or 'system'"), "messages")),
    }
}

/// A user turn: tool results become `tool` messages (before the rest, as OpenAI wants them right
/// after the assistant's calls), text and images one user message.
fn user_blocks(blocks: &[Value], i: usize, out: &mut Vec<Value>) -> Result<(), RequestProblem> {
    let mut parts = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("messages.{i}.content.{j}");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(text_part(b, &at)?),
            Some("image") => parts.push(image_part(b, &at)?),
            Some("tool_result") => {
                let id = b
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| problem(format!("{at}.tool_use_id: Field required"), "messages"))?;
                let text = match b.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(items)) => {
                        let mut text = String::new();
                        for item in items {
                            match item.get("type").and_then(Value::as_str) {
                                Some("text") => text.push_str(item.get("text").and_then(Value::as_str).unwrap_or("")),
                                _ => {
                                    return Err(problem(
                                        format!("{at}.content: only text is supported in tool results"),
                                        "messages",
                                    ))
                                }
                            }
                        }
                        text
                    }
                    Some(_) => {
                        return Err(problem(
                            format!("{at}.content: Input should be a valid string or list"),
                            "messages",
                        ))
                    }
                };
                let text = if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                    format!("Error: {text}")
                } else {
                    text
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
            }
            Some(other) => {
                return Err(problem(
                    format!("{at}.type: '{}' is not supported in a user message", crate::openai::validate::echo(other)),
                    "messages",
                ))
            }
            None => return Err(problem(format!("{at}.type: Field required"), "messages")),
        }
    }
    if !parts.is_empty() {
        out.push(json!({"role": "user", "content": parts}));
    }
    Ok(())
}

/// An assistant turn: its text, and its tool uses as tool calls. Earlier thinking is not
/// carried (OpenAI's chat has no place for it; providers ignore it for non-final turns).
fn assistant_blocks(blocks: &[Value], i: usize, out: &mut Vec<Value>) -> Result<(), RequestProblem> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("messages.{i}.content.{j}");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                let (Some(id), Some(name)) =
                    (b.get("id").and_then(Value::as_str), b.get("name").and_then(Value::as_str))
                else {
                    return Err(problem(format!("{at}: tool_use needs 'id' and 'name'"), "messages"));
                };
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}
                }));
            }
            Some("thinking") | Some("redacted_thinking") => {}
            Some(other) => {
                return Err(problem(
                    format!(
                        "{at}.type: '{}' is not supported in an assistant message",
                        crate::openai::validate::echo(other)
                    ),
                    "messages",
                ))
            }
            None => return Err(problem(format!("{at}.type: Field required"), "messages")),
        }
    }
    let mut m = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) }});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    out.push(m);
    Ok(())
}

fn text_part(b: &Value, at: &str) -> Result<Value, RequestProblem> {
    let text = b
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| problem(format!("{at}.text: Field required"), "messages"))?;
    Ok(json!({"type": "text", "text": text}))
}

fn image_part(b: &Value, at: &str) -> Result<Value, RequestProblem> {
    let source = b.get("source").ok_or_else(|| problem(format!("{at}.source: Field required"), "messages"))?;
    let url = match source.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let media = source.get("media_type").and_then(Value::as_str).unwrap_or_default();
            if !["image/jpeg", "image/png", "image/gif", "image/webp"].contains(&media) {
                return Err(problem(
                    format!("{at}.source.media_type: must be image/jpeg, image/png, image/gif or image/webp"),
                    "messages",
                ));
            }
            let data = source
                .get("data")
                .and_then(Value::as_str)
                .ok_or_else(|| problem(format!("{at}.source.data: Field required"), "messages"))?;
            format!("data:{media};base64,{data}")
        }
        Some("url") => source
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| problem(format!("{at}.source.url: Field required"), "messages"))?
            .to_string(),
        _ => return Err(problem(format!("{at}.source.type: must be 'base64' or 'url'"), "messages")),
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

fn translate_tool(t: &Value, i: usize) -> Result<Value, RequestProblem> {
    if let Some(kind) = t.get("type").and_then(Value::as_str).filter(|k| *k != "custom") {
        return Err(problem(
            format!("tools.{i}.type: the server tool '{}' is not supported", crate::openai::validate::echo(kind)),
            "tools",
        ));
    }
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| problem(format!("tools.{i}.name: Field required"), "tools"))?;
    let schema = t
        .get("input_schema")
        .filter(|s| s.is_object())
        .ok_or_else(|| problem(format!("tools.{i}.input_schema: Field required"), "tools"))?;
    let mut function = json!({"name": name, "parameters": schema});
    if let Some(d) = t.get("description").and_then(Value::as_str) {
        function["description"] = Value::String(d.to_string());
    }
    Ok(json!({"type": "function", "function": function}))
}

/// `tool_choice`, and whether parallel calls are allowed when the client said.
fn translate_tool_choice(choice: &Value) -> Result<(Value, Option<bool>), RequestProblem> {
    let parallel = choice.get("disable_parallel_tool_use").and_then(Value::as_bool).map(|d| !d);
    let c = match choice.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            let name = choice
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| problem("tool_choice.tool.name: Field required", "tool_choice"))?;
            json!({"type": "function", "function": {"name": name}})
        }
        _ => return Err(problem("tool_choice: type must be 'auto', 'any', 'tool' or 'none'", "tool_choice")),
    };
    Ok((c, parallel))
}
