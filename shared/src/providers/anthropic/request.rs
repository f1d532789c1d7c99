//! Anthropic: an OpenAI chat request as a Messages API request.

use super::*;

/// The Messages API body for a (validated) OpenAI chat request.
pub fn to_anthropic(req: &ChatRequest, upstream_model: &str) -> Result<Value, AdapterError> {
    let body = req.body();
    refuse_unexpressible(body)?;
    let (system, messages) = translate_messages(req.messages())?;

    let mut out = Map::new();
    out.insert("model".into(), upstream_model.into());
    let (max_tokens, thinking) = token_limits(body);
    out.insert("max_tokens".into(), max_tokens.into());
    if !system.is_empty() {
        out.insert("system".into(), system.into());
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(budget) = thinking {
        out.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
    }
    if let Some(stop) = param(body, "stop") {
        let sequences = match stop {
            Value::String(s) => vec![Value::String(s.clone())],
            other => other.as_array().cloned().unwrap_or_default(),
        };
        if !sequences.is_empty() {
            out.insert("stop_sequences".into(), Value::Array(sequences));
        }
    }
    for name in ["temperature", "top_p"] {
        if let Some(v) = param(body, name) {
            out.insert(name.into(), v.clone());
        }
    }
    // `safety_identifier` replaced `user` in OpenAI's API; both identify the end user.
    if let Some(user) = param(body, "user").or_else(|| param(body, "safety_identifier")) {
        out.insert("metadata".into(), json!({ "user_id": user }));
    }
    translate_tools(body, &mut out)?;
    if req.stream {
        out.insert("stream".into(), Value::Bool(true));
    }
    Ok(Value::Object(out))
}

/// Refuses parameters whose meaning the Messages API cannot reproduce: answering without them
/// would hand the client something other than what it asked for.
pub(super) fn refuse_unexpressible(body: &Map<String, Value>) -> Result<(), AdapterError> {
    if param(body, "n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return Err(unsupported("This model returns a single choice: 'n' must be 1."));
    }
    if param(body, "logprobs").and_then(Value::as_bool) == Some(true) {
        return Err(unsupported("This model does not support 'logprobs'."));
    }
    // OpenAI's range is 0..2, Anthropic's 0..1; rescaling would change the meaning of the
    // values both accept, so only the overlap is served.
    if param(body, "temperature").and_then(Value::as_f64).is_some_and(|t| t > 1.0) {
        return Err(unsupported("This model supports 'temperature' between 0 and 1."));
    }
    if let Some(rf) = param(body, "response_format") {
        let kind = rf.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind != "text" {
            return Err(unsupported(format!("This model does not support 'response_format' of type '{kind}'.")));
        }
    }
    let audio_out = param(body, "modalities")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|x| x.as_str() == Some("audio")));
    if audio_out || param(body, "audio").is_some() {
        return Err(unsupported("This model does not produce audio: 'modalities' may only hold 'text'."));
    }
    if param(body, "functions").is_some() || param(body, "function_call").is_some() {
        return Err(unsupported("This model does not support the deprecated 'functions' parameter: use 'tools'."));
    }
    if param(body, "web_search_options").is_some() {
        return Err(unsupported("This model does not support 'web_search_options'."));
    }
    Ok(())
}

/// `max_tokens` and the thinking budget, if any.
///
/// OpenAI's `reasoning_effort` becomes extended thinking with a fixed budget per effort
/// (`none`/`minimal` mean no thinking). Anthropic counts thinking inside `max_tokens`, as OpenAI
/// counts reasoning inside `max_completion_tokens`, so a client's limit stays the hard cap and
/// the budget shrinks to fit under it; when not even the minimum budget fits, the request goes
/// without thinking. Without a client limit there is room for the budget plus a default answer.
pub(super) fn token_limits(body: &Map<String, Value>) -> (u64, Option<u64>) {
    let limit = param(body, "max_completion_tokens").or_else(|| param(body, "max_tokens")).and_then(Value::as_u64);
    let budget = match param(body, "reasoning_effort").and_then(Value::as_str) {
        Some("low") => Some(MIN_THINKING_BUDGET),
        Some("medium") => Some(4096),
        Some("high") => Some(16384),
        // Keeps budget plus default answer under the smallest output cap of current thinking
        // models (32k).
        Some("xhigh") => Some(24576),
        _ => None,
    };
    let default = u64::from(DEFAULT_MAX_TOKENS);
    match (limit, budget) {
        (None, None) => (default, None),
        (Some(limit), None) => (limit, None),
        (None, Some(budget)) => (budget + default, Some(budget)),
        (Some(limit), Some(budget)) => {
            // The budget must stay below max_tokens so some answer can follow the thinking.
            let budget = budget.min(limit.saturating_sub(1));
            (limit, (budget >= MIN_THINKING_BUDGET).then_some(budget))
        }
    }
}

/// One Messages API turn being assembled.
pub(super) struct Turn {
    pub(super) role: &'static str,
    pub(super) content: Vec<Value>,
}

pub(super) fn is_tool_result(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("tool_result")
}

/// Appends blocks, merging into the previous turn when it has the same role: the Messages API
/// requires user and assistant turns to alternate, OpenAI does not.
pub(super) fn push_turn(turns: &mut Vec<Turn>, role: &'static str, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    if turns.last().is_none_or(|t| t.role != role) {
        turns.push(Turn { role, content: Vec::with_capacity(blocks.len()) });
    }
    let Some(turn) = turns.last_mut() else { return };
    for block in blocks {
        if is_tool_result(&block) {
            // Anthropic wants a user turn's tool results before any of its text.
            let at = turn.content.iter().position(|b| !is_tool_result(b)).unwrap_or(turn.content.len());
            turn.content.insert(at, block);
        } else {
            turn.content.push(block);
        }
    }
}

/// The top-level `system` text and the alternating turns.
///
/// System and developer messages anywhere in the conversation go to the top-level `system`, the
/// only place the Messages API takes instructions. Empty texts are left out: Anthropic refuses
/// empty text blocks, and a turn left with nothing is dropped (its neighbours then merge).
pub(super) fn translate_messages(messages: &[Value]) -> Result<(String, Vec<Value>), AdapterError> {
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<Turn> = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        match role {
            "system" | "developer" => system.extend(text_only(m, i)?),
            "user" => push_turn(&mut turns, "user", user_blocks(m, i)?),
            "assistant" => push_turn(&mut turns, "assistant", assistant_blocks(m, i)?),
            "tool" => push_turn(&mut turns, "user", vec![tool_result(m, i)?]),
            other => return Err(unsupported(format!("This model does not support messages with the role '{other}'."))),
        }
    }
    if turns.is_empty() {
        return Err(unsupported("This model needs at least one non-empty user or assistant message in 'messages'."));
    }
    let turns = turns.into_iter().map(|t| json!({"role": t.role, "content": t.content})).collect();
    Ok((system.join("\n\n"), turns))
}

pub(super) fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

pub(super) fn user_blocks(m: &Value, i: usize) -> Result<Vec<Value>, AdapterError> {
    match m.get("content") {
        Some(Value::String(s)) if !s.is_empty() => Ok(vec![text_block(s)]),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                match part.get("type").and_then(Value::as_str) {
                    Some("image_url") => out.push(image_block(part, i, j)?),
                    _ => {
                        let text = part_text(part, i, j, &["text"])?;
                        if !text.is_empty() {
                            out.push(text_block(text));
                        }
                    }
                }
            }
            Ok(out)
        }
        _ => Ok(Vec::new()),
    }
}

/// An `image_url` part: a base64 `data:` URL or an http(s) URL Anthropic fetches itself.
pub(super) fn image_block(part: &Value, i: usize, j: usize) -> Result<Value, AdapterError> {
    let p = format!("messages[{i}].content[{j}].image_url");
    let image = part.get("image_url");
    let url = image
        .and_then(|u| u.get("url"))
        .or(image)
        .and_then(Value::as_str)
        .ok_or_else(|| unsupported(format!("'{p}.url' must be a string.")))?;
    if starts_with_ignore_case(url, "data:") {
        let rest = url.get(5..).unwrap_or_default();
        let (meta, data) = rest.split_once(',').unwrap_or((rest, ""));
        let mut meta = meta.split(';');
        let media_type = meta.next().unwrap_or_default();
        if !meta.any(|m| m.eq_ignore_ascii_case("base64")) || media_type.is_empty() || data.is_empty() {
            return Err(unsupported(format!(
                "'{p}.url': this model supports images as base64 data URLs (data:image/png;base64,...) or http(s) URLs."
            )));
        }
        return Ok(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data}
        }));
    }
    if starts_with_ignore_case(url, "https://") || starts_with_ignore_case(url, "http://") {
        return Ok(json!({"type": "image", "source": {"type": "url", "url": url}}));
    }
    Err(unsupported(format!("'{p}.url' must be an http(s) URL or a base64 data URL.")))
}

pub(super) fn assistant_blocks(m: &Value, i: usize) -> Result<Vec<Value>, AdapterError> {
    let mut out: Vec<Value> = assistant_texts(m, i)?.into_iter().map(text_block).collect();
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
        for (j, c) in calls.iter().enumerate() {
            out.push(tool_use_block(c, i, j)?);
        }
    }
    Ok(out)
}

pub(super) fn tool_use_block(c: &Value, i: usize, j: usize) -> Result<Value, AdapterError> {
    let p = format!("messages[{i}].tool_calls[{j}]");
    let kind = c.get("type").and_then(Value::as_str).unwrap_or("function");
    if kind != "function" {
        return Err(unsupported(format!("This model does not support tool calls of type '{kind}' in '{p}'.")));
    }
    let id = c.get("id").and_then(Value::as_str).ok_or_else(|| unsupported(format!("'{p}.id' must be a string.")))?;
    let function = c.get("function");
    let name = function
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str)
        .ok_or_else(|| unsupported(format!("'{p}.function.name' must be a string.")))?;
    let arguments = function.and_then(|f| f.get("arguments")).and_then(Value::as_str).unwrap_or_default();
    // Anthropic takes the input as a JSON object, not as text; clients send "" for no arguments.
    let input = if arguments.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        match serde_json::from_str::<Value>(arguments) {
            Ok(v @ Value::Object(_)) => v,
            _ => return Err(unsupported(format!("'{p}.function.arguments' must be a JSON object for this model."))),
        }
    };
    Ok(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
}

pub(super) fn tool_result(m: &Value, i: usize) -> Result<Value, AdapterError> {
    let id = m
        .get("tool_call_id")
        .and_then(Value::as_str)
        .ok_or_else(|| unsupported(format!("'messages[{i}].tool_call_id' must be a string.")))?;
    let mut block = json!({"type": "tool_result", "tool_use_id": id});
    let content = match m.get("content") {
        Some(Value::String(s)) if !s.is_empty() => Some(Value::String(s.clone())),
        Some(Value::Array(_)) => {
            let texts = text_only(m, i)?;
            (!texts.is_empty()).then(|| Value::Array(texts.iter().map(String::as_str).map(text_block).collect()))
        }
        _ => None,
    };
    // `content` is optional in a tool result; an empty one would be an empty text block.
    if let (Some(content), Some(obj)) = (content, block.as_object_mut()) {
        obj.insert("content".into(), content);
    }
    Ok(block)
}

pub(super) fn translate_tools(body: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), AdapterError> {
    let tools = param(body, "tools").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if tools.is_empty() {
        // Anthropic accepts a tool choice only alongside tools; without tools none can be called.
        return Ok(());
    }
    let mut translated = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let kind = t.get("type").and_then(Value::as_str).unwrap_or_default();
        let function = match (kind, t.get("function")) {
            ("function", Some(f)) => f,
            _ => {
                return Err(unsupported(format!("This model does not support tools of type '{kind}' in 'tools[{i}]'.")))
            }
        };
        let mut tool = Map::new();
        tool.insert("name".into(), function.get("name").cloned().unwrap_or_default());
        if let Some(d) = function.get("description").filter(|d| d.is_string()) {
            tool.insert("description".into(), d.clone());
        }
        let schema = function
            .get("parameters")
            .filter(|p| p.is_object())
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        tool.insert("input_schema".into(), schema);
        translated.push(Value::Object(tool));
    }
    out.insert("tools".into(), Value::Array(translated));

    let mut choice = match param(body, "tool_choice") {
        None => None,
        Some(Value::String(mode)) => Some(match mode.as_str() {
            "required" => json!({"type": "any"}),
            "none" => json!({"type": "none"}),
            _ => json!({"type": "auto"}),
        }),
        Some(c) => {
            let kind = c.get("type").and_then(Value::as_str).unwrap_or_default();
            let name = c.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
            match (kind, name) {
                ("function", Some(name)) => Some(json!({"type": "tool", "name": name})),
                _ => return Err(unsupported(format!("This model does not support 'tool_choice' of type '{kind}'."))),
            }
        }
    };
    if param(body, "parallel_tool_calls").and_then(Value::as_bool) == Some(false) {
        // Anthropic's `none` choice takes no options: no tool call at all is never parallel.
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        if let Some(obj) = c.as_object_mut().filter(|o| o.get("type").and_then(Value::as_str) != Some("none")) {
            obj.insert("disable_parallel_tool_use".into(), Value::Bool(true));
        }
    }
    if let Some(choice) = choice {
        out.insert("tool_choice".into(), choice);
    }
    Ok(())
}
