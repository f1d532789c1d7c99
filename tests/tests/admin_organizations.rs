//! `GET /api/v1/organizations/current`: the caller's organization, and the wall between session
//! tokens and everything else (API keys, garbage, forged or expired tokens). All on the test
//! binary's shared stack, each test with its own organization.

use gw_tests::{expect_api_error, expect_field_error, expect_unauthorized, header, json_of, session_token, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

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
async fn current_without_credentials_is_401() {
    let stack = Stack::shared().await;
    expect_unauthorized(stack.http.get(current_url(&stack)).send().await.unwrap()).await;
}

#[tokio::test]
async fn current_with_an_api_key_is_401() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let b = expect_unauthorized(stack.http.get(current_url(&stack)).bearer_auth(&key).send().await.unwrap()).await;
    assert!(b["error"]["message"].as_str().unwrap().contains("API keys are not accepted"));
}

#[tokio::test]
async fn current_with_a_malformed_token_is_401() {
    let stack = Stack::shared().await;
    let r = stack.http.get(current_url(&stack)).bearer_auth("eyJhbGciOiJIUzI1NiJ9.e30.bad").send().await.unwrap();
    expect_unauthorized(r).await;
}

#[tokio::test]
async fn current_with_a_token_signed_by_another_secret_is_401() {
    let stack = Stack::shared().await;
    let (forged, _) = gw_shared::jwt::issue_access_token(
        "not-the-secret-not-the-secret-xx",
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
        "owner",
        60,
    )
    .unwrap();
    expect_unauthorized(stack.http.get(current_url(&stack)).bearer_auth(forged).send().await.unwrap()).await;
}

#[tokio::test]
async fn current_with_an_expired_token_is_401() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    // Expired a minute ago: beyond the verifier's few seconds of leeway.
    let expired = session_token(s.user_id, s.org_id, Uuid::new_v4(), "owner", -60);
    expect_unauthorized(stack.admin_get("/organizations/current", &expired).await).await;
}

#[tokio::test]
async fn current_with_a_wrong_method_is_405_with_allow() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.http.post(current_url(&stack)).bearer_auth(&s.access_token).send().await.unwrap();
    assert_eq!(header(&r, "allow"), "GET, PATCH");
    let b = expect_api_error(r, 405).await;
    assert_eq!(b["error"]["code"], "method_not_allowed");
}
