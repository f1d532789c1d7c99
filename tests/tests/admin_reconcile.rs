//! `/api/v1/analytics/reconcile`: a provider's own usage and cost reports put against what gw
//! logged, per model and UTC day. The mock upstream keeps a ledger per credential and serves
//! OpenAI's and Anthropic's report APIs from it (see `# Usage reports` in mock_upstream), so each
//! test makes real requests through gw with a provider key of its own, lets the mock price them
//! as gw does, and then reconciles: agreement, injected token and cost differences, paging over
//! a quarter, runs read back and listed, and each way a run is refused. All on the test binary's
//! shared stack, each test with its own organization and credential. A run straddling midnight
//! UTC may see a request on another day on each side; the tests reconcile today only.

use std::str::FromStr;

use chrono::{Days, Utc};
use gw_shared::audit::AuditRecord;
use gw_shared::db::reconcile_runs;
use gw_tests::{db, expect_api_error, expect_field_error, header, unique_tag, user_message, Session, Stack};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;

/// What gw's `gpt-4o-mini` sends to provider `upstream` (kind openai), and gw's prices for it
/// (the test config's `[pricing]`).
const OPENAI_MODEL: &str = "gpt-4o-mini-2024-07-18";
const OPENAI_PRICES: (&str, &str, &str) = ("0.15", "0.60", "0.15");
/// What gw's `claude-test` sends to provider `anthropic` (kind anthropic), and gw's prices.
const ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
const ANTHROPIC_PRICES: (&str, &str, &str) = ("3", "15", "0.3");

fn today() -> String {
    Utc::now().date_naive().to_string()
}

fn days_from_today(back: u64, ahead: u64) -> String {
    let d = Utc::now().date_naive() - Days::new(back) + Days::new(ahead);
    d.to_string()
}

/// A provider credential of the test's own: the mock keeps a ledger per credential.
fn new_secret() -> String {
    format!("sk-recon-{}", Uuid::new_v4().simple())
}

/// Gives the mock gw's prices for `model`, so that both sides cost a request alike. Every test
/// sets the same prices, so sharing the mock's price table is harmless.
async fn price_like_gw(stack: &Stack, model: &str, (input, output, cached): (&str, &str, &str)) {
    let body = json!({model: {"input_per_mtok": input, "output_per_mtok": output, "cached_input_per_mtok": cached}});
    let r = stack.http.post(format!("{}/_mock/usage/prices", stack.mock)).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 204, "setting the mock's prices");
}

/// Adds to the mock's ledger (a discrepancy the provider reports and gw never logged).
async fn adjust(stack: &Stack, body: Value) {
    let r = stack.http.post(format!("{}/_mock/usage/adjust", stack.mock)).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 204, "adjusting the mock's ledger with {body}");
}

/// Registers `secret` as the organization's key for `provider`; returns the key's id.
async fn add_provider_key(stack: &Stack, s: &Session, provider: &str, secret: &str) -> String {
    let body = json!({"provider": provider, "name": "reconcile", "secret": secret});
    let r = stack.admin_post("/provider-keys", &s.access_token, &body).await;
    assert_eq!(r.status(), 201, "adding a {provider} key");
    let v: Value = r.json().await.unwrap();
    v["id"].as_str().unwrap().to_string()
}

/// Sends `plain` plain and `streamed` streamed chats to `model` through gw, and returns their
/// audit rows once written.
async fn chats(stack: &Stack, s: &Session, key: &str, model: &str, plain: usize, streamed: usize) -> Vec<AuditRecord> {
    let tag = unique_tag();
    let mut ids = Vec::new();
    for i in 0..plain + streamed {
        let prompt = format!("reconcile {tag} request {i}: count these words please");
        let body = json!({"model": model, "messages": user_message(&prompt), "stream": i >= plain});
        let r = stack.chat(key, body).await;
        assert_eq!(r.status(), 200, "chat {i} to {model}");
        let id: Uuid = header(&r, "x-gw-request-id").parse().unwrap();
        // The audit row is written once the answer (a stream included) has been sent whole.
        r.text().await.unwrap();
        ids.push(id);
    }
    let mut rows = Vec::new();
    for id in ids {
        rows.push(db::audit_row(s.org_id, id).await);
    }
    rows
}

/// What a run's `logged` shows for `rows` (all of one model, today).
fn logged_entry(rows: &[AuditRecord], model: &str) -> Value {
    let sum = |f: fn(&AuditRecord) -> i32| rows.iter().map(|r| i64::from(f(r))).sum::<i64>();
    let (input, output, cached) = (sum(|r| r.prompt_tokens), sum(|r| r.completion_tokens), sum(|r| r.cached_tokens));
    let cost: Decimal = rows.iter().map(|r| r.cost_usd).sum();
    json!({"model": model, "day": today(), "requests": rows.len(), "input_tokens": input, "output_tokens": output,
           "cached_tokens": cached, "cost_usd": cost.normalize().to_string()})
}

async fn reconcile(stack: &Stack, s: &Session, body: Value) -> reqwest::Response {
    stack.admin_post("/analytics/reconcile", &s.access_token, &body).await
}

/// A run that must succeed: its body.
async fn reconciled(stack: &Stack, s: &Session, body: Value) -> Value {
    let r = reconcile(stack, s, body).await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 201, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// An organization whose requests to `provider` go out with a credential of its own, priced
/// alike on both sides: (session, gw API key, the provider credential).
async fn org_with_provider_key(stack: &Stack, provider: &str) -> (Session, String, String) {
    let (s, key, _) = stack.org_with_key().await;
    let secret = new_secret();
    add_provider_key(stack, &s, provider, &secret).await;
    (s, key, secret)
}

// ---- agreement ----

#[tokio::test]
async fn a_provider_that_agrees_with_the_log_matches() {
    let stack = Stack::shared().await;
    price_like_gw(&stack, OPENAI_MODEL, OPENAI_PRICES).await;
    let (s, key, secret) = org_with_provider_key(&stack, "upstream").await;
    let rows = chats(&stack, &s, &key, "gpt-4o-mini", 2, 2).await;
    for r in &rows {
        assert_eq!(r.provider.as_deref(), Some("upstream"));
        assert_eq!(r.routing[0]["credential"], "organization", "the request went out with the org's key");
    }

    let run = reconciled(&stack, &s, json!({"provider": "upstream", "from": today()})).await;
    assert_eq!(run["matched"], true, "{run}");
    assert_eq!(run["discrepancies"], json!([]));
    assert_eq!(run["logged"], json!([logged_entry(&rows, OPENAI_MODEL)]));
    assert_eq!(run["reported"], run["logged"], "OpenAI counts requests too");
    assert_eq!(run["provider"], "upstream");
    assert_eq!((&run["from"], &run["to"]), (&json!(today()), &json!(days_from_today(0, 1))));
    assert_eq!(run["created_by"], s.user_id.to_string());

    // Read back whole, and stored for this organization.
    let id = run["id"].as_str().unwrap().to_string();
    let r = stack.admin_get(&format!("/analytics/reconcile/{id}"), &s.access_token).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), run);
    let mut conn = db::connect().await;
    let stored = reconcile_runs::find(&mut conn, s.org_id, id.parse().unwrap()).await.unwrap().expect("the run");
    assert_eq!((stored.provider.as_str(), stored.created_by), ("upstream", Some(s.user_id)));
    assert_eq!(stored.discrepancies, json!([]));

    // The trail names the run and where its credential came from, not the credential.
    let r = stack.admin_get("/audit-events?action=analytics.reconcile", &s.access_token).await;
    assert_eq!(r.status(), 200);
    let events: Value = r.json().await.unwrap();
    let event = &events["data"][0];
    assert_eq!(event["resource_type"], "reconcile_run");
    assert_eq!(event["resource_id"], id.as_str());
    assert_eq!(event["detail"]["provider"], "upstream");
    assert_eq!(event["detail"]["credential"], "provider_key");
    assert_eq!(event["detail"]["discrepancies"], 0);
    assert!(!events.to_string().contains(&secret));
}

#[tokio::test]
async fn an_admin_key_in_the_request_is_used_and_stored_nowhere() {
    let stack = Stack::shared().await;
    price_like_gw(&stack, OPENAI_MODEL, OPENAI_PRICES).await;
    let (s, key, _) = stack.org_with_key().await;
    let secret = new_secret();
    let key_id = add_provider_key(&stack, &s, "upstream", &secret).await;
    let rows = chats(&stack, &s, &key, "gpt-4o-mini", 1, 0).await;
    // Without a live provider key, the run can only have used the key sent with it.
    assert_eq!(stack.admin_delete(&format!("/provider-keys/{key_id}"), &s.access_token).await.status(), 204);

    let run = reconciled(&stack, &s, json!({"provider": "upstream", "from": today(), "admin_key": secret})).await;
    assert_eq!(run["matched"], true, "{run}");
    assert_eq!(run["reported"], json!([logged_entry(&rows, OPENAI_MODEL)]));

    let id: Uuid = run["id"].as_str().unwrap().parse().unwrap();
    let mut conn = db::connect().await;
    let stored = reconcile_runs::find(&mut conn, s.org_id, id).await.unwrap().expect("the run");
    let text = format!("{stored:?}");
    assert!(!text.contains(&secret), "the admin key was stored: {text}");
    let events: Value =
        stack.admin_get("/audit-events?action=analytics.reconcile", &s.access_token).await.json().await.unwrap();
    assert_eq!(events["data"][0]["detail"]["credential"], "admin_key");
    assert!(!events.to_string().contains(&secret), "the admin key is in the trail: {events}");
}

#[tokio::test]
async fn anthropic_reports_are_reconciled_without_request_counts() {
    let stack = Stack::shared().await;
    price_like_gw(&stack, ANTHROPIC_MODEL, ANTHROPIC_PRICES).await;
    let (s, key, secret) = org_with_provider_key(&stack, "anthropic").await;
    let rows = chats(&stack, &s, &key, "claude-test", 1, 1).await;
    for r in &rows {
        assert_eq!(r.provider.as_deref(), Some("anthropic"));
        assert_eq!(r.routing[0]["credential"], "organization");
    }

    let run =
        reconciled(&stack, &s, json!({"provider": "anthropic", "from": today(), "to": days_from_today(0, 1)})).await;
    assert_eq!(run["matched"], true, "{run}");
    let logged = logged_entry(&rows, ANTHROPIC_MODEL);
    assert_eq!(run["logged"], json!([logged]));
    // Anthropic's reports count tokens and money, not requests.
    let mut reported = logged.clone();
    reported["requests"] = Value::Null;
    assert_eq!(run["reported"], json!([reported]));

    adjust(&stack, json!({"credential": secret, "model": ANTHROPIC_MODEL, "day": today(), "input_tokens": 7})).await;
    let run = reconciled(&stack, &s, json!({"provider": "anthropic", "from": today()})).await;
    assert_eq!(run["matched"], false);
    let input = logged["input_tokens"].as_i64().unwrap();
    assert_eq!(
        run["discrepancies"],
        json!([{"model": ANTHROPIC_MODEL, "day": today(), "field": "input_tokens",
                "logged": input.to_string(), "reported": (input + 7).to_string(), "difference": "7"}])
    );
}

// ---- discrepancies ----

#[tokio::test]
async fn tokens_the_provider_counts_beyond_the_log_are_one_discrepancy() {
    let stack = Stack::shared().await;
    price_like_gw(&stack, OPENAI_MODEL, OPENAI_PRICES).await;
    let (s, key, secret) = org_with_provider_key(&stack, "upstream").await;
    let rows = chats(&stack, &s, &key, "gpt-4o-mini", 1, 1).await;
    adjust(&stack, json!({"credential": secret, "model": OPENAI_MODEL, "day": today(), "input_tokens": 7})).await;

    let run = reconciled(&stack, &s, json!({"provider": "upstream", "from": today()})).await;
    assert_eq!(run["matched"], false);
    let logged = logged_entry(&rows, OPENAI_MODEL);
    assert_eq!(run["logged"], json!([logged]));
    let input = logged["input_tokens"].as_i64().unwrap();
    assert_eq!(
        run["discrepancies"],
        json!([{"model": OPENAI_MODEL, "day": today(), "field": "input_tokens",
                "logged": input.to_string(), "reported": (input + 7).to_string(), "difference": "7"}])
    );
    assert_eq!(run["reported"][0]["input_tokens"], input + 7);

    let events: Value =
        stack.admin_get("/audit-events?action=analytics.reconcile", &s.access_token).await.json().await.unwrap();
    assert_eq!(events["data"][0]["detail"]["discrepancies"], 1);
}

#[tokio::test]
async fn a_cost_the_provider_charges_beyond_the_log_is_one_exact_discrepancy() {
    let stack = Stack::shared().await;
    price_like_gw(&stack, OPENAI_MODEL, OPENAI_PRICES).await;
    let (s, key, secret) = org_with_provider_key(&stack, "upstream").await;
    let rows = chats(&stack, &s, &key, "gpt-4o-mini", 2, 1).await;
    adjust(&stack, json!({"credential": secret, "model": OPENAI_MODEL, "day": today(), "cost": "0.0000001"})).await;

    let run = reconciled(&stack, &s, json!({"provider": "upstream", "from": today()})).await;
    assert_eq!(run["matched"], false);
    let logged: Decimal = rows.iter().map(|r| r.cost_usd).sum();
    let reported = logged + Decimal::from_str("0.0000001").unwrap();
    assert_eq!(
        run["discrepancies"],
        json!([{"model": OPENAI_MODEL, "day": today(), "field": "cost_usd",
                "logged": logged.normalize().to_string(), "reported": reported.normalize().to_string(),
                "difference": "0.0000001"}])
    );
}

// ---- periods, pages and lists ----

#[tokio::test]
async fn a_quarter_is_read_across_report_pages() {
    let stack = Stack::shared().await;
    let (s, _, _) = stack.org_with_key().await;
    // 93 days: three pages of 31 per report. A credential nobody used reports nothing, as the
    // organization's empty log does.
    let body = json!({"provider": "upstream", "from": days_from_today(92, 0), "to": days_from_today(0, 1), "admin_key": new_secret()});
    let run = reconciled(&stack, &s, body).await;
    assert_eq!(run["matched"], true, "{run}");
    assert_eq!((&run["logged"], &run["reported"]), (&json!([]), &json!([])));
    assert_eq!(run["from"], days_from_today(92, 0));
}

#[tokio::test]
async fn runs_are_listed_newest_first_in_pages() {
    let stack = Stack::shared().await;
    let (s, _, _) = stack.org_with_key().await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let run =
            reconciled(&stack, &s, json!({"provider": "upstream", "from": today(), "admin_key": new_secret()})).await;
        ids.push(run["id"].as_str().unwrap().to_string());
    }

    let r = stack.admin_get("/analytics/reconcile?limit=1", &s.access_token).await;
    assert_eq!(r.status(), 200);
    let page: Value = r.json().await.unwrap();
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    let first = &page["data"][0];
    assert_eq!(first["id"], ids[1].as_str());
    assert_eq!(first["provider"], "upstream");
    assert_eq!(first["matched"], true);
    assert_eq!(first["discrepancy_count"], 0);
    assert_eq!(page["next_cursor"], ids[1].as_str());

    let cursor = page["next_cursor"].as_str().unwrap();
    let page: Value =
        stack.admin_get(&format!("/analytics/reconcile?cursor={cursor}"), &s.access_token).await.json().await.unwrap();
    let listed: Vec<&str> = page["data"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(listed, vec![ids[0].as_str()]);
    assert_eq!(page["next_cursor"], Value::Null);

    expect_field_error(stack.admin_get("/analytics/reconcile?limit=0", &s.access_token).await, "limit", "").await;
}

// ---- refusals ----

#[tokio::test]
async fn an_unknown_provider_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let b =
        expect_field_error(reconcile(&stack, &s, json!({"provider": "nope", "from": today()})).await, "provider", "")
            .await;
    let message = b["error"]["message"].as_str().unwrap();
    assert!(message.contains("upstream") && message.contains("anthropic"), "names those that can: {message}");
}

#[tokio::test]
async fn a_provider_kind_without_usage_reports_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = reconcile(&stack, &s, json!({"provider": "gemini", "from": today(), "admin_key": new_secret()})).await;
    let b = expect_field_error(r, "provider", "").await;
    let message = b["error"]["message"].as_str().unwrap();
    assert!(message.contains("gemini") && message.contains("openai, anthropic"), "{message}");
}

#[tokio::test]
async fn a_to_not_after_from_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"provider": "upstream", "from": today(), "to": today(), "admin_key": new_secret()});
    expect_field_error(reconcile(&stack, &s, body).await, "to", "").await;
}

#[tokio::test]
async fn a_period_over_93_days_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"provider": "upstream", "from": days_from_today(93, 0), "to": days_from_today(0, 1), "admin_key": new_secret()});
    expect_field_error(reconcile(&stack, &s, body).await, "to", "").await;
}

#[tokio::test]
async fn a_period_ending_after_today_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"provider": "upstream", "from": today(), "to": days_from_today(0, 2), "admin_key": new_secret()});
    expect_field_error(reconcile(&stack, &s, body).await, "to", "").await;
    let body = json!({"provider": "upstream", "from": days_from_today(0, 1), "admin_key": new_secret()});
    expect_field_error(reconcile(&stack, &s, body).await, "from", "").await;
}

#[tokio::test]
async fn a_malformed_body_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"provider": "upstream", "from": "01/02/2026", "admin_key": new_secret()});
    expect_field_error(reconcile(&stack, &s, body).await, "from", "").await;
    let body = json!({"provider": "upstream", "from": today(), "secret": new_secret()});
    let b = expect_api_error(reconcile(&stack, &s, body).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "secret",
            "message": "is not a known field"
          }
        ],
        "message": "secret: is not a known field"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "validation_error");
}

#[tokio::test]
async fn without_an_admin_key_or_a_provider_key_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let b = expect_api_error(reconcile(&stack, &s, json!({"provider": "upstream", "from": today()})).await, 400).await;
    assert_eq!(b["error"]["code"], "validation_error");
    assert_eq!(b["error"]["message"], "no admin key: pass admin_key or add a provider key for upstream");
}

#[tokio::test]
async fn an_unreachable_provider_is_502_and_nothing_is_stored() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let secret = new_secret();
    // Provider `dead` is of kind openai at an address where nothing listens.
    let r = reconcile(&stack, &s, json!({"provider": "dead", "from": today(), "admin_key": secret})).await;
    let b = expect_api_error(r, 502).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "bad_gateway",
        "fields": [],
        "message": "provider \"dead\", usage report: could not connect"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "bad_gateway");
    let message = b["error"]["message"].as_str().unwrap();
    assert!(message.contains("dead") && message.contains("could not connect"), "{message}");
    assert!(!b.to_string().contains(&secret));

    let list: Value = stack.admin_get("/analytics/reconcile", &s.access_token).await.json().await.unwrap();
    assert_eq!(list["data"], json!([]));
}

#[tokio::test]
async fn members_and_viewers_are_403() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let body = json!({"provider": "upstream", "from": today(), "admin_key": new_secret()});
    let run = reconciled(&stack, &owner, body.clone()).await;
    let id = run["id"].as_str().unwrap();
    for role in ["member", "viewer"] {
        let s = stack.join(&owner, role, &[]).await;
        let b = expect_api_error(reconcile(&stack, &s, body.clone()).await, 403).await;
        assert_eq!(b["error"]["code"], "forbidden", "{role} reconciling");
        for path in ["/analytics/reconcile".to_string(), format!("/analytics/reconcile/{id}")] {
            let b = expect_api_error(stack.admin_get(&path, &s.access_token).await, 403).await;
            assert_eq!(b["error"]["code"], "forbidden", "{role} on {path}");
        }
    }
    // An admin may.
    let admin = stack.join(&owner, "admin", &[]).await;
    assert_eq!(stack.admin_get(&format!("/analytics/reconcile/{id}"), &admin.access_token).await.status(), 200);
}

#[tokio::test]
async fn another_organizations_run_is_404() {
    let stack = Stack::shared().await;
    let mine = stack.register().await;
    let theirs = stack.register().await;
    let run =
        reconciled(&stack, &theirs, json!({"provider": "upstream", "from": today(), "admin_key": new_secret()})).await;
    let id = run["id"].as_str().unwrap();

    let b =
        expect_api_error(stack.admin_get(&format!("/analytics/reconcile/{id}"), &mine.access_token).await, 404).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "not_found",
        "fields": [],
        "message": "reconcile run not found"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "not_found");
    let list: Value = stack.admin_get("/analytics/reconcile", &mine.access_token).await.json().await.unwrap();
    assert_eq!(list["data"], json!([]));
    let unknown = Uuid::now_v7();
    let r = stack.admin_get(&format!("/analytics/reconcile/{unknown}"), &mine.access_token).await;
    expect_api_error(r, 404).await;
    // Still theirs.
    assert_eq!(stack.admin_get(&format!("/analytics/reconcile/{id}"), &theirs.access_token).await.status(), 200);
}
