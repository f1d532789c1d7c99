//! Anthropic Messages: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

use actix_web::HttpResponse;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::convo::{char_pieces, pieces, strings, text_of, Answer, Conversation, ToolChoice};
use crate::usage::Spent;
use crate::{intact, json_reply, status_code, stream_reply, Call, StreamPlan};

fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// An error in Anthropic's shape.
pub fn error(status: u16, message: &str) -> HttpResponse {
    HttpResponse::build(status_code(status)).json(error_body(status, message))
}

fn sse(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

fn conversation(body: &Value) -> Result<Conversation, String> {
    let messages =
        body.get("messages").and_then(Value::as_array).filter(|m| !m.is_empty()).ok_or("messages: Field required")?;
    let mut conv = Conversation::default();
    let system = body.get("system").map(text_of).unwrap_or_default();
    if !system.is_empty() {
        conv.push("system", system, None);
    }
    for m in messages {
        let role = if m.get("role").and_then(Value::as_str) == Some("assistant") { "assistant" } else { "user" };
        let mut texts = Vec::new();
        let mut result = None;
        match m.get("content") {
            Some(Value::String(s)) => texts.push(s.clone()),
            Some(Value::Array(blocks)) => {
                for b in blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => texts.extend(b.get("text").and_then(Value::as_str).map(str::to_string)),
                        Some("tool_result") => {
                            let content = b.get("content").map(text_of).unwrap_or_default();
                            texts.push(content.clone());
                            result = Some(content);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        conv.push(role, texts.join("\n"), result);
    }
    conv.tools = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    conv.choice = match body.pointer("/tool_choice/type").and_then(Value::as_str) {
        Some("none") => ToolChoice::Off,
        Some("any") => ToolChoice::Any,
        Some("tool") => body
            .pointer("/tool_choice/name")
            .and_then(Value::as_str)
            .map_or(ToolChoice::Any, |name| ToolChoice::Named(name.to_string())),
        _ => ToolChoice::Auto,
    };
    conv.stop = strings(body.get("stop_sequences"));
    Ok(conv)
}

/// The input tokens a message would be billed for (its `usage.input_tokens` and cache reads):
/// `{"input_tokens": N}`.
pub fn count_tokens(call: Call) -> HttpResponse {
    let Call { body, .. } = call;
    if body.get("model").and_then(Value::as_str).is_none() {
        return error(400, "model: Field required");
    }
    match conversation(&body) {
        Ok(conv) => HttpResponse::Ok().json(json!({"input_tokens": conv.answer().prompt_tokens})),
        Err(e) => error(400, &e),
    }
}

/// A message; with it, what the answer spent when it goes out whole.
pub fn messages(call: Call) -> (HttpResponse, Option<Spent>) {
    let Call { k, body, .. } = call;
    let Some(model) = body.get("model").and_then(Value::as_str) else {
        return (error(400, "model: Field required"), None);
    };
    if body.get("max_tokens").and_then(Value::as_u64).is_none() {
        return (error(400, "max_tokens: Field required"), None);
    }
    let out = match conversation(&body) {
        Ok(conv) => conv.answer(),
        Err(e) => return (error(400, &e), None),
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let cached = k.cached_tokens.min(out.prompt_tokens);
    let spent = intact(&k, stream).then(|| Spent {
        model: model.to_string(),
        input_tokens: out.prompt_tokens,
        output_tokens: out.completion_tokens,
        cached_tokens: cached,
    });
    // Every field Anthropic's published document requires (what the mock has no value for, null).
    let delta_usage = json!({"input_tokens": out.prompt_tokens - cached, "output_tokens": out.completion_tokens,
                           "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached,
                           "output_tokens_details": null, "server_tool_use": null});
    let mut usage = delta_usage.clone();
    for field in ["cache_creation", "inference_geo", "service_tier"] {
        usage[field] = Value::Null;
    }
    let id = format!("msg_{}", out.digest);
    let tool_id = format!("toolu_{}", out.digest);
    let (stop_reason, stop_sequence) = match &out.answer {
        Answer::Text { stop: Some(s), .. } => ("stop_sequence", json!(s)),
        Answer::Text { stop: None, .. } => ("end_turn", Value::Null),
        Answer::Tool { .. } => ("tool_use", Value::Null),
    };

    if !stream {
        let block = match &out.answer {
            Answer::Text { text, .. } => json!({"type": "text", "text": text, "citations": null}),
            Answer::Tool { name, input } => json!({"type": "tool_use", "id": tool_id, "name": name, "input": input,
                                                   "caller": {"type": "direct"}}),
        };
        let mut resp = json!({"id": id, "type": "message", "role": "assistant", "model": model,
                              "content": [block], "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                              "stop_details": null, "container": null});
        if !k.no_usage {
            resp["usage"] = usage;
        }
        return (json_reply(&resp, &k), spent);
    }

    let mut message = json!({"id": id, "type": "message", "role": "assistant", "model": model, "content": [],
                             "stop_reason": null, "stop_sequence": null, "stop_details": null, "container": null});
    if !k.no_usage {
        usage["output_tokens"] = json!(1);
        message["usage"] = usage;
    }
    let (start, deltas): (Value, Vec<Value>) = match &out.answer {
        Answer::Text { text, .. } => (
            json!({"type": "text", "text": "", "citations": null}),
            pieces(text, 3).into_iter().map(|p| json!({"type": "text_delta", "text": p})).collect(),
        ),
        Answer::Tool { name, input } => (
            json!({"type": "tool_use", "id": tool_id, "name": name, "input": {}, "caller": {"type": "direct"}}),
            char_pieces(&input.to_string(), 8)
                .into_iter()
                .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                .collect(),
        ),
    };
    let mut events = vec![
        sse("message_start", &json!({"type": "message_start", "message": message})),
        sse("content_block_start", &json!({"type": "content_block_start", "index": 0, "content_block": start})),
        sse("ping", &json!({"type": "ping"})),
    ];
    for delta in deltas {
        events.push(sse("content_block_delta", &json!({"type": "content_block_delta", "index": 0, "delta": delta})));
    }
    events.push(sse("content_block_stop", &json!({"type": "content_block_stop", "index": 0})));
    let mut end = json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence,
                                                             "stop_details": null, "container": null}});
    if !k.no_usage {
        end["usage"] = delta_usage;
    }
    events.push(sse("message_delta", &end));
    events.push(sse("message_stop", &json!({"type": "message_stop"})));
    let plan = StreamPlan {
        events,
        first: 4,
        partial: 5,
        error: sse("error", &error_body(500, "mock upstream failed mid-stream")),
        bad_chunk: Bytes::from_static(b"event: content_block_delta\ndata: {not json\n\n"),
    };
    (stream_reply(plan, &k), spent)
}
