//! mock-upstream: an OpenAI-compatible upstream for tests, demos and benchmarks, reached over
//! real HTTP. Deterministic answers derived from the prompt; knobs for latency, time to first
//! token, error statuses and malformed bodies.
//!
//! Usage: `mock-upstream [--listen 127.0.0.1:0] [--latency-ms N] [--ttft-ms N] [--chunk-delay-ms N]
//!         [--status CODE] [--malformed] [--no-usage] [--fail-first N]`
//! Prints `listening on <addr>` once bound. Knobs can also be changed at run time with
//! `POST /_mock/config` (same names, snake_case JSON), and per request with `x-mock-*` headers or
//! a top-level `"mock": {...}` object in the request body (the same names as `/_mock/config`; gw
//! forwards unknown body fields unchanged, so tests steer the mock through gw this way). Body
//! knobs override header knobs, which override the global ones.
//!
//! `GET /_mock/stats` returns the number of chat requests since the last `POST /_mock/config` and
//! the last request body; `GET /_mock/stats?tag=T` the same for the chat requests whose knobs
//! carry `"tag": "T"` (counted since start). Tests sharing one mock use tags to stay apart.
//!
//! `/v1/embeddings` honours the body's `"mock"` object only (`latency_ms`, `status`, `malformed`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use actix_web::{get, post, web, App, HttpRequest, HttpResponse, HttpServer};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Knobs {
    latency_ms: u64,
    ttft_ms: u64,
    chunk_delay_ms: u64,
    /// Answer every chat request with this status and an OpenAI error body.
    status: Option<u16>,
    /// Answer 200 with a body that is not a chat completion.
    malformed: bool,
    /// Leave `usage` out of answers.
    no_usage: bool,
    /// Fail (503) the first N chat requests, then behave. With a `tag`, the first N requests
    /// carrying that tag; without, the first N since start or the last `POST /_mock/config`.
    fail_first: u64,
    /// Streams: send a couple of content chunks, then an error event, and end (no `[DONE]`).
    error_mid_stream: bool,
    /// Streams: send a couple of content chunks and end without `[DONE]`.
    truncate_stream: bool,
    /// Groups requests for `fail_first` and `GET /_mock/stats?tag=`; meant for the body's `mock`.
    tag: Option<String>,
}

/// What the mock saw of the chat requests with one tag.
#[derive(Default)]
struct TagStats {
    requests: u64,
    last_body: Value,
}

struct State {
    knobs: Mutex<Knobs>,
    requests: AtomicU64,
    last_body: Mutex<Value>,
    tags: Mutex<HashMap<String, TagStats>>,
}

fn knobs(state: &State, req: &HttpRequest) -> Knobs {
    let mut k = state.knobs.lock().map(|k| k.clone()).unwrap_or_default();
    let h = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(v) = h("x-mock-latency-ms").and_then(|v| v.parse().ok()) {
        k.latency_ms = v;
    }
    if let Some(v) = h("x-mock-ttft-ms").and_then(|v| v.parse().ok()) {
        k.ttft_ms = v;
    }
    if let Some(v) = h("x-mock-status").and_then(|v| v.parse().ok()) {
        k.status = Some(v);
    }
    if h("x-mock-malformed").is_some() {
        k.malformed = true;
    }
    k
}

/// `k` overridden by the request body's `"mock"` object, if it has one: only the knobs that
/// object names change.
fn with_body_knobs(k: Knobs, body: &Value) -> Result<Knobs, String> {
    let over = match body.get("mock") {
        None | Some(Value::Null) => return Ok(k),
        Some(Value::Object(over)) => over,
        Some(_) => return Err("'mock' must be an object of mock-upstream knobs".into()),
    };
    let mut merged = serde_json::to_value(&k).map_err(|e| e.to_string())?;
    if let Value::Object(m) = &mut merged {
        for (name, v) in over {
            m.insert(name.clone(), v.clone());
        }
    }
    serde_json::from_value(merged).map_err(|e| format!("invalid 'mock' knobs: {e}"))
}

fn bad_knobs(message: String) -> HttpResponse {
    HttpResponse::BadRequest()
        .json(json!({"error": {"message": message, "type": "invalid_request_error", "param": "mock", "code": null}}))
}

fn words(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.split_whitespace().count() as u64,
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text")).map(words).sum(),
        _ => 0,
    }
}

/// The reply: a digest of the messages plus an echo of the last user message.
fn reply_for(body: &Value) -> (String, u64) {
    let msgs = body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(&msgs).unwrap_or_default());
    let digest = hex::encode(&h.finalize()[..4]);
    let last = msgs
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let echo: Vec<&str> = last.split_whitespace().take(8).collect();
    let prompt_tokens = msgs.iter().map(|m| m.get("content").map(words).unwrap_or(0) + 3).sum();
    (format!("Mock upstream reply {digest}: {}", echo.join(" ")), prompt_tokens)
}

fn error_body(status: u16) -> Value {
    json!({"error": {"message": format!("mock upstream failure ({status})"), "type": "server_error", "param": null, "code": null}})
}

#[post("/v1/chat/completions")]
async fn chat(state: web::Data<State>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let k = knobs(&state, &req);
    let n = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return HttpResponse::BadRequest().json(
                json!({"error": {"message": format!("invalid JSON: {e}"), "type": "invalid_request_error", "param": null, "code": null}}),
            )
        }
    };
    if let Ok(mut last) = state.last_body.lock() {
        *last = body.clone();
    }
    let k = match with_body_knobs(k, &body) {
        Ok(k) => k,
        Err(e) => return bad_knobs(e),
    };
    // The position of this request among those with its tag, else among all.
    let mut seen = n;
    if let Some(tag) = &k.tag {
        if let Ok(mut tags) = state.tags.lock() {
            let t = tags.entry(tag.clone()).or_default();
            t.requests += 1;
            t.last_body = body.clone();
            seen = t.requests;
        }
    }
    if k.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(k.latency_ms)).await;
    }
    if seen <= k.fail_first {
        return HttpResponse::ServiceUnavailable().json(error_body(503));
    }
    if let Some(status) = k.status {
        let code =
            actix_web::http::StatusCode::from_u16(status).unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
        return HttpResponse::build(code).json(error_body(status));
    }
    if body.get("messages").and_then(Value::as_array).is_none_or(|m| m.is_empty()) {
        return HttpResponse::BadRequest().json(
            json!({"error": {"message": "'messages' is required", "type": "invalid_request_error", "param": "messages", "code": null}}),
        );
    }
    let model = body.get("model").and_then(Value::as_str).unwrap_or("mock").to_string();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = body.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
    let (reply, prompt_tokens) = reply_for(&body);
    let completion_tokens = reply.split_whitespace().count() as u64;
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                       "total_tokens": prompt_tokens + completion_tokens});
    let id = format!("chatcmpl-mock{n}");
    let created = 1_700_000_000 + n as i64;

    if !stream {
        if k.malformed {
            return HttpResponse::Ok().content_type("application/json").body("{\"this is\": not json");
        }
        let mut resp = json!({
            "id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply, "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "system_fingerprint": "fp_mock",
        });
        if !k.no_usage {
            resp["usage"] = usage;
        }
        return HttpResponse::Ok().json(resp);
    }

    let mut events: Vec<Bytes> = Vec::new();
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "system_fingerprint": "fp_mock",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    let sse = |v: &Value| Bytes::from(format!("data: {v}\n\n"));
    if k.malformed {
        events.push(Bytes::from_static(b"data: {not json at all\n\n"));
    } else if k.error_mid_stream || k.truncate_stream {
        events.push(sse(&chunk(json!({"role": "assistant", "content": ""}), Value::Null)));
        for (i, w) in reply.split(' ').take(2).enumerate() {
            let piece = if i == 0 { w.to_string() } else { format!(" {w}") };
            events.push(sse(&chunk(json!({"content": piece}), Value::Null)));
        }
        if k.error_mid_stream {
            events.push(sse(&json!({"error": {"message": "mock upstream failed mid-stream", "type": "server_error",
                                             "param": null, "code": null}})));
        }
    } else {
        events.push(sse(&chunk(json!({"role": "assistant", "content": ""}), Value::Null)));
        for (i, w) in reply.split(' ').enumerate() {
            let piece = if i == 0 { w.to_string() } else { format!(" {w}") };
            events.push(sse(&chunk(json!({"content": piece}), Value::Null)));
        }
        events.push(sse(&chunk(json!({}), json!("stop"))));
        if include_usage && !k.no_usage {
            events.push(sse(&json!({"id": id, "object": "chat.completion.chunk", "created": created,
                                     "model": model, "choices": [], "usage": usage})));
        }
        events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    }
    let (ttft, delay) = (k.ttft_ms, k.chunk_delay_ms);
    let stream = futures::stream::unfold((events.into_iter(), true), move |(mut it, first)| async move {
        let next = it.next()?;
        let wait = if first { ttft } else { delay };
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        Some((Ok::<_, actix_web::Error>(next), (it, false)))
    });
    HttpResponse::Ok().content_type("text/event-stream").insert_header(("Cache-Control", "no-cache")).streaming(stream)
}

#[post("/v1/embeddings")]
async fn embeddings(body: web::Json<Value>) -> HttpResponse {
    let k = match with_body_knobs(Knobs::default(), &body) {
        Ok(k) => k,
        Err(e) => return bad_knobs(e),
    };
    if k.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(k.latency_ms)).await;
    }
    if let Some(status) = k.status {
        let code =
            actix_web::http::StatusCode::from_u16(status).unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
        return HttpResponse::build(code).json(error_body(status));
    }
    if k.malformed {
        return HttpResponse::Ok().content_type("application/json").body("{\"this is\": not json");
    }
    let inputs: Vec<String> = match body.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a.iter().map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).collect(),
        _ => {
            return HttpResponse::BadRequest().json(
                json!({"error": {"message": "'input' is required", "type": "invalid_request_error", "param": "input", "code": null}}),
            )
        }
    };
    let dims = body.get("dimensions").and_then(Value::as_u64).unwrap_or(8).clamp(1, 4096) as usize;
    let mut tokens = 0;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| {
            tokens += text.split_whitespace().count();
            let digest = Sha256::digest(text.as_bytes());
            let v: Vec<f32> = (0..dims).map(|d| (digest[d % 32] as f32 / 127.5) - 1.0).collect();
            json!({"object": "embedding", "index": i, "embedding": v})
        })
        .collect();
    let model = body.get("model").and_then(Value::as_str).unwrap_or("mock-embedding");
    HttpResponse::Ok().json(json!({"object": "list", "data": data, "model": model,
                                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}))
}

#[get("/v1/models")]
async fn models() -> HttpResponse {
    HttpResponse::Ok().json(json!({"object": "list", "data": [
        {"id": "mock-chat", "object": "model", "created": 1_700_000_000, "owned_by": "mock"},
        {"id": "mock-embedding", "object": "model", "created": 1_700_000_000, "owned_by": "mock"}]}))
}

#[post("/_mock/config")]
async fn set_config(state: web::Data<State>, body: web::Json<Knobs>) -> HttpResponse {
    if let Ok(mut k) = state.knobs.lock() {
        *k = body.into_inner();
    }
    state.requests.store(0, Ordering::SeqCst);
    HttpResponse::NoContent().finish()
}

#[derive(Deserialize)]
struct StatsQuery {
    tag: Option<String>,
}

#[get("/_mock/stats")]
async fn stats(state: web::Data<State>, q: web::Query<StatsQuery>) -> HttpResponse {
    if let Some(tag) = &q.tag {
        let (requests, last) = state
            .tags
            .lock()
            .ok()
            .and_then(|tags| {
                let t = tags.get(tag)?;
                Some((t.requests, t.last_body.clone()))
            })
            .unwrap_or((0, Value::Null));
        return HttpResponse::Ok().json(json!({"requests": requests, "last_body": last}));
    }
    let last = state.last_body.lock().map(|v| v.clone()).unwrap_or(Value::Null);
    HttpResponse::Ok().json(json!({"requests": state.requests.load(Ordering::SeqCst), "last_body": last}))
}

fn parse_args() -> Result<(String, Knobs), String> {
    let mut listen = "127.0.0.1:0".to_string();
    let mut k = Knobs::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            args.next().and_then(|v| v.parse().ok()).ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--listen" => listen = args.next().ok_or("--listen needs an address")?,
            "--latency-ms" => k.latency_ms = num("--latency-ms")?,
            "--ttft-ms" => k.ttft_ms = num("--ttft-ms")?,
            "--chunk-delay-ms" => k.chunk_delay_ms = num("--chunk-delay-ms")?,
            "--status" => k.status = Some(num("--status")? as u16),
            "--fail-first" => k.fail_first = num("--fail-first")?,
            "--malformed" => k.malformed = true,
            "--no-usage" => k.no_usage = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok((listen, k))
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let (listen, knobs) = match parse_args() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("mock-upstream: {e}");
            std::process::exit(2);
        }
    };
    let state = web::Data::new(State {
        knobs: Mutex::new(knobs),
        requests: AtomicU64::new(0),
        last_body: Mutex::new(Value::Null),
        tags: Mutex::new(HashMap::new()),
    });
    let workers = std::env::var("MOCK_WORKERS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(web::PayloadConfig::new(64 * 1024 * 1024))
            .app_data(web::JsonConfig::default().limit(64 * 1024 * 1024))
            .service(chat)
            .service(embeddings)
            .service(models)
            .service(set_config)
            .service(stats)
    })
    .workers(workers)
    .bind(&listen)?;
    for addr in server.addrs() {
        println!("listening on {addr}");
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    server.run().await
}
