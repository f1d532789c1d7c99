//! `/api/v1/auth`: register, login, refresh-token rotation, each with the ways it is refused. All
//! on the test binary's shared stack, each test with its own organization.

use gw_tests::{expect_api_error, header, Stack, PASSWORD};
use serde_json::{json, Value};

async fn post(stack: &Stack, path: &str, body: Value) -> reqwest::Response {
    stack.http.post(format!("{}/api/v1{path}", stack.admin)).json(&body).send().await.unwrap()
}

// ---- POST /auth/register ----

#[tokio::test]
async fn register_creates_an_org_and_returns_tokens() {
    let stack = Stack::shared().await;
    let email = format!("reg-{}@test.gw", uuid::Uuid::new_v4());
    let r = post(
        &stack,
        "/auth/register",
        json!({"email": email, "password": PASSWORD, "name": "New Owner", "org_name": "New Org"}),
    )
    .await;
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["user"]["email"], email);
    assert_eq!(body["role"], "owner");
    insta::assert_json_snapshot!("register_response", &body, {
        ".access_token" => "[jwt]",
        ".refresh_token" => "[refresh token]",
        ".user.id" => "[uuid]",
        ".user.email" => "[email]",
        ".organization.id" => "[uuid]",
    });
}

#[tokio::test]
async fn register_with_a_taken_email_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    // E-mail addresses compare case-insensitively.
    let dup = post(
        &stack,
        "/auth/register",
        json!({"email": s.email.to_uppercase(), "password": "another password", "name": "X", "org_name": "Y"}),
    )
    .await;
    let b = expect_api_error(dup, 409).await;
    assert_eq!(b["error"]["code"], "conflict");
}

#[tokio::test]
async fn register_with_invalid_fields_is_400() {
    let stack = Stack::shared().await;
    for bad in [
        json!({"email": "not-an-email", "password": "long enough pw", "name": "X", "org_name": "Y"}),
        json!({"email": "a@b.co", "password": "short", "name": "X", "org_name": "Y"}),
        json!({"email": "a@b.co", "password": "long enough pw", "name": " ", "org_name": "Y"}),
        json!({"email": "a@b.co", "password": "long enough pw", "name": "X"}),
        json!({"email": "a@b.co", "password": "long enough pw", "name": "X", "org_name": "Y", "plan": "enterprise"}),
    ] {
        let r = post(&stack, "/auth/register", bad.clone()).await;
        assert_eq!(r.status(), 400, "{bad}");
        let b = expect_api_error(r, 400).await;
        assert_eq!(b["error"]["code"], "validation_error", "{bad}");
    }
}

#[tokio::test]
async fn register_with_malformed_json_is_400() {
    let stack = Stack::shared().await;
    let r = stack
        .http
        .post(format!("{}/api/v1/auth/register", stack.admin))
        .body("{oops")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    expect_api_error(r, 400).await;
}

#[tokio::test]
async fn register_with_a_wrong_method_is_405_with_allow() {
    let stack = Stack::shared().await;
    let r = stack.http.get(format!("{}/api/v1/auth/register", stack.admin)).send().await.unwrap();
    assert_eq!(header(&r, "allow"), "POST");
    let b = expect_api_error(r, 405).await;
    assert_eq!(b["error"]["code"], "method_not_allowed");
}

// ---- POST /auth/login ----

#[tokio::test]
async fn login_returns_tokens_for_the_users_org() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let ok = post(&stack, "/auth/login", json!({"email": s.email, "password": PASSWORD})).await;
    assert_eq!(ok.status(), 200);
    let tokens: Value = ok.json().await.unwrap();
    assert_eq!(tokens["token_type"], "Bearer");
    assert_eq!(tokens["role"], "owner");
    assert!(tokens["expires_in"].as_i64().unwrap() > 0);

    // The access token acts in the user's organization.
    let r = stack.admin_get("/organizations/current", tokens["access_token"].as_str().unwrap()).await;
    assert_eq!(r.status(), 200);
    let org: Value = r.json().await.unwrap();
    assert_eq!(org["id"], s.org_id.to_string());
    assert_eq!(org["name"], "Test Org");
    assert_eq!(org["plan"], "free");
    assert!(org["data_residency"]["region"].is_string());
    assert!(org["metadata"].is_object());
}

#[tokio::test]
async fn login_with_a_wrong_password_is_401() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = post(&stack, "/auth/login", json!({"email": s.email, "password": "wrong password!"})).await;
    let b = expect_api_error(r, 401).await;
    assert_eq!(b["error"]["code"], "unauthorized");
}

#[tokio::test]
async fn login_with_an_unknown_email_is_401() {
    let stack = Stack::shared().await;
    let r = post(&stack, "/auth/login", json!({"email": "nobody@test.gw", "password": "whatever123"})).await;
    let b = expect_api_error(r, 401).await;
    assert_eq!(b["error"]["code"], "unauthorized");
}

// ---- POST /auth/refresh ----

#[tokio::test]
async fn refresh_rotates_the_refresh_token() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r1 = post(&stack, "/auth/refresh", json!({"refresh_token": s.refresh_token})).await;
    assert_eq!(r1.status(), 200);
    let t1: Value = r1.json().await.unwrap();
    let next = t1["refresh_token"].as_str().unwrap().to_string();
    assert_ne!(next, s.refresh_token);
    assert!(t1["access_token"].is_string());
    // The new one works in turn.
    let r2 = post(&stack, "/auth/refresh", json!({"refresh_token": next})).await;
    assert_eq!(r2.status(), 200);
}

#[tokio::test]
async fn refresh_token_reuse_revokes_the_family() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r1 = post(&stack, "/auth/refresh", json!({"refresh_token": s.refresh_token})).await;
    assert_eq!(r1.status(), 200);
    let next = r1.json::<Value>().await.unwrap()["refresh_token"].as_str().unwrap().to_string();
    // Presenting the already-rotated token again is reuse: the whole family dies.
    expect_api_error(post(&stack, "/auth/refresh", json!({"refresh_token": s.refresh_token})).await, 401).await;
    expect_api_error(post(&stack, "/auth/refresh", json!({"refresh_token": next})).await, 401).await;
}

#[tokio::test]
async fn refresh_with_an_unknown_token_is_401() {
    let stack = Stack::shared().await;
    expect_api_error(post(&stack, "/auth/refresh", json!({"refresh_token": "rt_garbage"})).await, 401).await;
}
