//! Gemini: an OpenAI chat request as a generateContent request.

use super::*;

/// The `generateContent` body for a (validated) OpenAI chat request. The model is not part of it:
/// Gemini takes it from the path.
pub fn to_gemini(req: &ChatRequest) -> Result<Value, AdapterError> {
    let body = req.body();
    refuse_unexpressible(body)?;
    let (system, contents) = translate_messages(req.messages())?;

    let mut out = Map::new();
    if !system.is_empty() {
        let parts: Vec<Value> = system.iter().map(|t| json!({ "text": t })).collect();
        out.insert("systemInstruction".into(), json!({ "parts": parts }));
    }
    out.insert("contents".into(), Value::Array(contents));
    translate_tools(body, &mut out)?;
    let config = generation_config(body);
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    Ok(Value::Object(out))
}

/// Refuses parameters whose meaning Gemini cannot reproduce: answering without them would hand
/// the client something other than what it asked for.
pub(super) fn refuse_unexpressible(body: &Map<String, Value>) -> Result<(), AdapterError> {
    if param(body, "logprobs").and_then(Value::as_bool) == Some(true) {
        return Err(unsupported("This model does not support 'logprobs'."));
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

/// Thinking budget per `reasoning_effort`, the budgets Google's own OpenAI compatibility layer
/// uses (`none` turns thinking off on the models that allow it).
pub(super) fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "none" => Some(0),
        "minimal" | "low" => Some(1024),
        "medium" => Some(8192),
        // 24576 is the most 2.5 Flash accepts.
        "high" | "xhigh" => Some(24576),
        _ => None,
    }
}

pub(super) fn generation_config(body: &Map<String, Value>) -> Map<String, Value> {
    let mut config = Map::new();
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("n", "candidateCount"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ] {
        if let Some(v) = param(body, from) {
            config.insert(to.into(), v.clone());
        }
    }
    if let Some(max) = param(body, "max_completion_tokens").or_else(|| param(body, "max_tokens")) {
        config.insert("maxOutputTokens".into(), max.clone());
    }
    if let Some(stop) = param(body, "stop") {
        let sequences = match stop {
            Value::String(s) => vec![Value::String(s.clone())],
            other => other.as_array().cloned().unwrap_or_default(),
        };
        if !sequences.is_empty() {
            config.insert("stopSequences".into(), Value::Array(sequences));
        }
    }
    if let Some(rf) = param(body, "response_format") {
        match rf.get("type").and_then(Value::as_str) {
            Some("json_object") => {
                config.insert("responseMimeType".into(), "application/json".into());
            }
            Some("json_schema") => {
                config.insert("responseMimeType".into(), "application/json".into());
                if let Some(schema) = rf.get("json_schema").and_then(|s| s.get("schema")).filter(|s| s.is_object()) {
                    config.insert("responseSchema".into(), strip_schema(schema));
                }
            }
            _ => {}
        }
    }
    if let Some(budget) = param(body, "reasoning_effort").and_then(Value::as_str).and_then(thinking_budget) {
        config.insert("thinkingConfig".into(), json!({ "thinkingBudget": budget }));
    }
    config
}

/// JSON-schema keywords Gemini's `Schema` (an OpenAPI subset) rejects as unknown fields.
pub(super) const REJECTED_SCHEMA_KEYS: &[&str] = &["additionalProperties", "$schema", "strict"];

/// Keywords whose value maps names to schemas: their keys are names (a property may well be
/// called `strict`), only their values are schemas.
pub(super) const NAMED_SCHEMA_KEYS: &[&str] = &["properties", "patternProperties", "$defs", "definitions"];

/// Keywords whose value is data, not a schema: left as the client wrote it.
pub(super) const DATA_SCHEMA_KEYS: &[&str] = &["enum", "const", "default", "example", "examples"];

/// A JSON schema with the keywords Gemini rejects removed, at every depth.
pub(super) fn strip_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map {
                let key = k.as_str();
                if REJECTED_SCHEMA_KEYS.contains(&key) {
                    continue;
                }
                let v = if DATA_SCHEMA_KEYS.contains(&key) {
                    v.clone()
                } else if NAMED_SCHEMA_KEYS.contains(&key) {
                    match v {
                        Value::Object(named) => {
                            Value::Object(named.iter().map(|(name, s)| (name.clone(), strip_schema(s))).collect())
                        }
                        other => other.clone(),
                    }
                } else {
                    strip_schema(v)
                };
                out.insert(k.clone(), v);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(strip_schema).collect()),
        other => other.clone(),
    }
}

/// One Gemini `Content` being assembled.
pub(super) struct Turn {
    pub(super) role: &'static str,
    pub(super) parts: Vec<Value>,
}

/// Appends parts, merging into the previous turn when it has the same role: Gemini wants user
/// and model turns to alternate, OpenAI does not (tool results after tool results, a user
/// message after tool results).
pub(super) fn push_turn(turns: &mut Vec<Turn>, role: &'static str, parts: Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some(turn) if turn.role == role => turn.parts.extend(parts),
        _ => turns.push(Turn { role, parts }),
    }
}

/// The system instruction texts and the `contents`.
///
/// System and developer messages anywhere in the conversation go to `systemInstruction`, the only
/// place Gemini takes instructions. Empty texts are left out (Gemini refuses empty text parts), and
/// a turn left with nothing is dropped.
pub(super) fn translate_messages(messages: &[Value]) -> Result<(Vec<String>, Vec<Value>), AdapterError> {
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<Turn> = Vec::with_capacity(messages.len());
    // Gemini names the function a result belongs to; OpenAI names the call by its id.
    let mut call_names: HashMap<&str, &str> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        match role {
            "system" | "developer" => system.extend(text_only(m, i)?),
            "user" => push_turn(&mut turns, "user", user_parts(m, i)?),
            "assistant" => push_turn(&mut turns, "model", model_parts(m, i, &mut call_names)?),
            "tool" => push_turn(&mut turns, "user", vec![function_response(m, i, &call_names)?]),
            other => return Err(unsupported(format!("This model does not support messages with the role '{other}'."))),
        }
    }
    if turns.is_empty() {
        return Err(unsupported("This model needs at least one non-empty user or assistant message in 'messages'."));
    }
    let contents = turns.into_iter().map(|t| json!({"role": t.role, "parts": t.parts})).collect();
    Ok((system, contents))
}

pub(super) fn text_part(text: &str) -> Value {
    json!({ "text": text })
}

pub(super) fn user_parts(m: &Value, i: usize) -> Result<Vec<Value>, AdapterError> {
    match m.get("content") {
        Some(Value::String(s)) if !s.is_empty() => Ok(vec![text_part(s)]),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                match part.get("type").and_then(Value::as_str) {
                    Some("image_url") => out.push(image_part(part, i, j)?),
                    _ => {
                        let text = part_text(part, i, j, &["text"])?;
                        if !text.is_empty() {
                            out.push(text_part(text));
                        }
                    }
                }
            }
            Ok(out)
        }
        _ => Ok(Vec::new()),
    }
}

/// An image's MIME type from its URL's extension; JPEG when the URL does not say (the most common
/// photo format, and Gemini sniffs the bytes it fetches anyway).
pub(super) fn image_mime_type(url: &str) -> &'static str {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let file = path.rsplit('/').next().unwrap_or_default();
    let ext = file.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "webp" => "image/webp",
        "gif" => "image/gif",
        "heic" => "image/heic",
        "heif" => "image/heif",
        _ => "image/jpeg",
    }
}

/// An `image_url` part: a base64 `data:` URL goes inline, an http(s) URL as a file Gemini fetches.
pub(super) fn image_part(part: &Value, i: usize, j: usize) -> Result<Value, AdapterError> {
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
        let mime_type = meta.next().unwrap_or_default();
        if !meta.any(|m| m.eq_ignore_ascii_case("base64")) || mime_type.is_empty() || data.is_empty() {
            return Err(unsupported(format!(
                "'{p}.url': this model supports images as base64 data URLs (data:image/png;base64,...) or http(s) URLs."
            )));
        }
        return Ok(json!({"inlineData": {"mimeType": mime_type, "data": data}}));
    }
    if starts_with_ignore_case(url, "https://") || starts_with_ignore_case(url, "http://") {
        return Ok(json!({"fileData": {"mimeType": image_mime_type(url), "fileUri": url}}));
    }
    Err(unsupported(format!("'{p}.url' must be an http(s) URL or a base64 data URL.")))
}

/// An assistant message as `model` parts; its tool calls' names are remembered by id for the
/// tool results that follow.
pub(super) fn model_parts<'a>(
    m: &'a Value,
    i: usize,
    call_names: &mut HashMap<&'a str, &'a str>,
) -> Result<Vec<Value>, AdapterError> {
    let mut out: Vec<Value> = assistant_texts(m, i)?.into_iter().map(text_part).collect();
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
        for (j, c) in calls.iter().enumerate() {
            let (id, name, part) = function_call_part(c, i, j)?;
            if let Some(id) = id {
                call_names.insert(id, name);
            }
            out.push(part);
        }
    }
    Ok(out)
}

/// A tool call as a `functionCall` part, with the call's id (if any) and function name.
pub(super) fn function_call_part(c: &Value, i: usize, j: usize) -> Result<(Option<&str>, &str, Value), AdapterError> {
    let p = format!("messages[{i}].tool_calls[{j}]");
    let kind = c.get("type").and_then(Value::as_str).unwrap_or("function");
    if kind != "function" {
        return Err(unsupported(format!("This model does not support tool calls of type '{kind}' in '{p}'.")));
    }
    let function = c.get("function");
    let name = function
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str)
        .ok_or_else(|| unsupported(format!("'{p}.function.name' must be a string.")))?;
    let arguments = function.and_then(|f| f.get("arguments")).and_then(Value::as_str).unwrap_or_default();
    // Gemini takes the arguments as a JSON object, not as text; clients send "" for none.
    let args = if arguments.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        match serde_json::from_str::<Value>(arguments) {
            Ok(v @ Value::Object(_)) => v,
            _ => return Err(unsupported(format!("'{p}.function.arguments' must be a JSON object for this model."))),
        }
    };
    let id = c.get("id").and_then(Value::as_str);
    Ok((id, name, json!({"functionCall": {"name": name, "args": args}})))
}

/// A tool message as a `functionResponse` part. Gemini takes the response as a JSON object: a
/// result that is one goes as it is, any other text under `content`.
pub(super) fn function_response(m: &Value, i: usize, call_names: &HashMap<&str, &str>) -> Result<Value, AdapterError> {
    let id = m
        .get("tool_call_id")
        .and_then(Value::as_str)
        .ok_or_else(|| unsupported(format!("'messages[{i}].tool_call_id' must be a string.")))?;
    let name = call_names.get(id).ok_or_else(|| {
        unsupported(format!(
            "'messages[{i}].tool_call_id' does not match the id of a tool call in an earlier assistant message."
        ))
    })?;
    let text = text_only(m, i)?.join("\n");
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({ "content": text }),
    };
    Ok(json!({"functionResponse": {"name": name, "response": response}}))
}

/// Whether a function's parameters declare no parameter at all. Gemini has refused object schemas
/// with empty `properties` ("should be non-empty for OBJECT type"), and a declaration without
/// `parameters` means the same.
pub(super) fn declares_nothing(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
        && schema.get("properties").and_then(Value::as_object).is_none_or(Map::is_empty)
        && schema.get("anyOf").is_none()
}

pub(super) fn translate_tools(body: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), AdapterError> {
    let tools = param(body, "tools").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if tools.is_empty() {
        // Without tools no function can be called, whatever the tool choice says.
        return Ok(());
    }
    let mut declarations = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let kind = t.get("type").and_then(Value::as_str).unwrap_or_default();
        let function = match (kind, t.get("function")) {
            ("function", Some(f)) => f,
            _ => {
                return Err(unsupported(format!("This model does not support tools of type '{kind}' in 'tools[{i}]'.")))
            }
        };
        let mut declaration = Map::new();
        declaration.insert("name".into(), function.get("name").cloned().unwrap_or_default());
        if let Some(d) = function.get("description").filter(|d| d.is_string()) {
            declaration.insert("description".into(), d.clone());
        }
        if let Some(schema) = function.get("parameters").filter(|p| p.is_object() && !declares_nothing(p)) {
            declaration.insert("parameters".into(), strip_schema(schema));
        }
        declarations.push(Value::Object(declaration));
    }
    out.insert("tools".into(), json!([{ "functionDeclarations": declarations }]));

    let calling = match param(body, "tool_choice") {
        None => None,
        Some(Value::String(mode)) => Some(match mode.as_str() {
            "required" => json!({"mode": "ANY"}),
            "none" => json!({"mode": "NONE"}),
            _ => json!({"mode": "AUTO"}),
        }),
        Some(c) => {
            let kind = c.get("type").and_then(Value::as_str).unwrap_or_default();
            let name = c.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
            match (kind, name) {
                ("function", Some(name)) => Some(json!({"mode": "ANY", "allowedFunctionNames": [name]})),
                _ => return Err(unsupported(format!("This model does not support 'tool_choice' of type '{kind}'."))),
            }
        }
    };
    if let Some(calling) = calling {
        out.insert("toolConfig".into(), json!({ "functionCallingConfig": calling }));
    }
    Ok(())
}
