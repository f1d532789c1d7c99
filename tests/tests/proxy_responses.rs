//! `POST /v1/responses` (OpenAI's Responses API, stateless): answered as a `response` object and
//! the Responses event sequence whatever serves the model: an OpenAI-compatible deployment and an
//! Anthropic one, each the mock upstream in its own dialect. Function calls streamed as argument
//! deltas that reassemble exactly, and their outputs answered; what needs stored state refused by
//! name; the audit row and cost as for chat. To a deployment that serves the Responses API
//! (`responses_api`) a request passes through as the client sent it (its model aside, `store:
//! false` added) and the answer comes back as the deployment sent it, unless a guardrail must
//! read or change either (hosted tools left out of it, as the translation leaves them out).

use gw_tests::{
    assert_no_piece_of_tool_email, db, expect_openai_error, org_with_output_pii_policy, request_id,
    tool_calling_models, Stack, StackOptions, OUTPUT_PII_POLICY, RESPONSES_DEPLOYMENT,
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
    // `gpt-tools-responses` serves the Responses API: its own events pass through.
    let models = [("gpt-tools", "gpt-4o-mini"), ("gpt-tools-responses", "gpt-4o-mini"), ("claude-test", "claude-test")];
    for (model, answering) in models {
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
async fn a_file_given_by_id_is_refused_it_is_the_gateways_not_the_clients() {
    let stack = Stack::shared().await;
    let (_s, key, _) = stack.org_with_key().await;
    let input = json!([{"type": "function_call_output", "call_id": "call_1",
                        "output": [{"type": "input_image", "file_id": "file-abc"}]}]);
    let b =
        expect_openai_error(responses(&stack, &key, json!({"model": "gpt-4o-mini", "input": input})).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "invalid_request",
        "message": "'input[0].output[0]': parts given by 'file_id' are not supported.",
        "param": "input",
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
    // The second deployment serves the Responses API: under the policy it is translated too.
    for model in ["gpt-pii-tools", "gpt-pii-tools-responses"] {
        let body = json!({"model": model, "stream": true, "input": "Mail the report, please",
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
        assert_eq!(args, json!({"email": "[EMAIL_1]", "city": "Paris"}), "{model}");
    }
}

/// Beside `gpt-responses` ([`RESPONSES_DEPLOYMENT`]): the model it serves under its own name,
/// and a deployment serving the Responses API that always fails, before an Anthropic one.
const MORE_RESPONSES_MODELS: &str = r#"
[[providers]]
name = "responses-down"
kind = "openai"
base_url = "{mock}/k/status=503/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
responses_api = true
[[models]]
name = "gpt-4o-mini-2024-07-18"
deployments = [{ provider = "responses", model = "gpt-4o-mini-2024-07-18" }]
[[models]]
name = "responses-then-claude"
deployments = [{ provider = "responses-down", model = "gpt-4o-mini" }, { provider = "anthropic", model = "claude-sonnet-4-5" }]
"#;

async fn responses_stack() -> Stack {
    let extra_config = format!("{RESPONSES_DEPLOYMENT}{MORE_RESPONSES_MODELS}");
    Stack::start_with(StackOptions { extra_config, ..Default::default() }).await
}

/// The mock counts a request under the tag its body's `mock` knobs name: a field gw's translation
/// drops, so only a passed-through body carries it.
async fn mock_seen(stack: &Stack, tag: &str) -> Value {
    stack.mock_stats_for(tag).await
}

fn header<'r>(r: &'r reqwest::Response, name: &str) -> &'r str {
    r.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

/// The exact cost a stream's closing comment carries.
fn streamed_cost(text: &str) -> &str {
    text.split(": x-gw-cost-usd=").nth(1).and_then(|rest| rest.split('\n').next()).expect("the cost comment")
}

#[tokio::test]
async fn to_a_responses_deployment_the_request_and_answer_pass_through_costing_what_chat_costs() {
    let stack = responses_stack().await;
    let (s, key, _) = stack.org_with_key().await;
    // The same conversation through chat, to a deployment of the same model: the same tokens.
    let chat = json!({"model": "gpt-4o-mini", "messages": [{"role": "developer", "content": "Be brief."},
                                                           {"role": "user", "content": "Say hello"}]});
    let r = stack.chat_with(&stack.proxy, &key, &chat, &[]).await;
    assert_eq!(r.status(), 200);
    let chat_cost = header(&r, "x-gw-cost-usd").to_string();
    assert_ne!(chat_cost.parse::<f64>().unwrap(), 0.0);
    for stream in [false, true] {
        let tag = format!("responses-{}", uuid::Uuid::new_v4().simple());
        let body = json!({"model": "gpt-responses", "instructions": "Be brief.", "input": "Say hello",
            "stream": stream, "include": ["reasoning.encrypted_content"], "text": {"verbosity": "low"},
            "mock": {"tag": tag}});
        let r = responses(&stack, &key, body.clone()).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-gw-provider"), "responses");
        let id = request_id(&r);
        let plain_cost = header(&r, "x-gw-cost-usd").to_string();
        let text = r.text().await.unwrap();
        let seen = mock_seen(&stack, &tag).await;
        assert_eq!(seen["requests"], 1, "the body reached the deployment with its own fields");
        let mut expected = body.clone();
        expected["model"] = json!("gpt-4o-mini-2024-07-18");
        expected["store"] = json!(false);
        assert_eq!(seen["last_body"], expected, "only the model changed, and nothing is stored");
        if stream {
            let ev = events(&text);
            assert_eq!(ev[0]["type"], "response.created");
            assert!(ev[0]["response"]["id"].as_str().unwrap().starts_with("resp_mock"), "the deployment's events");
            assert_eq!(ev.last().unwrap()["type"], "response.completed");
            assert!(!text.contains("[DONE]"));
            assert_eq!(streamed_cost(&text), chat_cost, "a streamed response costs what chat costs");
        } else {
            let b: Value = serde_json::from_str(&text).unwrap();
            assert!(b["id"].as_str().unwrap().starts_with("resp_mock"), "the deployment's own response");
            assert_eq!(b["model"], "gpt-4o-mini-2024-07-18");
            assert_eq!(b["store"], false);
            assert_eq!(plain_cost, chat_cost, "a response costs what chat costs");
        }
        let row = db::audit_row(s.org_id, id).await;
        assert_eq!(row.endpoint, "/v1/responses");
        assert_eq!(row.provider.as_deref(), Some("responses"));
        assert_eq!(row.cost_usd, chat_cost.parse::<rust_decimal::Decimal>().unwrap());
    }
}

#[tokio::test]
async fn responses_passthrough_edges_bytes_an_error_a_fallback_a_policy_a_hosted_tool_and_the_cache() {
    let stack = responses_stack().await;
    let (s, key, _) = stack.org_with_key().await;
    // A policy requests may name (set before the proxy first sees the organization, so no
    // request below meets a proxy that has not learnt of it yet).
    let doc = json!({"policies": [{"name": "in-pii", "guardrails": [{"type": "pii_redact"}]}]});
    gw_tests::json_of(stack.admin_put("/organizations/current/policy", &s.access_token, &doc).await, 200).await;
    let post = |body: String, policy: Option<&'static str>| {
        let mut r = reqwest::Client::new()
            .post(format!("{}/v1/responses", stack.proxy))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body);
        if let Some(p) = policy {
            r = r.header("x-gw-policy", p);
        }
        r.send()
    };

    // The model the deployment serves, `store` sent: the body arrives as the client wrote it.
    let tag = format!("bytes-{}", uuid::Uuid::new_v4().simple());
    let written = format!(
        r#"{{ "input":"Say hello",  "model":"gpt-4o-mini-2024-07-18","store":false, "mock":{{"tag":"{tag}"}} }}"#
    );
    let r = post(written.clone(), None).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(mock_seen(&stack, &tag).await["last_raw"], written.as_str(), "byte for byte");
    // A key named twice: the deployment gets gw's reading (the last), never the raw text.
    let tag = format!("twice-{}", uuid::Uuid::new_v4().simple());
    let written = format!(
        r#"{{"input":"Say hello","model":"gpt-4o-mini-2024-07-18","store":false,"tools":[{{"type":"web_search"}}],"tools":[],"mock":{{"tag":"{tag}"}}}}"#
    );
    let r = post(written.clone(), None).await.unwrap();
    assert_eq!(r.status(), 200);
    let seen = mock_seen(&stack, &tag).await;
    assert_ne!(seen["last_raw"], written.as_str());
    assert_eq!(seen["last_body"]["tools"], json!([]));

    // The deployment's stream breaks: gw's error event continues its numbering.
    let body = json!({"model": "gpt-responses", "input": "Tell me a long story", "stream": true,
                      "mock": {"error_mid_stream": true, "chunk_delay_ms": 30}});
    let r = post(body.to_string(), None).await.unwrap();
    assert_eq!(r.status(), 200);
    let ev = events(&r.text().await.unwrap());
    assert!(ev.iter().any(|e| e["type"] == "response.output_text.delta"), "{ev:?}");
    let last = ev.last().unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["message"], "Upstream provider 'responses' failed mid-stream.", "{last}");

    // The Responses deployment fails, the Anthropic one answers: gw's translation, whole.
    for stream in [false, true] {
        let body = json!({"model": "responses-then-claude", "input": "Tell me about fallbacks", "stream": stream});
        let r = post(body.to_string(), None).await.unwrap();
        assert_eq!(r.status(), 200, "stream {stream}");
        assert_eq!(header(&r, "x-gw-provider"), "anthropic");
        let id = request_id(&r);
        let text = r.text().await.unwrap();
        let response = match stream {
            true => events(&text).remove(0)["response"].clone(),
            false => serde_json::from_str(&text).unwrap(),
        };
        assert_eq!(response["id"], format!("resp_{}", id.simple()));
    }

    // Under a policy the request is translated (the guardrails read what goes upstream).
    let tag = format!("policy-{}", uuid::Uuid::new_v4().simple());
    let body = json!({"model": "gpt-responses", "input": "Mail jane.doe@example.com a hello", "mock": {"tag": tag}});
    let r = post(body.to_string(), Some("in-pii")).await.unwrap();
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    assert_eq!(r.json::<Value>().await.unwrap()["id"], format!("resp_{}", id.simple()), "translated");
    assert_eq!(mock_seen(&stack, &tag).await["requests"], 0, "the client's own body never went upstream");

    // A hosted tool is left out of what is passed on (OpenAI bills its calls at rates gw does
    // not price), as the translation leaves it out.
    let tag = format!("hosted-{}", uuid::Uuid::new_v4().simple());
    let function = json!({"type": "function", "name": "get_weather", "parameters": {"type": "object"}});
    let body = json!({"model": "gpt-responses", "input": "Say hello", "tools": [{"type": "web_search"}, function],
                      "mock": {"tag": tag}});
    let r = post(body.to_string(), None).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.json::<Value>().await.unwrap()["id"].as_str().unwrap().starts_with("resp_mock"), "passed through");
    assert_eq!(mock_seen(&stack, &tag).await["last_body"]["tools"], json!([function]));

    // A passed-through answer is cached; the repeat is gw's rendering of it, at no cost. (An
    // organization of its own, its cache on before the proxy first sees it.)
    let (cached, cache_key, _) = stack.org_with_key().await;
    let r = stack.admin_put("/organizations/current/cache", &cached.access_token, &json!({"l1": true})).await;
    assert_eq!(r.status(), 200);
    let tag = format!("cached-{}", uuid::Uuid::new_v4().simple());
    let body = json!({"model": "gpt-responses", "input": "What is the capital of France?", "mock": {"tag": tag}});
    let first = responses(&stack, &cache_key, body.clone()).await;
    assert_eq!(header(&first, "x-gw-cache"), "miss");
    let first: Value = first.json().await.unwrap();
    assert!(first["id"].as_str().unwrap().starts_with("resp_mock"));
    let again = responses(&stack, &cache_key, body).await;
    assert_eq!(header(&again, "x-gw-cache"), "L1");
    assert_eq!(header(&again, "x-gw-cost-usd").parse::<f64>().unwrap(), 0.0);
    let id = request_id(&again);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["id"], format!("resp_{}", id.simple()));
    assert_eq!(again["output"][0]["content"][0]["text"], first["output"][0]["content"][0]["text"]);
    assert_eq!(again["usage"]["output_tokens"], first["usage"]["output_tokens"]);
    assert_eq!(mock_seen(&stack, &tag).await["requests"], 1);
}
