use proptest::prelude::*;
use serde_json::json;

use super::*;

fn chunk(choices: Value) -> Value {
    json!({"id":"chatcmpl-9","object":"chat.completion.chunk","created":7,"model":"gpt-x","choices":choices})
}

#[test]
fn a_stream_gathers_into_its_completion() {
    let mut a = Assembler::new();
    a.chunk(&chunk(json!([{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}])));
    a.chunk(&chunk(json!([{"index":0,"delta":{"content":"Hel"},"finish_reason":null}])));
    a.chunk(&chunk(json!([{"index":0,"delta":{"content":"lo"},"finish_reason":null}])));
    a.chunk(&chunk(json!([{"index":0,"delta":{},"finish_reason":"stop"}])));
    let mut usage = chunk(json!([]));
    usage["usage"] = json!({"prompt_tokens":3,"completion_tokens":2,"total_tokens":5});
    a.chunk(&usage);
    let c = a.finish().unwrap();
    assert_eq!(c["object"], "chat.completion");
    assert_eq!(c["id"], "chatcmpl-9");
    assert_eq!(c["choices"][0]["message"], json!({"role":"assistant","content":"Hello","refusal":null}));
    assert_eq!(c["choices"][0]["finish_reason"], "stop");
    assert_eq!(c["choices"][0]["logprobs"], Value::Null);
    assert_eq!(c["usage"]["total_tokens"], 5);
}

#[test]
fn tool_call_deltas_merge_by_index() {
    let mut a = Assembler::new();
    a.chunk(&chunk(json!([{"index":0,"delta":{"role":"assistant","tool_calls":[
        {"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}])));
    a.chunk(&chunk(json!([{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}])));
    a.chunk(&chunk(json!([{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]}}])));
    a.chunk(&chunk(json!([{"index":0,"delta":{},"finish_reason":"tool_calls"}])));
    let c = a.finish().unwrap();
    assert_eq!(
        c["choices"][0]["message"]["tool_calls"],
        json!([{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}])
    );
    assert_eq!(c["choices"][0]["message"]["content"], Value::Null);
}

#[test]
fn unfinished_or_unrepresentable_streams_are_not_kept() {
    let mut a = Assembler::new();
    a.chunk(&chunk(json!([{"index":0,"delta":{"content":"cut"},"finish_reason":null}])));
    assert!(a.finish().is_none(), "a stream without its finish is truncated");
    assert!(Assembler::new().finish().is_none());
    let mut a = Assembler::new();
    a.chunk(&chunk(json!([{"index":0,"delta":{"content":"x"},"logprobs":{"content":[]},"finish_reason":"stop"}])));
    assert!(a.finish().is_none(), "log probabilities cannot be replayed");
    let mut a = Assembler::new();
    a.chunk(&chunk(json!([{"index":0,"delta":{"audio":{"id":"a"}},"finish_reason":"stop"}])));
    assert!(a.finish().is_none());
    let mut a = Assembler::new();
    a.chunk(&json!("not an object"));
    assert!(a.finish().is_none());
}

#[test]
fn replay_streams_in_pieces_with_usage_last_only_when_asked() {
    let completion = json!({"id":"old","object":"chat.completion","created":1,"model":"gpt-x",
        "choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog, twice over, and then rests a while.","refusal":null},
        "logprobs":null,"finish_reason":"stop"}],
        "usage":{"prompt_tokens":3,"completion_tokens":20,"total_tokens":23}});
    let chunks = replay(&completion, "chatcmpl-new", 99, true);
    assert!(chunks.len() >= 5, "{}", chunks.len());
    assert!(chunks
        .iter()
        .all(|c| c["id"] == "chatcmpl-new" && c["created"] == 99 && c["object"] == "chat.completion.chunk"));
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["total_tokens"], 23);
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c.get("usage").is_none()));
    // Gathered again, the chunks are the stored answer.
    let mut a = Assembler::new();
    for c in &chunks {
        a.chunk(c);
    }
    let back = a.finish().unwrap();
    assert_eq!(back["choices"], completion["choices"]);
    assert_eq!(back["usage"], completion["usage"]);
    let without = replay(&completion, "x", 1, false);
    assert!(without.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(without.len(), chunks.len() - 1);
}

#[test]
fn replayed_tool_calls_gather_back() {
    let completion = json!({"id":"old","object":"chat.completion","created":1,"model":"m",
        "choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[
            {"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},
            {"id":"c2","type":"function","function":{"name":"g","arguments":"{\"a\":1}"}}]},
        "logprobs":null,"finish_reason":"tool_calls"}]});
    let mut a = Assembler::new();
    for c in replay(&completion, "x", 1, false) {
        a.chunk(&c);
    }
    let back = a.finish().unwrap();
    assert_eq!(back["choices"], completion["choices"]);
}

#[test]
fn sse_replay_writes_the_same_chunks() {
    let completion = json!({"id":"old","object":"chat.completion","created":1,"model":"m","system_fingerprint":"fp",
        "choices":[{"index":0,"message":{"role":"assistant","content":"Some text that is long enough to be cut into pieces","refusal":"no",
            "tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},"logprobs":null,"finish_reason":"stop"},
            {"index":1,"message":{"role":"assistant","content":null,"refusal":null},"logprobs":null,"finish_reason":"length"}],
        "usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}});
    for usage in [true, false] {
        let values = replay(&completion, "chatcmpl-x", 5, usage);
        let mut out = Vec::new();
        let n = replay_sse(&completion, "chatcmpl-x", 5, usage, &mut out);
        let text = String::from_utf8(out).unwrap();
        let parsed: Vec<Value> = text
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        assert_eq!(n, parsed.len());
        assert_eq!(parsed, values);
    }
    let values = replay(&completion, "x", 1, true);
    assert_eq!(values[0]["choices"][0]["delta"], json!({"role":"assistant","content":""}));
    assert_eq!(values[0]["system_fingerprint"], "fp");
    assert!(values.iter().any(|c| c["choices"][0]["delta"]["refusal"] == "no"));
    assert!(values.iter().any(|c| c["choices"][0]["delta"]["tool_calls"][0]["index"] == 0));
    assert_eq!(values.iter().filter(|c| c["choices"][0]["finish_reason"] == "length").count(), 1);
    // The second choice has no text: its role chunk carries no content.
    assert!(values
        .iter()
        .any(|c| c["choices"][0]["index"] == 1 && c["choices"][0]["delta"] == json!({"role":"assistant"})));
}

#[test]
fn long_words_are_cut_too() {
    let text = "x".repeat(1000);
    let p = pieces(&text, 24);
    assert!(p.len() > 5);
    assert_eq!(p.concat(), text);
}

proptest! {
    #[test]
    fn pieces_join_back_to_the_text(text in "\\PC{0,300}", size in 1usize..40) {
        let p = pieces(&text, size);
        prop_assert_eq!(p.concat(), text.clone());
        prop_assert!(p.iter().all(|s| !s.is_empty()));
    }
}
