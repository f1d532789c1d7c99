//! Chat completions end to end: real proxy, real upstream over HTTP, real Postgres and Redis.

use std::str::FromStr;

use gw_tests::{db, header, Stack, GW_HEADERS};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// Parses an SSE body into its `data:` payloads.
fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n").filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_string)).collect()
}

#[tokio::test]
async fn non_streaming_completion_carries_headers_cost_and_audit_row() {
    let stack = Stack::start().await;
    let (session, key, key_id) = stack.org_with_key().await;
    let resp = stack
        .chat(&key, json!({"model": "gpt-4o-mini", "messages": user("hello there gateway"), "temperature": 0.3, "x_extra": {"kept": true}}))
        .await;
    assert_eq!(resp.status(), 200);
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h}");
    }
    assert_eq!(header(&resp, "x-gw-provider"), "upstream");
    assert_eq!(header(&resp, "x-gw-model"), "gpt-4o-mini-2024-07-18");
    assert_eq!(header(&resp, "x-gw-cache"), "miss");
    assert_eq!(header(&resp, "x-gw-policy-action"), "none");
    let latency: u64 = header(&resp, "x-gw-latency-ms").parse().unwrap();
    let ttft: u64 = header(&resp, "x-gw-ttft-ms").parse().unwrap();
    assert!(ttft <= latency);
    let request_id = Uuid::parse_str(header(&resp, "x-gw-request-id")).unwrap();
    assert_eq!(request_id.get_version_num(), 7);
    let cost = Decimal::from_str(header(&resp, "x-gw-cost-usd")).unwrap();
    let body: Value = resp.json().await.unwrap();

    // Cost is exactly the upstream's usage times the configured prices.
    let usage = &body["usage"];
    let (p, c) = (usage["prompt_tokens"].as_u64().unwrap(), usage["completion_tokens"].as_u64().unwrap());
    assert!(p > 0 && c > 0);
    let expected = (Decimal::from(p) * Decimal::from_str("0.15").unwrap()
        + Decimal::from(c) * Decimal::from_str("0.60").unwrap())
        / Decimal::from(1_000_000);
    assert_eq!(cost, expected.normalize());
    assert!(body["choices"][0]["message"]["content"].as_str().unwrap().contains("hello there gateway"));

    // The upstream got the deployment's model name and every field the client sent.
    let stats = stack.mock_stats().await;
    assert_eq!(stats["last_body"]["model"], "gpt-4o-mini-2024-07-18");
    assert_eq!(stats["last_body"]["temperature"], 0.3);
    assert_eq!(stats["last_body"]["x_extra"], json!({"kept": true}));

    let row = db::audit_row(session.org_id, request_id).await;
    assert_eq!(row.id, request_id);
    assert_eq!(row.api_key_id, Some(Uuid::parse_str(&key_id).unwrap()));
    assert_eq!(row.status_code, 200);
    assert_eq!(row.model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(row.provider.as_deref(), Some("upstream"));
    assert_eq!(row.upstream_model.as_deref(), Some("gpt-4o-mini-2024-07-18"));
    assert_eq!((row.prompt_tokens as u64, row.completion_tokens as u64), (p, c));
    assert_eq!(row.cost_usd, expected);
    assert_eq!(row.cache_status, "miss");
    assert!(!row.stream);
}

#[tokio::test]
async fn streaming_with_usage_ends_with_usage_chunk_then_done() {
    let stack = Stack::start().await;
    let (session, key, _) = stack.org_with_key().await;
    let resp = stack
        .chat(
            &key,
            json!({"model": "gpt-4o-mini", "messages": user("stream this please"), "stream": true,
                   "stream_options": {"include_usage": true}}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    assert!(header(&resp, "content-type").starts_with("text/event-stream"));
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h}");
    }
    let request_id = Uuid::parse_str(header(&resp, "x-gw-request-id")).unwrap();
    let text = resp.text().await.unwrap();
    let data = sse_data(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    let total = last["usage"]["total_tokens"].as_u64().unwrap();
    assert!(total > 0);
    // Only the last chunk carries usage.
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c.get("usage").is_none()));
    let content: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert!(content.contains("stream this please"));

    let row = db::audit_row(session.org_id, request_id).await;
    assert!(row.stream);
    assert_eq!(row.total_tokens as u64, total);
    assert!(row.cost_usd > Decimal::ZERO);
    assert!(row.ttft_ms.is_some());
}

#[tokio::test]
async fn streaming_without_usage_request_hides_usage_but_still_costs() {
    let stack = Stack::start().await;
    let (session, key, _) = stack.org_with_key().await;
    let resp =
        stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": user("no usage for me"), "stream": true})).await;
    assert_eq!(resp.status(), 200);
    let request_id = Uuid::parse_str(header(&resp, "x-gw-request-id")).unwrap();
    let text = resp.text().await.unwrap();
    let data = sse_data(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    for d in &data[..data.len() - 1] {
        let v: Value = serde_json::from_str(d).unwrap();
        assert!(v.get("usage").is_none(), "usage leaked: {d}");
        assert_eq!(v["choices"].as_array().map(Vec::len), Some(1));
    }
    // gw asked the upstream for usage itself, so the audit row has the exact cost.
    let stats = stack.mock_stats().await;
    assert_eq!(stats["last_body"]["stream_options"]["include_usage"], true);
    let row = db::audit_row(session.org_id, request_id).await;
    assert!(row.total_tokens > 0);
    assert!(row.cost_usd > Decimal::ZERO);
}

#[tokio::test]
async fn built_in_mock_provider_answers_both_modes() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "mock-model", "messages": user("hi mock")})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-provider"), "mock");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert!(body["usage"]["total_tokens"].as_u64().unwrap() > 0);

    let resp = stack
        .chat(
            &key,
            json!({"model": "mock-model", "messages": user("hi mock"), "stream": true,
                            "stream_options": {"include_usage": true}}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let data = sse_data(&resp.text().await.unwrap());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let usage_chunk: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(usage_chunk["usage"], body["usage"]);
}

#[tokio::test]
async fn models_are_listed() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack.http.get(format!("{}/v1/models", stack.proxy)).bearer_auth(&key).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h}");
    }
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["gpt-4o-mini", "mock-model", "dead-model", "fallback-model"]);
    assert!(body["data"].as_array().unwrap().iter().all(|m| m["object"] == "model"));
}

#[tokio::test]
async fn fallback_deployment_answers_when_primary_is_down() {
    let stack = Stack::start().await;
    let (session, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "fallback-model", "messages": user("fall back")})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-provider"), "upstream");
    let request_id = Uuid::parse_str(header(&resp, "x-gw-request-id")).unwrap();
    let row = db::audit_row(session.org_id, request_id).await;
    assert_eq!(row.attempts, 2);
    assert_eq!(row.provider.as_deref(), Some("upstream"));
}

#[tokio::test]
async fn upstream_5xx_then_recovery_reuses_nothing_broken() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    stack.mock_config(json!({"fail_first": 1})).await;
    let first = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": user("one")})).await;
    assert_eq!(first.status(), 502);
    let body: Value = first.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("503"), "{body}");
    for _ in 0..5 {
        let ok = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": user("two")})).await;
        assert_eq!(ok.status(), 200);
    }
}

#[tokio::test]
async fn latency_and_ttft_headers_measure_the_upstream() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    // The upstream takes 120 ms before its header and 150 ms more before the first chunk.
    stack.mock_config(json!({"latency_ms": 120, "ttft_ms": 150})).await;
    let resp = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": user("slow"), "stream": true})).await;
    assert_eq!(resp.status(), 200);
    let ttft: u64 = header(&resp, "x-gw-ttft-ms").parse().unwrap();
    assert!(ttft >= 270, "ttft {ttft} ms is below the upstream's own 270 ms");
    let _ = resp.text().await.unwrap();

    let resp = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": user("slow")})).await;
    let latency: u64 = header(&resp, "x-gw-latency-ms").parse().unwrap();
    assert!(latency >= 120, "latency {latency} ms is below the upstream's own 120 ms");
}

#[tokio::test]
async fn sigterm_flushes_every_audit_row() {
    // A flush interval far longer than the test: only the shutdown drain can write these rows.
    let stack = Stack::start_with(gw_tests::StackOptions {
        proxy_config: "audit_flush_interval_ms = 600000".into(),
        ..Default::default()
    })
    .await;
    let (session, key, _) = stack.org_with_key().await;
    let mut ids = Vec::new();
    for i in 0..40 {
        let resp = stack.chat(&key, json!({"model": "mock-model", "messages": user(&format!("req {i}"))})).await;
        assert_eq!(resp.status(), 200);
        ids.push(Uuid::parse_str(header(&resp, "x-gw-request-id")).unwrap());
    }
    // Stop the proxy right away: whatever is still queued must be written on the way out.
    stack.terminate_proxy().await;
    let mut conn = db::connect().await;
    for id in ids {
        let row = gw_shared::db::audit_logs::find(&mut conn, session.org_id, id).await.unwrap();
        assert!(row.is_some(), "audit row {id} lost at shutdown");
    }
}
