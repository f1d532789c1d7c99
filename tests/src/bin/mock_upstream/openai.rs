//! OpenAI: `POST /v1/chat/completions`, `POST /v1/embeddings`, `GET /v1/models`; and Azure
//! OpenAI, the same answers behind `/openai/deployments/{deployment}/...?api-version=...`.

use std::collections::HashMap;

use actix_web::HttpResponse;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::convo::{char_pieces, dimensions, embedding, pieces, reply_for, Reply};
use crate::usage::Spent;
use crate::{garbage, intact, json_reply, status_code, stream_reply, Call, Knobs, StreamPlan};

/// An error in OpenAI's shape.
pub fn error(status: u16, message: &str, param: Option<&str>) -> HttpResponse {
    let kind = if status >= 500 { "server_error" } else { "invalid_request_error" };
    let code = if status == 401 { json!("invalid_api_key") } else { Value::Null };
    HttpResponse::build(status_code(status))
        .json(json!({"error": {"message": message, "type": kind, "param": param, "code": code}}))
}

/// The answer to the `status` and `fail_first` knobs.
pub fn fault(status: u16) -> HttpResponse {
    HttpResponse::build(status_code(status)).json(json!({"error": {
        "message": format!("mock upstream failure ({status})"), "type": "server_error", "param": null, "code": null}}))
}

/// Azure's 400 when the `api-version` query parameter is missing.
fn missing_api_version(deployment: Option<&str>, query: &HashMap<String, String>) -> Option<HttpResponse> {
    (deployment.is_some() && !query.contains_key("api-version"))
        .then(|| error(400, "Missing required query parameter 'api-version'.", Some("api-version")))
}

/// What a chat (or Responses) answer says, as the knobs choose it.
pub(crate) enum Said {
    Text(String),
    /// The text cut at the request's completion limit (`finish_reason: "length"`).
    Cut(String),
    /// The `refusal` knob: `content` null, the text in `refusal`.
    Refusal(String),
    /// The `tool_call_arguments` knob: a call of the tool `name` with these arguments (JSON text,
    /// as the knob gives it, not checked).
    Tool {
        name: String,
        arguments: String,
    },
}

impl Said {
    /// `tool_call_arguments` wins over `refusal`, which wins over `reply` (else the usual reply).
    pub(crate) fn choose(k: &Knobs, body: &Value, usual: String) -> Said {
        if let Some(arguments) = &k.tool_call_arguments {
            let name = body
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find_map(|t| t.pointer("/function/name").and_then(Value::as_str))
                .unwrap_or("tool");
            return Said::Tool { name: name.to_string(), arguments: arguments.clone() };
        }
        if let Some(refusal) = &k.refusal {
            return Said::Refusal(refusal.clone());
        }
        let text = match (k.reply_words, &k.reply) {
            (0, Some(reply)) => reply.clone(),
            (0, None) => usual,
            (n, _) => vec!["word"; n].join(" "),
        };
        // A completion limit is honoured as OpenAI does: the answer stops there (a word a token).
        let limit = ["max_completion_tokens", "max_tokens"].iter().find_map(|p| body.get(*p).and_then(Value::as_u64));
        match limit {
            Some(max) if text.split_whitespace().count() as u64 > max => {
                let kept: Vec<&str> = text.split_whitespace().take(max as usize).collect();
                Said::Cut(kept.join(" "))
            }
            _ => Said::Text(text),
        }
    }

    /// Completion tokens, reasoning tokens aside: the words of the text, of the arguments (at
    /// least 1).
    pub(crate) fn tokens(&self) -> u64 {
        match self {
            Said::Text(t) | Said::Cut(t) | Said::Refusal(t) => t.split_whitespace().count() as u64,
            Said::Tool { arguments, .. } => (arguments.split_whitespace().count() as u64).max(1),
        }
    }

    fn finish_reason(&self) -> &'static str {
        match self {
            Said::Tool { .. } => "tool_calls",
            Said::Cut(_) => "length",
            _ => "stop",
        }
    }
}

/// One token's entry in OpenAI's `logprobs.content` (the knob's fixed values).
fn token_logprob(token: &str) -> Value {
    let bytes = token.as_bytes();
    json!({"token": token, "logprob": -0.1, "bytes": bytes,
           "top_logprobs": [{"token": token, "logprob": -0.1, "bytes": bytes}]})
}

/// A choice's `logprobs` over `tokens`: under `refusal` for a refusal, else under `content`.
fn logprobs_of(tokens: &[String], refusal: bool) -> Value {
    let list: Vec<Value> = tokens.iter().map(|t| token_logprob(t)).collect();
    if refusal {
        json!({"content": null, "refusal": list})
    } else {
        json!({"content": list, "refusal": null})
    }
}

/// A chat completion; `deployment` for Azure (it is then the answer's model). With it, what the
/// answer spent when it goes out whole.
pub fn chat(call: Call, deployment: Option<&str>) -> (HttpResponse, Option<Spent>) {
    let Call { k, body, n, query } = call;
    if let Some(resp) = missing_api_version(deployment, &query) {
        return (resp, None);
    }
    let Some(msgs) = body.get("messages").and_then(Value::as_array).filter(|m| !m.is_empty()) else {
        return (error(400, "'messages' is required", Some("messages")), None);
    };
    let model = deployment.or_else(|| body.get("model").and_then(Value::as_str)).unwrap_or("mock").to_string();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = body.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
    let Reply { text: reply, prompt_tokens, .. } = reply_for(msgs);
    let said = Said::choose(&k, &body, reply);
    let completion_tokens = said.tokens() + k.reasoning_tokens;
    let mut usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                           "total_tokens": prompt_tokens + completion_tokens});
    let cached = k.cached_tokens.min(prompt_tokens);
    if cached > 0 {
        usage["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    if k.reasoning_tokens > 0 {
        usage["completion_tokens_details"] = json!({"reasoning_tokens": k.reasoning_tokens});
    }
    let spent = intact(&k, stream).then(|| Spent {
        model: model.clone(),
        input_tokens: prompt_tokens,
        output_tokens: completion_tokens,
        cached_tokens: cached,
    });
    let id = format!("chatcmpl-mock{n}");
    let call_id = format!("call_mock{n}");
    let created = 1_700_000_000 + n as i64;
    let finish = said.finish_reason();

    if !stream {
        let (message, logprobs) = match &said {
            Said::Text(text) | Said::Cut(text) => (
                json!({"role": "assistant", "content": text, "refusal": null}),
                k.logprobs.then(|| logprobs_of(&pieces(text, 1), false)),
            ),
            Said::Refusal(text) => (
                json!({"role": "assistant", "content": null, "refusal": text}),
                k.logprobs.then(|| logprobs_of(&pieces(text, 1), true)),
            ),
            Said::Tool { name, arguments } => (
                json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}),
                None,
            ),
        };
        let mut resp = json!({
            "id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}],
            "system_fingerprint": "fp_mock",
        });
        if !k.no_usage {
            resp["usage"] = usage;
        }
        return (json_reply(&resp, &k), spent);
    }

    let chunk = |delta: Value, logprobs: Option<Value>, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "system_fingerprint": "fp_mock",
               "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]})
    };
    let sse = |v: &Value| Bytes::from(format!("data: {v}\n\n"));
    // Text and refusals: one word an event, or `chunk_chars` characters; arguments: `chunk_chars`
    // characters, 6 by default.
    let split = |text: &str, default: Option<usize>| match (k.chunk_chars, default) {
        (0, None) => pieces(text, 1),
        (0, Some(n)) => char_pieces(text, n),
        (n, _) => char_pieces(text, n),
    };
    let (first, deltas): (Value, Vec<(Value, Option<Value>)>) = match &said {
        Said::Text(text) | Said::Cut(text) => (
            json!({"role": "assistant", "content": ""}),
            split(text, None)
                .into_iter()
                .map(|p| {
                    let lp = k.logprobs.then(|| logprobs_of(std::slice::from_ref(&p), false));
                    (json!({"content": p}), lp)
                })
                .collect(),
        ),
        Said::Refusal(text) => (
            json!({"role": "assistant", "content": null, "refusal": ""}),
            split(text, None)
                .into_iter()
                .map(|p| {
                    let lp = k.logprobs.then(|| logprobs_of(std::slice::from_ref(&p), true));
                    (json!({"refusal": p}), lp)
                })
                .collect(),
        ),
        Said::Tool { name, arguments } => (
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": call_id,
                   "type": "function", "function": {"name": name, "arguments": ""}}]}),
            split(arguments, Some(6))
                .into_iter()
                .map(|p| (json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}), None))
                .collect(),
        ),
    };
    let mut events = vec![sse(&chunk(first, None, Value::Null))];
    for (delta, logprobs) in deltas {
        events.push(sse(&chunk(delta, logprobs, Value::Null)));
    }
    events.push(sse(&chunk(json!({}), None, json!(finish))));
    if include_usage && !k.no_usage {
        events.push(sse(&json!({"id": id, "object": "chat.completion.chunk", "created": created,
                                 "model": model, "choices": [], "usage": usage})));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let error = sse(&json!({"error": {"message": "mock upstream failed mid-stream", "type": "server_error",
                                       "param": null, "code": null}}));
    let plan =
        StreamPlan { events, first: 2, partial: 3, error, bad_chunk: Bytes::from_static(b"data: {not json\n\n") };
    (stream_reply(plan, &k), spent)
}

/// Embeddings; `deployment` for Azure (it is then the answer's model).
pub fn embeddings(call: Call, deployment: Option<&str>) -> HttpResponse {
    let Call { k, body, query, .. } = call;
    if let Some(resp) = missing_api_version(deployment, &query) {
        return resp;
    }
    if k.malformed {
        return garbage();
    }
    let inputs: Vec<String> = match body.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => {
            a.iter().map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).collect()
        }
        _ => return error(400, "'input' is required", Some("input")),
    };
    let dims = dimensions(body.get("dimensions"));
    let mut tokens = 0;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| {
            tokens += text.split_whitespace().count();
            json!({"object": "embedding", "index": i, "embedding": embedding(text, dims)})
        })
        .collect();
    let model = deployment.or_else(|| body.get("model").and_then(Value::as_str)).unwrap_or("mock-embedding");
    let resp = json!({"object": "list", "data": data, "model": model,
                      "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
    json_reply(&resp, &k)
}

pub fn models() -> HttpResponse {
    HttpResponse::Ok().json(json!({"object": "list", "data": [
        {"id": "mock-chat", "object": "model", "created": 1_700_000_000, "owned_by": "mock"},
        {"id": "mock-embedding", "object": "model", "created": 1_700_000_000, "owned_by": "mock"}]}))
}
