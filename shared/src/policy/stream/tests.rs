//! Stream guard tests: redaction however the text is cut, every field of a delta, flushing,
//! blocks, and the work a long held text costs.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::policy::engine::{PolicySet, Segment, TeamPolicies};
use crate::policy::spec::OrgPolicy;
use crate::policy::vault::Vault;

/// Fields beside `content`: tool calls, reasoning, refusals, transcripts, logprobs.
mod fields;

fn guard(doc: serde_json::Value, header: &str) -> OutputGuard {
    let d: OrgPolicy = serde_json::from_value(doc).unwrap();
    let s = PolicySet::compile(1, &d);
    let ps: Vec<Arc<_>> = s.resolve(TeamPolicies::NONE, Some(header)).unwrap();
    OutputGuard::new(&ps, Vault::new()).unwrap()
}

fn pii() -> OutputGuard {
    guard(serde_json::json!({}), "pii_redact")
}

/// Streams `text` cut at `cuts`, returning what the client would see.
fn stream(g: &mut OutputGuard, text: &str, cuts: &[usize]) -> (String, Vec<String>) {
    let mut held = Held::new();
    let mut seen = String::new();
    let mut emitted = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&text.len())) {
        let c = held::floor_boundary(text, c.min(text.len()));
        if c < at {
            continue;
        }
        let piece = push(g, &mut held, &text[at..c]).unwrap();
        seen.push_str(&piece);
        emitted.push(piece);
        at = c;
    }
    let rest = finish(g, &mut held).unwrap();
    seen.push_str(&rest);
    emitted.push(rest);
    (seen, emitted)
}

#[test]
fn a_value_split_over_chunks_is_redacted() {
    let text = "Write to john.doe@example.com or call +1 415 555 2671 today, card 4111 1111 1111 1111.";
    for step in 1..8 {
        let cuts: Vec<usize> = (1..text.len()).step_by(step).collect();
        let (seen, pieces) = stream(&mut pii(), text, &cuts);
        assert_eq!(seen, "Write to [EMAIL_1] or call [PHONE_1] today, card [CREDIT_CARD_1].", "step {step}");
        for p in pieces {
            assert!(!p.contains("john") && !p.contains("4111") && !p.contains("2671"), "{p:?}");
        }
    }
}

#[test]
fn long_tokens_and_key_blocks_are_held_whole() {
    let jwt = format!("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.{}", "a".repeat(300));
    let key = format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----", "QUJD\n".repeat(100));
    let text = format!("token {jwt} and {key} done");
    let cuts: Vec<usize> = (1..text.len()).step_by(7).collect();
    let (seen, pieces) = stream(&mut pii(), &text, &cuts);
    assert_eq!(seen, "token [SECRET_1] and [SECRET_2] done");
    assert!(pieces.iter().all(|p| !p.contains("eyJ") && !p.contains("QUJD")));
}

#[test]
fn text_without_values_passes_unchanged_and_soon() {
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(10);
    let cuts: Vec<usize> = (1..text.len()).step_by(4).collect();
    let (seen, pieces) = stream(&mut pii(), &text, &cuts);
    assert_eq!(seen, text);
    // Text leaves once it is a window behind the newest.
    let before_end: usize = pieces[..pieces.len() - 1].iter().map(String::len).sum();
    assert!(before_end >= text.len() - WINDOW - 8, "{before_end}");
}

#[test]
fn chunk_filter_flushes_at_finish_and_before_usage() {
    let mut f = GuardedStream::new(pii());
    let mut out = Vec::new();
    let c = |content: &str| {
        serde_json::json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]})
    };
    f.chunk(c("mail me at a@exa"), &mut out).unwrap();
    f.chunk(c("mple.com please"), &mut out).unwrap();
    f.chunk(serde_json::json!({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), &mut out)
        .unwrap();
    f.chunk(serde_json::json!({"id": "x", "choices": [], "usage": {"total_tokens": 3}}), &mut out).unwrap();
    let text: String = out
        .iter()
        .filter_map(|v| v["choices"].get(0).and_then(|c| c["delta"]["content"].as_str()).map(str::to_string))
        .collect();
    assert_eq!(text, "mail me at [EMAIL_1] please");
    assert_eq!(out.last().unwrap()["usage"]["total_tokens"], 3);
    assert_eq!(f.decisions()[0].entities, vec![("EMAIL".to_string(), 1)]);

    // A stream that ends without a finishing chunk: the held text comes out at finish.
    let mut f = GuardedStream::new(pii());
    let mut out = Vec::new();
    f.chunk(c("bye b@example.com"), &mut out).unwrap();
    f.finish(&mut out).unwrap();
    let text: String =
        out.iter().filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_string)).collect();
    assert_eq!(text, "bye [EMAIL_1]");
    assert_eq!(out.last().unwrap()["id"], "x");
}

#[test]
fn a_block_mid_stream_stops_the_stream() {
    let g = guard(
        serde_json::json!({"policies": [{"name": "nokeys", "guardrails": [{"type": "pii_redact", "entities": ["secret"], "action": "block"}]}]}),
        "nokeys",
    );
    let mut f = GuardedStream::new(g);
    let mut out = Vec::new();
    let c = |content: &str| serde_json::json!({"choices": [{"index": 0, "delta": {"content": content}}]});
    f.chunk(c("your key is AKIAIOSF"), &mut out).unwrap();
    let err = f.chunk(c("ODNN7EXAMPLE ok"), &mut out).unwrap_err();
    assert_eq!(err.policy, "nokeys");
    let seen: String = out.iter().filter_map(|v| v["choices"][0]["delta"]["content"].as_str()).collect();
    assert!(!seen.contains("AKIA"), "{seen:?}");
}

/// The filter reads a chunk's text where it sits and writes the rest back as it came.
fn filtered(f: &mut GuardedStream, json: &str) -> (Result<(), OutputBlocked>, String) {
    let mut buf = bytes::BytesMut::new();
    let mut count = 0;
    let r = f.filter(json, &mut crate::providers::Frames::new(&mut buf, &mut count));
    (r, String::from_utf8(buf.to_vec()).unwrap())
}

#[test]
fn members_the_guard_does_not_read_go_out_as_they_came() {
    let mut f = GuardedStream::new(pii());
    let chunk = r#"{"id":"x","created":1.0e3,"choices":[{"index":0,"delta":{"role":"assistant","content":"hi there, "},"logprobs":{"content":[{"token":"hi"}]},"finish_reason":null,"extra":{"b":2,"a":1}}],"z":[1,2]}"#;
    let (r, out) = filtered(&mut f, chunk);
    r.unwrap();
    // Member order and number formats kept; only the text (held back for now) and the logprobs
    // are written anew.
    assert_eq!(
        out,
        "data: {\"id\":\"x\",\"created\":1.0e3,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null,\"extra\":{\"b\":2,\"a\":1}}],\"z\":[1,2]}\n\n"
    );
    // A chunk without choices goes out byte for byte (after what was held, in a chunk of the
    // first chunk's members).
    let usage = r#"{"id":"x","choices":[],"usage":{"total_tokens":3}}"#;
    assert_eq!(
        filtered(&mut f, usage).1,
        format!(
            "data: {{\"id\":\"x\",\"created\":1.0e3,\"z\":[1,2],\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"hi there, \"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\ndata: {usage}\n\n"
        )
    );
}

#[test]
fn a_repeated_text_key_is_guarded_as_the_client_reads_it() {
    // Readers keep a repeated key's last value: that one must be the guarded one.
    let mut f = GuardedStream::new(pii());
    let chunk = r#"{"choices":[{"index":0,"delta":{"content":"ok ","content":"mail jane.roe@example.com now"},"finish_reason":"stop"}]}"#;
    let (r, out) = filtered(&mut f, chunk);
    r.unwrap();
    assert!(!out.contains("jane"), "{out}");
    assert!(out.contains("[EMAIL_1]"), "{out}");
}

#[test]
fn a_chunk_that_does_not_parse_stops_the_stream_and_other_json_passes() {
    let mut f = GuardedStream::new(pii());
    let (r, out) = filtered(&mut f, r#"{"choices":[{"delta":{"content":"a@b.com"#);
    assert_eq!(r.unwrap_err().reason, "the upstream sent a chunk the output guardrails could not read");
    assert_eq!(out, "");
    let (r, out) = filtered(&mut f, "[1,2]");
    r.unwrap();
    assert_eq!(out, "data: [1,2]\n\n");
}

#[test]
fn restored_placeholders_split_over_chunks() {
    let doc = serde_json::json!({"policies": [{"name": "r", "guardrails": [{"type": "pii_redact", "restore": true}]}]});
    let d: OrgPolicy = serde_json::from_value(doc).unwrap();
    let s = PolicySet::compile(1, &d);
    let ps = s.resolve(TeamPolicies::NONE, Some("r")).unwrap();
    let mut vault = Vault::new();
    let mut t = "I am a@example.com".to_string();
    let facts = crate::policy::engine::RequestFacts { model: "m", prompt_tokens: 1 };
    crate::policy::engine::run_input(&ps, &mut [Segment { user: true, text: &mut t }], &facts, &mut vault);
    let mut g = OutputGuard::new(&ps, vault).unwrap();
    let (seen, _) = stream(&mut g, "Hi [EMAIL_1]!", &[3, 6, 9]);
    assert_eq!(seen, "Hi a@example.com!");
}

fn scanned() -> usize {
    held::SCANNED.with(|s| s.get())
}

#[test]
fn long_held_texts_cost_linear_work() {
    // Within the longest key body the detector searches (16 KiB).
    let key_body = "QUJD\n".repeat(3_000);
    for (name, text) in [
        ("one run of MAX_HOLD", "Zm9vYmFy".repeat(MAX_HOLD / 8)),
        ("a run three times MAX_HOLD", "b".repeat(3 * MAX_HOLD)),
        ("an open key block", format!("key: -----BEGIN PRIVATE KEY-----\n{key_body}")),
        ("a closed key block", format!("key: -----BEGIN PRIVATE KEY-----\n{key_body}-----END PRIVATE KEY-----\nok")),
    ] {
        let cuts: Vec<usize> = (1..text.len()).collect();
        let mut g = pii();
        let before = scanned();
        let (seen, _) = stream(&mut g, &text, &cuts);
        let work = scanned() - before;
        assert!(work < 4 * text.len(), "{name}: {work} bytes scanned for {}", text.len());
        assert!(!seen.contains("QUJD"), "{name}");
    }
}

/// Chunks of one choice whose deltas are `deltas`, then its finishing chunk and the usage chunk,
/// through `f`.
fn run_chunks(f: &mut GuardedStream, deltas: &[serde_json::Value]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for d in deltas {
        let c = serde_json::json!({"id": "x", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": d, "logprobs": null, "finish_reason": null}]});
        f.chunk(c, &mut out).unwrap();
    }
    f.chunk(serde_json::json!({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), &mut out)
        .unwrap();
    f.chunk(serde_json::json!({"id": "x", "choices": [], "usage": {"total_tokens": 3}}), &mut out).unwrap();
    f.finish(&mut out).unwrap();
    out
}

/// Each tool call's arguments as the client assembles them, by the call's index.
fn tool_arguments(out: &[serde_json::Value]) -> BTreeMap<u64, String> {
    let mut args: BTreeMap<u64, String> = BTreeMap::new();
    for v in out {
        for call in v["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            if let Some(a) = call["function"]["arguments"].as_str() {
                args.entry(call["index"].as_u64().unwrap()).or_default().push_str(a);
            }
        }
    }
    args
}

/// A delta text as the client assembles it: the string at `path` in each chunk's first choice's
/// delta, joined.
fn delta_text(out: &[serde_json::Value], path: &[&str]) -> String {
    out.iter()
        .filter_map(|v| {
            let mut x = &v["choices"][0]["delta"];
            for p in path {
                x = &x[*p];
            }
            x.as_str().map(str::to_string)
        })
        .collect()
}

/// Each tool call's `custom.input` as the client assembles it, by the call's index.
fn tool_inputs(out: &[serde_json::Value]) -> BTreeMap<u64, String> {
    let mut inputs: BTreeMap<u64, String> = BTreeMap::new();
    for v in out {
        for call in v["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            if let Some(a) = call["custom"]["input"].as_str() {
                inputs.entry(call["index"].as_u64().unwrap()).or_default().push_str(a);
            }
        }
    }
    inputs
}

fn card(prefix: &str, len: usize, seed: &[u8]) -> String {
    let mut d: Vec<u8> = prefix.bytes().map(|b| b - b'0').collect();
    let mut i = 0;
    while d.len() < len - 1 {
        d.push(seed[i % seed.len()] % 10);
        i += 1;
    }
    let sum: u32 = d
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &x)| {
            let x = x as u32;
            if i % 2 == 0 {
                let y = x * 2;
                if y > 9 {
                    y - 9
                } else {
                    y
                }
            } else {
                x
            }
        })
        .sum();
    d.push(((10 - sum % 10) % 10) as u8);
    d.iter().map(|x| (x + b'0') as char).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// However a stream is cut, no digit of a card number or character of an e-mail's local
    /// part reaches the client, and the text reads as the whole would.
    #[test]
    fn pii_split_anywhere_never_leaks(
        words in proptest::collection::vec("[a-z]{1,8}", 1..20),
        seed in proptest::collection::vec(any::<u8>(), 8..16),
        local in "[a-z]{6,12}",
        cuts in proptest::collection::vec(1usize..400, 0..30),
    ) {
        let number = card("4", 16, &seed);
        let email = format!("{local}@example.org");
        let mid = words.len() / 2;
        let mut parts: Vec<String> = words.clone();
        parts.insert(mid, number.clone());
        parts.push(email.clone());
        let text = parts.join(" ");
        let mut cuts = cuts;
        cuts.sort_unstable();
        let mut g = pii();
        let whole = g.clone().text(&text).unwrap();
        let (seen, pieces) = stream(&mut g, &text, &cuts);
        prop_assert_eq!(&seen, &whole);
        let placeholders = regex::Regex::new(r"\[[A-Z_]+_\d+\]").unwrap();
        let stripped = placeholders.replace_all(&seen, "");
        prop_assert!(!stripped.bytes().any(|b| b.is_ascii_digit()), "a card digit leaked: {}", seen);
        prop_assert!(!seen.contains(&local));
        for p in pieces {
            prop_assert!(!p.contains(&local));
        }
    }

    /// The same for the chain of thought (`reasoning_content`, or OpenRouter's `reasoning`)
    /// streamed in deltas before the answer: it reads as the whole would, and no chunk carries a
    /// value.
    #[test]
    fn reasoning_split_anywhere_never_leaks(
        words in proptest::collection::vec("[a-z]{1,8}", 1..24),
        seed in proptest::collection::vec(any::<u8>(), 8..16),
        local in "[a-z]{6,12}",
        cuts in proptest::collection::vec(1usize..400, 0..30),
        openrouter in any::<bool>(),
    ) {
        let key = if openrouter { "reasoning" } else { "reasoning_content" };
        let number = card("4", 16, &seed);
        let mid = words.len() / 2;
        let text = format!("{} {number} {} and {local}@example.org.", words[..mid].join(" "), words[mid..].join(" "));
        let mut cuts = cuts;
        cuts.sort_unstable();
        let mut deltas = vec![serde_json::json!({"role": "assistant", "content": null, key: ""})];
        let mut at = 0;
        for &c in cuts.iter().chain(std::iter::once(&text.len())) {
            let c = c.min(text.len());
            if c <= at {
                continue;
            }
            deltas.push(serde_json::json!({key: &text[at..c], "content": null}));
            at = c;
        }
        deltas.push(serde_json::json!({"content": "Done."}));
        let whole = pii().text(&text).unwrap();
        let mut f = GuardedStream::new(pii());
        let out = run_chunks(&mut f, &deltas);
        prop_assert_eq!(delta_text(&out, &[key]), whole);
        prop_assert_eq!(delta_text(&out, &["content"]), "Done.");
        for v in &out {
            let s = v.to_string();
            prop_assert!(!s.contains(&local) && !s.contains(&number[..8]), "{}", s);
        }
    }

    /// The same for a tool call's arguments streamed in deltas beside another call's, and for a
    /// custom tool call's input streamed between them: each call's text reads as the whole would,
    /// and no chunk carries a value.
    #[test]
    fn tool_arguments_split_anywhere_never_leak(
        words in proptest::collection::vec("[a-z]{1,8}", 1..12),
        seed in proptest::collection::vec(any::<u8>(), 8..16),
        local in "[a-z]{6,12}",
        cuts in proptest::collection::vec(1usize..300, 0..30),
    ) {
        let number = card("4", 16, &seed);
        let args = format!("{{\"note\":\"{}\",\"card\":\"{number}\",\"to\":\"{local}@example.org\"}}", words.join(" "));
        let mut cuts = cuts;
        cuts.sort_unstable();
        let mut deltas = vec![serde_json::json!({"tool_calls": [{"index": 0, "id": "a", "type": "function",
            "function": {"name": "f", "arguments": ""}}]})];
        let mut at = 0;
        for &c in cuts.iter().chain(std::iter::once(&args.len())) {
            let c = c.min(args.len());
            if c <= at {
                continue;
            }
            deltas.push(serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": &args[at..c]}}]}));
            at = c;
        }
        deltas.push(serde_json::json!({"tool_calls": [{"index": 1, "id": "b", "type": "function",
            "function": {"name": "g", "arguments": "{}"}}]}));
        // A custom tool call's free-form input, cut at the same places, its pieces between the
        // function call's.
        let input = format!("mail {local}@example.org: {} (card {number})", words.join(" "));
        deltas.insert(1, serde_json::json!({"tool_calls": [{"index": 2, "id": "c", "type": "custom",
            "custom": {"name": "h", "input": ""}}]}));
        let mut at = 0;
        let mut slot = 3;
        for &c in cuts.iter().chain(std::iter::once(&input.len())) {
            let c = c.min(input.len());
            if c <= at {
                continue;
            }
            let piece = serde_json::json!({"tool_calls": [{"index": 2, "custom": {"input": &input[at..c]}}]});
            deltas.insert(slot.min(deltas.len()), piece);
            slot += 2;
            at = c;
        }
        let whole = pii().text(&args).unwrap();
        let whole_input = pii().text(&input).unwrap();
        let mut f = GuardedStream::new(pii());
        let out = run_chunks(&mut f, &deltas);
        let got = tool_arguments(&out);
        prop_assert_eq!(&got[&0], &whole);
        prop_assert_eq!(&got[&1], "{}");
        prop_assert_eq!(&tool_inputs(&out)[&2], &whole_input);
        for v in &out {
            let s = v.to_string();
            prop_assert!(!s.contains(&local) && !s.contains(&number[..8]), "{}", s);
        }
    }
}
