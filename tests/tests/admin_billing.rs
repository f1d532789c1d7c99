//! `/api/v1/billing/checkout`, `/portal` and `/webhook`: the ways each refuses. What they do
//! (the provider's pages, signed events driving the plan, replays, ordering, air-gapped mode) is
//! in `tests/python/test_billing.py`; roles and tenant isolation in `admin_access.rs`. The shared
//! stack sells no plan and has no webhook secret; one stack of this file's own has both.

use gw_tests::{expect_api_error, Stack, StackOptions};
use serde_json::json;

const SECRET: &str = "whsec_admin_billing";

async fn webhook(stack: &Stack, signature: Option<String>, body: &str) -> reqwest::Response {
    let mut req = stack
        .http
        .post(format!("{}/api/v1/billing/webhook", stack.admin))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(s) = signature {
        req = req.header("stripe-signature", s);
    }
    req.send().await.unwrap()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[tokio::test]
async fn a_webhook_without_a_configured_secret_is_503() {
    let stack = Stack::shared().await;
    let r = webhook(&stack, Some("t=1,v1=00".into()), "{}").await;
    insta::assert_json_snapshot!(expect_api_error(r, 503).await, @r#"
    {
      "error": {
        "code": "unavailable",
        "fields": [],
        "message": "billing webhooks are not configured (STRIPE_WEBHOOK_SECRET)"
      }
    }
    "#);
}

#[tokio::test]
async fn checkout_of_a_plan_not_sold_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"plan": "growth", "success_url": "https://a.example/ok", "cancel_url": "https://a.example/no"});
    let r = stack.admin_post("/billing/checkout", &s.access_token, &body).await;
    insta::assert_json_snapshot!(expect_api_error(r, 400).await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "plan",
            "message": "no plan is sold on this gateway"
          }
        ],
        "message": "plan: no plan is sold on this gateway"
      }
    }
    "#);
}

#[tokio::test]
async fn a_portal_without_a_billing_account_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_post("/billing/portal", &s.access_token, &json!({"return_url": "https://a.example/"})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 409).await, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "the organization has no billing account yet: subscribe through POST /billing/checkout first"
      }
    }
    "#);
}

#[tokio::test]
async fn a_portal_return_url_that_is_not_absolute_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_post("/billing/portal", &s.access_token, &json!({"return_url": "/billing"})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 400).await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "return_url",
            "message": "must be an absolute https:// URL"
          }
        ],
        "message": "return_url: must be an absolute https:// URL"
      }
    }
    "#);
}

/// Every way the webhook refuses a body, on a stack holding a webhook secret.
#[tokio::test]
async fn the_webhook_refuses_unsigned_forged_stale_and_malformed_bodies() {
    let env = vec![("STRIPE_WEBHOOK_SECRET".to_string(), SECRET.to_string())];
    let stack = Stack::start_with(StackOptions { env, ..Default::default() }).await;
    let id = format!("evt_{}", uuid::Uuid::new_v4().simple());
    let body = json!({"id": id, "type": "invoice.paid", "created": now(), "data": {"object": {}}}).to_string();
    let sign =
        |secret: &str, t: i64, body: &str| gw_shared::billing::stripe_signature::sign(secret, t, body.as_bytes());

    let r = webhook(&stack, None, &body).await;
    insta::assert_json_snapshot!(expect_api_error(r, 400).await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [],
        "message": "the Stripe-Signature header is missing"
      }
    }
    "#);
    let r = webhook(&stack, Some(sign("whsec_forged", now(), &body)), &body).await;
    insta::assert_json_snapshot!(expect_api_error(r, 400).await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [],
        "message": "Stripe-Signature: no signature matches"
      }
    }
    "#);
    let r = webhook(&stack, Some(sign(SECRET, 1_000_000_000, &body)), &body).await;
    let e = expect_api_error(r, 400).await;
    assert!(e["error"]["message"].as_str().unwrap().ends_with("s away from now, more than the 300 s allowed"), "{e}");
    let r = webhook(&stack, Some("t=x,v1=00".into()), &body).await;
    insta::assert_json_snapshot!(expect_api_error(r, 400).await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [],
        "message": "Stripe-Signature: the Stripe-Signature header is malformed"
      }
    }
    "#);
    let not_an_event = r#"{"id":"evt_2"}"#;
    let r = webhook(&stack, Some(sign(SECRET, now(), not_an_event)), not_an_event).await;
    insta::assert_json_snapshot!(expect_api_error(r, 400).await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [],
        "message": "not a billing event: no type"
      }
    }
    "#);
    // The genuine one is taken, once.
    let r = webhook(&stack, Some(sign(SECRET, now(), &body)), &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap(), json!({"received": true, "outcome": "recorded"}));
    let r = webhook(&stack, Some(sign(SECRET, now(), &body)), &body).await;
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["outcome"], "duplicate");
}
