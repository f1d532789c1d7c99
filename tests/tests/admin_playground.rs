//! `POST /api/v1/playground/compare`: one prompt to several models at once through the proxy's
//! own pipeline. Across the built-in mock, an Anthropic-dialect and a Gemini-dialect model with
//! different latencies (and one model that fails), every figure is present and equals the
//! model's audit row, time to first token never exceeds the total, and the failure is reported
//! beside the answers. Streamed, each model's result arrives as it finishes. A model the caller
//! may not use is refused as on `/v1`. The comparison's calls are audit rows marked
//! `playground`, on a key of the caller's that is never listed. One stack of its own (its models
//! have fixed latencies).

use gw_tests::{db, expect_api_error, json_of, sse_data, start_shared_with, Session, SharedStack, Stack, StackOptions};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::str::FromStr;
use std::sync::OnceLock;
use uuid::Uuid;

static STACK: OnceLock<Result<SharedStack, String>> = OnceLock::new();

/// `claude-slow` (Anthropic dialect, first token after 300 ms) and `gemini-slow` (Gemini
/// dialect, after 100 ms) on the mock upstream; `mock-model` is the built-in mock provider and
/// `dead-model` cannot be reached.
fn stack() -> Stack {
    Stack::view(STACK.get_or_init(|| {
            let extra = "\
[[providers]]\nname = \"anthropic-slow\"\nkind = \"anthropic\"\nbase_url = \"{mock}/k/ttft_ms=300/v1\"\napi_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
[[providers]]\nname = \"gemini-slow\"\nkind = \"gemini\"\nbase_url = \"{mock}/k/ttft_ms=100/v1beta\"\napi_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
[[models]]\nname = \"claude-slow\"\ndeployments = [{ provider = \"anthropic-slow\", model = \"claude-sonnet-4-5\" }]\n\
[[models]]\nname = \"gemini-slow\"\ndeployments = [{ provider = \"gemini-slow\", model = \"gemini-2.5-flash\" }]\n";
            start_shared_with(StackOptions { extra_config: extra.into(), ..Default::default() })
        }))
}

fn prompt(models: &[&str]) -> Value {
    json!({"models": models, "messages": [{"role": "user", "content": "Name three rivers."}],
           "parameters": {"temperature": 0.2, "max_tokens": 64}})
}

async fn compare(stack: &Stack, s: &Session, body: &Value) -> Value {
    json_of(stack.admin_post("/playground/compare", &s.access_token, body).await, 200).await
}

/// Asserts a successful model's figures: all present, TTFT within the total, and each equal to
/// its audit row (which is marked as the playground's).
async fn check_against_audit(org: Uuid, r: &Value) {
    assert_eq!(r["error"], Value::Null, "{r}");
    assert_eq!(r["audited"], true, "{r}");
    for f in ["provider", "upstream_model", "answer", "finish_reason", "request_id"] {
        assert!(r[f].is_string(), "{f} missing: {r}");
    }
    for f in ["ttft_ms", "latency_ms", "prompt_tokens", "completion_tokens", "total_tokens"] {
        assert!(r[f].as_i64().is_some_and(|n| n > 0), "{f}: {r}");
    }
    assert!(r["cached_tokens"].is_i64() && r["reasoning_tokens"].is_i64(), "{r}");
    assert!(r["ttft_ms"].as_i64() <= r["latency_ms"].as_i64(), "{r}");
    let cost = Decimal::from_str(r["cost_usd"].as_str().unwrap()).unwrap();
    assert!(cost > Decimal::ZERO, "{r}");
    let row = db::audit_row(org, r["request_id"].as_str().unwrap().parse().unwrap()).await;
    assert_eq!(row.origin.as_deref(), Some("playground"));
    assert_eq!(row.provider.as_deref(), r["provider"].as_str());
    assert_eq!(row.upstream_model.as_deref(), r["upstream_model"].as_str());
    assert_eq!(row.model.as_deref(), r["model"].as_str());
    assert_eq!(row.ttft_ms.map(i64::from), r["ttft_ms"].as_i64());
    assert_eq!(Some(i64::from(row.latency_ms)), r["latency_ms"].as_i64());
    assert_eq!(i64::from(row.prompt_tokens), r["prompt_tokens"].as_i64().unwrap());
    assert_eq!(i64::from(row.completion_tokens), r["completion_tokens"].as_i64().unwrap());
    assert_eq!(i64::from(row.cached_tokens), r["cached_tokens"].as_i64().unwrap());
    assert_eq!(i64::from(row.reasoning_tokens), r["reasoning_tokens"].as_i64().unwrap());
    assert_eq!(row.cost_usd, cost);
    assert_eq!(i64::from(row.status_code), r["status"].as_i64().unwrap());
}

#[tokio::test]
async fn three_dialects_compare_with_figures_equal_to_their_audit_rows_and_a_failure_beside_them() {
    let stack = &stack();
    let s = stack.register().await;
    let out = compare(stack, &s, &prompt(&["mock-model", "claude-slow", "gemini-slow", "dead-model"])).await;
    let results = out["results"].as_array().unwrap();
    assert_eq!(
        results.iter().map(|r| r["model"].as_str().unwrap()).collect::<Vec<_>>(),
        vec!["mock-model", "claude-slow", "gemini-slow", "dead-model"]
    );
    for r in &results[..3] {
        check_against_audit(s.org_id, r).await;
    }
    assert_eq!(results[1]["provider"], "anthropic-slow");
    assert_eq!(results[2]["provider"], "gemini-slow");
    // The slow first tokens show: the mock's 300 ms and 100 ms.
    assert!(results[1]["ttft_ms"].as_i64().unwrap() >= 300, "{}", results[1]);
    assert!(results[2]["ttft_ms"].as_i64().unwrap() >= 100, "{}", results[2]);
    let failed = &results[3];
    assert_eq!(failed["status"], 502, "{failed}");
    assert_eq!(failed["answer"], Value::Null);
    insta::assert_json_snapshot!(failed["error"], @r#"
    {
      "code": "upstream_unavailable",
      "message": "gw could not connect to upstream provider 'dead' (connection refused).",
      "param": null,
      "status": 502,
      "type": "api_error"
    }
    "#);
    // The comparison's key is the caller's, never listed with the organization's keys.
    let row = db::audit_row(s.org_id, results[0]["request_id"].as_str().unwrap().parse().unwrap()).await;
    let keys = stack.list_keys(&s.access_token, "").await;
    assert!(keys["data"].as_array().unwrap().iter().all(|k| k["id"] != json!(row.api_key_id)), "{keys}");
    let logged = stack.log_entry(&s, row.id).await;
    assert_eq!(logged["origin"], "playground");
}

#[tokio::test]
async fn streamed_each_model_arrives_as_it_finishes() {
    let stack = &stack();
    let s = stack.register().await;
    let mut body = prompt(&["claude-slow", "mock-model"]);
    body["stream"] = json!(true);
    let r = stack.admin_post("/playground/compare", &s.access_token, &body).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let text = r.text().await.unwrap();
    let events: Vec<Value> = sse_data(&text).iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(events.len(), 3, "{text}");
    // The built-in mock answers first although it was named second.
    assert_eq!(
        (events[0]["type"].as_str(), events[0]["model"].as_str(), events[0]["index"].as_u64()),
        (Some("result"), Some("mock-model"), Some(1))
    );
    assert_eq!(events[1]["model"], "claude-slow");
    assert_eq!(events[2], json!({"type": "done"}));
    check_against_audit(s.org_id, &events[1]).await;
}

#[tokio::test]
async fn a_model_the_caller_may_not_use_is_refused_as_on_v1() {
    let stack = &stack();
    let owner = stack.register().await;
    let team = stack.create_team(&owner, "narrow").await;
    let r = stack.admin_patch(&format!("/teams/{team}"), &owner.access_token, &json!({"models": ["mock-model"]})).await;
    assert_eq!(r.status(), 200);
    let mut body = prompt(&["mock-model", "gemini-slow"]);
    body["team_id"] = json!(team);
    let out = compare(stack, &owner, &body).await;
    check_against_audit(owner.org_id, &out["results"][0]).await;
    let refused = &out["results"][1];
    assert_eq!(refused["status"], 404);
    insta::assert_json_snapshot!(refused["error"], @r#"
    {
      "code": "model_not_found",
      "message": "The model 'gemini-slow' does not exist or you do not have access to it.",
      "param": "model",
      "status": 404,
      "type": "invalid_request_error"
    }
    "#);
    // A member may only spend a team's budget they belong to, and must name it.
    let member = stack.join(&owner, "member", &[]).await;
    let b = expect_api_error(stack.admin_post("/playground/compare", &member.access_token, &body).await, 403).await;
    assert_eq!(b["error"]["code"], "forbidden");
    let unscoped = prompt(&["mock-model", "gemini-slow"]);
    let b = expect_api_error(stack.admin_post("/playground/compare", &member.access_token, &unscoped).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "team_id");
    let own = stack.join(&owner, "member", &[team]).await;
    let out = compare(stack, &own, &body).await;
    check_against_audit(owner.org_id, &out["results"][0]).await;
}

#[tokio::test]
async fn a_template_version_is_compared_like_on_v1() {
    let stack = &stack();
    let s = stack.register().await;
    let t = json!({"name": "rivers", "messages": [{"role": "user", "content": "Name {{ n }} rivers."}],
                   "variables": {"n": {"type": "integer"}}});
    let t = json_of(stack.admin_post("/prompt-templates", &s.access_token, &t).await, 201).await;
    let body = json!({"models": ["mock-model", "gemini-slow"],
                      "prompt": {"id": t["id"], "version": 1, "variables": {"n": 3}}});
    let out = compare(stack, &s, &body).await;
    for r in out["results"].as_array().unwrap() {
        check_against_audit(s.org_id, r).await;
        let row = db::audit_row(s.org_id, r["request_id"].as_str().unwrap().parse().unwrap()).await;
        assert_eq!(
            (row.template_id.map(|i| i.to_string()), row.template_version),
            (t["id"].as_str().map(str::to_string), Some(1))
        );
    }
    let body = json!({"models": ["mock-model", "gemini-slow"], "prompt": {"id": t["id"], "variables": {}}});
    let out = compare(stack, &s, &body).await;
    assert_eq!(out["results"][0]["error"]["param"], "prompt.variables.n");
}

#[tokio::test]
async fn an_ill_formed_comparison_is_refused_naming_the_field() {
    let stack = &stack();
    let s = stack.register().await;
    let post = |body: Value| {
        let token = s.access_token.clone();
        async move { expect_api_error(stack.admin_post("/playground/compare", &token, &body).await, 400).await }
    };
    let b = post(prompt(&["mock-model"])).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "models",
            "message": "must name 2 to 8 models"
          }
        ],
        "message": "models: must name 2 to 8 models"
      }
    }
    "#);
    assert_eq!(post(prompt(&["a", "b", "a"])).await["error"]["fields"][0]["field"], "models[2]");
    assert_eq!(post(json!({"models": ["a", "b"]})).await["error"]["fields"][0]["field"], "messages");
    let mut reserved = prompt(&["a", "b"]);
    reserved["parameters"]["stream"] = json!(false);
    assert_eq!(post(reserved).await["error"]["fields"][0]["field"], "parameters.stream");
    let bad_ref = json!({"models": ["a", "b"], "prompt": {"id": "x"}});
    assert_eq!(post(bad_ref).await["error"]["fields"][0]["field"], "prompt.id");
    let r = stack
        .admin_post(
            "/playground/compare",
            &s.access_token,
            &json!({"models": ["a", "b"], "prompt": {"id": Uuid::now_v7()}}),
        )
        .await;
    expect_api_error(r, 404).await;
}
