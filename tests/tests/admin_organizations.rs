//! `GET /api/v1/organizations/current`: the caller's organization, and the wall between session
//! tokens and everything else (API keys, garbage, forged or expired tokens). All on the test
//! binary's shared stack, each test with its own organization.

use gw_tests::{expect_api_error, expect_field_error, header, json_of, Stack};
use serde_json::{json, Value};

fn current_url(stack: &Stack) -> String {
    format!("{}/api/v1/organizations/current", stack.admin)
}

#[tokio::test]
async fn current_returns_the_callers_organization() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_get("/organizations/current", &s.access_token).await;
    assert_eq!(r.status(), 200);
    let org: Value = r.json().await.unwrap();
    assert_eq!(org["id"], s.org_id.to_string());
    assert_eq!(org["name"], "Test Org");
    assert_eq!(org["plan"], "free");
    assert!(org["data_residency"]["region"].is_string());
    assert!(org["metadata"].is_object());
    insta::assert_json_snapshot!("organization", &org, {
        ".id" => "[uuid]",
        ".created_at" => "[timestamp]",
        ".updated_at" => "[timestamp]",
    });
}

#[tokio::test]
async fn what_get_answers_can_be_patched_back() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack
        .admin_patch(
            "/organizations/current",
            &s.access_token,
            &json!({"budget": {"amount_usd": "250.5"}, "metadata": {"cc": "7"}}),
        )
        .await;
    let before = json_of(r, 200).await;
    let back = json_of(stack.admin_patch("/organizations/current", &s.access_token, &before).await, 200).await;
    for field in
        ["id", "name", "plan", "data_residency", "metadata", "budget", "rate_limits", "log_bodies", "created_at"]
    {
        assert_eq!(back[field], before[field], "{field}");
    }
    assert_eq!(back["budget"]["amount_usd"], "250.5");
    // A read-only field may come back unchanged, never changed.
    let mut changed = before.clone();
    changed["plan"] = json!("enterprise");
    let b =
        expect_field_error(stack.admin_patch("/organizations/current", &s.access_token, &changed).await, "plan", "")
            .await;
    assert!(b["error"]["message"].as_str().unwrap().contains("billing"), "{b}");
}

#[tokio::test]
async fn current_is_open_to_members() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_get("/organizations/current", &stack.join(&s, "member", &[]).await.access_token).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["id"], s.org_id.to_string());
}

#[tokio::test]
async fn current_with_a_wrong_method_is_405_with_allow() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.http.post(current_url(&stack)).bearer_auth(&s.access_token).send().await.unwrap();
    assert_eq!(header(&r, "allow"), "GET, PATCH");
    let b = expect_api_error(r, 405).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "method_not_allowed",
        "fields": [],
        "message": "method not allowed on this path; allowed: GET, PATCH"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "method_not_allowed");
}
