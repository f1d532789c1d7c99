//! The stream guard over the fields beside `content`.

use super::*;

#[test]
fn tool_call_arguments_are_held_and_redacted_per_call() {
    let mut f = GuardedStream::new(pii());
    let call = |k: u64, args: &str| serde_json::json!({"tool_calls": [{"index": k, "function": {"arguments": args}}]});
    let out = run_chunks(
        &mut f,
        &[
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "a", "type": "function",
                "function": {"name": "mail", "arguments": ""}}]}),
            call(0, "{\"to\":\"jane.r"),
            call(0, "oe@example.com\"}"),
            serde_json::json!({"tool_calls": [{"index": 1, "id": "b", "type": "function",
                "function": {"name": "call", "arguments": "{\"n\":\"+1 415"}}]}),
            call(1, " 555 2671\"}"),
        ],
    );
    let args = tool_arguments(&out);
    assert_eq!(args[&0], "{\"to\":\"[EMAIL_1]\"}");
    assert_eq!(args[&1], "{\"n\":\"[PHONE_1]\"}");
    for v in &out {
        let s = v.to_string();
        assert!(!s.contains("jane") && !s.contains("2671"), "{s}");
    }
    assert_eq!(out[0]["choices"][0]["delta"]["tool_calls"][0]["id"], "a");
    assert_eq!(out[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "mail");
    // Held arguments leave with the finishing chunk, as entries of their own.
    let finishing = out.iter().find(|v| v["choices"][0]["finish_reason"] == "stop").unwrap();
    let calls = finishing["choices"][0]["delta"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.iter().map(|c| c["index"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(out.last().unwrap()["usage"]["total_tokens"], 3);
}

#[test]
fn reasoning_is_held_and_redacted_like_content() {
    // DeepSeek and vLLM name it `reasoning_content`, OpenRouter `reasoning`; the answer follows.
    for key in ["reasoning_content", "reasoning"] {
        let mut f = GuardedStream::new(pii());
        let out = run_chunks(
            &mut f,
            &[
                serde_json::json!({"role": "assistant", "content": null, key: ""}),
                serde_json::json!({key: "Let me think about what the user asked for here, step by step. ",
                    "content": null}),
                serde_json::json!({key: "The user wrote from jane.r", "content": null}),
                serde_json::json!({key: "oe@example.com and gave +1 415"}),
                serde_json::json!({key: " 555 2671 as the"}),
                serde_json::json!({key: " number.\n", "content": null}),
                serde_json::json!({"content": "I will mail jane.roe@exa"}),
                serde_json::json!({"content": "mple.com now."}),
            ],
        );
        assert_eq!(
            delta_text(&out, &[key]),
            "Let me think about what the user asked for here, step by step. The user wrote from [EMAIL_1] and gave \
             [PHONE_1] as the number.\n"
        );
        // Some of it left before the end, cut where no value could be.
        let early = out.iter().take_while(|v| v["choices"][0]["finish_reason"] != "stop");
        assert!(early.filter_map(|v| v["choices"][0]["delta"][key].as_str()).any(|s| !s.is_empty()), "{key}");
        assert_eq!(delta_text(&out, &["content"]), "I will mail [EMAIL_1] now.");
        for v in &out {
            let s = v.to_string();
            assert!(!s.contains("jane") && !s.contains("roe@") && !s.contains("2671"), "{key}: {s}");
        }
        // The held rest leaves with the finishing chunk, before the usage chunk.
        let finishing = out.iter().find(|v| v["choices"][0]["finish_reason"] == "stop").unwrap();
        assert!(finishing["choices"][0]["delta"][key].as_str().is_some_and(|s| s.ends_with("number.\n")), "{key}");
        assert_eq!(out.last().unwrap()["usage"]["total_tokens"], 3);
        // Two e-mail values (the same address twice, one placeholder), one phone number.
        assert_eq!(f.decisions()[0].entities, vec![("EMAIL".to_string(), 2), ("PHONE".to_string(), 1)]);
    }

    // Without a finishing chunk: the held reasoning goes out before the usage chunk, or at finish.
    for usage in [true, false] {
        let mut f = GuardedStream::new(pii());
        let mut out = Vec::new();
        let c = |delta: serde_json::Value| {
            serde_json::json!({"id": "x", "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
        };
        f.chunk(c(serde_json::json!({"reasoning_content": "ask b@exa"})), &mut out).unwrap();
        f.chunk(c(serde_json::json!({"reasoning_content": "mple.com"})), &mut out).unwrap();
        if usage {
            f.chunk(serde_json::json!({"id": "x", "choices": [], "usage": {"total_tokens": 3}}), &mut out).unwrap();
        }
        f.finish(&mut out).unwrap();
        assert_eq!(delta_text(&out, &["reasoning_content"]), "ask [EMAIL_1]");
        let flushed = out.iter().rev().find(|v| v["choices"][0]["delta"]["reasoning_content"].is_string()).unwrap();
        assert_eq!(flushed["id"], "x");
        assert_eq!(flushed["model"], "m");
        if usage {
            assert_eq!(out.last().unwrap()["usage"]["total_tokens"], 3);
        }
        assert!(out.iter().all(|v| !v.to_string().contains("b@exa")));
    }
}

#[test]
fn custom_tool_call_input_is_held_and_redacted_per_call() {
    let mut f = GuardedStream::new(pii());
    let input = |k: u64, text: &str| serde_json::json!({"tool_calls": [{"index": k, "custom": {"input": text}}]});
    let out = run_chunks(
        &mut f,
        &[
            serde_json::json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "a", "type": "custom",
                "custom": {"name": "mail", "input": ""}}]}),
            input(0, "Dear team, please forward the quarterly figures and the notes below to the board; "),
            input(0, "send to jane.r"),
            input(0, "oe@example.com the card 4111 "),
            serde_json::json!({"tool_calls": [{"index": 1, "id": "b", "type": "function",
                "function": {"name": "call", "arguments": "{\"n\":\"+1 415"}}]}),
            input(0, "1111 1111 1111"),
            serde_json::json!({"tool_calls": [{"index": 1, "function": {"arguments": " 555 2671\"}"}}]}),
            serde_json::json!({"tool_calls": [{"index": 2, "id": "c", "type": "custom",
                "custom": {"name": "note", "input": "call +1 415 555 2671"}}]}),
        ],
    );
    let inputs = tool_inputs(&out);
    assert_eq!(
        inputs[&0],
        "Dear team, please forward the quarterly figures and the notes below to the board; send to [EMAIL_1] the \
         card [CREDIT_CARD_1]"
    );
    assert_eq!(inputs[&2], "call [PHONE_1]");
    assert!(!inputs.contains_key(&1));
    assert_eq!(tool_arguments(&out)[&1], "{\"n\":\"[PHONE_1]\"}");
    for v in &out {
        let s = v.to_string();
        assert!(!s.contains("jane") && !s.contains("4111") && !s.contains("2671"), "{s}");
    }
    let first = &out[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(
        (&first["id"], &first["type"], &first["custom"]["name"]),
        (&"a".into(), &"custom".into(), &"mail".into())
    );
    // Held inputs leave with the finishing chunk, each call as an entry of its own.
    let finishing = out.iter().find(|v| v["choices"][0]["finish_reason"] == "stop").unwrap();
    let calls = finishing["choices"][0]["delta"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.iter().map(|c| c["index"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(calls[0].as_object().unwrap().keys().eq(["custom", "index"]), "{}", calls[0]);
    assert!(calls[2].as_object().unwrap().keys().eq(["custom", "index"]), "{}", calls[2]);
    assert_eq!(calls[2]["custom"]["input"], "call [PHONE_1]");
}

#[test]
fn a_held_custom_input_joins_the_finishing_chunks_own_entry() {
    let mut f = GuardedStream::new(pii());
    let mut out = Vec::new();
    let c = |delta: serde_json::Value, finish: Option<&str>| {
        serde_json::json!({"choices": [{"index": 0, "delta": delta,
            "finish_reason": finish}]})
    };
    f.chunk(
        c(serde_json::json!({"tool_calls": [{"index": 3, "type": "custom", "custom": {"input": "to a@exa"}}]}), None),
        &mut out,
    )
    .unwrap();
    // The finishing chunk carries the last piece itself: the held rest goes after it, in one entry.
    f.chunk(
        c(serde_json::json!({"tool_calls": [{"index": 3, "custom": {"input": "mple.com"}}]}), Some("tool_calls")),
        &mut out,
    )
    .unwrap();
    f.finish(&mut out).unwrap();
    assert_eq!(tool_inputs(&out)[&3], "to [EMAIL_1]");
    let last = &out.last().unwrap()["choices"][0]["delta"]["tool_calls"];
    assert_eq!(*last, serde_json::json!([{"index": 3, "custom": {"input": "to [EMAIL_1]"}}]));
}

#[test]
fn a_block_in_the_reasoning_or_a_custom_input_stops_the_stream() {
    let deltas: [fn(&str) -> serde_json::Value; 3] = [
        |t| serde_json::json!({"reasoning_content": t}),
        |t| serde_json::json!({"reasoning": t}),
        |t| serde_json::json!({"tool_calls": [{"index": 0, "custom": {"input": t}}]}),
    ];
    for delta in deltas {
        let g = guard(
            serde_json::json!({"policies": [{"name": "nokeys", "guardrails": [{"type": "pii_redact",
                "entities": ["secret"], "action": "block"}]}]}),
            "nokeys",
        );
        let mut f = GuardedStream::new(g);
        let mut out = Vec::new();
        let c = |d: serde_json::Value| serde_json::json!({"choices": [{"index": 0, "delta": d}]});
        f.chunk(c(delta("the key is AKIAIOSF")), &mut out).unwrap();
        let err = f.chunk(c(delta("ODNN7EXAMPLE ok")), &mut out).unwrap_err();
        assert_eq!(err.policy, "nokeys");
        assert!(out.iter().all(|v| !v.to_string().contains("AKIA")), "{out:?}");
    }
}

#[test]
fn refusal_function_call_and_transcript_are_guarded() {
    let mut f = GuardedStream::new(pii());
    let mut out = Vec::new();
    let c = |delta: serde_json::Value| {
        serde_json::json!({"id": "x", "choices": [{"index": 0, "delta": delta,
            "logprobs": {"content": [{"token": "a@", "logprob": -1.0, "bytes": [97, 64], "top_logprobs": []}]},
            "finish_reason": null}]})
    };
    f.chunk(c(serde_json::json!({"refusal": "I will not mail a@exa"})), &mut out).unwrap();
    f.chunk(c(serde_json::json!({"refusal": "mple.com, sorry"})), &mut out).unwrap();
    f.chunk(c(serde_json::json!({"function_call": {"name": "f", "arguments": "{\"p\":\"+1 415 555"}})), &mut out)
        .unwrap();
    f.chunk(c(serde_json::json!({"audio": {"id": "au", "transcript": "card 4111 1111 "}})), &mut out).unwrap();
    f.chunk(c(serde_json::json!({"audio": {"data": "AAAA", "transcript": "1111 1111 thanks"}})), &mut out).unwrap();
    f.chunk(c(serde_json::json!({"function_call": {"arguments": " 2671\"}"}})), &mut out).unwrap();
    f.finish(&mut out).unwrap();
    let joined = |path: &[&str]| delta_text(&out, path);
    assert_eq!(joined(&["refusal"]), "I will not mail [EMAIL_1], sorry");
    assert_eq!(joined(&["function_call", "arguments"]), "{\"p\":\"[PHONE_1]\"}");
    assert_eq!(joined(&["audio", "transcript"]), "card [CREDIT_CARD_1] thanks");
    assert!(out.iter().all(|v| v["choices"][0]["logprobs"].is_null()), "log probabilities spell values out");
    assert!(out.iter().any(|v| v["choices"][0]["delta"]["audio"]["data"] == "AAAA"));
}

#[test]
fn a_guard_that_only_restores_keeps_logprobs() {
    let doc = serde_json::json!({"policies": [{"name": "r", "guardrails": [{"type": "pii_redact", "restore": true,
        "output": false}]}]});
    let d: OrgPolicy = serde_json::from_value(doc).unwrap();
    let ps = PolicySet::compile(1, &d).resolve(TeamPolicies::NONE, Some("r")).unwrap();
    let mut vault = Vault::new();
    let mut t = "I am a@example.com".to_string();
    let facts = crate::policy::engine::RequestFacts { model: "m", prompt_tokens: 1 };
    crate::policy::engine::run_input(&ps, &mut [Segment { user: true, text: &mut t }], &facts, &mut vault);
    let g = OutputGuard::new(&ps, vault).unwrap();
    assert!(!g.scans());
    let mut f = GuardedStream::new(g);
    let mut out = Vec::new();
    let lp = serde_json::json!({"content": [{"token": "Hi", "logprob": -1.0, "bytes": null, "top_logprobs": []}]});
    f.chunk(
        serde_json::json!({"choices": [{"index": 0, "delta": {"content": "Hi [EMAIL_1]"}, "logprobs": lp}]}),
        &mut out,
    )
    .unwrap();
    f.finish(&mut out).unwrap();
    assert_eq!(out[0]["choices"][0]["logprobs"], lp);
    let text: String = out.iter().filter_map(|v| v["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "Hi a@example.com");
}
