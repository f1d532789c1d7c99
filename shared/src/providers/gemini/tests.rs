use super::*;
use crate::providers::ProviderOptions;

const MODEL: &str = "gemini-2.5-flash";

static OPTS: ProviderOptions =
    ProviderOptions { api_version: None, region: None, responses_api: false, host: String::new() };

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
    check_request(include_str!("../testdata/gemini/request_basic.json"));
}

#[test]
fn golden_request_tool_roundtrip() {
    check_request(include_str!("../testdata/gemini/request_tool_roundtrip.json"));
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
    check_response(include_str!("../testdata/gemini/response_text.json"));
}

#[test]
fn golden_response_tool_call() {
    check_response(include_str!("../testdata/gemini/response_tool_call.json"));
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
    check_stream(include_str!("../testdata/gemini/stream_text.json"));
}

#[test]
fn golden_stream_tool() {
    check_stream(include_str!("../testdata/gemini/stream_tool.json"));
}

#[test]
fn golden_errors() {
    let cases = fixture(include_str!("../testdata/gemini/errors.json"));
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
    let f = fixture(include_str!("../testdata/gemini/embeddings.json"));
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
    let two = EmbeddingsRequest::parse(br#"{"model":"e","input":["ab","cdefg"],"encoding_format":"base64"}"#).unwrap();
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
    assert!(
        unsupported_message(json!({ "messages": bad_args })).contains("'messages[1].tool_calls[0].function.arguments'")
    );
    let orphan = json!([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "nope", "content": "1"}]);
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
        config(json!({"max_tokens": 10, "max_completion_tokens": 20})).and_then(|c| c.get("maxOutputTokens").cloned()),
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
    let error = json!({"error": {"code": 500, "message": "An internal error\nhas occurred.", "status": "INTERNAL"}});
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
    let (chunks, sink, last) = run(true, &[String::new(), finish.to_string(), usage.to_string(), usage.to_string()]);
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
