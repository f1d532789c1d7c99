//! The limits settings routes: budgets and rate limits on the organization, teams and keys are
//! validated field by field and removable, and `GET .../limits` reports the current period
//! (enforcement is `proxy_limits.rs`).

use gw_tests::{expect_api_error, json_of, Stack};
use serde_json::{json, Value};

#[tokio::test]
async fn limit_settings_are_validated_and_removable() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for (bad, field) in [
        (json!({"budget": {"amount_usd": -1, "period": "day"}}), "budget.amount_usd"),
        (json!({"budget": {"amount_usd": 1, "period": "year"}}), "budget.period"),
        (json!({"rate_limits": {"rpm": 0}}), "rate_limits.rpm"),
        (json!({"rate_limits": {}}), "rate_limits"),
        (json!({"rate_limits": {"models": {"m": {"tpm": 0}}}}), "rate_limits.models.m.tpm"),
    ] {
        let e = expect_api_error(stack.admin_patch("/organizations/current", &s.access_token, &bad).await, 400).await;
        assert_eq!(e["error"]["fields"][0]["field"], field, "{bad}: {e}");
    }
    let created = json_of(stack.create_key(&s, json!({"name": "limited"})).await, 201).await;
    let key_id = created["id"].as_str().unwrap();
    let v: Value = stack
        .admin_patch(
            &format!("/api-keys/{key_id}"),
            &s.access_token,
            &json!({"budget": {"amount_usd": 5, "period": "week"}}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["budget"]["alert_thresholds"], json!([50, 80, 95, 100]));
    let v: Value = stack.admin_get(&format!("/api-keys/{key_id}/limits"), &s.access_token).await.json().await.unwrap();
    assert_eq!((&v["budget"]["spend_usd"], &v["budget"]["amount_usd"]), (&json!("0"), &json!("5")));
    assert_eq!((&v["spend"]["period"], &v["spend"]["spend_usd"]), (&json!("week"), &json!("0")));
    assert!(v["budget"]["period_id"].as_str().unwrap().contains("-W"));
    let v: Value = stack
        .admin_patch(&format!("/api-keys/{key_id}"), &s.access_token, &json!({"budget": null}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["budget"], Value::Null);
    // Another organization's key is not found, not shown.
    let other = stack.register().await;
    let r = stack.admin_get(&format!("/api-keys/{key_id}/limits"), &other.access_token).await;
    assert_eq!(r.status(), 404);
}
