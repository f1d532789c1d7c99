//! `POST /v1/chat/completions`: answers (plain, streamed, built-in mock, fallback, headers, cost,
//! audit row, team attribution), then every way a request can fail, one test each.
//!
//! All on the test binary's shared stack: each test registers its own organization and steers
//! the mock upstream per request with a `"mock": {...}` body object (gw forwards unknown fields),
//! with a unique `tag` when it reads what the mock saw.

use std::str::FromStr;
use std::time::Duration;

use gw_tests::{
    db, delta_text, expect_openai_error, header, sse_data, sse_json, unique_tag, user_message, Stack, GW_HEADERS,
};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;

/// A valid request body for the upstream-backed model, as raw JSON.
const VALID: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}"#;

fn chat_url(stack: &Stack) -> String {
    format!("{}/v1/chat/completions", stack.proxy)
}

async fn post_raw(stack: &Stack, key: Option<&str>, body: impl Into<reqwest::Body>) -> reqwest::Response {
    let mut req = stack.http.post(chat_url(stack)).body(body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    req.send().await.unwrap()
}

/// A request the built-in mock provider answers.
fn mock_model_body() -> Value {
    json!({"model": "mock-model", "messages": user_message("hi")})
}

/// A request to the upstream-backed model that steers the mock upstream with `knobs`.
fn upstream_body(knobs: Value) -> Value {
    json!({"model": "gpt-4o-mini", "messages": user_message("x"), "mock": knobs})
}

async fn chat_with_team(stack: &Stack, key: &str, team: &str) -> reqwest::Response {
    stack
        .http
        .post(chat_url(stack))
        .bearer_auth(key)
        .header("x-gw-team", team)
        .json(&mock_model_body())
        .send()
        .await
        .unwrap()
}

// ---- answers ----

#[tokio::test]
async fn plain_completion_carries_headers_cost_and_audit_row() {
    let stack = Stack::shared().await;
    let (session, key, key_id) = stack.org_with_key().await;
    let tag = unique_tag();
    let resp = stack
        .chat(
            &key,
            json!({"model": "gpt-4o-mini", "messages": user_message("hello there gateway"), "temperature": 0.3,
                   "x_extra": {"kept": true}, "mock": {"tag": tag}}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h}");
    }
    assert_eq!(header(&resp, "x-gw-provider"), "upstream");
    assert_eq!(header(&resp, "x-gw-model"), "gpt-4o-mini-2024-07-18");
    assert_eq!(header(&resp, "x-gw-cache"), "bypass");
    assert_eq!(header(&resp, "x-gw-policy-action"), "none");
    let latency: u64 = header(&resp, "x-gw-latency-ms").parse().unwrap();
    let ttft: u64 = header(&resp, "x-gw-ttft-ms").parse().unwrap();
    assert!(ttft <= latency);
    let request_id = Uuid::parse_str(header(&resp, "x-gw-request-id")).unwrap();
    assert_eq!(request_id.get_version_num(), 7);
    let cost = Decimal::from_str(header(&resp, "x-gw-cost-usd")).unwrap();
    let body: Value = resp.json().await.unwrap();
    insta::assert_json_snapshot!("chat_completion", &body, {
        ".id" => "[id]",
        ".created" => "[created]",
    });

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
    let stats = stack.mock_stats_for(&tag).await;
    assert_eq!(stats["requests"], 1);
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
    assert_eq!(row.cache_status, "bypass");
    assert!(!row.stream);
}

#[tokio::test]
async fn stream_with_usage_ends_with_usage_chunk_then_done() {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let resp = stack
        .chat(
            &key,
            json!({"model": "gpt-4o-mini", "messages": user_message("stream this please"), "stream": true,
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
async fn stream_without_usage_request_hides_usage_but_still_costs() {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let tag = unique_tag();
    let resp = stack
        .chat(
            &key,
            json!({"model": "gpt-4o-mini", "messages": user_message("no usage for me"), "stream": true,
                   "mock": {"tag": tag}}),
        )
        .await;
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
    let stats = stack.mock_stats_for(&tag).await;
    assert_eq!(stats["last_body"]["stream_options"]["include_usage"], true);
    let row = db::audit_row(session.org_id, request_id).await;
    assert!(row.total_tokens > 0);
    assert!(row.cost_usd > Decimal::ZERO);
}

#[tokio::test]
async fn built_in_mock_provider_answers_both_modes() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "mock-model", "messages": user_message("hi mock")})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-provider"), "mock");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert!(body["usage"]["total_tokens"].as_u64().unwrap() > 0);

    let resp = stack
        .chat(
            &key,
            json!({"model": "mock-model", "messages": user_message("hi mock"), "stream": true,
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
async fn a_stream_failing_before_any_content_is_a_plain_error() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let mut body = upstream_body(json!({"error_mid_stream": true}));
    body["stream"] = json!(true);
    let resp = stack.chat(&key, body).await;
    // Everything arrived in one read and failed before gw wrote a byte: nothing was promised yet.
    let b = expect_openai_error(resp, 502).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "upstream_stream_broken",
        "message": "Upstream provider 'upstream' failed mid-stream.",
        "param": null,
        "type": "api_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "upstream_stream_broken");
}

#[tokio::test]
async fn fallback_deployment_answers_when_primary_is_down() {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "fallback-model", "messages": user_message("fall back")})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-provider"), "upstream");
    let request_id = Uuid::parse_str(header(&resp, "x-gw-request-id")).unwrap();
    let row = db::audit_row(session.org_id, request_id).await;
    assert_eq!(row.attempts, 2);
    assert_eq!(row.provider.as_deref(), Some("upstream"));
}

#[tokio::test]
async fn team_header_attributes_the_request_to_a_team_of_the_org() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let mine = Uuid::now_v7();
    let mut conn = db::connect().await;
    gw_shared::db::teams::insert(&mut conn, s.org_id, mine, "mine").await.unwrap();
    let r = chat_with_team(&stack, &key, &mine.to_string()).await;
    assert_eq!(r.status(), 200);
    let rid = Uuid::parse_str(header(&r, "x-gw-request-id")).unwrap();
    assert_eq!(db::audit_row(s.org_id, rid).await.team_id, Some(mine));
}

#[tokio::test]
async fn team_bound_key_attributes_to_its_team_without_the_header() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let mine = Uuid::now_v7();
    let mut conn = db::connect().await;
    gw_shared::db::teams::insert(&mut conn, s.org_id, mine, "mine").await.unwrap();
    let body: Value = stack.create_key(&s, json!({"name": "team key", "team_id": mine})).await.json().await.unwrap();
    assert_eq!(body["team_id"], mine.to_string());
    let team_key = body["key"].as_str().unwrap().to_string();
    let r = stack.chat(&team_key, mock_model_body()).await;
    assert_eq!(r.status(), 200);
    let rid = Uuid::parse_str(header(&r, "x-gw-request-id")).unwrap();
    assert_eq!(db::audit_row(s.org_id, rid).await.team_id, Some(mine));
}

// ---- credentials ----

#[tokio::test]
async fn without_credentials_is_401_invalid_api_key() {
    let stack = Stack::shared().await;
    let b = expect_openai_error(post_raw(&stack, None, VALID).await, 401).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "invalid_api_key",
        "message": "You didn't provide an API key. Send it as 'Authorization: Bearer <API_KEY>'.",
        "param": null,
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "invalid_api_key");
}

#[tokio::test]
async fn malformed_authorization_is_401() {
    let stack = Stack::shared().await;
    let r = stack
        .http
        .post(chat_url(&stack))
        .header("authorization", "Basic dXNlcjpwYXNz")
        .body(VALID)
        .send()
        .await
        .unwrap();
    let b = expect_openai_error(r, 401).await;
    assert_eq!(b["error"]["code"], "invalid_api_key");
}

#[tokio::test]
async fn unknown_key_is_401_without_echoing_the_secret() {
    let stack = Stack::shared().await;
    let b =
        expect_openai_error(post_raw(&stack, Some("sk_live_notARealKey000000000000000000000000000"), VALID).await, 401)
            .await;
    assert_eq!(b["error"]["code"], "invalid_api_key");
    assert!(!b["error"]["message"].as_str().unwrap().contains("notARealKey000000000000000000000000000"));
}

#[tokio::test]
async fn session_token_instead_of_api_key_is_401() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let b = expect_openai_error(post_raw(&stack, Some(&s.access_token), VALID).await, 401).await;
    assert!(b["error"]["message"]
        .as_str()
        .unwrap()
        .contains("(session and service-account tokens) are not accepted on /v1"));
}

#[tokio::test]
async fn revoked_key_is_401_revoked_api_key() {
    let stack = Stack::shared().await;
    let (s, key, id) = stack.org_with_key().await;
    let r = stack.admin_delete(&format!("/api-keys/{id}"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let b = expect_openai_error(stack.chat(&key, mock_model_body()).await, 401).await;
    assert_eq!(b["error"]["code"], "revoked_api_key");
}

#[tokio::test]
async fn expired_key_is_401_expired_api_key() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    // The management API refuses a past expiry, so the key expires a few seconds from now.
    let expires = chrono::Utc::now() + chrono::Duration::seconds(4);
    let resp = stack.create_key(&s, json!({"name": "short-lived", "expires_at": expires})).await;
    assert_eq!(resp.status(), 201);
    let key = resp.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    // Valid until then, and cached by the proxy from here on: expiry must beat the cache.
    assert_eq!(stack.chat(&key, mock_model_body()).await.status(), 200);
    let left = (expires - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(300)).await;
    let b = expect_openai_error(stack.chat(&key, mock_model_body()).await, 401).await;
    assert_eq!(b["error"]["code"], "expired_api_key");
}

#[tokio::test]
async fn key_without_the_proxy_permission_is_403() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    // The management API issues only `proxy:llm` keys today, so this one is written directly.
    let mut conn = db::connect().await;
    let perms = ["files:read".to_string()];
    let spec = gw_shared::accounts::KeySpec {
        org_id: s.org_id,
        team_id: None,
        name: "no proxy permission",
        permissions: &perms,
        allowed_models: None,
        created_by: Some(s.user_id),
        expires_at: None,
        budget: None,
        rate_limits: None,
    };
    let (_, key) = gw_shared::accounts::issue_api_key(&mut conn, spec).await.unwrap();
    let b = expect_openai_error(stack.chat(&key, mock_model_body()).await, 403).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "insufficient_permissions",
        "message": "This API key lacks the 'proxy:chat' permission.",
        "param": null,
        "type": "permission_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "insufficient_permissions");
}

#[tokio::test]
async fn team_header_not_a_uuid_is_400_invalid_team() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let b = expect_openai_error(chat_with_team(&stack, &key, "not-a-uuid").await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "invalid_team",
        "message": "x-gw-team must be a team id (UUID).",
        "param": "x-gw-team",
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "invalid_team");
}

#[tokio::test]
async fn team_header_naming_another_orgs_team_is_400_invalid_team() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let other = stack.register().await;
    let theirs = Uuid::now_v7();
    let mut conn = db::connect().await;
    gw_shared::db::teams::insert(&mut conn, other.org_id, theirs, "theirs").await.unwrap();
    let b = expect_openai_error(chat_with_team(&stack, &key, &theirs.to_string()).await, 400).await;
    assert_eq!(b["error"]["code"], "invalid_team");
}

#[tokio::test]
async fn team_bound_key_cannot_be_redirected_by_the_header() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let mine = Uuid::now_v7();
    let mut conn = db::connect().await;
    gw_shared::db::teams::insert(&mut conn, s.org_id, mine, "mine").await.unwrap();
    let body: Value = stack.create_key(&s, json!({"name": "team key", "team_id": mine})).await.json().await.unwrap();
    let team_key = body["key"].as_str().unwrap().to_string();
    let b = expect_openai_error(chat_with_team(&stack, &team_key, &Uuid::now_v7().to_string()).await, 400).await;
    assert_eq!(b["error"]["code"], "invalid_team");
}

// ---- the request ----

#[tokio::test]
async fn malformed_json_is_400() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let b = expect_openai_error(post_raw(&stack, Some(&key), "{\"model\": ").await, 400).await;
    assert_eq!(b["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn missing_model_is_400_naming_model() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let b =
        expect_openai_error(post_raw(&stack, Some(&key), r#"{"messages":[{"role":"user","content":"x"}]}"#).await, 400)
            .await;
    assert_eq!(b["error"]["param"], "model");
}

#[tokio::test]
async fn missing_messages_is_400_naming_messages() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let b = expect_openai_error(post_raw(&stack, Some(&key), r#"{"model":"gpt-4o-mini"}"#).await, 400).await;
    assert_eq!(b["error"]["param"], "messages");
}

#[tokio::test]
async fn empty_messages_is_400_naming_messages() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let b =
        expect_openai_error(post_raw(&stack, Some(&key), r#"{"model":"gpt-4o-mini","messages":[]}"#).await, 400).await;
    assert_eq!(b["error"]["param"], "messages");
}

#[tokio::test]
async fn unknown_model_is_404_model_not_found() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let b = expect_openai_error(
        post_raw(&stack, Some(&key), r#"{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}"#).await,
        404,
    )
    .await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "model_not_found",
        "message": "The model 'no-such-model' does not exist or you do not have access to it.",
        "param": "model",
        "type": "invalid_request_error"
      }
    }
    "#);
}

#[tokio::test]
async fn hostile_model_names_cannot_wedge_the_audit_log() {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    // Postgres TEXT refuses NUL; a huge name must not bloat the row either.
    let nul = stack.chat(&key, json!({"model": "bad\u{0}model", "messages": user_message("x")})).await;
    let nul_id = Uuid::parse_str(header(&nul, "x-gw-request-id")).unwrap();
    insta::assert_json_snapshot!(expect_openai_error(nul, 404).await, @r#"
    {
      "error": {
        "code": "model_not_found",
        "message": "The model 'bad\u0000model' does not exist or you do not have access to it.",
        "param": "model",
        "type": "invalid_request_error"
      }
    }
    "#);
    let long = stack.chat(&key, json!({"model": "m".repeat(10_000), "messages": user_message("x")})).await;
    expect_openai_error(long, 404).await;
    let ok = stack.chat(&key, json!({"model": "mock-model", "messages": user_message("x")})).await;
    let ok_id = Uuid::parse_str(header(&ok, "x-gw-request-id")).unwrap();
    assert_eq!(ok.status(), 200);
    let row = db::audit_row(session.org_id, ok_id).await;
    assert_eq!(row.status_code, 200);
    let row = db::audit_row(session.org_id, nul_id).await;
    assert_eq!(row.status_code, 404);
    assert_eq!(row.model.as_deref(), Some("badmodel"));
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    // The test config limits bodies to 64 KiB.
    let big = format!(r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"{}"}}]}}"#, "a".repeat(70_000));
    let b = expect_openai_error(post_raw(&stack, Some(&key), big).await, 413).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "request_too_large",
        "message": "Request body is larger than the 65536-byte limit.",
        "param": null,
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "request_too_large");
}

#[tokio::test]
async fn body_over_the_limit_streamed_without_length_is_413() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..20).map(|_| Ok(vec![b' '; 8192])).collect();
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let resp = post_raw(&stack, Some(&key), body).await;
    expect_openai_error(resp, 413).await;
}

#[tokio::test]
async fn wrong_method_is_405_with_allow() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.http.get(chat_url(&stack)).bearer_auth(&key).send().await.unwrap();
    assert_eq!(header(&r, "allow"), "POST");
    insta::assert_json_snapshot!(expect_openai_error(r, 405).await, @r#"
    {
      "error": {
        "code": "method_not_allowed",
        "message": "Method GET is not allowed on /v1/chat/completions; use POST.",
        "param": null,
        "type": "invalid_request_error"
      }
    }
    "#);
}

// ---- the upstream ----

#[tokio::test]
async fn upstream_down_is_502_upstream_unavailable() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.chat(&key, json!({"model": "dead-model", "messages": user_message("x")})).await;
    assert_eq!(header(&r, "x-gw-provider"), "dead");
    let b = expect_openai_error(r, 502).await;
    assert_eq!(b["error"]["code"], "upstream_unavailable");
    assert!(b["error"]["message"].as_str().unwrap().contains("dead"));
}

#[tokio::test]
async fn upstream_down_for_a_stream_is_502() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.chat(&key, json!({"model": "dead-model", "stream": true, "messages": user_message("x")})).await;
    expect_openai_error(r, 502).await;
}

#[tokio::test]
async fn upstream_garbage_is_502_upstream_bad_response() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.chat(&key, upstream_body(json!({"malformed": true}))).await;
    let b = expect_openai_error(r, 502).await;
    assert_eq!(b["error"]["code"], "upstream_bad_response");
}

#[tokio::test]
async fn upstream_garbage_stream_is_502_upstream_bad_response() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let mut body = upstream_body(json!({"malformed": true}));
    body["stream"] = json!(true);
    let b = expect_openai_error(stack.chat(&key, body).await, 502).await;
    assert_eq!(b["error"]["code"], "upstream_bad_response");
}

#[tokio::test]
async fn upstream_client_error_passes_through() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.chat(&key, upstream_body(json!({"status": 400}))).await;
    let b = expect_openai_error(r, 400).await;
    assert!(b["error"]["message"].as_str().unwrap().contains("mock upstream failure"));
}

#[tokio::test]
async fn upstream_server_error_is_502() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.chat(&key, upstream_body(json!({"status": 500}))).await;
    let b = expect_openai_error(r, 502).await;
    assert_eq!(b["error"]["code"], "upstream_unavailable");
}

#[tokio::test]
async fn upstream_rate_limit_is_429() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.chat(&key, upstream_body(json!({"status": 429}))).await;
    let b = expect_openai_error(r, 429).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "upstream_rate_limited",
        "message": "Upstream provider 'upstream' is rate limiting requests; retry later.",
        "param": null,
        "type": "rate_limit_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "upstream_rate_limited");
}

#[tokio::test]
async fn upstream_5xx_then_recovery_reuses_nothing_broken() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    // The first request with this tag fails with 503; the mock behaves after that.
    let tag = unique_tag();
    let knobs = json!({"fail_first": 1, "tag": tag});
    let first = stack.chat(&key, upstream_body(knobs.clone())).await;
    assert_eq!(first.status(), 502);
    let body: Value = first.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("503"), "{body}");
    for _ in 0..5 {
        let ok = stack.chat(&key, upstream_body(knobs.clone())).await;
        assert_eq!(ok.status(), 200);
    }
    assert_eq!(stack.mock_stats_for(&tag).await["requests"], 6);
}

#[tokio::test]
async fn upstream_slower_than_the_read_timeout_is_504() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    // The test config gives the upstream 5 s per read.
    let r = stack.chat(&key, upstream_body(json!({"latency_ms": 6000}))).await;
    let b = expect_openai_error(r, 504).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "upstream_timeout",
        "message": "Upstream provider 'upstream' did not answer in time.",
        "param": null,
        "type": "api_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "upstream_timeout");
}

#[tokio::test]
async fn upstream_error_mid_stream_ends_the_stream_with_an_error_event() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    // Chunks a little apart, so content reaches the client before the failure (a failure before
    // any content is a plain error response, or a fallback).
    let mut body = upstream_body(json!({"error_mid_stream": true, "chunk_delay_ms": 30}));
    body["stream"] = json!(true);
    let resp = stack.chat(&key, body).await;
    // The status line left with the first chunk: only the stream itself can tell the failure.
    assert_eq!(resp.status(), 200);
    let data = sse_data(&resp.text().await.unwrap());
    assert!(!data.iter().any(|d| d == "[DONE]"), "{data:?}");
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    let message = last["error"]["message"].as_str().unwrap_or_else(|| panic!("last event is no error: {last}"));
    // The upstream's own words go to the log, not to the client: they can name gw's account.
    assert!(!message.contains("mock upstream failed"), "{last}");
    assert!(message.contains("'upstream' failed mid-stream"), "{last}");
    assert_eq!(last["error"]["code"], "upstream_stream_broken");
    assert!(delta_text(&sse_json(&data)).starts_with("Mock upstream"), "{data:?}");
}

#[tokio::test]
async fn upstream_stream_cut_short_ends_the_stream_with_an_error_event() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let mut body = upstream_body(json!({"truncate_stream": true, "chunk_delay_ms": 30}));
    body["stream"] = json!(true);
    let resp = stack.chat(&key, body).await;
    assert_eq!(resp.status(), 200);
    let data = sse_data(&resp.text().await.unwrap());
    assert!(!data.iter().any(|d| d == "[DONE]"), "{data:?}");
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert!(last["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "last event is no error: {last}");
    assert!(delta_text(&sse_json(&data)).starts_with("Mock upstream"), "{data:?}");
}
