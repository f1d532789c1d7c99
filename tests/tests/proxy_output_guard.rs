//! What an output guardrail must not let through besides the answer's text: logprobs (refused
//! when asked for, dropped when the upstream sends them unasked), tool-call arguments and
//! refusals (redacted, plain and streamed, values split across deltas included); on the way in,
//! values hidden by invisible characters or inside the history's tool calls; and embeddings
//! inputs a text guardrail cannot read (token arrays), refused.
//!
//! The mock upstream is steered per request (`"mock": {...}`): `reply`, `refusal`,
//! `tool_call_arguments` and `logprobs` (attached whether or not the request asked for them).

use gw_tests::*;
use serde_json::{json, Value};

const EMAIL: &str = "jane.roe@example.com";
/// An organization policy scanning answers for PII (see [`with_output_policy`]).
const OUT_POLICY: &str = "pii_out";

async fn embed(stack: &Stack, key: &str, policy: Option<&str>, body: &Value) -> reqwest::Response {
    let mut req = stack.http.post(format!("{}/v1/embeddings", stack.proxy)).bearer_auth(key).json(body);
    if let Some(p) = policy {
        req = req.header("x-gw-policy", p);
    }
    req.send().await.expect("embeddings request")
}

fn streamed(mut body: Value, chunk_chars: usize) -> Value {
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    body["mock"]["chunk_chars"] = json!(chunk_chars);
    body
}

/// A fresh organization with [`OUT_POLICY`]: `pii_redact` on prompts and answers. Returns its key.
async fn with_output_policy(stack: &Stack) -> String {
    let (s, key, _) = stack.org_with_key().await;
    let doc = json!({"policies": [{"name": OUT_POLICY, "guardrails": [{"type": "pii_redact", "output": true}]}]});
    json_of(stack.admin_put("/organizations/current/policy", &s.access_token, &doc).await, 200).await;
    key
}

/// The parsed chunks of an SSE body, `[DONE]` left out.
fn chunks(raw: &str) -> Vec<Value> {
    sse_data(raw)
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap_or_else(|err| panic!("chunk {e:?} is not JSON: {err}")))
        .collect()
}

/// The concatenation of the first choice's string at `pointer` (within the choice) over `chunks`.
fn joined(chunks: &[Value], pointer: &str) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).and_then(|choice| choice.pointer(pointer)).and_then(Value::as_str))
        .collect()
}

/// Asserts that `text` holds no piece of [`EMAIL`] of `len` characters or more that starts in
/// its local part or at the `@` (`jan`, `roe@exa`, `@ex`...). With `whole`, no piece of the
/// domain either (for texts that cannot contain `com` or `ple` otherwise).
fn assert_no_piece_of_the_address(text: &str, len: usize, whole: bool) {
    let at = EMAIL.find('@').expect("an address");
    let last_start = if whole { EMAIL.len() - len } else { at };
    for start in 0..=last_start {
        let piece = &EMAIL[start..start + len];
        assert!(!text.contains(piece), "{piece:?} of the address got through: {text}");
    }
}

// --- a. logprobs are refused under an output guardrail ----------------------------------------

/// A request with `extra` (log probabilities) under the output policy: 400 naming `logprobs`, and
/// the upstream never asked.
async fn refused_for_logprobs(extra: Value) {
    let stack = Stack::shared().await;
    let key = with_output_policy(&stack).await;
    let tag = unique_tag();
    let mut body = tagged_chat("hello there", &tag);
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        body[k] = v;
    }
    let resp = post_chat(&stack, &key, Some(OUT_POLICY), &body).await;
    let err = expect_openai_error(resp, 400).await;
    // Both tests below come through here: the same snapshot, twice.
    insta::allow_duplicates! {
        insta::assert_json_snapshot!(err, @r###"
        {
          "error": {
            "code": "invalid_request",
            "message": "'logprobs' is not available on requests an output guardrail applies to: token log probabilities would show the values the guardrail redacts.",
            "param": "logprobs",
            "type": "invalid_request_error"
          }
        }
        "###);
    }
    assert_eq!(stack.mock_stats_for(&tag).await["requests"], 0, "a refused request reached the upstream");
}

#[tokio::test]
async fn logprobs_are_refused_under_an_output_policy() {
    refused_for_logprobs(json!({"logprobs": true})).await;
}

#[tokio::test]
async fn top_logprobs_are_refused_under_an_output_policy() {
    refused_for_logprobs(json!({"logprobs": true, "top_logprobs": 2})).await;
}

#[tokio::test]
async fn logprobs_pass_without_a_policy() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let tag = unique_tag();
    let mut body = tagged_chat("hello there", &tag);
    body["logprobs"] = json!(true);
    let resp = post_chat(&stack, &key, None, &body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    assert_eq!(stack.mock_stats_for(&tag).await["last_body"]["logprobs"], true);
}

// --- b. logprobs the upstream sends unasked never leave --------------------------------------

fn reply_with_logprobs(tag: &str) -> Value {
    let mut body = tagged_chat("hello there", tag);
    body["mock"]["reply"] = json!(format!("Reach me at {EMAIL} today"));
    body["mock"]["logprobs"] = json!(true);
    body
}

#[tokio::test]
async fn unasked_logprobs_of_a_plain_answer_are_dropped() {
    let stack = Stack::shared().await;
    let key = with_output_policy(&stack).await;
    let resp = post_chat(&stack, &key, Some(OUT_POLICY), &reply_with_logprobs(&unique_tag())).await;
    assert_eq!(resp.status(), 200);
    let raw = resp.text().await.expect("body");
    assert!(!raw.contains("jane.roe"), "{raw}");
    let v: Value = serde_json::from_str(&raw).expect("completion JSON");
    assert_eq!(v["choices"][0]["logprobs"], Value::Null, "{raw}");
    assert_eq!(v["choices"][0]["message"]["content"], "Reach me at [EMAIL_1] today");
}

#[tokio::test]
async fn unasked_logprobs_of_a_stream_are_dropped() {
    let stack = Stack::shared().await;
    let key = with_output_policy(&stack).await;
    // One word a chunk: the address is one token of the chunk that carries it.
    let resp = post_chat(&stack, &key, Some(OUT_POLICY), &streamed(reply_with_logprobs(&unique_tag()), 0)).await;
    assert_eq!(resp.status(), 200);
    let raw = resp.text().await.expect("stream");
    assert!(!raw.contains("jane.roe"), "{raw}");
    assert_no_piece_of_the_address(&raw, 3, false);
    let chunks = chunks(&raw);
    for c in &chunks {
        for choice in c["choices"].as_array().expect("choices") {
            assert_eq!(choice["logprobs"], Value::Null, "logprobs got through: {c}");
        }
    }
    assert_eq!(joined(&chunks, "/delta/content"), "Reach me at [EMAIL_1] today");
}

// --- c. tool-call arguments ----------------------------------------------------------------

fn tool_call(tag: &str) -> Value {
    let mut body = tagged_chat("Mail the report, please", tag);
    body["tools"] = json!([{"type": "function", "function": {"name": "send_mail",
        "parameters": {"type": "object", "properties": {"email": {"type": "string"}, "city": {"type": "string"}}}}}]);
    body["mock"]["tool_call_arguments"] = json!(format!(r#"{{"email":"{EMAIL}","city":"Paris"}}"#));
    body
}

#[tokio::test]
async fn tool_call_arguments_of_a_plain_answer_are_redacted() {
    let stack = Stack::shared().await;
    let key = with_output_policy(&stack).await;
    let resp = post_chat(&stack, &key, Some(OUT_POLICY), &tool_call(&unique_tag())).await;
    assert_eq!(resp.status(), 200);
    let raw = resp.text().await.expect("body");
    assert!(!raw.contains("jane.roe"), "{raw}");
    let v: Value = serde_json::from_str(&raw).expect("completion JSON");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "send_mail");
    let args = call["function"]["arguments"].as_str().expect("arguments");
    assert!(args.contains("[EMAIL_1]") && !args.contains("jane.roe"), "{args}");
    let parsed: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("arguments {args:?} are not JSON: {e}"));
    assert_eq!(parsed, json!({"email": "[EMAIL_1]", "city": "Paris"}));
}

#[tokio::test]
async fn tool_call_arguments_split_across_stream_deltas_are_redacted() {
    let stack = Stack::shared().await;
    let key = with_output_policy(&stack).await;
    // Three characters a delta: the address arrives in seven pieces.
    let resp = post_chat(&stack, &key, Some(OUT_POLICY), &streamed(tool_call(&unique_tag()), 3)).await;
    assert_eq!(resp.status(), 200);
    let raw = resp.text().await.expect("stream");
    assert!(!raw.contains("jane.roe"), "{raw}");
    assert_no_piece_of_the_address(&raw, 3, false);
    let chunks = chunks(&raw);
    let args = joined(&chunks, "/delta/tool_calls/0/function/arguments");
    assert!(args.contains("[EMAIL_1]"), "{args}");
    assert_no_piece_of_the_address(&args, 3, true);
    let parsed: Value = serde_json::from_str(&args).unwrap_or_else(|e| panic!("arguments {args:?} are not JSON: {e}"));
    assert_eq!(parsed, json!({"email": "[EMAIL_1]", "city": "Paris"}));
    let finish: Vec<&Value> = chunks.iter().filter_map(|c| c["choices"].get(0)).map(|c| &c["finish_reason"]).collect();
    assert!(finish.contains(&&json!("tool_calls")), "no tool_calls finish: {raw}");
}

// --- d. refusals ---------------------------------------------------------------------------

fn refusal(tag: &str) -> Value {
    let mut body = tagged_chat("Mail the report, please", tag);
    body["mock"]["refusal"] = json!(format!("I cannot write to {EMAIL} for you."));
    body
}

#[tokio::test]
async fn a_plain_refusal_is_redacted() {
    let stack = Stack::shared().await;
    let key = with_output_policy(&stack).await;
    let resp = post_chat(&stack, &key, Some(OUT_POLICY), &refusal(&unique_tag())).await;
    assert_eq!(resp.status(), 200);
    let raw = resp.text().await.expect("body");
    assert!(!raw.contains("jane.roe"), "{raw}");
    let v: Value = serde_json::from_str(&raw).expect("completion JSON");
    let message = &v["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    let text = message["refusal"].as_str().expect("refusal");
    assert!(text.contains("[EMAIL_1]"), "{text}");
}

#[tokio::test]
async fn a_streamed_refusal_is_redacted() {
    let stack = Stack::shared().await;
    let key = with_output_policy(&stack).await;
    let resp = post_chat(&stack, &key, Some(OUT_POLICY), &streamed(refusal(&unique_tag()), 3)).await;
    assert_eq!(resp.status(), 200);
    let raw = resp.text().await.expect("stream");
    assert!(!raw.contains("jane.roe"), "{raw}");
    assert_no_piece_of_the_address(&raw, 3, false);
    let text = joined(&chunks(&raw), "/delta/refusal");
    assert!(text.contains("[EMAIL_1]"), "{text}");
    assert_no_piece_of_the_address(&text, 3, true);
}

// --- e. the input side -----------------------------------------------------------------------

#[tokio::test]
async fn an_address_split_by_a_zero_width_space_is_redacted_before_the_upstream() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let tag = unique_tag();
    let resp =
        post_chat(&stack, &key, Some("pii_redact"), &tagged_chat("Write to jane\u{200B}.roe@example.com today", &tag))
            .await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    assert_eq!(header(&resp, "x-gw-policy-action"), "redacted");
    let seen = stack.mock_stats_for(&tag).await;
    let sent = seen["last_body"]["messages"][0]["content"].as_str().expect("content").to_string();
    assert!(sent.contains("[EMAIL_1]"), "{sent:?}");
    let all = seen["last_body"].to_string();
    assert!(!all.contains("jane") && !all.contains("roe@example"), "{all}");
}

#[tokio::test]
async fn values_in_the_history_s_tool_calls_never_reach_the_upstream() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let tag = unique_tag();
    let body = json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "user", "content": "Mail the report to my usual address."},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": format!(r#"{{"email":"{EMAIL}"}}"#)}}]},
            {"role": "tool", "tool_call_id": "c1", "content": format!("ok, mailed {EMAIL}")},
            {"role": "user", "content": "Thanks. Anything else to do?"}
        ],
        "mock": {"tag": tag},
    });
    let resp = post_chat(&stack, &key, Some("pii_redact"), &body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    let seen = stack.mock_stats_for(&tag).await;
    assert_eq!(seen["requests"], 1);
    let all = seen["last_body"].to_string();
    assert!(!all.contains("jane.roe"), "{all}");
    let args = seen["last_body"]["messages"][1]["tool_calls"][0]["function"]["arguments"].as_str().expect("arguments");
    serde_json::from_str::<Value>(args).unwrap_or_else(|e| panic!("arguments {args:?} are not JSON any more: {e}"));
}

// --- f. embeddings a text guardrail cannot read -----------------------------------------------

#[tokio::test]
async fn token_array_embeddings_are_refused_under_pii_redact() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let tag = unique_tag();
    let body = json!({"model": "text-embedding-3-small", "input": [[1, 2, 3]], "mock": {"tag": tag}});
    let resp = embed(&stack, &key, Some("pii_redact"), &body).await;
    let err = expect_openai_error(resp, 400).await;
    insta::assert_json_snapshot!(err, @r###"
    {
      "error": {
        "code": "invalid_request",
        "message": "Token-array 'input' cannot be checked by this request's guardrails (they read text): send the input as text.",
        "param": "input",
        "type": "invalid_request_error"
      }
    }
    "###);
    assert_eq!(stack.mock_stats_for(&tag).await["requests"], 0, "a refused request reached the upstream");
}

#[tokio::test]
async fn text_embeddings_pass_under_pii_redact() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let tag = unique_tag();
    let body = json!({"model": "text-embedding-3-small", "input": ["plain words", "more words"], "mock": {"tag": tag}});
    let resp = embed(&stack, &key, Some("pii_redact"), &body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap_or_default());
    let v: Value = resp.json().await.expect("embeddings JSON");
    assert_eq!(v["data"].as_array().map(Vec::len), Some(2));
    assert_eq!(stack.mock_stats_for(&tag).await["requests"], 1);
}

// --- the mock does what these tests rely on ---------------------------------------------------

/// Straight to the mock, without gw: the knobs above really put the values where the tests
/// look for them, so a passing test means gw removed them.
#[tokio::test]
async fn the_mock_sends_what_these_tests_guard_against() {
    let stack = Stack::shared().await;
    let url = format!("{}/v1/chat/completions", stack.mock);
    let ask = |body: Value| {
        let (http, url) = (stack.http.clone(), url.clone());
        async move {
            let resp = http.post(url).json(&body).send().await.expect("mock request");
            assert_eq!(resp.status(), 200);
            resp.text().await.expect("mock body")
        }
    };

    let v: Value = serde_json::from_str(&ask(reply_with_logprobs(&unique_tag())).await).expect("JSON");
    let tokens = v["choices"][0]["logprobs"]["content"].as_array().expect("logprobs content");
    assert!(tokens.iter().any(|t| t["token"] == format!(" {EMAIL}")), "{v}");
    let raw = ask(streamed(reply_with_logprobs(&unique_tag()), 0)).await;
    let lp = chunks(&raw).iter().filter_map(|c| c["choices"][0]["logprobs"]["content"][0]["token"].as_str()).count();
    assert!(lp >= 5 && raw.contains(EMAIL), "{raw}");

    let v: Value = serde_json::from_str(&ask(tool_call(&unique_tag())).await).expect("JSON");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "send_mail");
    assert!(v["choices"][0]["message"]["tool_calls"][0]["id"].as_str().is_some_and(|id| id.starts_with("call_mock")));
    let raw = ask(streamed(tool_call(&unique_tag()), 3)).await;
    let args = joined(&chunks(&raw), "/delta/tool_calls/0/function/arguments");
    assert_eq!(args, format!(r#"{{"email":"{EMAIL}","city":"Paris"}}"#));
    assert!(!raw.contains(EMAIL), "three characters a delta, the address is split: {raw}");

    let v: Value = serde_json::from_str(&ask(refusal(&unique_tag())).await).expect("JSON");
    assert_eq!(v["choices"][0]["message"]["refusal"], format!("I cannot write to {EMAIL} for you."));
    let raw = ask(streamed(refusal(&unique_tag()), 3)).await;
    assert_eq!(joined(&chunks(&raw), "/delta/refusal"), format!("I cannot write to {EMAIL} for you."));
}
