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
    check_request(include_str!("../testdata/anthropic/request_basic.json"));
}

#[test]
fn golden_request_tool_roundtrip() {
    check_request(include_str!("../testdata/anthropic/request_tool_roundtrip.json"));
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
    check_response(include_str!("../testdata/anthropic/response_text.json"));
}

#[test]
fn golden_response_tool_use() {
    check_response(include_str!("../testdata/anthropic/response_tool_use.json"));
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
    check_stream(include_str!("../testdata/anthropic/stream_text.json"));
}

#[test]
fn golden_stream_tool() {
    check_stream(include_str!("../testdata/anthropic/stream_tool.json"));
}

#[test]
fn golden_errors() {
    let cases = fixture(include_str!("../testdata/anthropic/errors.json"));
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
    assert!(
        unsupported_message(json!({ "messages": bad_args })).contains("'messages[1].tool_calls[0].function.arguments'")
    );
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
        choice(json!({"tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": false})),
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
