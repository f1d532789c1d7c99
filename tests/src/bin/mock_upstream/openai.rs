//! OpenAI: `POST /v1/chat/completions`, `POST /v1/embeddings`, `GET /v1/models`; and Azure
//! OpenAI, the same answers behind `/openai/deployments/{deployment}/...?api-version=...`.

use std::collections::HashMap;

use actix_web::HttpResponse;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::convo::{dimensions, embedding, reply_for, Reply};
use crate::usage::Spent;
use crate::{garbage, intact, json_reply, status_code, stream_reply, Call, StreamPlan};

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
    let reply = k.reply.clone().unwrap_or(reply);
    let completion_tokens = reply.split_whitespace().count() as u64 + k.reasoning_tokens;
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
    let created = 1_700_000_000 + n as i64;

    if !stream {
        let mut resp = json!({
            "id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply, "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "system_fingerprint": "fp_mock",
        });
        if !k.no_usage {
            resp["usage"] = usage;
        }
        return (json_reply(&resp, &k), spent);
    }

    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "system_fingerprint": "fp_mock",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    let sse = |v: &Value| Bytes::from(format!("data: {v}\n\n"));
    let mut events = vec![sse(&chunk(json!({"role": "assistant", "content": ""}), Value::Null))];
    if k.chunk_chars > 0 {
        let chars: Vec<char> = reply.chars().collect();
        for piece in chars.chunks(k.chunk_chars) {
            events.push(sse(&chunk(json!({"content": piece.iter().collect::<String>()}), Value::Null)));
        }
    } else {
        for (i, w) in reply.split(' ').enumerate() {
            let piece = if i == 0 { w.to_string() } else { format!(" {w}") };
            events.push(sse(&chunk(json!({"content": piece}), Value::Null)));
        }
    }
    events.push(sse(&chunk(json!({}), json!("stop"))));
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
