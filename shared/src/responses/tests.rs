use serde_json::{json, Map, Value};

use super::*;
use crate::pricing::TokenUsage;

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[test]
fn input_items_instructions_tools_and_format_become_the_chat_request() {
    let body = obj(json!({
        "model": "gpt-x", "instructions": "Be brief.", "max_output_tokens": 50, "temperature": 0.2,
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"},
                                         {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_2", "output": "noon"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny at noon."}]},
            {"type": "message", "role": "user", "content": "Thanks"}
        ],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": true}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}},
        "reasoning": {"effort": "low"}, "stream": true, "store": false
    }));
    assert_eq!(
        Value::Object(chat_body(&body).unwrap()),
        json!({
            "model": "gpt-x",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                             {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
                {"role": "assistant", "content": "Sunny at noon."},
                {"role": "user", "content": "Thanks"}
            ],
            "max_completion_tokens": 50, "temperature": 0.2,
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}, "strict": true}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": true}},
            "reasoning_effort": "low",
            "stream": true, "stream_options": {"include_usage": true}
        })
    );
}

#[test]
fn what_needs_stored_state_or_unknown_tools_is_refused_by_name() {
    let cases = [
        (json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}), "previous_response_id"),
        (json!({"model": "m", "input": "x", "conversation": "conv_1"}), "conversation"),
        (json!({"model": "m", "input": "x", "store": true}), "store"),
        (json!({"model": "m", "input": "x", "background": true}), "background"),
        (json!({"input": "x"}), "model"),
        (json!({"model": "m"}), "input"),
        (json!({"model": "m", "input": [{"type": "web_search_call"}]}), "input"),
        (json!({"model": "m", "input": "x", "tools": [{"type": "local_shell"}]}), "tools"),
        (json!({"model": "m", "input": "x", "tool_choice": {"type": "web_search"}}), "tool_choice"),
        (json!({"model": "m", "input": "x", "max_output_tokens": 0}), "max_output_tokens"),
        (json!({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}), "text.format"),
        // Files of the account gw calls OpenAI with are never a client's to name.
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/i.png", "file_id": "file-1"}]}]}),
            "input",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_url": "https://x/a.pdf"}]}]}),
            "input",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_file", "file_id": "file-1"}]}]}),
            "input",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "file_id": "file-1"}]}]}),
            "input",
        ),
    ];
    for (body, param) in cases {
        let p = chat_body(&obj(body.clone())).unwrap_err();
        assert_eq!(p.param.as_deref(), Some(param), "{body}: {}", p.message);
    }
}

#[test]
fn a_completion_becomes_a_response_with_its_items_and_usage() {
    let echo = Echo::new(&obj(json!({"model": "gpt-x", "input": "hi"})), "resp_abc".into(), 1_700_000_000);
    let chat = json!({"choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Looking.",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]}}]});
    let u = TokenUsage {
        prompt_tokens: 10,
        completion_tokens: 4,
        cached_tokens: 2,
        reasoning_tokens: 1,
        ..Default::default()
    };
    let r = response(&echo, &chat, &u);
    assert_eq!(r["id"], "resp_abc");
    assert_eq!(r["object"], "response");
    assert_eq!(r["status"], "completed");
    assert_eq!(
        r["output"][0],
        json!({"type": "message", "id": "msg_abc", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": "Looking.", "annotations": [], "logprobs": []}]})
    );
    assert_eq!(
        r["output"][1],
        json!({"type": "function_call", "id": "fc_abc_0", "call_id": "call_1", "name": "w",
        "arguments": "{}", "status": "completed"})
    );
    assert_eq!(
        r["usage"],
        json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 1}, "total_tokens": 14})
    );
    let cut = json!({"choices": [{"finish_reason": "length", "message": {"content": "abc"}}]});
    let r = response(&echo, &cut, &u);
    assert_eq!(r["status"], "incomplete");
    assert_eq!(r["incomplete_details"], json!({"reason": "max_output_tokens"}));
}

fn events(bytes: &[u8]) -> Vec<Value> {
    std::str::from_utf8(bytes)
        .unwrap()
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let mut lines = e.lines();
            let name = lines.next().unwrap().strip_prefix("event: ").unwrap().to_string();
            let data: Value = serde_json::from_str(lines.next().unwrap().strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], name.as_str());
            data
        })
        .collect()
}

#[test]
fn chunks_become_the_event_sequence_numbered_in_order() {
    let echo = Echo::new(&obj(json!({"model": "gpt-x", "input": "hi"})), "resp_abc".into(), 1);
    let mut enc = EventEncoder::new(echo);
    let chunk = |delta: Value, finish: Value| {
        format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
    };
    let mut out = Vec::new();
    out.extend(enc.frames(chunk(json!({"role": "assistant", "content": "Hi"}), Value::Null).as_bytes()));
    out.extend(enc.frames(chunk(json!({"content": " there"}), Value::Null).as_bytes()));
    out.extend(
        enc.frames(
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "w", "arguments": "{\"a\""}}]}),
                Value::Null,
            )
            .as_bytes(),
        ),
    );
    out.extend(enc.frames(
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}), json!("tool_calls")).as_bytes(),
    ));
    out.extend(enc.finish(&TokenUsage { prompt_tokens: 3, completion_tokens: 5, ..Default::default() }));
    let ev = events(&out);
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    for (n, e) in ev.iter().enumerate() {
        assert_eq!(e["sequence_number"], n as u64);
    }
    assert_eq!(ev[6]["text"], "Hi there");
    assert_eq!(ev[12]["arguments"], "{\"a\":1}");
    let done = &ev[14]["response"];
    assert_eq!(done["output"][0]["content"][0]["text"], "Hi there");
    assert_eq!(done["output"][1]["arguments"], "{\"a\":1}");
    assert_eq!(done["output"][1]["output_index"], Value::Null);
    assert_eq!(done["usage"]["total_tokens"], 8);
    assert_eq!(ev[9]["output_index"], 1);
}

#[test]
fn namespaced_functions_are_offered_flat_and_called_by_namespace_and_hosted_tools_left_out() {
    let body = obj(json!({"model": "m", "input": "x", "tools": [
        {"type": "function", "name": "exec", "parameters": {"type": "object"}},
        {"type": "namespace", "name": "agents", "description": "Sub-agents", "tools": [
            {"type": "function", "name": "spawn", "parameters": {"type": "object"}}
        ]},
        {"type": "web_search", "external_web_access": false}
    ]}));
    let chat = chat_body(&body).unwrap();
    let names: Vec<&str> =
        chat["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["exec", "spawn"]);
    let echo = Echo::new(&body, "resp_1".into(), 1);
    let answer = json!({"choices": [{"finish_reason": "tool_calls", "message": {"content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "spawn", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "exec", "arguments": "{}"}}
    ]}}]});
    let r = response(&echo, &answer, &TokenUsage::default());
    assert_eq!(r["output"][0]["namespace"], "agents");
    assert!(r["output"][1].get("namespace").is_none());
    // The echo repeats the tools as sent.
    assert_eq!(r["tools"].as_array().unwrap().len(), 3);
}
