//! `POST /v1/messages` and `/v1/messages/count_tokens` (Anthropic's Messages API) on the shared
//! stack: answered in the Messages shapes (the `message` object, the SSE event sequence, the
//! error object) whatever serves the model: an OpenAI-compatible deployment (`gpt-4o-mini`) and
//! an Anthropic one (`claude-test`), each the mock upstream in its own dialect. The key in
//! `x-api-key` or `Authorization`; tool uses streamed as `input_json_delta` fragments that
//! reassemble exactly; a tool result answered; the audit row and cost as for chat. To the
//! Anthropic deployment a request passes through as the client sent it (its model aside) and the
//! answer comes back as the deployment sent it, unless a guardrail must read or change either.

use gw_tests::{
    assert_no_piece_of_tool_email, db, org_with_output_pii_policy, request_id, tool_calling_models, Stack,
    StackOptions, OUTPUT_PII_POLICY,
};
use serde_json::{json, Value};

const MODELS: [&str; 2] = ["gpt-4o-mini", "claude-test"];

/// The model an answer names: gw's translation names the model asked for; a passed-through
/// answer (the Anthropic deployment's) names the deployment's model.
fn answering(model: &str) -> &str {
    match model {
        "claude-test" => "claude-sonnet-4-5",
        m => m,
    }
}

async fn messages(stack: &Stack, key: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/messages", stack.proxy))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .expect("messages request")
}

/// A Messages request under one of the organization's policies (`x-gw-policy`).
async fn messages_under(stack: &Stack, key: &str, policy: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/messages", stack.proxy))
        .header("x-api-key", key)
        .header("x-gw-policy", policy)
        .json(&body)
        .send()
        .await
        .expect("messages request")
}

/// The events of a Messages stream, as (event name, data).
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(d).expect("an event's data is JSON"));
                }
            }
            Some((name?, data?))
        })
        .collect()
}

fn text_of(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "text_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_message_comes_back_in_the_messages_shape_from_either_kind_of_deployment() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    for model in MODELS {
        let body = json!({"model": model, "max_tokens": 64, "system": "Be brief.",
                          "messages": [{"role": "user", "content": "Say hello"}]});
        let r = messages(&stack, &key, body).await;
        assert_eq!(r.status(), 200, "{model}");
        let id = request_id(&r);
        assert!(r.headers().get("x-gw-cost-usd").is_some());
        let m: Value = r.json().await.unwrap();
        assert_eq!(m["type"], "message");
        assert_eq!(m["role"], "assistant");
        assert_eq!(m["model"], answering(model));
        if model == "gpt-4o-mini" {
            assert_eq!(m["id"], format!("msg_{}", id.simple()));
        }
        assert_eq!(m["stop_reason"], "end_turn");
        assert!(m["stop_sequence"].is_null());
        assert_eq!(m["content"][0]["type"], "text");
        assert!(!m["content"][0]["text"].as_str().unwrap().is_empty());
        for field in ["input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"] {
            assert!(m["usage"][field].is_u64(), "{model}: usage.{field}");
        }
        assert!(m["usage"]["input_tokens"].as_u64().unwrap() > 0);
        let row = db::audit_row(s.org_id, id).await;
        assert_eq!(row.endpoint, "/v1/messages");
        assert!(row.cost_usd > rust_decimal::Decimal::ZERO, "{model}: a message reaching an upstream is billed");
        assert_eq!(row.prompt_tokens as u64, m["usage"]["input_tokens"].as_u64().unwrap());
    }
}

#[tokio::test]
async fn a_stream_is_the_messages_event_sequence_and_says_what_the_plain_answer_says() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    for model in MODELS {
        let ask = |stream: bool| {
            json!({"model": model, "max_tokens": 64, "stream": stream,
                   "messages": [{"role": "user", "content": "Tell me about streams"}]})
        };
        let plain: Value = messages(&stack, &key, ask(false)).await.json().await.unwrap();
        let r = messages(&stack, &key, ask(true)).await;
        assert_eq!(r.status(), 200);
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
        let ev = events(&r.text().await.unwrap());
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"message_start"), "{model}: {names:?}");
        assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"], "{model}");
        assert_eq!(names[1], "content_block_start");
        assert!(names.contains(&"content_block_stop"));
        assert!(ev.iter().all(|(n, d)| d["type"] == n.as_str()), "every event's type is its name");
        assert_eq!(ev[0].1["message"]["model"], answering(model));
        assert_eq!(text_of(&ev), plain["content"][0]["text"].as_str().unwrap(), "{model}");
        let delta = &ev[ev.len() - 2].1;
        assert_eq!(delta["delta"]["stop_reason"], "end_turn");
        assert_eq!(delta["usage"]["output_tokens"], plain["usage"]["output_tokens"], "{model}");
        // Anthropic says the input tokens in `message_start` (gw's re-framing repeats them in the
        // last `message_delta`).
        let input = match &delta["usage"]["input_tokens"] {
            Value::Null => &ev[0].1["message"]["usage"]["input_tokens"],
            n => n,
        };
        assert_eq!(input, &plain["usage"]["input_tokens"], "{model}");
    }
}

#[tokio::test]
async fn a_streamed_tool_use_reassembles_exactly_and_its_result_is_answered() {
    let stack = Stack::start_with(StackOptions { extra_config: tool_calling_models(), ..Default::default() }).await;
    let (_s, key, _) = stack.org_with_key().await;
    let tools = json!([{"name": "get_weather", "description": "The weather in a city",
                        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    // The calling model, and the one the result goes back to.
    for (model, answering) in [("gpt-tools", "gpt-4o-mini"), ("claude-test", "claude-test")] {
        let ask = json!({"model": model, "max_tokens": 64, "stream": true, "tools": tools,
                         "messages": [{"role": "user", "content": "What is the weather in Paris?"}]});
        let r = messages(&stack, &key, ask).await;
        assert_eq!(r.status(), 200);
        let ev = events(&r.text().await.unwrap());
        let start = ev
            .iter()
            .find(|(n, d)| n == "content_block_start" && d["content_block"]["type"] == "tool_use")
            .unwrap_or_else(|| panic!("{model}: no tool_use block in {ev:?}"));
        let block = &start.1["content_block"];
        assert_eq!(block["name"], "get_weather");
        assert_eq!(block["input"], json!({}));
        let index = &start.1["index"];
        let json_text: String = ev
            .iter()
            .filter(|(_, d)| d["index"] == *index && d["delta"]["type"] == "input_json_delta")
            .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(serde_json::from_str::<Value>(&json_text).unwrap(), json!({"city": "Paris"}), "{model}");
        assert_eq!(ev[ev.len() - 2].1["delta"]["stop_reason"], "tool_use");

        // The result goes back as a tool_result block.
        let id = block["id"].as_str().unwrap();
        let follow = json!({"model": answering, "max_tokens": 64, "tools": tools, "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "18C and sunny"}]}
        ]});
        let r = messages(&stack, &key, follow).await;
        assert_eq!(r.status(), 200);
        let m: Value = r.json().await.unwrap();
        assert_eq!(m["stop_reason"], "end_turn");
        if answering == "claude-test" {
            // The Anthropic mock answers a tool result by quoting it: it arrived as one.
            assert_eq!(m["content"][0]["text"], "The tool said: 18C and sunny");
        }
    }
}

#[tokio::test]
async fn count_tokens_estimates_the_prompt_of_a_deployment_that_is_not_anthropic() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages/count_tokens", stack.proxy))
        .bearer_auth(&key)
        .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x".repeat(400)}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    // The message's 415 bytes (its text and its field names and role) at four a token, plus the
    // framing of one message and the reply's priming: gw's limits estimate (docs/limits.md).
    assert_eq!(body, json!({"input_tokens": 104 + 4 + 3}));
}

#[tokio::test]
async fn count_tokens_of_an_anthropic_deployment_is_anthropic_s_own_count() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    let tag = format!("count-{}", uuid::Uuid::new_v4().simple());
    let prompt = json!([{"role": "user", "content": "How many tokens are in this short question of mine?"}]);
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages/count_tokens", stack.proxy))
        .header("x-api-key", &key)
        .json(&json!({"model": "claude-test", "messages": prompt, "mock": {"tag": tag}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let counted: Value = r.json().await.unwrap();
    let seen = mock_seen(&stack, &tag).await;
    assert_eq!(seen["requests"], 1, "the count was asked of the deployment");
    assert_eq!(seen["last_body"]["model"], "claude-sonnet-4-5");
    // What a message with that prompt is billed for, as the deployment counts it.
    let m: Value = messages(&stack, &key, json!({"model": "claude-test", "max_tokens": 16, "messages": prompt}))
        .await
        .json()
        .await
        .unwrap();
    let billed = m["usage"]["input_tokens"].as_u64().unwrap() + m["usage"]["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(counted, json!({"input_tokens": billed}));
}

/// An error's status and body, its `request_id` checked and taken out.
async fn error(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let id = request_id(&r);
    let mut body: Value = r.json().await.unwrap();
    assert_eq!(body["request_id"], id.to_string());
    body.as_object_mut().unwrap().remove("request_id");
    (status, body)
}

#[tokio::test]
async fn a_get_is_refused_in_the_messages_shape() {
    let stack = Stack::shared().await;
    let r = reqwest::get(format!("{}/v1/messages", stack.proxy)).await.unwrap();
    assert_eq!(r.headers()["allow"], "POST");
    insta::assert_json_snapshot!(error(r).await, @r#"
    [
      405,
      {
        "error": {
          "message": "Method GET is not allowed on /v1/messages; use POST.",
          "type": "not_found_error"
        },
        "type": "error"
      }
    ]
    "#);
}

#[tokio::test]
async fn an_oversized_header_is_refused_in_the_messages_shape() {
    let stack = Stack::shared().await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages/count_tokens", stack.proxy))
        .header("x-big", "x".repeat(20_000))
        .json(&json!({"model": "claude-test", "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    insta::assert_json_snapshot!(error(r).await, @r#"
    [
      431,
      {
        "error": {
          "message": "Request header 'x-big' is larger than the 8192-byte limit.",
          "type": "invalid_request_error"
        },
        "type": "error"
      }
    ]
    "#);
}

#[tokio::test]
async fn a_missing_key_is_an_authentication_error() {
    let stack = Stack::shared().await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages", stack.proxy))
        .json(&json!({"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    insta::assert_json_snapshot!(error(r).await, @r#"
    [
      401,
      {
        "error": {
          "message": "You didn't provide an API key. Send it as 'x-api-key: <API_KEY>' or 'Authorization: Bearer <API_KEY>'.",
          "type": "authentication_error"
        },
        "type": "error"
      }
    ]
    "#);
}

#[tokio::test]
async fn a_message_without_max_tokens_is_an_invalid_request() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    let r =
        messages(&stack, &key, json!({"model": "claude-test", "messages": [{"role": "user", "content": "x"}]})).await;
    insta::assert_json_snapshot!(error(r).await, @r#"
    [
      400,
      {
        "error": {
          "message": "max_tokens: Field required",
          "type": "invalid_request_error"
        },
        "type": "error"
      }
    ]
    "#);
}

#[tokio::test]
async fn an_unknown_model_is_not_found() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    let body = json!({"model": "claude-nope", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]});
    let r = messages(&stack, &key, body).await;
    insta::assert_json_snapshot!(error(r).await, @r#"
    [
      404,
      {
        "error": {
          "message": "The model 'claude-nope' does not exist or you do not have access to it.",
          "type": "not_found_error"
        },
        "type": "error"
      }
    ]
    "#);
}

#[tokio::test]
async fn a_key_for_chat_only_may_not_send_messages() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let created: Value =
        stack.create_key(&s, json!({"name": "chat only", "permissions": ["proxy:chat"]})).await.json().await.unwrap();
    let key = created["key"].as_str().unwrap();
    let body = json!({"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]});
    let (status, body) = error(messages(&stack, key, body).await).await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["type"], "permission_error");
}

#[tokio::test]
async fn under_pii_redact_a_streamed_tool_use_argument_never_reaches_the_client_raw() {
    let stack = Stack::start_with(StackOptions { extra_config: tool_calling_models(), ..Default::default() }).await;
    let key = org_with_output_pii_policy(&stack).await;
    let body = json!({"model": "gpt-pii-tools", "max_tokens": 64, "stream": true,
        "tools": [{"name": "send_mail", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "Mail the report, please"}]});
    let r = messages_under(&stack, &key, OUTPUT_PII_POLICY, body).await;
    assert_eq!(r.status(), 200);
    let raw = r.text().await.unwrap();
    assert_no_piece_of_tool_email(&raw);
    let ev = events(&raw);
    let input: String = ev
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&input).unwrap(), json!({"email": "[EMAIL_1]", "city": "Paris"}));
}

/// The mock counts a request under the tag its body's `mock` knobs name: a field gw's translation
/// would drop, so only a passed-through body carries it.
async fn mock_seen(stack: &Stack, tag: &str) -> Value {
    reqwest::get(format!("{}/_mock/stats?tag={tag}", stack.mock)).await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn to_an_anthropic_deployment_the_request_and_answer_pass_through_unchanged() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    for stream in [false, true] {
        let tag = format!("passthrough-{}", uuid::Uuid::new_v4().simple());
        let body = json!({"model": "claude-test", "max_tokens": 64, "stream": stream, "top_k": 7,
            "metadata": {"user_id": "u-1"}, "mock": {"tag": tag},
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "Say hello"}]});
        let r = reqwest::Client::new()
            .post(format!("{}/v1/messages", stack.proxy))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .header("anthropic-beta", "prompt-caching-2024-07-31")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let id = request_id(&r);
        let text = r.text().await.unwrap();
        let seen = mock_seen(&stack, &tag).await;
        assert_eq!(seen["requests"], 1, "the body reached the deployment with its own fields");
        let mut expected = body.clone();
        expected["model"] = json!("claude-sonnet-4-5");
        assert_eq!(seen["last_body"], expected, "only the model changed");
        if stream {
            let ev = events(&text);
            let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
            // The deployment's own events, its `ping` among them (gw's re-framing sends none).
            assert!(names.contains(&"ping"), "{names:?}");
            assert_eq!(names.last(), Some(&"message_stop"));
            assert_ne!(ev[0].1["message"]["id"], format!("msg_{}", id.simple()));
            assert!(!text.contains("[DONE]"));
        } else {
            let m: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(m["model"], "claude-sonnet-4-5");
            assert_ne!(m["id"], format!("msg_{}", id.simple()), "the deployment's own message id");
        }
    }
}

#[tokio::test]
async fn with_an_output_guardrail_the_anthropic_answer_is_translated_to_be_read() {
    let stack = Stack::shared().await;
    let key = org_with_output_pii_policy(&stack).await;
    let tag = format!("translated-{}", uuid::Uuid::new_v4().simple());
    let body = json!({"model": "claude-test", "max_tokens": 64, "mock": {"tag": tag},
        "messages": [{"role": "user", "content": "Say hello"}]});
    let r = messages_under(&stack, &key, OUTPUT_PII_POLICY, body).await;
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let m: Value = r.json().await.unwrap();
    assert_eq!(m["id"], format!("msg_{}", id.simple()), "gw's own message, the guardrails' reading");
    assert_eq!(m["model"], "claude-test");
    assert_eq!(mock_seen(&stack, &tag).await["requests"], 0, "the translation carries no unknown field");
}

/// An Anthropic deployment that always fails (503) before an OpenAI-compatible one, and a model
/// named as its Anthropic deployment names it.
const PASSTHROUGH_MODELS: &str = r#"
[[providers]]
name = "anthropic-down"
kind = "anthropic"
base_url = "{mock}/k/status=503/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
[[models]]
name = "claude-then-gpt"
deployments = [{ provider = "anthropic-down", model = "claude-sonnet-4-5" }, { provider = "upstream", model = "gpt-4o-mini-2024-07-18" }]
[[models]]
name = "claude-sonnet-4-5"
deployments = [{ provider = "anthropic", model = "claude-sonnet-4-5" }]
"#;

#[tokio::test]
async fn passthrough_edges_byte_for_byte_a_fallback_a_policy_and_a_count_under_policy() {
    let stack = Stack::start_with(StackOptions { extra_config: PASSTHROUGH_MODELS.into(), ..Default::default() }).await;
    let (s, key, _) = stack.org_with_key().await;
    // A policy requests may name (set before the proxy first sees the organization, so no
    // request below meets a proxy that has not learnt of it yet).
    let doc = json!({"policies": [{"name": "in-pii", "guardrails": [{"type": "pii_redact"}]}]});
    gw_tests::json_of(stack.admin_put("/organizations/current/policy", &s.access_token, &doc).await, 200).await;
    let post = |path: &'static str, body: String, policy: Option<&'static str>| {
        let mut r = reqwest::Client::new()
            .post(format!("{}{path}", stack.proxy))
            .header("x-api-key", &key)
            .header("content-type", "application/json")
            .body(body);
        if let Some(p) = policy {
            r = r.header("x-gw-policy", p);
        }
        r.send()
    };

    // The model the deployment serves: the body arrives as the client wrote it, spacing and order.
    let tag = format!("bytes-{}", uuid::Uuid::new_v4().simple());
    let written = format!(
        r#"{{ "messages":[{{"role":"user","content":"Say hello"}}],  "model":"claude-sonnet-4-5","max_tokens":16, "mock":{{"tag":"{tag}"}} }}"#
    );
    let r = post("/v1/messages", written.clone(), None).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(mock_seen(&stack, &tag).await["last_raw"], written.as_str(), "byte for byte");

    // The Anthropic deployment fails, the OpenAI-compatible one answers: gw's translation, whole.
    for stream in [false, true] {
        let body = json!({"model": "claude-then-gpt", "max_tokens": 32, "stream": stream,
                          "messages": [{"role": "user", "content": "Tell me about fallbacks"}]});
        let r = post("/v1/messages", body.to_string(), None).await.unwrap();
        assert_eq!(r.status(), 200, "stream {stream}");
        assert_eq!(r.headers()["x-gw-provider"], "upstream");
        let id = request_id(&r);
        let text = r.text().await.unwrap();
        if stream {
            let ev = events(&text);
            let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
            assert_eq!(names.last(), Some(&"message_stop"));
            assert!(!names.contains(&"ping"), "gw's own events, none of the failed deployment's");
            assert_eq!(ev[0].1["message"]["id"], format!("msg_{}", id.simple()));
            assert!(!text_of(&ev).is_empty());
        } else {
            let m: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(m["id"], format!("msg_{}", id.simple()));
            assert_eq!(m["model"], "claude-then-gpt");
        }
    }

    // Under an input policy the request is translated (the guardrails read what goes upstream),
    // and a count is gw's estimate (no prompt leaves for a count the guardrails never read).
    let tag = format!("policy-{}", uuid::Uuid::new_v4().simple());
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 16, "mock": {"tag": tag},
                      "messages": [{"role": "user", "content": "Mail jane.doe@example.com a hello"}]});
    let r = post("/v1/messages", body.to_string(), Some("in-pii")).await.unwrap();
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let m: Value = r.json().await.unwrap();
    assert_eq!(m["id"], format!("msg_{}", id.simple()), "translated");
    assert_eq!(mock_seen(&stack, &tag).await["requests"], 0, "the client's own body never went upstream");
    let count = json!({"model": "claude-sonnet-4-5", "mock": {"tag": tag},
                       "messages": [{"role": "user", "content": "jane.doe@example.com"}]});
    let r = post("/v1/messages/count_tokens", count.to_string(), Some("in-pii")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.json::<Value>().await.unwrap()["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(mock_seen(&stack, &tag).await["requests"], 0, "the count was not asked upstream");
}
