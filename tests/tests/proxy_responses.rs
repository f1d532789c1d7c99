//! `POST /v1/responses` (OpenAI's Responses API, stateless): answered as a `response` object and
//! the Responses event sequence whatever serves the model: an OpenAI-compatible deployment and an
//! Anthropic one, each the mock upstream in its own dialect. Function calls streamed as argument
//! deltas that reassemble exactly, and their outputs answered; what needs stored state refused by
//! name; the audit row and cost as for chat.

use gw_tests::{
    assert_no_piece_of_tool_email, db, expect_openai_error, org_with_output_pii_policy, request_id,
    tool_calling_models, Stack, StackOptions, OUTPUT_PII_POLICY,
};
use serde_json::{json, Value};

const MODELS: [&str; 2] = ["gpt-4o-mini", "claude-test"];

async fn responses(stack: &Stack, key: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/responses", stack.proxy))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("responses request")
}

/// The events of a Responses stream, each checked: its `event:` name is its `type`, and the
/// sequence numbers count up from 0.
fn events(text: &str) -> Vec<Value> {
    let ev: Vec<Value> = text
        .split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data: Option<Value> = None;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(d).expect("an event's data is JSON"));
                }
            }
            let data = data?;
            assert_eq!(data["type"], name?.as_str());
            Some(data)
        })
        .collect();
    for (n, e) in ev.iter().enumerate() {
        assert_eq!(e["sequence_number"], n as u64, "{e}");
    }
    ev
}

#[tokio::test]
async fn a_response_comes_back_from_either_kind_of_deployment() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    for model in MODELS {
        let body = json!({"model": model, "instructions": "Be brief.", "input": "Say hello", "max_output_tokens": 64});
        let r = responses(&stack, &key, body).await;
        assert_eq!(r.status(), 200, "{model}");
        let id = request_id(&r);
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["object"], "response");
        assert_eq!(b["id"], format!("resp_{}", id.simple()));
        assert_eq!(b["status"], "completed");
        assert_eq!(b["model"], model);
        assert_eq!(b["instructions"], "Be brief.");
        assert_eq!(b["max_output_tokens"], 64);
        assert_eq!(b["store"], false);
        let item = &b["output"][0];
        assert_eq!(item["type"], "message");
        assert_eq!(item["role"], "assistant");
        assert_eq!(item["content"][0]["type"], "output_text");
        assert!(!item["content"][0]["text"].as_str().unwrap().is_empty());
        let u = &b["usage"];
        assert_eq!(
            u["total_tokens"].as_u64().unwrap(),
            u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap()
        );
        let row = db::audit_row(s.org_id, id).await;
        assert_eq!(row.endpoint, "/v1/responses");
        assert!(row.cost_usd > rust_decimal::Decimal::ZERO, "{model}: a response reaching an upstream is billed");
        assert_eq!(row.prompt_tokens as u64, u["input_tokens"].as_u64().unwrap());
    }
}

#[tokio::test]
async fn a_stream_is_the_responses_event_sequence_and_says_what_the_plain_answer_says() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    for model in MODELS {
        let ask = |stream: bool| json!({"model": model, "input": "Tell me about streams", "stream": stream});
        let plain: Value = responses(&stack, &key, ask(false)).await.json().await.unwrap();
        let r = responses(&stack, &key, ask(true)).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(!text.contains("[DONE]"));
        let ev = events(&text);
        let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            &types[..4],
            ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
        );
        assert_eq!(types.last(), Some(&"response.completed"), "{model}");
        let deltas: String = ev
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap().to_string())
            .collect();
        let said = plain["output"][0]["content"][0]["text"].as_str().unwrap();
        assert_eq!(deltas, said, "{model}");
        let done = &ev[ev.len() - 1]["response"];
        assert_eq!(done["output"][0]["content"][0]["text"], said);
        assert_eq!(done["usage"], plain["usage"], "{model}");
        assert_eq!(done["status"], "completed");
    }
}

#[tokio::test]
async fn a_streamed_function_call_reassembles_exactly_and_its_output_is_answered() {
    let stack = Stack::start_with(StackOptions { extra_config: tool_calling_models(), ..Default::default() }).await;
    let (_s, key, _) = stack.org_with_key().await;
    let tools = json!([{"type": "function", "name": "get_weather", "description": "The weather in a city",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    for (model, answering) in [("gpt-tools", "gpt-4o-mini"), ("claude-test", "claude-test")] {
        let ask = json!({"model": model, "stream": true, "tools": tools, "input": "What is the weather in Paris?"});
        let r = responses(&stack, &key, ask).await;
        assert_eq!(r.status(), 200);
        let ev = events(&r.text().await.unwrap());
        let added = ev
            .iter()
            .find(|e| e["type"] == "response.output_item.added" && e["item"]["type"] == "function_call")
            .unwrap_or_else(|| panic!("{model}: no function call in {ev:?}"));
        let item = &added["item"];
        assert_eq!(item["name"], "get_weather");
        let arguments: String = ev
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta" && e["item_id"] == item["id"])
            .map(|e| e["delta"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), json!({"city": "Paris"}), "{model}");
        let done = ev.iter().find(|e| e["type"] == "response.function_call_arguments.done").unwrap();
        assert_eq!(done["arguments"], arguments.as_str());
        let completed = &ev[ev.len() - 1]["response"];
        let call = completed["output"].as_array().unwrap().iter().find(|o| o["type"] == "function_call").unwrap();
        assert_eq!(call["arguments"], arguments.as_str());

        let call_id = call["call_id"].as_str().unwrap();
        let follow = json!({"model": answering, "tools": tools, "input": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"type": "function_call", "call_id": call_id, "name": "get_weather", "arguments": arguments},
            {"type": "function_call_output", "call_id": call_id, "output": "18C and sunny"}
        ]});
        let r = responses(&stack, &key, follow).await;
        assert_eq!(r.status(), 200);
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["status"], "completed");
        if answering == "claude-test" {
            // The Anthropic mock answers a tool result by quoting it: it arrived as one.
            assert_eq!(b["output"][0]["content"][0]["text"], "The tool said: 18C and sunny");
        }
    }
}

#[tokio::test]
async fn a_previous_response_id_is_refused_gw_stores_no_responses() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    let r =
        responses(&stack, &key, json!({"model": "gpt-4o-mini", "input": "x", "previous_response_id": "resp_1"})).await;
    let b = expect_openai_error(r, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "invalid_request",
        "message": "gw does not store responses: send the whole conversation in 'input'.",
        "param": "previous_response_id",
        "type": "invalid_request_error"
      }
    }
    "#);
}

#[tokio::test]
async fn store_true_is_refused() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    let r = responses(&stack, &key, json!({"model": "gpt-4o-mini", "input": "x", "store": true})).await;
    let b = expect_openai_error(r, 400).await;
    assert_eq!(b["error"]["param"], "store");
}

#[tokio::test]
async fn a_tool_type_gw_cannot_offer_is_refused() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    let r = responses(&stack, &key, json!({"model": "gpt-4o-mini", "input": "x", "tools": [{"type": "local_shell"}]}))
        .await;
    let b = expect_openai_error(r, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "invalid_request",
        "message": "Tools of type 'local_shell' are not supported.",
        "param": "tools",
        "type": "invalid_request_error"
      }
    }
    "#);
}

#[tokio::test]
async fn a_hosted_tool_is_left_out_and_the_answer_comes_without_it() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    let tools = json!([{"type": "web_search", "external_web_access": false}]);
    let r = responses(&stack, &key, json!({"model": "gpt-4o-mini", "input": "Say hello", "tools": tools})).await;
    assert_eq!(r.status(), 200);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["status"], "completed");
    assert_eq!(b["output"][0]["type"], "message");
    assert_eq!(b["tools"], tools, "the response repeats the tools as sent");
    // Forcing it is refused: nothing behind gw can run it.
    let forced = json!({"model": "gpt-4o-mini", "input": "x", "tools": tools, "tool_choice": {"type": "web_search"}});
    let b = expect_openai_error(responses(&stack, &key, forced).await, 400).await;
    assert_eq!(b["error"]["param"], "tool_choice");
}

#[tokio::test]
async fn a_key_for_chat_only_may_not_create_responses() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let created: Value =
        stack.create_key(&s, json!({"name": "chat only", "permissions": ["proxy:chat"]})).await.json().await.unwrap();
    let r = responses(&stack, created["key"].as_str().unwrap(), json!({"model": "gpt-4o-mini", "input": "x"})).await;
    let b = expect_openai_error(r, 403).await;
    assert_eq!(b["error"]["code"], "insufficient_permissions");
}

#[tokio::test]
async fn under_pii_redact_a_streamed_function_call_argument_never_reaches_the_client_raw() {
    let stack = Stack::start_with(StackOptions { extra_config: tool_calling_models(), ..Default::default() }).await;
    let key = org_with_output_pii_policy(&stack).await;
    let body = json!({"model": "gpt-pii-tools", "stream": true, "input": "Mail the report, please",
        "tools": [{"type": "function", "name": "send_mail", "parameters": {"type": "object"}}]});
    let r = reqwest::Client::new()
        .post(format!("{}/v1/responses", stack.proxy))
        .bearer_auth(&key)
        .header("x-gw-policy", OUTPUT_PII_POLICY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let raw = r.text().await.unwrap();
    assert_no_piece_of_tool_email(&raw);
    let ev = events(&raw);
    let done = ev.iter().find(|e| e["type"] == "response.function_call_arguments.done").expect("a function call");
    let args: Value = serde_json::from_str(done["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"email": "[EMAIL_1]", "city": "Paris"}));
}
