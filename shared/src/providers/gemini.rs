//! The Google Gemini adapter (Generative Language API): chat goes to
//! `models/{model}:generateContent`, or `models/{model}:streamGenerateContent?alt=sse` when
//! streamed, embeddings to `models/{model}:batchEmbedContents`; the key travels in
//! `x-goog-api-key`.
//!
//! The translation is pure (no network, no clock): [`to_gemini`], [`from_gemini`],
//! [`GeminiStream`] and [`error_from_gemini`] are public and testable on their own.
//!
//! What OpenAI can say and Gemini cannot (log probabilities, audio output, legacy `functions`,
//! web search options, content parts other than text and images, custom tools, `allowed_tools`
//! tool choices) is refused with [`AdapterError::Unsupported`] naming the parameter, so the
//! fallback loop may try a deployment that can serve it. Parameters that only tune OpenAI's own
//! service or have no Gemini counterpart that changes what a correct answer is (`user`,
//! `safety_identifier`, `logit_bias`, `store`, `metadata`, `service_tier`, `prediction`, prompt
//! cache keys, `verbosity`, `parallel_tool_calls`: Gemini has no switch for it) are dropped.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::openai::credential_header;
use super::{
    default_error, log_snippet, Adapter, AdapterError, Call, Completion, Endpoint, Exchange, Flow, StreamSetup,
    StreamSink, StreamTranslator, UpstreamError, UpstreamFailure, UpstreamRequest,
};
use crate::openai::{
    embeddings_response, AssistantMessage, ChatCompletion, ChatCompletionChunk, ChatRequest, Choice, ChunkChoice,
    Delta, EmbeddingsRequest, ErrorBody, Usage,
};
use crate::pricing::TokenUsage;

/// Gemini's `alt=sse` streams have no end event (no `[DONE]`, no `message_stop`): the body simply
/// ends after the fragment carrying the last `finishReason` and the final `usageMetadata`. A
/// translator cannot tell the last fragment from the others, so [`GeminiStream`] always answers
/// [`Flow::Continue`], and the proxy treats a clean end of the body (after a finish) as the
/// stream's completion for adapters that say so through [`Adapter::stream_ends_at_eof`].
pub const STREAM_ENDS_AT_EOF: bool = true;

const API_KEY_HEADER: &str = "x-goog-api-key";

pub struct GeminiAdapter;

impl Adapter for GeminiAdapter {
    fn supports(&self, endpoint: Endpoint) -> bool {
        matches!(endpoint, Endpoint::ChatCompletions | Endpoint::Embeddings)
    }

    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError> {
        let body = serde_json::to_vec(&to_gemini(call.request)?).map_err(AdapterError::config)?;
        // Without `alt=sse` Gemini streams one JSON array spread over the body, not events.
        let method = if call.request.stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
        Ok(Exchange::Http(UpstreamRequest {
            path: format!("{}/models/{}:{method}", call.base_path, model_id(call.upstream_model)?),
            headers: key_header(call.api_key)?,
            body: body.into(),
        }))
    }

    fn parse_response(&self, call: &Call<'_>, body: &[u8]) -> Result<Completion, UpstreamError> {
        from_gemini(body, call.created, &call.completion_id(), call.upstream_model)
    }

    fn stream(&self, setup: StreamSetup) -> Box<dyn StreamTranslator> {
        Box::new(GeminiStream::new(setup))
    }

    fn stream_ends_at_eof(&self) -> bool {
        STREAM_ENDS_AT_EOF
    }

    fn map_error(&self, status: u16, body: &[u8]) -> UpstreamError {
        error_from_gemini(status, body)
    }

    fn build_embeddings(&self, call: &Call<'_, EmbeddingsRequest>) -> Result<Exchange, AdapterError> {
        let texts = call.request.texts().ok_or_else(|| {
            unsupported("This model embeds text only: 'input' must be a string or an array of strings, not token ids.")
        })?;
        let model = model_id(call.upstream_model)?;
        let body = to_gemini_embeddings(texts, model, call.request.dimensions);
        let body = serde_json::to_vec(&body).map_err(AdapterError::config)?;
        Ok(Exchange::Http(UpstreamRequest {
            path: format!("{}/models/{model}:batchEmbedContents", call.base_path),
            headers: key_header(call.api_key)?,
            body: body.into(),
        }))
    }

    fn parse_embeddings(&self, call: &Call<'_, EmbeddingsRequest>, body: &[u8]) -> Result<Completion, UpstreamError> {
        from_gemini_embeddings(call.request, call.upstream_model, body)
    }
}

/// The model id as a path segment. It is followed by `:method` and may end up before a query, so
/// only the characters Gemini's model ids use get through; a `models/` prefix (Gemini's resource
/// name) is accepted too.
fn model_id(upstream_model: &str) -> Result<&str, AdapterError> {
    let model = upstream_model.strip_prefix("models/").unwrap_or(upstream_model);
    if model.is_empty() || !model.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')) {
        return Err(AdapterError::Config(format!("'{upstream_model}' is not a Gemini model id")));
    }
    Ok(model)
}

fn key_header(key: Option<&str>) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, AdapterError> {
    key.map(|k| credential_header(http::HeaderName::from_static(API_KEY_HEADER), k.to_string())).into_iter().collect()
}

// ---------------------------------------------------------------------------------------------
// Request

fn unsupported(msg: impl Into<String>) -> AdapterError {
    AdapterError::Unsupported(msg.into())
}

/// A top-level parameter, `null` counting as absent (OpenAI treats them alike).
fn param<'a>(body: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|v| !v.is_null())
}

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
fn refuse_unexpressible(body: &Map<String, Value>) -> Result<(), AdapterError> {
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
fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "none" => Some(0),
        "minimal" | "low" => Some(1024),
        "medium" => Some(8192),
        // 24576 is the most 2.5 Flash accepts.
        "high" | "xhigh" => Some(24576),
        _ => None,
    }
}

fn generation_config(body: &Map<String, Value>) -> Map<String, Value> {
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
const REJECTED_SCHEMA_KEYS: &[&str] = &["additionalProperties", "$schema", "strict"];

/// Keywords whose value maps names to schemas: their keys are names (a property may well be
/// called `strict`), only their values are schemas.
const NAMED_SCHEMA_KEYS: &[&str] = &["properties", "patternProperties", "$defs", "definitions"];

/// Keywords whose value is data, not a schema: left as the client wrote it.
const DATA_SCHEMA_KEYS: &[&str] = &["enum", "const", "default", "example", "examples"];

/// A JSON schema with the keywords Gemini rejects removed, at every depth.
fn strip_schema(schema: &Value) -> Value {
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
struct Turn {
    role: &'static str,
    parts: Vec<Value>,
}

/// Appends parts, merging into the previous turn when it has the same role: Gemini wants user
/// and model turns to alternate, OpenAI does not (tool results after tool results, a user
/// message after tool results).
fn push_turn(turns: &mut Vec<Turn>, role: &'static str, parts: Vec<Value>) {
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
fn translate_messages(messages: &[Value]) -> Result<(Vec<String>, Vec<Value>), AdapterError> {
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

/// The texts of a message that may only hold text (system, developer, tool), non-empty ones.
fn text_only(m: &Value, i: usize) -> Result<Vec<String>, AdapterError> {
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
fn part_text<'a>(part: &'a Value, i: usize, j: usize, allowed: &[&str]) -> Result<&'a str, AdapterError> {
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

fn text_part(text: &str) -> Value {
    json!({ "text": text })
}

fn user_parts(m: &Value, i: usize) -> Result<Vec<Value>, AdapterError> {
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

fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix))
}

/// An image's MIME type from its URL's extension; JPEG when the URL does not say (the most common
/// photo format, and Gemini sniffs the bytes it fetches anyway).
fn image_mime_type(url: &str) -> &'static str {
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
fn image_part(part: &Value, i: usize, j: usize) -> Result<Value, AdapterError> {
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
fn model_parts<'a>(
    m: &'a Value,
    i: usize,
    call_names: &mut HashMap<&'a str, &'a str>,
) -> Result<Vec<Value>, AdapterError> {
    if m.get("function_call").is_some_and(|f| !f.is_null()) {
        return Err(unsupported(format!(
            "This model does not support the deprecated 'messages[{i}].function_call': use 'tool_calls'."
        )));
    }
    let mut out = Vec::new();
    match m.get("content") {
        Some(Value::String(s)) if !s.is_empty() => out.push(text_part(s)),
        Some(Value::Array(parts)) => {
            for (j, part) in parts.iter().enumerate() {
                // A refusal the model gave earlier is still what it said: replay it as text.
                let text = part_text(part, i, j, &["text", "refusal"])?;
                if !text.is_empty() {
                    out.push(text_part(text));
                }
            }
        }
        _ => {}
    }
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
fn function_call_part(c: &Value, i: usize, j: usize) -> Result<(Option<&str>, &str, Value), AdapterError> {
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
fn function_response(m: &Value, i: usize, call_names: &HashMap<&str, &str>) -> Result<Value, AdapterError> {
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
fn declares_nothing(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
        && schema.get("properties").and_then(Value::as_object).is_none_or(Map::is_empty)
        && schema.get("anyOf").is_none()
}

fn translate_tools(body: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), AdapterError> {
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

// ---------------------------------------------------------------------------------------------
// Response

/// Gemini's `usageMetadata`; counts it has nothing for are left out of the JSON.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    #[serde(default)]
    prompt_token_count: Option<u32>,
    #[serde(default)]
    candidates_token_count: Option<u32>,
    #[serde(default)]
    cached_content_token_count: Option<u32>,
    #[serde(default)]
    thoughts_token_count: Option<u32>,
}

impl UsageMetadata {
    /// `promptTokenCount` already includes the cached tokens, as OpenAI's `prompt_tokens` does;
    /// `candidatesTokenCount` leaves thoughts out, which OpenAI's `completion_tokens` include (and
    /// Google bills as output).
    fn tokens(&self) -> TokenUsage {
        let thoughts = self.thoughts_token_count.unwrap_or(0);
        TokenUsage {
            prompt_tokens: self.prompt_token_count.unwrap_or(0),
            completion_tokens: self.candidates_token_count.unwrap_or(0).saturating_add(thoughts),
            cached_tokens: self.cached_content_token_count.unwrap_or(0),
            reasoning_tokens: thoughts,
            ..TokenUsage::default()
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    #[serde(default)]
    text: Option<String>,
    /// A thought summary (sent only with `includeThoughts`): not part of the answer.
    #[serde(default)]
    thought: bool,
    #[serde(default)]
    function_call: Option<FunctionCall>,
}

#[derive(Debug, Deserialize)]
struct FunctionCall {
    #[serde(default)]
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct Content {
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    index: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

/// A `GenerateContentResponse`, whole or (streamed) one fragment of it; an error payload in a
/// stream has the same envelope as an error answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GenerateContentResponse {
    #[serde(default)]
    candidates: Vec<Candidate>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default)]
    model_version: Option<String>,
    #[serde(default)]
    response_id: Option<String>,
    #[serde(default)]
    error: Option<GeminiError>,
}

impl GenerateContentResponse {
    /// Gemini refused the prompt itself: no candidate at all, only the reason.
    fn prompt_blocked(&self) -> bool {
        self.candidates.is_empty() && self.prompt_feedback.as_ref().is_some_and(|f| f.block_reason.is_some())
    }
}

/// Gemini's `finishReason` as an OpenAI `finish_reason`.
fn finish_reason(reason: Option<&str>, has_calls: bool) -> &'static str {
    match reason {
        Some("MAX_TOKENS") => "length",
        Some(
            "SAFETY"
            | "RECITATION"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION",
        ) => "content_filter",
        // Gemini says STOP when it ends its turn with function calls.
        _ if has_calls => "tool_calls",
        // STOP, LANGUAGE, OTHER, MALFORMED_FUNCTION_CALL and anything newer.
        _ => "stop",
    }
}

/// A candidate's answer text (thoughts left out; `None` when it has no text part) and its function
/// calls as name and arguments (OpenAI carries them as JSON text).
/// A candidate's text (if any) and its function calls as (name, JSON arguments).
type CandidateOutput<'a> = (Option<String>, Vec<(&'a str, String)>);

fn candidate_output(c: &Candidate) -> Result<CandidateOutput<'_>, UpstreamError> {
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    for part in c.content.iter().flat_map(|content| content.parts.iter()) {
        if let Some(f) = &part.function_call {
            let arguments = match f.args.as_ref().filter(|a| !a.is_null()) {
                Some(args) => serde_json::to_string(args).map_err(|e| UpstreamError::bad_response(e.to_string()))?,
                None => "{}".to_string(),
            };
            calls.push((f.name.as_str(), arguments));
        } else if let Some(t) = part.text.as_deref().filter(|_| !part.thought) {
            text.get_or_insert_with(String::new).push_str(t);
        }
    }
    Ok((text, calls))
}

/// Tool call ids: Gemini gives its calls none, so gw makes them up, unique per response (from
/// the completion's id) so a conversation's calls never share one.
fn call_prefix(completion_id: &str) -> String {
    format!("call_{}", completion_id.strip_prefix("chatcmpl-").unwrap_or(completion_id))
}

fn tool_call(id: String, name: &str, arguments: String) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// OpenAI's usage object, with the details its document describes.
fn openai_usage(t: &TokenUsage) -> Usage {
    let mut extra = Map::new();
    extra.insert("prompt_tokens_details".into(), json!({"cached_tokens": t.cached_tokens}));
    extra.insert("completion_tokens_details".into(), json!({"reasoning_tokens": t.reasoning_tokens}));
    Usage { prompt_tokens: t.prompt_tokens, completion_tokens: t.completion_tokens, total_tokens: t.total(), extra }
}

fn choice_index(candidate: &Candidate, position: usize) -> u32 {
    candidate.index.unwrap_or_else(|| u32::try_from(position).unwrap_or(u32::MAX))
}

/// A `generateContent` answer as an OpenAI chat completion: one choice per candidate. The id is
/// Gemini's `responseId` (else `id_fallback`), the model its `modelVersion` (else
/// `model_fallback`). A prompt Gemini blocked becomes one empty `content_filter` choice.
pub fn from_gemini(
    body: &[u8],
    created: i64,
    id_fallback: &str,
    model_fallback: &str,
) -> Result<Completion, UpstreamError> {
    let resp: GenerateContentResponse = serde_json::from_slice(body)
        .map_err(|e| UpstreamError::bad_response(format!("not a Gemini response: {e}: {}", log_snippet(body))))?;
    if resp.candidates.is_empty() && !resp.prompt_blocked() {
        return Err(UpstreamError::bad_response(format!(
            "a Gemini response without candidates: {}",
            log_snippet(body)
        )));
    }
    let id = match resp.response_id.as_deref().filter(|r| !r.is_empty()) {
        Some(r) => format!("chatcmpl-{r}"),
        None => id_fallback.to_string(),
    };
    let prefix = call_prefix(&id);
    let mut next_call = 0u32;
    let mut choices = Vec::with_capacity(resp.candidates.len().max(1));
    for (position, candidate) in resp.candidates.iter().enumerate() {
        let (text, calls) = candidate_output(candidate)?;
        let has_calls = !calls.is_empty();
        let mut message_extra = Map::new();
        if has_calls {
            let mut tool_calls = Vec::with_capacity(calls.len());
            for (name, arguments) in calls {
                tool_calls.push(tool_call(format!("{prefix}_{next_call}"), name, arguments));
                next_call = next_call.saturating_add(1);
            }
            message_extra.insert("tool_calls".into(), Value::Array(tool_calls));
        }
        choices.push(Choice {
            index: choice_index(candidate, position),
            message: AssistantMessage { role: "assistant".into(), content: text, refusal: None, extra: message_extra },
            logprobs: None,
            finish_reason: Some(finish_reason(candidate.finish_reason.as_deref(), has_calls).into()),
            extra: Map::new(),
        });
    }
    if choices.is_empty() {
        choices.push(Choice {
            index: 0,
            message: AssistantMessage { role: "assistant".into(), content: None, refusal: None, extra: Map::new() },
            logprobs: None,
            finish_reason: Some("content_filter".into()),
            extra: Map::new(),
        });
    }
    let usage = resp.usage_metadata.as_ref().map(UsageMetadata::tokens);
    let completion = ChatCompletion {
        id,
        object: "chat.completion".into(),
        created,
        model: resp.model_version.filter(|m| !m.is_empty()).unwrap_or_else(|| model_fallback.to_string()),
        choices,
        usage: usage.as_ref().map(openai_usage),
        system_fingerprint: None,
        extra: Map::new(),
    };
    let body = serde_json::to_vec(&completion).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
    Ok(Completion { body: body.into(), usage })
}

// ---------------------------------------------------------------------------------------------
// Stream

/// What has gone out for one choice (one candidate) so far.
#[derive(Debug, Default)]
struct ChoiceState {
    index: u32,
    started: bool,
    /// Function calls streamed: the next one's OpenAI `index`, and whether the finish is
    /// `tool_calls`.
    calls: u32,
    finished: bool,
}

/// Translates Gemini's `alt=sse` stream into OpenAI chunks. Every event is a whole
/// `GenerateContentResponse` fragment: its text parts are the next piece of the answer, its
/// function calls arrive complete, the last one carries `finishReason` and the final
/// `usageMetadata`. There is no end event: see [`STREAM_ENDS_AT_EOF`].
pub struct GeminiStream {
    setup: StreamSetup,
    call_prefix: String,
    /// Function calls streamed over all choices: makes each call's id.
    next_call: u32,
    choices: Vec<ChoiceState>,
    usage_sent: bool,
}

impl GeminiStream {
    pub fn new(setup: StreamSetup) -> Self {
        let call_prefix = call_prefix(&setup.completion_id);
        Self { setup, call_prefix, next_call: 0, choices: Vec::new(), usage_sent: false }
    }

    /// The position of the choice with this index, created on first sight.
    fn slot(&mut self, index: u32) -> usize {
        if let Some(at) = self.choices.iter().position(|c| c.index == index) {
            return at;
        }
        self.choices.push(ChoiceState { index, ..ChoiceState::default() });
        self.choices.len() - 1
    }

    fn chunk(&self, index: u32, delta: Delta, finish: Option<&str>) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.setup.completion_id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.setup.created,
            model: self.setup.model.clone(),
            choices: vec![ChunkChoice {
                index,
                delta,
                finish_reason: finish.map(Into::into),
                logprobs: None,
                extra: Map::new(),
            }],
            usage: None,
            system_fingerprint: None,
            extra: Map::new(),
        }
    }

    fn candidate(&mut self, index: u32, candidate: &Candidate, out: &mut StreamSink) -> Result<(), UpstreamError> {
        let (text, calls) = candidate_output(candidate)?;
        let text = text.filter(|t| !t.is_empty());
        let at = self.slot(index);
        let Some(state) = self.choices.get_mut(at) else { return Ok(()) };
        if state.finished {
            // Nothing follows a finish in OpenAI's stream.
            return Ok(());
        }
        let mut tool_calls = Vec::with_capacity(calls.len());
        for (name, arguments) in calls {
            let mut call = tool_call(format!("{}_{}", self.call_prefix, self.next_call), name, arguments);
            if let Some(obj) = call.as_object_mut() {
                obj.insert("index".into(), state.calls.into());
            }
            tool_calls.push(call);
            self.next_call = self.next_call.saturating_add(1);
            state.calls = state.calls.saturating_add(1);
        }
        let finish = candidate.finish_reason.as_deref().map(|r| finish_reason(Some(r), state.calls > 0));
        let content = text.is_some() || !tool_calls.is_empty();
        if !content && finish.is_none() {
            // Thoughts only, or an empty fragment: the role waits for the first real chunk.
            return Ok(());
        }
        let mut extra = Map::new();
        if !tool_calls.is_empty() {
            extra.insert("tool_calls".into(), Value::Array(tool_calls));
        }
        let delta = Delta { role: (!state.started).then(|| "assistant".to_string()), content: text, extra };
        state.started = true;
        state.finished = finish.is_some();
        let chunk = self.chunk(index, delta, finish);
        out.push_json(&chunk).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        if content {
            out.saw_content();
        }
        Ok(())
    }

    /// The prompt was blocked: the stream's only choice ends, empty, as filtered.
    fn blocked(&mut self, out: &mut StreamSink) -> Result<(), UpstreamError> {
        let at = self.slot(0);
        let Some(state) = self.choices.get_mut(at) else { return Ok(()) };
        if state.finished {
            return Ok(());
        }
        let delta = Delta { role: (!state.started).then(|| "assistant".to_string()), content: None, extra: Map::new() };
        state.started = true;
        state.finished = true;
        let chunk = self.chunk(0, delta, Some("content_filter"));
        out.push_json(&chunk).map_err(|e| UpstreamError::bad_response(e.to_string()))
    }
}

impl StreamTranslator for GeminiStream {
    fn event(&mut self, _event: &str, data: &str, out: &mut StreamSink) -> Result<Flow, UpstreamError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let fragment: GenerateContentResponse = serde_json::from_str(data).map_err(|e| {
            UpstreamError::bad_response(format!("invalid Gemini stream event: {e}: {}", log_snippet(data.as_bytes())))
        })?;
        if let Some(error) = &fragment.error {
            return Err(UpstreamError::new(UpstreamFailure::MidStream, error.describe()));
        }
        // Every fragment may carry usage, each one up to date: the last is the final count.
        let usage = fragment.usage_metadata.as_ref().map(UsageMetadata::tokens);
        if let Some(tokens) = usage {
            out.usage = Some(tokens);
        }
        for (position, candidate) in fragment.candidates.iter().enumerate() {
            self.candidate(choice_index(candidate, position), candidate, out)?;
        }
        if fragment.prompt_blocked() {
            self.blocked(out)?;
        }
        // The usage chunk goes last: with the fragment that finishes the stream, which Gemini
        // sends with the final usage (or with usage that comes after the finish).
        let finished = !self.choices.is_empty() && self.choices.iter().all(|c| c.finished);
        if let Some(tokens) = usage.filter(|_| finished && self.setup.include_usage && !self.usage_sent) {
            self.usage_sent = true;
            let mut last = self.chunk(0, Delta::default(), None);
            last.choices.clear();
            last.usage = Some(openai_usage(&tokens));
            out.push_json(&last).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        }
        // Gemini sends no end event: the end of the body is the end (see STREAM_ENDS_AT_EOF).
        Ok(Flow::Continue)
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// Google's error object, `{"error":{"code","message","status","details"}}`.
#[derive(Debug, Default, Deserialize)]
struct GeminiError {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    details: Vec<ErrorInfo>,
}

#[derive(Debug, Deserialize)]
struct ErrorInfo {
    #[serde(default)]
    reason: Option<String>,
}

impl GeminiError {
    fn describe(&self) -> String {
        format!(
            "{}: {}",
            self.status.as_deref().unwrap_or("error"),
            log_snippet(self.message.as_deref().unwrap_or_default().as_bytes())
        )
    }

    /// A 400 about gw's account rather than the request: a bad or expired key (Gemini answers
    /// those with 400 INVALID_ARGUMENT, reason `API_KEY_INVALID`), or FAILED_PRECONDITION (the
    /// API not available for the project's region or billing). Another deployment may work.
    fn is_account_problem(&self) -> bool {
        self.status.as_deref() == Some("FAILED_PRECONDITION")
            || self.details.iter().any(|d| d.reason.as_deref().is_some_and(|r| r.starts_with("API_KEY_")))
            || self.message.as_deref().is_some_and(|m| m.starts_with("API key "))
    }
}

#[derive(Debug, Deserialize)]
struct ErrorEnvelope {
    error: GeminiError,
}

/// Error answers are an object, or for streamed methods without `alt=sse` an array of them.
/// `Many` comes first: serde would also read a one-element array as the struct, wrongly.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ErrorAnswer {
    Many(Vec<ErrorEnvelope>),
    One(ErrorEnvelope),
}

fn parse_error(body: &[u8]) -> Option<GeminiError> {
    match serde_json::from_slice::<ErrorAnswer>(body).ok()? {
        ErrorAnswer::Many(all) => all.into_iter().next().map(|e| e.error),
        ErrorAnswer::One(e) => Some(e.error),
    }
}

/// Whether Gemini's message says the prompt does not fit the model's context window
/// ("The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).").
fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("exceeds the maximum number of tokens") || (m.contains("token count") && m.contains("exceed"))
}

/// A non-success Gemini answer as gw's error.
pub fn error_from_gemini(status: u16, body: &[u8]) -> UpstreamError {
    let detail = format!("HTTP {status}: {}", log_snippet(body));
    let error = parse_error(body);
    let failure = match status {
        // RESOURCE_EXHAUSTED: quota or rate.
        429 => UpstreamFailure::RateLimited,
        s if s >= 500 => UpstreamFailure::Unavailable { status: Some(s) },
        // UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND (the model): gw's key and configuration.
        401 | 403 | 404 => UpstreamFailure::Unavailable { status: Some(status) },
        400 if error.as_ref().is_some_and(GeminiError::is_account_problem) => {
            UpstreamFailure::Unavailable { status: Some(status) }
        }
        400 | 409 | 413 | 415 | 422 => {
            let Some(message) = error.and_then(|e| e.message) else { return default_error(status, body) };
            let code = is_context_overflow(&message).then_some("context_length_exceeded");
            let body = ErrorBody::new(message, "invalid_request_error", code, None);
            UpstreamFailure::Rejected { status, body: Box::new(body) }
        }
        _ => return default_error(status, body),
    };
    UpstreamError::new(failure, detail)
}

// ---------------------------------------------------------------------------------------------
// Embeddings

/// The `batchEmbedContents` body: one request per input, in order.
fn to_gemini_embeddings(texts: &[String], model: &str, dimensions: Option<u32>) -> Value {
    let resource = format!("models/{model}");
    let requests: Vec<Value> = texts
        .iter()
        .map(|text| {
            let mut request = Map::new();
            request.insert("model".into(), Value::String(resource.clone()));
            request.insert("content".into(), json!({"parts": [{ "text": text }]}));
            if let Some(d) = dimensions {
                request.insert("outputDimensionality".into(), d.into());
            }
            Value::Object(request)
        })
        .collect();
    json!({ "requests": requests })
}

/// Prompt tokens of an embeddings request, estimated: `batchEmbedContents` reports no usage, yet
/// the request has a cost. About four characters per token (Google's rule of thumb for Gemini
/// models), rounded up for each input.
fn estimate_tokens(texts: &[String]) -> u32 {
    texts.iter().map(|t| u32::try_from(t.chars().count().div_ceil(4)).unwrap_or(u32::MAX)).fold(0, u32::saturating_add)
}

#[derive(Debug, Deserialize)]
struct BatchEmbeddings {
    embeddings: Vec<Embedding>,
}

#[derive(Debug, Deserialize)]
struct Embedding {
    values: Vec<f32>,
}

/// A `batchEmbedContents` answer as OpenAI's `CreateEmbeddingResponse`, encoded as the client
/// asked, with the estimated prompt tokens as its usage (see [`estimate_tokens`]).
fn from_gemini_embeddings(
    request: &EmbeddingsRequest,
    upstream_model: &str,
    body: &[u8],
) -> Result<Completion, UpstreamError> {
    let answer: BatchEmbeddings = serde_json::from_slice(body).map_err(|e| {
        UpstreamError::bad_response(format!("not a Gemini embeddings response: {e}: {}", log_snippet(body)))
    })?;
    if answer.embeddings.len() != request.len() {
        return Err(UpstreamError::bad_response(format!(
            "{} embeddings for {} inputs: {}",
            answer.embeddings.len(),
            request.len(),
            log_snippet(body)
        )));
    }
    let vectors: Vec<Vec<f32>> = answer.embeddings.into_iter().map(|e| e.values).collect();
    let prompt_tokens = request.texts().map(estimate_tokens).unwrap_or(0);
    let body = embeddings_response(&vectors, upstream_model, request.encoding, prompt_tokens)
        .map_err(|e| UpstreamError::bad_response(e.to_string()))?;
    Ok(Completion { body, usage: Some(TokenUsage { prompt_tokens, ..TokenUsage::default() }) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ProviderOptions;

    const MODEL: &str = "gemini-2.5-flash";

    static OPTS: ProviderOptions = ProviderOptions { api_version: None, region: None, host: String::new() };

    fn req(v: &Value) -> ChatRequest {
        ChatRequest::parse(v.to_string().as_bytes()).unwrap()
    }

    fn call(req: &ChatRequest) -> Call<'_> {
        Call {
            endpoint: Endpoint::ChatCompletions,
            request: req,
            upstream_model: MODEL,
            api_key: Some("g-key"),
            base_path: "/v1beta",
            options: &OPTS,
            request_id: uuid::Uuid::nil(),
            created: 1,
        }
    }

    fn fixture(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    /// A request with these fields besides `model` and one user message.
    fn with(extra: Value) -> ChatRequest {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        req(&body)
    }

    fn unsupported_message(extra: Value) -> String {
        match to_gemini(&with(extra)) {
            Err(AdapterError::Unsupported(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    fn usage_of(v: &Value) -> TokenUsage {
        let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0) as u32;
        TokenUsage {
            prompt_tokens: n("prompt_tokens"),
            completion_tokens: n("completion_tokens"),
            cached_tokens: n("cached_tokens"),
            reasoning_tokens: n("reasoning_tokens"),
            ..TokenUsage::default()
        }
    }

    fn check_request(text: &str) {
        let f = fixture(text);
        let got = to_gemini(&req(&f["openai"])).unwrap();
        assert_eq!(got, f["gemini"], "\n got: {got:#}\nwant: {:#}", f["gemini"]);
    }

    #[test]
    fn golden_request_basic() {
        check_request(include_str!("testdata/gemini/request_basic.json"));
    }

    #[test]
    fn golden_request_tool_roundtrip() {
        check_request(include_str!("testdata/gemini/request_tool_roundtrip.json"));
    }

    fn check_response(text: &str) {
        let f = fixture(text);
        let r = with(json!({}));
        let body = f["gemini"].to_string();
        let c = GeminiAdapter.parse_response(&call(&r), body.as_bytes()).unwrap();
        let got: Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(got, f["openai"], "\n got: {got:#}\nwant: {:#}", f["openai"]);
        assert_eq!(c.usage, Some(usage_of(&f["usage"])));
    }

    #[test]
    fn golden_response_text() {
        check_response(include_str!("testdata/gemini/response_text.json"));
    }

    #[test]
    fn golden_response_tool_call() {
        check_response(include_str!("testdata/gemini/response_tool_call.json"));
    }

    fn setup(include_usage: bool) -> StreamSetup {
        StreamSetup { include_usage, completion_id: "chatcmpl-1".into(), model: "public-model".into(), created: 7 }
    }

    /// Feeds data payloads; returns the chunks written, the sink and the last result.
    fn run(include_usage: bool, events: &[String]) -> (Vec<Value>, StreamSink, Result<Flow, UpstreamError>) {
        let mut t = GeminiAdapter.stream(setup(include_usage));
        let mut sink = StreamSink::new();
        let mut last = Ok(Flow::Continue);
        for data in events {
            last = t.event("", data, &mut sink);
            if last.is_err() {
                break;
            }
        }
        let text = sink.take().map(|b| String::from_utf8(b.to_vec()).unwrap()).unwrap_or_default();
        let chunks = text
            .split("\n\n")
            .filter(|s| !s.is_empty())
            .map(|s| serde_json::from_str(s.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        (chunks, sink, last)
    }

    fn events_of(f: &Value) -> Vec<String> {
        f["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| match e {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect()
    }

    fn check_stream(text: &str) {
        let f = fixture(text);
        let include_usage = f["include_usage"].as_bool().unwrap();
        let (chunks, sink, last) = run(include_usage, &events_of(&f));
        assert_eq!(last.unwrap(), Flow::Continue, "Gemini streams end with the body");
        let want = f["chunks"].as_array().unwrap();
        assert_eq!(chunks.len(), want.len(), "\n got: {:#}", Value::Array(chunks.clone()));
        for (got, want) in chunks.iter().zip(want) {
            assert_eq!(got, want, "\n got: {got:#}\nwant: {want:#}");
        }
        assert_eq!(sink.usage, Some(usage_of(&f["usage"])));
        assert!(sink.content_seen);
    }

    #[test]
    fn golden_stream_text() {
        check_stream(include_str!("testdata/gemini/stream_text.json"));
    }

    #[test]
    fn golden_stream_tool() {
        check_stream(include_str!("testdata/gemini/stream_tool.json"));
    }

    #[test]
    fn golden_errors() {
        let cases = fixture(include_str!("testdata/gemini/errors.json"));
        for case in cases.as_array().unwrap() {
            let status = case["status"].as_u64().unwrap() as u16;
            let body = match &case["body"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let e = GeminiAdapter.map_error(status, body.as_bytes());
            assert!(!e.detail.contains('\n'));
            match (case["expect"].as_str().unwrap(), &e.failure) {
                ("rejected", UpstreamFailure::Rejected { status: s, body: b }) => {
                    assert_eq!(*s, status, "{case}");
                    assert_eq!(b.error.kind, "invalid_request_error", "{case}");
                    assert_eq!(b.error.code.as_deref(), case["code"].as_str(), "{case}");
                    if let Some(m) = case["message"].as_str() {
                        assert_eq!(b.error.message, m, "{case}");
                    }
                }
                ("rate_limited", UpstreamFailure::RateLimited) => {}
                ("unavailable", UpstreamFailure::Unavailable { status: s }) => assert_eq!(*s, Some(status), "{case}"),
                (want, got) => panic!("{case}: want {want}, got {got:?}"),
            }
        }
    }

    fn embeddings_call(r: &EmbeddingsRequest) -> Call<'_, EmbeddingsRequest> {
        Call {
            endpoint: Endpoint::Embeddings,
            request: r,
            upstream_model: "gemini-embedding-001",
            api_key: Some("g-key"),
            base_path: "/v1beta",
            options: &OPTS,
            request_id: uuid::Uuid::nil(),
            created: 1,
        }
    }

    #[test]
    fn golden_embeddings() {
        let f = fixture(include_str!("testdata/gemini/embeddings.json"));
        let r = EmbeddingsRequest::parse(f["openai_request"].to_string().as_bytes()).unwrap();
        let c = embeddings_call(&r);
        let Exchange::Http(up) = GeminiAdapter.build_embeddings(&c).unwrap() else { panic!() };
        assert_eq!(up.path, "/v1beta/models/gemini-embedding-001:batchEmbedContents");
        assert_eq!(up.headers.len(), 1);
        assert_eq!(up.headers[0].0, "x-goog-api-key");
        assert_eq!(up.headers[0].1, "g-key");
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        assert_eq!(body, f["gemini_request"], "\n got: {body:#}");

        let answer = f["gemini_response"].to_string();
        let done = GeminiAdapter.parse_embeddings(&c, answer.as_bytes()).unwrap();
        let got: Value = serde_json::from_slice(&done.body).unwrap();
        assert_eq!(got, f["openai_response"], "\n got: {got:#}");
        assert_eq!(done.usage, Some(usage_of(&f["usage"])));
    }

    #[test]
    fn embeddings_edge_cases() {
        let tokens = EmbeddingsRequest::parse(br#"{"model":"e","input":[[1,2,3]]}"#).unwrap();
        match GeminiAdapter.build_embeddings(&embeddings_call(&tokens)) {
            Err(AdapterError::Unsupported(m)) => assert!(m.contains("'input'"), "{m}"),
            other => panic!("{other:?}"),
        }
        let two =
            EmbeddingsRequest::parse(br#"{"model":"e","input":["ab","cdefg"],"encoding_format":"base64"}"#).unwrap();
        let c = embeddings_call(&two);
        let Exchange::Http(up) = GeminiAdapter.build_embeddings(&c).unwrap() else { panic!() };
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        assert!(body["requests"][0].get("outputDimensionality").is_none());
        // One vector for two inputs is not an answer.
        let short = br#"{"embeddings":[{"values":[1.0]}]}"#;
        assert_eq!(GeminiAdapter.parse_embeddings(&c, short).unwrap_err().failure, UpstreamFailure::BadResponse);
        assert_eq!(GeminiAdapter.parse_embeddings(&c, b"nope").unwrap_err().failure, UpstreamFailure::BadResponse);
        let ok = br#"{"embeddings":[{"values":[1.0]},{"values":[-0.5]}]}"#;
        let done = GeminiAdapter.parse_embeddings(&c, ok).unwrap();
        let v: Value = serde_json::from_slice(&done.body).unwrap();
        assert_eq!(v["data"][0]["embedding"], crate::openai::encode(&[1.0], crate::openai::EncodingFormat::Base64));
        // ⌈2/4⌉ + ⌈5/4⌉
        assert_eq!(done.usage.map(|u| u.prompt_tokens), Some(3));
        assert_eq!(v["usage"]["prompt_tokens"], 3);
        assert_eq!(estimate_tokens(&["ééééé".to_string()]), 2, "characters, not bytes");
    }

    #[test]
    fn builds_the_http_request() {
        assert!(GeminiAdapter.supports(Endpoint::ChatCompletions) && GeminiAdapter.supports(Endpoint::Embeddings));
        assert!(GeminiAdapter.stream_ends_at_eof());
        let r = with(json!({}));
        let Exchange::Http(up) = GeminiAdapter.build(&call(&r)).unwrap() else { panic!() };
        assert_eq!(up.path, "/v1beta/models/gemini-2.5-flash:generateContent");
        assert_eq!(up.headers.len(), 1);
        assert_eq!(up.headers[0].0, "x-goog-api-key");
        assert_eq!(up.headers[0].1, "g-key");
        assert!(up.headers[0].1.is_sensitive());
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        assert_eq!(body, json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}));

        let r = with(json!({"stream": true, "stream_options": {"include_usage": true}}));
        let mut c = call(&r);
        c.api_key = None;
        c.upstream_model = "models/gemini-2.5-pro";
        let Exchange::Http(up) = GeminiAdapter.build(&c).unwrap() else { panic!() };
        assert_eq!(up.path, "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse");
        assert!(up.headers.is_empty());
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        assert!(body.get("stream").is_none() && body.get("stream_options").is_none());

        c.upstream_model = "gemini?x=1";
        assert!(matches!(GeminiAdapter.build(&c), Err(AdapterError::Config(_))));
        c.api_key = Some("bad\nkey");
        c.upstream_model = MODEL;
        assert!(matches!(GeminiAdapter.build(&c), Err(AdapterError::Config(_))));
    }

    #[test]
    fn refuses_what_gemini_cannot_express() {
        assert!(unsupported_message(json!({"logprobs": true})).contains("'logprobs'"));
        assert!(unsupported_message(json!({"modalities": ["text", "audio"]})).contains("'modalities'"));
        assert!(unsupported_message(json!({"functions": [{"name": "f"}]})).contains("'functions'"));
        assert!(unsupported_message(json!({"web_search_options": {}})).contains("'web_search_options'"));
        let custom = json!([{"type": "custom", "custom": {"name": "c"}}]);
        assert!(unsupported_message(json!({ "tools": custom })).contains("'tools[0]'"));
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let allowed = json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}});
        assert!(unsupported_message(json!({"tools": tools, "tool_choice": allowed})).contains("'tool_choice'"));
        let audio = json!([{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}]}]);
        assert!(unsupported_message(json!({ "messages": audio })).contains("'messages[0].content[0]'"));
        let bad_args = json!([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]);
        assert!(unsupported_message(json!({ "messages": bad_args }))
            .contains("'messages[1].tool_calls[0].function.arguments'"));
        let orphan =
            json!([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "nope", "content": "1"}]);
        assert!(unsupported_message(json!({ "messages": orphan })).contains("'messages[1].tool_call_id'"));
        let only_system = json!([{"role": "system", "content": "be nice"}]);
        assert!(unsupported_message(json!({ "messages": only_system })).contains("'messages'"));
        let ftp = json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/a.png"}}]}]);
        assert!(unsupported_message(json!({ "messages": ftp })).contains("image_url"));
        let not_b64 =
            json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,abc"}}]}]);
        assert!(unsupported_message(json!({ "messages": not_b64 })).contains("base64"));
    }

    #[test]
    fn generation_config_mapping() {
        let config = |extra: Value| to_gemini(&with(extra)).unwrap().get("generationConfig").cloned();
        assert_eq!(config(json!({"logprobs": false, "user": "u", "logit_bias": {"1": 2}, "store": true})), None);
        assert_eq!(
            config(json!({"max_tokens": 10, "stop": ["a", "b"]})),
            Some(json!({"maxOutputTokens": 10,
            "stopSequences": ["a", "b"]}))
        );
        assert_eq!(
            config(json!({"max_tokens": 10, "max_completion_tokens": 20}))
                .and_then(|c| c.get("maxOutputTokens").cloned()),
            Some(json!(20))
        );
        assert_eq!(
            config(json!({"response_format": {"type": "json_object"}})),
            Some(json!({"responseMimeType": "application/json"}))
        );
        assert_eq!(config(json!({"response_format": {"type": "text"}})), None);
        // A json_schema format without a schema still asks for JSON.
        assert_eq!(
            config(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})),
            Some(json!({"responseMimeType": "application/json"}))
        );
        for (effort, budget) in
            [("none", 0), ("minimal", 1024), ("low", 1024), ("medium", 8192), ("high", 24576), ("xhigh", 24576)]
        {
            assert_eq!(
                config(json!({ "reasoning_effort": effort })),
                Some(json!({"thinkingConfig": {"thinkingBudget": budget}})),
                "{effort}"
            );
        }
    }

    #[test]
    fn tool_choice_modes() {
        let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
            "properties": {"x": {"type": "integer"}}}}}]);
        let choice = |tool_choice: Value| {
            to_gemini(&with(json!({"tools": tools, "tool_choice": tool_choice}))).unwrap().get("toolConfig").cloned()
        };
        assert_eq!(choice(json!("auto")), Some(json!({"functionCallingConfig": {"mode": "AUTO"}})));
        assert_eq!(choice(json!("none")), Some(json!({"functionCallingConfig": {"mode": "NONE"}})));
        assert_eq!(choice(json!("required")), Some(json!({"functionCallingConfig": {"mode": "ANY"}})));
        assert_eq!(choice(Value::Null), None);
        let b = to_gemini(&with(json!({ "tools": tools }))).unwrap();
        assert_eq!(
            b["tools"],
            json!([{"functionDeclarations": [{"name": "f", "parameters": {"type": "object",
                "properties": {"x": {"type": "integer"}}}}]}])
        );
        // No tools: no tool config either.
        let b = to_gemini(&with(json!({"tools": [], "tool_choice": "none"}))).unwrap();
        assert!(b.get("tools").is_none() && b.get("toolConfig").is_none());
    }

    #[test]
    fn schemas_lose_only_rejected_keywords() {
        let schema = json!({"$schema": "x", "type": "object", "additionalProperties": false, "strict": true,
            "properties": {
                "strict": {"type": "boolean"},
                "additionalProperties": {"type": "array", "items": {"type": "object", "additionalProperties": false}},
                "pick": {"anyOf": [{"type": "string"}, {"type": "object", "additionalProperties": true}]}
            },
            "default": {"strict": true}});
        assert_eq!(
            strip_schema(&schema),
            json!({"type": "object",
                "properties": {
                    "strict": {"type": "boolean"},
                    "additionalProperties": {"type": "array", "items": {"type": "object"}},
                    "pick": {"anyOf": [{"type": "string"}, {"type": "object"}]}
                },
                "default": {"strict": true}})
        );
    }

    #[test]
    fn turns_merge_and_empty_content_is_dropped() {
        let b = to_gemini(&with(json!({"messages": [
            {"role": "user", "content": "one"},
            {"role": "user", "content": ""},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": [{"type": "text", "text": "two"},
                {"type": "image_url", "image_url": {"url": "https://x.test/p/cat.WEBP?size=2#top"}}]},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            {"role": "assistant", "content": "yes", "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "t1", "content": ""},
            {"role": "user", "content": "later"}
        ]})))
        .unwrap();
        assert!(b.get("systemInstruction").is_none());
        assert_eq!(
            b["contents"],
            json!([
                {"role": "user", "parts": [{"text": "one"}, {"text": "two"},
                    {"fileData": {"mimeType": "image/webp", "fileUri": "https://x.test/p/cat.WEBP?size=2#top"}}]},
                {"role": "model", "parts": [{"text": "no"}, {"text": "yes"},
                    {"functionCall": {"name": "f", "args": {}}}]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "f", "response": {"content": ""}}},
                    {"text": "later"}
                ]}
            ])
        );
        assert_eq!(image_mime_type("https://x.test/photo"), "image/jpeg");
        assert_eq!(image_mime_type("https://x.test/a.gif"), "image/gif");
        assert_eq!(image_mime_type("https://x.test/a.png/b"), "image/jpeg");
    }

    fn parse(body: Value) -> Value {
        let c = from_gemini(body.to_string().as_bytes(), 5, "chatcmpl-fallback", "fallback-model").unwrap();
        serde_json::from_slice(&c.body).unwrap()
    }

    #[test]
    fn response_edge_cases() {
        // A blocked prompt: no candidates, one filtered choice with null content.
        let v = parse(json!({"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
            "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7}, "modelVersion": "gemini-2.5-flash"}));
        assert_eq!((v["id"].as_str(), v["model"].as_str()), (Some("chatcmpl-fallback"), Some("gemini-2.5-flash")));
        assert_eq!(v["choices"].as_array().unwrap().len(), 1);
        assert!(v["choices"][0]["message"].as_object().unwrap().contains_key("content"));
        assert_eq!(v["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(v["choices"][0]["finish_reason"], "content_filter");
        assert_eq!(v["usage"]["prompt_tokens"], 7);

        // Several candidates; one cut short, one filtered without content; no usage, no ids.
        let v = parse(json!({"candidates": [
            {"content": {"parts": [{"text": "a"}], "role": "model"}, "finishReason": "MAX_TOKENS"},
            {"finishReason": "RECITATION", "index": 1},
            {"content": {"parts": [{"functionCall": {"name": "f"}}], "role": "model"},
                "finishReason": "STOP", "index": 2}
        ]}));
        assert_eq!((v["id"].as_str(), v["model"].as_str()), (Some("chatcmpl-fallback"), Some("fallback-model")));
        let finishes: Vec<&str> =
            v["choices"].as_array().unwrap().iter().map(|c| c["finish_reason"].as_str().unwrap()).collect();
        assert_eq!(finishes, ["length", "content_filter", "tool_calls"]);
        assert_eq!(v["choices"][1]["index"], 1);
        assert_eq!(v["choices"][1]["message"]["content"], Value::Null);
        assert_eq!(
            v["choices"][2]["message"]["tool_calls"],
            json!([{"id": "call_fallback_0", "type": "function", "function": {"name": "f", "arguments": "{}"}}])
        );
        assert!(v["choices"][0]["message"].get("tool_calls").is_none());
        assert!(v.get("usage").is_none());

        for bad in [&b"{not json"[..], &b"{}"[..], &b"[]"[..], &br#"{"candidates":[]}"#[..]] {
            let e = from_gemini(bad, 5, "f", "m").unwrap_err();
            assert_eq!(e.failure, UpstreamFailure::BadResponse);
        }
        for (reason, calls, finish) in [
            (Some("STOP"), false, "stop"),
            (Some("STOP"), true, "tool_calls"),
            (Some("MAX_TOKENS"), true, "length"),
            (Some("SAFETY"), false, "content_filter"),
            (Some("BLOCKLIST"), false, "content_filter"),
            (Some("PROHIBITED_CONTENT"), false, "content_filter"),
            (Some("SPII"), false, "content_filter"),
            (Some("MALFORMED_FUNCTION_CALL"), false, "stop"),
            (Some("OTHER"), false, "stop"),
            (None, false, "stop"),
        ] {
            assert_eq!(finish_reason(reason, calls), finish, "{reason:?}");
        }
    }

    #[test]
    fn stream_errors_and_odd_fragments() {
        let text = json!({"candidates": [{"content": {"parts": [{"text": "hi"}], "role": "model"}, "index": 0}],
            "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}});
        let error =
            json!({"error": {"code": 500, "message": "An internal error\nhas occurred.", "status": "INTERNAL"}});
        let (chunks, sink, last) = run(true, &[text.to_string(), error.to_string()]);
        let e = last.unwrap_err();
        assert_eq!(e.failure, UpstreamFailure::MidStream);
        assert!(e.detail.contains("INTERNAL") && !e.detail.contains('\n'), "{}", e.detail);
        assert_eq!(chunks.len(), 1);
        // Usage known so far is kept for billing even though the stream broke.
        assert_eq!(sink.usage.map(|u| u.prompt_tokens), Some(3));

        let (_, _, last) = run(false, &["{not json".to_string()]);
        assert_eq!(last.unwrap_err().failure, UpstreamFailure::BadResponse);

        // Finish without usage, then usage alone: the usage chunk still comes, last, once.
        let finish = json!({"candidates": [{"content": {"parts": [{"text": ""}], "role": "model"},
            "finishReason": "MAX_TOKENS", "index": 0}]});
        let usage = json!({"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7}});
        let (chunks, sink, last) =
            run(true, &[String::new(), finish.to_string(), usage.to_string(), usage.to_string()]);
        assert_eq!(last.unwrap(), Flow::Continue);
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant"}));
        assert_eq!(chunks[0]["choices"][0]["finish_reason"], "length");
        assert_eq!(chunks[1]["choices"], json!([]));
        assert_eq!(chunks[1]["usage"]["total_tokens"], 7);
        assert_eq!(sink.usage.map(|u| u.total()), Some(7));
        assert!(!sink.content_seen);

        // Without include_usage no usage chunk, but the usage is recorded.
        let (chunks, sink, _) = run(false, &[finish.to_string(), usage.to_string()]);
        assert_eq!(chunks.len(), 1);
        assert_eq!(sink.usage.map(|u| u.completion_tokens), Some(4));
    }

    #[test]
    fn stream_blocked_prompt_and_several_candidates() {
        let blocked = json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
            "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5}});
        let (chunks, _, _) = run(true, &[blocked.to_string()]);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant"}));
        assert_eq!(chunks[0]["choices"][0]["finish_reason"], "content_filter");
        assert_eq!(chunks[1]["usage"]["prompt_tokens"], 5);

        let first = json!({"candidates": [
            {"content": {"parts": [{"text": "a"}], "role": "model"}, "index": 0},
            {"content": {"parts": [{"functionCall": {"name": "f", "args": {"x": 1}}}], "role": "model"}, "index": 1}
        ]});
        let second = json!({"candidates": [
            {"content": {"parts": [{"text": "b"}], "role": "model"}, "finishReason": "STOP", "index": 0},
            {"content": {"parts": [{"functionCall": {"name": "g"}}], "role": "model"},
                "finishReason": "STOP", "index": 1}
        ], "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 6, "totalTokenCount": 8}});
        let (chunks, _, _) = run(true, &[first.to_string(), second.to_string()]);
        assert_eq!(chunks.len(), 5, "{chunks:?}");
        assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": "a"}));
        assert_eq!(chunks[1]["choices"][0]["index"], 1);
        assert_eq!(
            chunks[1]["choices"][0]["delta"],
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1_0", "type": "function",
                "function": {"name": "f", "arguments": "{\"x\":1}"}}]})
        );
        assert_eq!(chunks[2]["choices"][0]["finish_reason"], "stop");
        assert_eq!(chunks[3]["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
        assert_eq!(chunks[3]["choices"][0]["delta"]["tool_calls"][0]["id"], "call_1_1");
        assert_eq!(chunks[3]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chunks[4]["usage"]["total_tokens"], 8);
    }
}
