//! The Anthropic Messages API adapter (`POST /v1/messages`). OpenAI chat requests are translated
//! into Messages requests, answers and stream events back into OpenAI completions and chunks.
//!
//! The translation is pure (no network, no clock): [`to_anthropic`], [`from_anthropic`],
//! [`AnthropicStream`] and [`error_from_anthropic`] are public so other Anthropic-speaking
//! providers (Bedrock's Anthropic models use the same body) can reuse them.
//!
//! What OpenAI can say and the Messages API cannot (several choices, log probabilities, JSON
//! response formats, audio, files, legacy `functions`) is refused with
//! [`AdapterError::Unsupported`] naming the parameter, so the fallback loop may try a deployment
//! that can serve it. Parameters that only tune OpenAI's own service (penalties, seed, logit
//! bias, store, metadata, service tier, prediction, prompt cache keys) are dropped silently: they
//! do not change what a correct answer is.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    default_error, log_snippet, Adapter, AdapterError, Call, Completion, Exchange, Flow, StreamSetup, StreamSink,
    StreamTranslator, UpstreamError, UpstreamFailure, UpstreamRequest,
};
use crate::openai::{
    AssistantMessage, ChatCompletion, ChatCompletionChunk, ChatRequest, Choice, ChunkChoice, Delta, ErrorBody, Usage,
};
use crate::pricing::{ServiceTier, TokenUsage};

/// The `anthropic-version` header sent when the provider's options name none.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// `max_tokens` when the client set no limit: the Messages API requires one, and every Claude
/// model can produce at least this many.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

pub const MESSAGES_PATH: &str = "/messages";

/// The smallest `thinking.budget_tokens` the Messages API accepts.
const MIN_THINKING_BUDGET: u64 = 1024;

pub struct AnthropicAdapter;

impl Adapter for AnthropicAdapter {
    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError> {
        let body = to_anthropic(call.request, call.upstream_model)?;
        let body = serde_json::to_vec(&body).map_err(AdapterError::config)?;
        let mut headers = Vec::with_capacity(2);
        if let Some(key) = call.api_key {
            let value = http::HeaderValue::try_from(key)
                .map_err(|_| AdapterError::config("the provider key is not a valid header value"))?;
            headers.push((http::HeaderName::from_static("x-api-key"), value));
        }
        let version = call.options.api_version.as_deref().unwrap_or(DEFAULT_VERSION);
        let version = http::HeaderValue::try_from(version)
            .map_err(|_| AdapterError::config("the provider's api_version is not a valid header value"))?;
        headers.push((http::HeaderName::from_static("anthropic-version"), version));
        Ok(Exchange::Http(UpstreamRequest {
            path: format!("{}{MESSAGES_PATH}", call.base_path),
            headers,
            body: body.into(),
        }))
    }

    fn parse_response(&self, call: &Call<'_>, body: &[u8]) -> Result<Completion, UpstreamError> {
        from_anthropic(body, call.created, &call.completion_id(), call.upstream_model)
    }

    fn stream(&self, setup: StreamSetup) -> Box<dyn StreamTranslator> {
        Box::new(AnthropicStream::new(setup))
    }

    fn map_error(&self, status: u16, body: &[u8]) -> UpstreamError {
        error_from_anthropic(status, body)
    }
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
fn refuse_unexpressible(body: &Map<String, Value>) -> Result<(), AdapterError> {
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
fn token_limits(body: &Map<String, Value>) -> (u64, Option<u64>) {
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
struct Turn {
    role: &'static str,
    content: Vec<Value>,
}

fn is_tool_result(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("tool_result")
}

/// Appends blocks, merging into the previous turn when it has the same role: the Messages API
/// requires user and assistant turns to alternate, OpenAI does not.
fn push_turn(turns: &mut Vec<Turn>, role: &'static str, blocks: Vec<Value>) {
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
fn translate_messages(messages: &[Value]) -> Result<(String, Vec<Value>), AdapterError> {
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

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn user_blocks(m: &Value, i: usize) -> Result<Vec<Value>, AdapterError> {
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

fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix))
}

/// An `image_url` part: a base64 `data:` URL or an http(s) URL Anthropic fetches itself.
fn image_block(part: &Value, i: usize, j: usize) -> Result<Value, AdapterError> {
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

fn assistant_blocks(m: &Value, i: usize) -> Result<Vec<Value>, AdapterError> {
    if m.get("function_call").is_some_and(|f| !f.is_null()) {
        return Err(unsupported(format!(
            "This model does not support the deprecated 'messages[{i}].function_call': use 'tool_calls'."
        )));
    }
    let mut out = Vec::new();
    match m.get("content") {
        Some(Value::String(s)) if !s.is_empty() => out.push(text_block(s)),
        Some(Value::Array(parts)) => {
            for (j, part) in parts.iter().enumerate() {
                // A refusal the model gave earlier is still what it said: replay it as text.
                let text = part_text(part, i, j, &["text", "refusal"])?;
                if !text.is_empty() {
                    out.push(text_block(text));
                }
            }
        }
        _ => {}
    }
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
        for (j, c) in calls.iter().enumerate() {
            out.push(tool_use_block(c, i, j)?);
        }
    }
    Ok(out)
}

fn tool_use_block(c: &Value, i: usize, j: usize) -> Result<Value, AdapterError> {
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

fn tool_result(m: &Value, i: usize) -> Result<Value, AdapterError> {
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

fn translate_tools(body: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), AdapterError> {
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

// ---------------------------------------------------------------------------------------------
// Response

/// Anthropic's `usage`; every field may be missing or `null` depending on the event.
#[derive(Debug, Default, Deserialize)]
struct AnthropicUsage {
    #[serde(default)]
    input_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u32>,
    #[serde(default)]
    cache_read_input_tokens: Option<u32>,
    #[serde(default)]
    service_tier: Option<String>,
}

/// Usage gathered so far; stream events report cumulative counts, so later values replace.
#[derive(Debug, Default, Clone)]
struct Counts {
    input: u32,
    output: u32,
    cache_creation: u32,
    cache_read: u32,
    tier: ServiceTier,
}

impl Counts {
    fn absorb(&mut self, u: &AnthropicUsage) {
        if let Some(n) = u.input_tokens {
            self.input = n;
        }
        if let Some(n) = u.output_tokens {
            self.output = n;
        }
        if let Some(n) = u.cache_creation_input_tokens {
            self.cache_creation = n;
        }
        if let Some(n) = u.cache_read_input_tokens {
            self.cache_read = n;
        }
        if let Some(t) = &u.service_tier {
            self.tier = ServiceTier::from_reported(t);
        }
    }

    /// Anthropic's `input_tokens` excludes cache reads and writes; gw's prompt tokens are all of
    /// them, as OpenAI counts.
    fn tokens(&self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.input.saturating_add(self.cache_read).saturating_add(self.cache_creation),
            completion_tokens: self.output,
            cached_tokens: self.cache_read,
            reasoning_tokens: 0,
            cache_creation_tokens: self.cache_creation,
            tier: self.tier,
        }
    }
}

/// OpenAI's usage object, with the details its document describes.
fn openai_usage(t: &TokenUsage) -> Usage {
    let mut extra = Map::new();
    extra.insert("prompt_tokens_details".into(), json!({"cached_tokens": t.cached_tokens}));
    extra.insert("completion_tokens_details".into(), json!({"reasoning_tokens": t.reasoning_tokens}));
    Usage { prompt_tokens: t.prompt_tokens, completion_tokens: t.completion_tokens, total_tokens: t.total(), extra }
}

/// Anthropic's `stop_reason` as an OpenAI `finish_reason`.
fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        // end_turn, stop_sequence, pause_turn (a server tool paused the turn; what came so far
        // is a complete answer to show) and anything newer.
        _ => "stop",
    }
}

#[derive(Debug, Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Message {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    content: Vec<Block>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

/// An OpenAI tool call for a `tool_use` block: OpenAI carries the input as JSON text.
fn tool_call(id: &str, name: &str, arguments: String) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// A Messages API answer as an OpenAI chat completion. `id` and `model` fall back to gw's when
/// the answer lacks them.
pub fn from_anthropic(
    body: &[u8],
    created: i64,
    id_fallback: &str,
    model_fallback: &str,
) -> Result<Completion, UpstreamError> {
    let msg: Message = serde_json::from_slice(body)
        .map_err(|e| UpstreamError::bad_response(format!("not an Anthropic message: {e}: {}", log_snippet(body))))?;
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    for block in msg.content {
        match block.kind.as_str() {
            "text" => text.get_or_insert_with(String::new).push_str(block.text.as_deref().unwrap_or_default()),
            "tool_use" => {
                let input = block.input.unwrap_or_else(|| Value::Object(Map::new()));
                let arguments =
                    serde_json::to_string(&input).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
                calls.push(tool_call(
                    block.id.as_deref().unwrap_or_default(),
                    block.name.as_deref().unwrap_or_default(),
                    arguments,
                ));
            }
            // Thinking (its text is not part of OpenAI's message) and server-tool blocks.
            _ => {}
        }
    }
    let mut message_extra = Map::new();
    if !calls.is_empty() {
        message_extra.insert("tool_calls".into(), Value::Array(calls));
    }
    let usage = msg.usage.as_ref().map(|u| {
        let mut c = Counts::default();
        c.absorb(u);
        c.tokens()
    });
    let completion = ChatCompletion {
        id: msg.id.unwrap_or_else(|| id_fallback.to_string()),
        object: "chat.completion".into(),
        created,
        model: msg.model.unwrap_or_else(|| model_fallback.to_string()),
        choices: vec![Choice {
            index: 0,
            message: AssistantMessage { role: "assistant".into(), content: text, refusal: None, extra: message_extra },
            logprobs: None,
            finish_reason: Some(finish_reason(msg.stop_reason.as_deref()).into()),
            extra: Map::new(),
        }],
        usage: usage.as_ref().map(openai_usage),
        system_fingerprint: None,
        extra: Map::new(),
    };
    let body = serde_json::to_vec(&completion).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
    Ok(Completion { body: body.into(), usage })
}

// ---------------------------------------------------------------------------------------------
// Stream

#[derive(Debug, Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    /// thinking_delta, signature_delta, citations_delta, ...: nothing OpenAI's chunk carries.
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorDetail {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u32,
        content_block: Block,
    },
    ContentBlockDelta {
        index: u32,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<AnthropicUsage>,
    },
    MessageStop,
    Error {
        #[serde(default)]
        error: ErrorDetail,
    },
    /// `ping` and event types added after this was written.
    #[serde(other)]
    Ignored,
}

/// A `tool_use` content block being streamed; its position among them is its OpenAI index.
#[derive(Debug)]
struct ToolBlock {
    block: u32,
    /// Some argument text went out: a tool without input still needs `{}` to be valid JSON.
    arguments_sent: bool,
}

/// Translates Anthropic's typed stream events into OpenAI chunks.
pub struct AnthropicStream {
    setup: StreamSetup,
    started: bool,
    finished: bool,
    tools: Vec<ToolBlock>,
    counts: Counts,
}

impl AnthropicStream {
    pub fn new(setup: StreamSetup) -> Self {
        Self { setup, started: false, finished: false, tools: Vec::new(), counts: Counts::default() }
    }

    fn chunk(&self, delta: Delta, finish: Option<&str>) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.setup.completion_id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.setup.created,
            model: self.setup.model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
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

    fn push(&mut self, out: &mut StreamSink, delta: Delta, finish: Option<&str>) -> Result<(), UpstreamError> {
        self.ensure_started(out)?;
        let content = delta.content.as_deref().is_some_and(|c| !c.is_empty()) || delta.extra.contains_key("tool_calls");
        let chunk = self.chunk(delta, finish);
        out.push_json(&chunk).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        if content {
            out.saw_content();
        }
        Ok(())
    }

    /// OpenAI streams open with the assistant role; Anthropic's `message_start` is where it goes,
    /// or the first content if that event never came.
    fn ensure_started(&mut self, out: &mut StreamSink) -> Result<(), UpstreamError> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let delta = Delta { role: Some("assistant".into()), content: Some(String::new()), extra: Map::new() };
        out.push_json(&self.chunk(delta, None)).map_err(|e| UpstreamError::bad_response(e.to_string()))
    }

    fn push_tool_delta(&mut self, out: &mut StreamSink, call: Value) -> Result<(), UpstreamError> {
        let mut extra = Map::new();
        extra.insert("tool_calls".into(), Value::Array(vec![call]));
        self.push(out, Delta { role: None, content: None, extra }, None)
    }

    fn finish(&mut self, out: &mut StreamSink, stop_reason: Option<&str>) -> Result<(), UpstreamError> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        self.push(out, Delta::default(), Some(finish_reason(stop_reason)))
    }
}

impl StreamTranslator for AnthropicStream {
    fn event(&mut self, _event: &str, data: &str, out: &mut StreamSink) -> Result<Flow, UpstreamError> {
        // Every event names its type in the data too, which also covers streams relayed without
        // `event:` lines.
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let event: Event = serde_json::from_str(data).map_err(|e| {
            UpstreamError::bad_response(format!(
                "invalid Anthropic stream event: {e}: {}",
                log_snippet(data.as_bytes())
            ))
        })?;
        match event {
            Event::MessageStart { message } => {
                if let Some(u) = &message.usage {
                    self.counts.absorb(u);
                    out.usage = Some(self.counts.tokens());
                }
                self.ensure_started(out)?;
            }
            Event::ContentBlockStart { index, content_block } => match content_block.kind.as_str() {
                "text" => {
                    if let Some(text) = content_block.text.filter(|t| !t.is_empty()) {
                        self.push(out, Delta { role: None, content: Some(text), extra: Map::new() }, None)?;
                    }
                }
                "tool_use" => {
                    let input = content_block.input.filter(|i| i.as_object().is_some_and(|o| !o.is_empty()));
                    let arguments = match &input {
                        Some(i) => serde_json::to_string(i).map_err(|e| UpstreamError::bad_response(e.to_string()))?,
                        None => String::new(),
                    };
                    let at = self.tools.len();
                    self.tools.push(ToolBlock { block: index, arguments_sent: input.is_some() });
                    let mut call = tool_call(
                        content_block.id.as_deref().unwrap_or_default(),
                        content_block.name.as_deref().unwrap_or_default(),
                        arguments,
                    );
                    if let Some(obj) = call.as_object_mut() {
                        obj.insert("index".into(), at.into());
                    }
                    self.push_tool_delta(out, call)?;
                }
                _ => {}
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } if !text.is_empty() => {
                    self.push(out, Delta { role: None, content: Some(text), extra: Map::new() }, None)?;
                }
                BlockDelta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                    // Input deltas of blocks that are not client tools (server tools) are not the
                    // client's to see.
                    let tool = self.tools.iter_mut().enumerate().find(|(_, t)| t.block == index);
                    if let Some((at, t)) = tool {
                        t.arguments_sent = true;
                        self.push_tool_delta(out, json!({"index": at, "function": {"arguments": partial_json}}))?;
                    }
                }
                _ => {}
            },
            Event::ContentBlockStop { index } => {
                let silent = self.tools.iter_mut().enumerate().find(|(_, t)| t.block == index && !t.arguments_sent);
                if let Some((at, t)) = silent {
                    t.arguments_sent = true;
                    self.push_tool_delta(out, json!({"index": at, "function": {"arguments": "{}"}}))?;
                }
            }
            Event::MessageDelta { delta, usage } => {
                if let Some(u) = &usage {
                    self.counts.absorb(u);
                    out.usage = Some(self.counts.tokens());
                }
                if let Some(reason) = delta.stop_reason.as_deref() {
                    self.finish(out, Some(reason))?;
                }
            }
            Event::MessageStop => {
                self.finish(out, None)?;
                let tokens = self.counts.tokens();
                out.usage = Some(tokens);
                if self.setup.include_usage {
                    let mut last = self.chunk(Delta::default(), None);
                    last.choices.clear();
                    last.usage = Some(openai_usage(&tokens));
                    out.push_json(&last).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
                }
                return Ok(Flow::Done);
            }
            Event::Error { error } => {
                let detail = format!(
                    "{}: {}",
                    error.kind.as_deref().unwrap_or("error"),
                    log_snippet(error.message.unwrap_or_default().as_bytes())
                );
                return Err(UpstreamError::new(UpstreamFailure::MidStream, detail));
            }
            Event::Ignored => {}
        }
        Ok(Flow::Continue)
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

#[derive(Debug, Deserialize)]
struct ErrorEnvelope {
    error: ErrorDetail,
}

/// Whether Anthropic's message says the prompt (with `max_tokens`) does not fit the context.
fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["prompt is too long", "context window", "context limit", "too many tokens"].iter().any(|s| m.contains(s))
}

/// A non-success Messages API answer as gw's error.
pub fn error_from_anthropic(status: u16, body: &[u8]) -> UpstreamError {
    let detail = format!("HTTP {status}: {}", log_snippet(body));
    let failure = match status {
        429 => UpstreamFailure::RateLimited,
        // 529 is Anthropic's "overloaded".
        s if s >= 500 => UpstreamFailure::Unavailable { status: Some(s) },
        // Credentials, billing (402), permissions and model names are gw's account and
        // configuration: another deployment may serve the request.
        401..=404 => UpstreamFailure::Unavailable { status: Some(status) },
        400 | 409 | 413 | 415 | 422 => {
            let Some(message) = serde_json::from_slice::<ErrorEnvelope>(body).ok().and_then(|e| e.error.message) else {
                return default_error(status, body);
            };
            let code = is_context_overflow(&message).then_some("context_length_exceeded");
            let body = ErrorBody::new(message, "invalid_request_error", code, None);
            UpstreamFailure::Rejected { status, body: Box::new(body) }
        }
        _ => return default_error(status, body),
    };
    UpstreamError::new(failure, detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{Endpoint, ProviderOptions};

    const MODEL: &str = "claude-sonnet-4-5";

    fn req(v: &Value) -> ChatRequest {
        ChatRequest::parse(v.to_string().as_bytes()).unwrap()
    }

    fn call<'a>(req: &'a ChatRequest, options: &'a ProviderOptions) -> Call<'a> {
        Call {
            endpoint: Endpoint::ChatCompletions,
            request: req,
            upstream_model: MODEL,
            api_key: Some("sk-ant"),
            base_path: "/v1",
            options,
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
        match to_anthropic(&with(extra), MODEL) {
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
            cache_creation_tokens: n("cache_creation_tokens"),
            tier: ServiceTier::Standard,
        }
    }

    fn check_request(text: &str) {
        let f = fixture(text);
        let got = to_anthropic(&req(&f["openai"]), MODEL).unwrap();
        assert_eq!(got, f["anthropic"], "\n got: {got:#}\nwant: {:#}", f["anthropic"]);
    }

    #[test]
    fn golden_request_basic() {
        check_request(include_str!("testdata/anthropic/request_basic.json"));
    }

    #[test]
    fn golden_request_tool_roundtrip() {
        check_request(include_str!("testdata/anthropic/request_tool_roundtrip.json"));
    }

    fn check_response(text: &str) {
        let f = fixture(text);
        let r = req(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}));
        let options = ProviderOptions::default();
        let body = f["anthropic"].to_string();
        let c = AnthropicAdapter.parse_response(&call(&r, &options), body.as_bytes()).unwrap();
        let got: Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(got, f["openai"], "\n got: {got:#}\nwant: {:#}", f["openai"]);
        assert_eq!(c.usage, Some(usage_of(&f["usage"])));
    }

    #[test]
    fn golden_response_text() {
        check_response(include_str!("testdata/anthropic/response_text.json"));
    }

    #[test]
    fn golden_response_tool_use() {
        check_response(include_str!("testdata/anthropic/response_tool_use.json"));
    }

    fn setup(include_usage: bool) -> StreamSetup {
        StreamSetup { include_usage, completion_id: "chatcmpl-1".into(), model: "public-model".into(), created: 7 }
    }

    /// Feeds `(event, data)` pairs; returns the chunks written, the usage and the last result.
    fn run(include_usage: bool, events: &[(String, String)]) -> (Vec<Value>, StreamSink, Result<Flow, UpstreamError>) {
        let mut t = AnthropicAdapter.stream(setup(include_usage));
        let mut sink = StreamSink::new();
        let mut last = Ok(Flow::Continue);
        for (event, data) in events {
            last = t.event(event, data, &mut sink);
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

    fn events_of(f: &Value) -> Vec<(String, String)> {
        f["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let data = match &e[1] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (e[0].as_str().unwrap().to_string(), data)
            })
            .collect()
    }

    fn check_stream(text: &str) {
        let f = fixture(text);
        let include_usage = f["include_usage"].as_bool().unwrap();
        let (chunks, sink, last) = run(include_usage, &events_of(&f));
        assert_eq!(last.unwrap(), Flow::Done);
        let want = f["chunks"].as_array().unwrap();
        assert_eq!(chunks.len(), want.len(), "\n got: {:#}", Value::Array(chunks.clone()));
        for (got, want) in chunks.iter().zip(want) {
            assert_eq!(got, want, "\n got: {got:#}\nwant: {want:#}");
        }
        assert_eq!(sink.usage, Some(usage_of(&f["usage"])));
    }

    #[test]
    fn golden_stream_text() {
        check_stream(include_str!("testdata/anthropic/stream_text.json"));
    }

    #[test]
    fn golden_stream_tool() {
        check_stream(include_str!("testdata/anthropic/stream_tool.json"));
    }

    #[test]
    fn golden_errors() {
        let cases = fixture(include_str!("testdata/anthropic/errors.json"));
        for case in cases.as_array().unwrap() {
            let status = case["status"].as_u64().unwrap() as u16;
            let body = match &case["body"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let e = AnthropicAdapter.map_error(status, body.as_bytes());
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
                ("bad_response", UpstreamFailure::BadResponse) => {}
                (want, got) => panic!("{case}: want {want}, got {got:?}"),
            }
        }
    }

    #[test]
    fn builds_the_http_request() {
        let r = with(json!({"stream": true}));
        let mut options = ProviderOptions::default();
        let Exchange::Http(up) = AnthropicAdapter.build(&call(&r, &options)).unwrap() else { panic!() };
        assert_eq!(up.path, "/v1/messages");
        let header = |name: &str| up.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.to_str().unwrap());
        assert_eq!(header("x-api-key"), Some("sk-ant"));
        assert_eq!(header("anthropic-version"), Some(DEFAULT_VERSION));
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        assert_eq!(body["model"], MODEL);
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(body["stream"], true);

        options.api_version = Some("2099-01-01".into());
        let mut c = call(&r, &options);
        c.api_key = None;
        let Exchange::Http(up) = AnthropicAdapter.build(&c).unwrap() else { panic!() };
        assert_eq!(up.headers.len(), 1);
        assert_eq!(up.headers[0].0, "anthropic-version");
        assert_eq!(up.headers[0].1, "2099-01-01");
    }

    #[test]
    fn refuses_what_messages_cannot_express() {
        assert!(unsupported_message(json!({"n": 2})).contains("'n'"));
        assert!(unsupported_message(json!({"logprobs": true})).contains("'logprobs'"));
        assert!(unsupported_message(json!({"temperature": 1.5})).contains("'temperature'"));
        assert!(unsupported_message(json!({"response_format": {"type": "json_object"}})).contains("'response_format'"));
        let schema = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {}}});
        assert!(unsupported_message(json!({ "response_format": schema })).contains("'response_format'"));
        assert!(unsupported_message(json!({"modalities": ["text", "audio"]})).contains("'modalities'"));
        assert!(unsupported_message(json!({"functions": [{"name": "f"}]})).contains("'functions'"));
        let custom = json!([{"type": "custom", "custom": {"name": "c"}}]);
        assert!(unsupported_message(json!({ "tools": custom })).contains("'tools[0]'"));
        let audio = json!([{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}]}]);
        assert!(unsupported_message(json!({ "messages": audio })).contains("'messages[0].content[0]'"));
        let file = json!([{"role": "user", "content": [
            {"type": "text", "text": "x"}, {"type": "file", "file": {"file_id": "f"}}]}]);
        let m = unsupported_message(json!({ "messages": file }));
        assert!(m.contains("'file'") && m.contains("'messages[0].content[1]'"), "{m}");
        let bad_args = json!([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]);
        assert!(unsupported_message(json!({ "messages": bad_args }))
            .contains("'messages[1].tool_calls[0].function.arguments'"));
        let only_system = json!([{"role": "system", "content": "be nice"}]);
        assert!(unsupported_message(json!({ "messages": only_system })).contains("'messages'"));
        let ftp = json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/a.png"}}]}]);
        assert!(unsupported_message(json!({ "messages": ftp })).contains("image_url"));
        let not_b64 =
            json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,abc"}}]}]);
        assert!(unsupported_message(json!({ "messages": not_b64 })).contains("base64"));
    }

    #[test]
    fn accepts_what_it_can_drop_or_map() {
        let body = to_anthropic(
            &with(json!({"n": 1, "logprobs": false, "temperature": 1, "response_format": {"type": "text"},
                "presence_penalty": 0.5, "frequency_penalty": 0.1, "seed": 3, "logit_bias": {"1": 2}, "store": true,
                "metadata": {"a": "b"}, "service_tier": "auto", "x_unknown": 1})),
            MODEL,
        )
        .unwrap();
        let mut keys: Vec<&str> = body.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["max_tokens", "messages", "model", "temperature"]);
    }

    #[test]
    fn max_tokens_and_thinking() {
        let b = to_anthropic(&with(json!({"max_tokens": 100})), MODEL).unwrap();
        assert_eq!(b["max_tokens"], 100);
        let b = to_anthropic(&with(json!({"max_tokens": 100, "max_completion_tokens": 200})), MODEL).unwrap();
        assert_eq!(b["max_tokens"], 200);
        let b = to_anthropic(&with(json!({"reasoning_effort": "medium"})), MODEL).unwrap();
        assert_eq!(b["thinking"], json!({"type": "enabled", "budget_tokens": 4096}));
        assert_eq!(b["max_tokens"], 4096 + DEFAULT_MAX_TOKENS);
        // The client's cap stays the cap; the budget fits under it.
        let b = to_anthropic(&with(json!({"reasoning_effort": "high", "max_completion_tokens": 3000})), MODEL).unwrap();
        assert_eq!(b["max_tokens"], 3000);
        assert_eq!(b["thinking"]["budget_tokens"], 2999);
        let b = to_anthropic(&with(json!({"reasoning_effort": "low", "max_completion_tokens": 500})), MODEL).unwrap();
        assert_eq!(b["max_tokens"], 500);
        assert!(b.get("thinking").is_none());
        for effort in ["none", "minimal"] {
            let b = to_anthropic(&with(json!({ "reasoning_effort": effort })), MODEL).unwrap();
            assert!(b.get("thinking").is_none());
            assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
        }
    }

    #[test]
    fn tool_choice_and_parallelism() {
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let choice = |extra: Value| {
            let mut e = json!({ "tools": tools });
            for (k, v) in extra.as_object().unwrap() {
                e[k] = v.clone();
            }
            to_anthropic(&with(e), MODEL).unwrap().get("tool_choice").cloned()
        };
        assert_eq!(choice(json!({})), None);
        assert_eq!(choice(json!({"tool_choice": "auto"})), Some(json!({"type": "auto"})));
        assert_eq!(choice(json!({"tool_choice": "required"})), Some(json!({"type": "any"})));
        assert_eq!(choice(json!({"tool_choice": "none"})), Some(json!({"type": "none"})));
        assert_eq!(
            choice(
                json!({"tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": false})
            ),
            Some(json!({"type": "tool", "name": "f", "disable_parallel_tool_use": true}))
        );
        assert_eq!(
            choice(json!({"parallel_tool_calls": false})),
            Some(json!({"type": "auto", "disable_parallel_tool_use": true}))
        );
        assert_eq!(choice(json!({"tool_choice": "none", "parallel_tool_calls": false})), Some(json!({"type": "none"})));
        assert_eq!(choice(json!({"parallel_tool_calls": true})), None);
        // A parameterless tool still gets the object schema Anthropic requires.
        let b = to_anthropic(&with(json!({ "tools": tools })), MODEL).unwrap();
        assert_eq!(b["tools"], json!([{"name": "f", "input_schema": {"type": "object", "properties": {}}}]));
        // No tools: no tool choice either.
        let b = to_anthropic(&with(json!({"tools": [], "tool_choice": "none"})), MODEL).unwrap();
        assert!(b.get("tools").is_none() && b.get("tool_choice").is_none());
        let allowed = json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}});
        assert!(unsupported_message(json!({"tools": tools, "tool_choice": allowed})).contains("'tool_choice'"));
    }

    #[test]
    fn turns_alternate_and_empty_content_is_dropped() {
        let b = to_anthropic(
            &with(json!({"messages": [
                {"role": "developer", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
                {"role": "user", "content": "one"},
                {"role": "user", "content": ""},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": [{"type": "text", "text": "two"}]},
                {"role": "system", "content": "C"},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
                {"role": "assistant", "content": "yes", "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "f", "arguments": ""}}]},
                {"role": "user", "content": "late text"},
                {"role": "tool", "tool_call_id": "t1", "content": ""}
            ]})),
            MODEL,
        )
        .unwrap();
        assert_eq!(b["system"], "A\n\nB\n\nC");
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "no"},
                    {"type": "text", "text": "yes"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1"},
                    {"type": "text", "text": "late text"}
                ]}
            ])
        );
    }

    #[test]
    fn user_and_safety_identifier() {
        let b = to_anthropic(&with(json!({"user": "u1", "safety_identifier": "s1"})), MODEL).unwrap();
        assert_eq!(b["metadata"], json!({"user_id": "u1"}));
        let b = to_anthropic(&with(json!({"safety_identifier": "s1", "stop": "END"})), MODEL).unwrap();
        assert_eq!(b["metadata"], json!({"user_id": "s1"}));
        assert_eq!(b["stop_sequences"], json!(["END"]));
    }

    #[test]
    fn response_edge_cases() {
        // No text at all: content is null, yet present.
        let body = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"}],
            "stop_reason": "max_tokens", "stop_sequence": null});
        let c = from_anthropic(body.to_string().as_bytes(), 5, "fallback", "m").unwrap();
        let v: Value = serde_json::from_slice(&c.body).unwrap();
        assert!(v["choices"][0]["message"].as_object().unwrap().contains_key("content"));
        assert_eq!(v["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert!(v["choices"][0]["message"].get("tool_calls").is_none());
        assert!(v.get("usage").is_none() && c.usage.is_none());
        // Missing id and model fall back to gw's.
        let body = json!({"content": [{"type": "text", "text": "x"}], "stop_reason": "refusal"});
        let c = from_anthropic(body.to_string().as_bytes(), 5, "fallback", "m").unwrap();
        let v: Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!((v["id"].as_str(), v["model"].as_str()), (Some("fallback"), Some("m")));
        assert_eq!(v["choices"][0]["finish_reason"], "content_filter");
        for bad in [&b"{not json"[..], &br#"{"type":"message"}"#[..], &b"[]"[..]] {
            assert_eq!(from_anthropic(bad, 5, "f", "m").unwrap_err().failure, UpstreamFailure::BadResponse);
        }
        for (stop, finish) in
            [("end_turn", "stop"), ("stop_sequence", "stop"), ("pause_turn", "stop"), ("tool_use", "tool_calls")]
        {
            assert_eq!(finish_reason(Some(stop)), finish);
        }
    }

    fn ev(event: &str, data: Value) -> (String, String) {
        (event.to_string(), data.to_string())
    }

    #[test]
    fn stream_errors_and_forward_compatibility() {
        let start = ev(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg", "type": "message",
            "role": "assistant", "content": [], "model": "claude", "usage": {"input_tokens": 3, "output_tokens": 1}}}),
        );
        let error =
            ev("error", json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded\nnow"}}));
        let (chunks, sink, last) = run(false, &[start.clone(), error]);
        let e = last.unwrap_err();
        assert_eq!(e.failure, UpstreamFailure::MidStream);
        assert!(e.detail.contains("overloaded_error") && !e.detail.contains('\n'), "{}", e.detail);
        assert_eq!(chunks.len(), 1);
        // Usage known so far is kept for billing even though the stream broke.
        assert_eq!(sink.usage.map(|u| u.prompt_tokens), Some(3));

        let (_, _, last) = run(false, &[start.clone(), ("content_block_delta".into(), "{not json".into())]);
        assert_eq!(last.unwrap_err().failure, UpstreamFailure::BadResponse);

        let future = ev("brand_new_event", json!({"type": "brand_new_event", "stuff": [1]}));
        let new_delta = ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "hologram_delta", "x": 1}}),
        );
        let stop = ev("message_stop", json!({"type": "message_stop"}));
        let (chunks, sink, last) = run(true, &[start, future, new_delta, ("ping".into(), String::new()), stop]);
        assert_eq!(last.unwrap(), Flow::Done);
        // Role, a finish chunk even without message_delta, then usage.
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[1]["choices"][0]["finish_reason"], "stop");
        assert_eq!(chunks[2]["choices"], json!([]));
        assert_eq!(chunks[2]["usage"]["total_tokens"], 4);
        assert_eq!(sink.usage.map(|u| u.total()), Some(4));
    }

    #[test]
    fn stream_without_message_start_still_opens_with_the_role() {
        let delta = ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "hi"}}),
        );
        let (chunks, _, _) = run(false, &[delta]);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
        assert_eq!(chunks[1]["choices"][0]["delta"], json!({"content": "hi"}));
    }
}
