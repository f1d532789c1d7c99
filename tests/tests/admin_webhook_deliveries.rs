//! `/api/v1/organizations/current/webhooks/deliveries` (the history), `.../{delivery_id}/retry`,
//! `.../webhooks/{webhook_id}/test` and `/api/v1/auth/me/alerts`: the ways each refuses. What
//! they do is in `tests/python/test_webhook_deliveries.py`, `test_webhook_schedule.py` and
//! `test_webhook_events.py` (real receivers, the reference verifier, a controllable clock);
//! roles and tenant isolation in `admin_access.rs`.

use gw_tests::{db, expect_api_error, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

const DELIVERIES: &str = "/organizations/current/webhooks/deliveries";

async fn listed(stack: &Stack, token: &str, query: &str) -> Value {
    expect_api_error(stack.admin_get(&format!("{DELIVERIES}?{query}"), token).await, 400).await
}

#[tokio::test]
async fn an_unknown_status_filter_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    insta::assert_json_snapshot!(listed(&stack, &s.access_token, "status=lost").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "status",
            "message": "must be one of pending, succeeded, failed, dropped"
          }
        ],
        "message": "status: must be one of pending, succeeded, failed, dropped"
      }
    }
    "#);
}

#[tokio::test]
async fn an_unknown_event_type_filter_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let b = listed(&stack, &s.access_token, "event_type=budget.spent").await;
    assert_eq!(b["error"]["fields"][0]["field"], "event_type");
    assert!(b["error"]["message"].as_str().unwrap().starts_with("event_type: must be one of budget.threshold_crossed"));
}

#[tokio::test]
async fn a_range_ending_before_it_starts_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    insta::assert_json_snapshot!(listed(&stack, &s.access_token, "from=2026-01-02&to=2026-01-01").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "to",
            "message": "must be after from"
          }
        ],
        "message": "to: must be after from"
      }
    }
    "#);
}

#[tokio::test]
async fn a_malformed_time_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    insta::assert_json_snapshot!(listed(&stack, &s.access_token, "from=yesterday").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "from",
            "message": "must be an RFC 3339 time (2026-01-31T12:00:00Z) or a date (2026-01-31)"
          }
        ],
        "message": "from: must be an RFC 3339 time (2026-01-31T12:00:00Z) or a date (2026-01-31)"
      }
    }
    "#);
}

#[tokio::test]
async fn an_unknown_query_parameter_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    insta::assert_json_snapshot!(listed(&stack, &s.access_token, "colour=red").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "colour",
            "message": "is not a known field"
          }
        ],
        "message": "colour: is not a known field"
      }
    }
    "#);
}

#[tokio::test]
async fn retrying_an_unknown_delivery_is_404() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_post(&format!("{DELIVERIES}/{}/retry", Uuid::new_v4()), &s.access_token, &json!({})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 404).await, @r#"
    {
      "error": {
        "code": "not_found",
        "fields": [],
        "message": "webhook delivery not found"
      }
    }
    "#);
}

#[tokio::test]
async fn retrying_a_delivery_with_an_attempt_under_way_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"url": "https://93.184.216.34/hooks/gw", "event_types": ["webhook.test"]});
    let r = stack.admin_post("/organizations/current/webhooks", &s.access_token, &body).await;
    assert_eq!(r.status(), 201);
    let endpoint: Value = r.json().await.unwrap();
    // A delivery claimed (by a relay, as far as anyone can tell) for the next hour.
    let id = Uuid::new_v4();
    db::execute(&format!(
        "INSERT INTO webhook_deliveries (id, org_id, endpoint_id, event_id, event_type, body, claimed_until) \
         VALUES ('{id}', '{}', '{}', gen_random_uuid(), 'webhook.test', '{{}}', now() + interval '1 hour')",
        s.org_id,
        endpoint["id"].as_str().unwrap()
    ))
    .await;
    let r = stack.admin_post(&format!("{DELIVERIES}/{id}/retry"), &s.access_token, &json!({})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 409).await, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "an attempt at this delivery is under way; try again shortly"
      }
    }
    "#);
}

#[tokio::test]
async fn testing_an_unknown_endpoint_is_404() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack
        .admin_post(&format!("/organizations/current/webhooks/{}/test", Uuid::new_v4()), &s.access_token, &json!({}))
        .await;
    insta::assert_json_snapshot!(expect_api_error(r, 404).await, @r#"
    {
      "error": {
        "code": "not_found",
        "fields": [],
        "message": "webhook not found"
      }
    }
    "#);
}

#[tokio::test]
async fn choosing_no_alerts_at_all_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_put("/auth/me/alerts", &s.access_token, &json!({})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 400).await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [],
        "message": "nothing to update: send budget or security"
      }
    }
    "#);
}

#[tokio::test]
async fn an_unknown_alert_category_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_put("/auth/me/alerts", &s.access_token, &json!({"policy": true})).await;
    assert_eq!(expect_api_error(r, 400).await["error"]["code"], "validation_error");
}

#[tokio::test]
async fn a_member_choosing_alerts_is_403() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let member = stack.join(&owner, "member", &[]).await;
    let r = stack.admin_put("/auth/me/alerts", &member.access_token, &json!({"budget": true})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 403).await, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "this action needs the admin role or higher; you are member"
      }
    }
    "#);
    let r = stack.admin_get("/auth/me/alerts", &member.access_token).await;
    assert_eq!(r.status(), 200);
    let alerts: Value = r.json().await.unwrap();
    assert_eq!((alerts["budget"].clone(), alerts["security"].clone()), (json!(false), json!(false)));
}
