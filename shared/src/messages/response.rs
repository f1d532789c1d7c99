//! The answer of gw's pipeline (an OpenAI chat completion, or its stream of chunks) in the
//! Messages API's shapes: the `message` object, its SSE event sequence, its error object.

use serde_json::{json, Map, Value};

use crate::pricing::TokenUsage;

/// The Messages `usage` object (every field the published document requires; what gw does not
/// know, null). Anthropic counts `input_tokens` without the cache's reads and writes, which it
/// reports apart; OpenAI's `prompt_tokens` holds all three.
pub fn usage(u: &TokenUsage) -> Value {
    let mut usage = delta_usage(u);
    for field in ["cache_creation", "inference_geo", "service_tier"] {
        usage[field] = Value::Null;
    }
    usage
}

/// The `usage` of a stream's `message_delta` (cumulative, as Anthropic reports it).
fn delta_usage(u: &TokenUsage) -> Value {
    let read = u.cached_tokens.min(u.prompt_tokens);
    let written = u.cache_creation_tokens.min(u.prompt_tokens - read);
    json!({
        "input_tokens": u.prompt_tokens - read - written,
        "output_tokens": u.completion_tokens,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens_details": null,
        "server_tool_use": null,
    })
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text, "citations": null})
}

fn tool_use_block(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input, "caller": {"type": "direct"}})
}

/// Anthropic's `stop_reason` for an OpenAI `finish_reason`.
pub fn stop_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls") | Some("function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

/// A tool call's arguments as the `input` object Anthropic carries (arguments that are not a
/// JSON object are kept as a string under `arguments`, never dropped).
fn input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => Value::Object(o),
        _ if arguments.trim().is_empty() => json!({}),
        _ => json!({ "arguments": arguments }),
    }
}

/// The `message` object for a chat completion body.
pub fn message(chat: &Value, id: &str, model: &str, u: &TokenUsage) -> Value {
    let choice = &chat["choices"][0];
    let msg = &choice["message"];
    let mut content = Vec::new();
    if let Some(r) = msg.get("reasoning_content").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        content.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
    }
    if let Some(t) = msg.get("content").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        content.push(text_block(t));
    } else if let Some(r) = msg.get("refusal").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        content.push(text_block(r));
    }
    for call in msg.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
        content.push(tool_use_block(
            call["id"].as_str().unwrap_or_default(),
            call["function"]["name"].as_str().unwrap_or_default(),
            input(call["function"]["arguments"].as_str().unwrap_or_default()),
        ));
    }
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": model,
        "stop_reason": stop_reason(choice["finish_reason"].as_str()),
        "stop_sequence": null,
        "stop_details": null,
        "container": null,
        "usage": usage(u),
    })
}

/// Anthropic's error `type` for an HTTP status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 | 409 | 415 | 422 | 431 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 | 405 => "not_found_error",
        408 | 504 => "timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The Messages error object.
pub fn error_body(status: u16, message: &str, request_id: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": error_type(status), "message": message},
        "request_id": request_id,
    })
}

/// One SSE event as the Messages API frames it.
fn event(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // Serializing a `Value` cannot fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

/// The error event ending a stream that fails after it started.
pub fn error_event(status: u16, message: &str, request_id: &str) -> Vec<u8> {
    let mut out = Vec::new();
    event(&mut out, "error", &error_body(status, message, request_id));
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    /// A tool use, by the OpenAI tool call index it carries.
    Tool(u64),
}

/// Re-frames a stream of OpenAI chat chunks as the Messages event sequence: `message_start`,
/// per content block `content_block_start`, its deltas and `content_block_stop`, then
/// `message_delta` (stop reason, usage) and `message_stop`. Tool-call arguments go out as
/// `input_json_delta` fragments in the order they came, so the client reassembles them exactly.
pub struct EventEncoder {
    id: String,
    model: String,
    started: bool,
    open: Option<Block>,
    /// Blocks started so far (the next block's index).
    blocks: u64,
    finish: Option<String>,
}

impl EventEncoder {
    pub fn new(id: String, model: String) -> Self {
        Self { id, model, started: false, open: None, blocks: 0, finish: None }
    }

    /// The model the answer names, when it is known only after the request was parsed (an
    /// experiment's variant).
    pub fn set_model(&mut self, model: &str) {
        self.model = model.to_string();
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        // The usage is known at the end (`message_delta` carries it, cumulative).
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
            "stop_reason": null, "stop_sequence": null, "stop_details": null, "container": null,
            "usage": usage(&TokenUsage::default()),
        });
        event(out, "message_start", &json!({"type": "message_start", "message": message}));
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if self.open.take().is_some() {
            event(out, "content_block_stop", &json!({"type": "content_block_stop", "index": self.blocks - 1}));
        }
    }

    fn open(&mut self, out: &mut Vec<u8>, block: Block, content_block: Value) {
        self.close(out);
        event(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": self.blocks, "content_block": content_block}),
        );
        self.blocks += 1;
        self.open = Some(block);
    }

    fn delta(&self, out: &mut Vec<u8>, delta: Value) {
        event(
            out,
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": self.blocks - 1, "delta": delta}),
        );
    }

    /// The events for a piece of an OpenAI SSE body (whole `data:` frames; comments and
    /// `[DONE]` are skipped: [`Self::finish`] ends the message).
    pub fn frames(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.start(&mut out);
        for chunk in crate::openai::chunk_objects(bytes) {
            self.chunk(&chunk, &mut out);
        }
        out
    }

    fn chunk(&mut self, chunk: &Map<String, Value>, out: &mut Vec<u8>) {
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else { return };
        let delta = &choice["delta"];
        if let Some(r) = delta.get("reasoning_content").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            if self.open != Some(Block::Thinking) {
                self.open(out, Block::Thinking, json!({"type": "thinking", "thinking": "", "signature": ""}));
            }
            self.delta(out, json!({"type": "thinking_delta", "thinking": r}));
        }
        // A refusal is said as text, as in a plain answer.
        let text = delta.get("content").and_then(Value::as_str).filter(|s| !s.is_empty());
        if let Some(t) = text.or_else(|| delta.get("refusal").and_then(Value::as_str).filter(|s| !s.is_empty())) {
            if self.open != Some(Block::Text) {
                self.open(out, Block::Text, text_block(""));
            }
            self.delta(out, json!({"type": "text_delta", "text": t}));
        }
        for call in delta.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            if self.open != Some(Block::Tool(index)) {
                let block = tool_use_block(
                    call["id"].as_str().unwrap_or_default(),
                    call["function"]["name"].as_str().unwrap_or_default(),
                    json!({}),
                );
                self.open(out, Block::Tool(index), block);
            }
            if let Some(args) = call["function"]["arguments"].as_str().filter(|s| !s.is_empty()) {
                self.delta(out, json!({"type": "input_json_delta", "partial_json": args}));
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(f.to_string());
        }
    }

    /// The end of the message: the open block closed, the stop reason and the usage.
    pub fn finish(&mut self, u: &TokenUsage) -> Vec<u8> {
        let mut out = Vec::new();
        self.start(&mut out);
        self.close(&mut out);
        event(
            &mut out,
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {
                    "stop_reason": stop_reason(self.finish.as_deref()),
                    "stop_sequence": null,
                    "stop_details": null,
                    "container": null,
                },
                "usage": delta_usage(u),
            }),
        );
        event(&mut out, "message_stop", &json!({"type": "message_stop"}));
        out
    }
}
