use serde_json::{json, Map, Value};

use super::*;
use crate::pricing::TokenUsage;

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[test]
fn a_conversation_with_system_images_tools_and_results_becomes_the_chat_request() {
    let body = obj(json!({
        "model": "claude-x", "max_tokens": 100,
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is here?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"q": "x"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a cat"}]},
                {"type": "text", "text": "And?"}
            ]}
        ],
        "tools": [{"name": "look", "description": "Looks", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "stop_sequences": ["END"], "temperature": 0.5, "metadata": {"user_id": "u1"}, "stream": true
    }));
    let chat = chat_body(&body, false).unwrap();
    assert_eq!(
        Value::Object(chat),
        json!({
            "model": "claude-x", "max_completion_tokens": 100,
            "messages": [
                {"role": "system", "content": "Be brief.\nBe kind."},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is here?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}
                ]},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":\"x\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "a cat"},
                {"role": "user", "content": [{"type": "text", "text": "And?"}]}
            ],
            "stop": ["END"], "temperature": 0.5, "user": "u1",
            "tools": [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}, "description": "Looks"}}],
            "tool_choice": "required", "parallel_tool_calls": false,
            "stream": true, "stream_options": {"include_usage": true}
        })
    );
}

#[test]
fn what_the_messages_api_requires_is_required() {
    let cases = [
        (json!({"max_tokens": 1, "messages": []}), "model"),
        (json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}), "max_tokens"),
        (json!({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}), "max_tokens"),
        (json!({"model": "m", "max_tokens": 1}), "messages"),
        (json!({"model": "m", "max_tokens": 1, "messages": [{"role": "tool", "content": "x"}]}), "messages"),
        (
            json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "video"}]}]}),
            "messages",
        ),
        (
            json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5}),
            "temperature",
        ),
        (
            json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "t"}]}),
            "tools",
        ),
        (
            json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "some"}}),
            "tool_choice",
        ),
    ];
    for (body, param) in cases {
        let p = chat_body(&obj(body.clone()), false).unwrap_err();
        assert_eq!(p.param.as_deref(), Some(param), "{body}: {}", p.message);
    }
    // count_tokens takes no max_tokens.
    assert!(chat_body(&obj(json!({"model": "m", "messages": [{"role": "user", "content": "x"}]})), true).is_ok());
}

#[test]
fn a_completion_becomes_a_message_with_anthropic_s_usage() {
    let chat = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Let me look.",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}}]
    }}]});
    let u = TokenUsage {
        prompt_tokens: 100,
        completion_tokens: 7,
        cached_tokens: 60,
        cache_creation_tokens: 10,
        ..Default::default()
    };
    assert_eq!(
        message(&chat, "msg_1", "claude-x", &u),
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "text", "text": "Let me look.", "citations": null},
                {"type": "tool_use", "id": "call_1", "name": "look", "input": {"q": 1}, "caller": {"type": "direct"}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null, "stop_details": null, "container": null,
            "usage": {"input_tokens": 30, "output_tokens": 7, "cache_creation_input_tokens": 10, "cache_read_input_tokens": 60,
                      "cache_creation": null, "inference_geo": null, "service_tier": null,
                      "output_tokens_details": null, "server_tool_use": null}
        })
    );
    for (finish, stop) in [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal")] {
        assert_eq!(stop_reason(Some(finish)), stop);
    }
}

/// The events of an SSE body, as (name, data).
fn events(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(bytes).unwrap();
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let mut lines = e.lines();
            let name = lines.next().unwrap().strip_prefix("event: ").unwrap().to_string();
            let data = serde_json::from_str(lines.next().unwrap().strip_prefix("data: ").unwrap()).unwrap();
            (name, data)
        })
        .collect()
}

#[test]
fn chunks_become_the_event_sequence_with_tool_arguments_intact() {
    let mut enc = EventEncoder::new("msg_1".into(), "claude-x".into());
    let chunk = |delta: Value, finish: Value| {
        format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
    };
    let mut out = Vec::new();
    // Two chunks in one write, a comment, a tool call split at awkward places.
    out.extend(
        enc.frames(
            format!(
                "{}{}",
                chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                chunk(json!({"content": "Hi"}), Value::Null)
            )
            .as_bytes(),
        ),
    );
    out.extend(enc.frames(chunk(json!({"content": " there"}), Value::Null).as_bytes()));
    out.extend(enc.frames(b": keep-alive\n\n"));
    out.extend(enc.frames(chunk(json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":"}}]}), Value::Null).as_bytes()));
    out.extend(enc.frames(
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"a\\\"b\"}"}}]}), Value::Null).as_bytes(),
    ));
    out.extend(
        enc.frames(
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "other", "arguments": "{}"}}]}),
                json!("tool_calls"),
            )
            .as_bytes(),
        ),
    );
    out.extend(enc.frames(b"data: [DONE]\n\n"));
    out.extend(enc.finish(&TokenUsage { prompt_tokens: 12, completion_tokens: 5, ..Default::default() }));
    let ev = events(&out);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    // Every event's `type` is its name.
    assert!(ev.iter().all(|(n, d)| d["type"] == n.as_str()));
    let json_of_first_tool: String = ev
        .iter()
        .filter(|(_, d)| d["index"] == 1 && d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&json_of_first_tool).unwrap(), json!({"q": "a\"b"}));
    assert_eq!(
        ev[5].1["content_block"],
        json!({"type": "tool_use", "id": "call_1", "name": "look", "input": {}, "caller": {"type": "direct"}})
    );
    assert_eq!(ev[12].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(ev[12].1["usage"]["output_tokens"], 5);
    assert_eq!(ev[12].1["usage"]["input_tokens"], 12);
}

#[test]
fn errors_take_anthropic_s_types() {
    for (status, kind) in [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (529, "overloaded_error"),
    ] {
        assert_eq!(error_type(status), kind);
    }
    let e = events(&error_event(429, "slow down", "r1"));
    assert_eq!(e[0].0, "error");
    assert_eq!(
        e[0].1,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}, "request_id": "r1"})
    );
}

#[test]
fn a_passed_through_body_changes_only_its_model() {
    let raw = bytes::Bytes::from_static(br#"{"model":"claude","max_tokens":5,"top_k":3,"messages":[]}"#);
    assert_eq!(super::passthrough_body(&raw, "claude", "claude").unwrap(), raw);
    let moved: serde_json::Value =
        serde_json::from_slice(&super::passthrough_body(&raw, "claude", "claude-sonnet-4-5").unwrap()).unwrap();
    assert_eq!(moved, serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "top_k": 3, "messages": []}));
    // A key named twice goes up as gw read it (the last one), never as the raw text.
    let twice = bytes::Bytes::from_static(br#"{"model":"claude","max_tokens":5,"max_tokens":9000,"messages":[]}"#);
    let sent: serde_json::Value =
        serde_json::from_slice(&super::passthrough_body(&twice, "claude", "claude").unwrap()).unwrap();
    assert_eq!(sent, serde_json::json!({"model": "claude", "max_tokens": 9000, "messages": []}));
}

#[test]
fn betas_billed_at_unknown_rates_are_not_passed_on() {
    let h = |v: &'static str| http::HeaderValue::from_static(v);
    assert_eq!(super::billable_betas(&h("prompt-caching-2024-07-31")), Some(h("prompt-caching-2024-07-31")));
    assert_eq!(
        super::billable_betas(&h("context-1m-2025-08-07, interleaved-thinking-2025-05-14")),
        Some(h("interleaved-thinking-2025-05-14"))
    );
    assert_eq!(super::billable_betas(&h("context-1m-2025-08-07")), None);
}
