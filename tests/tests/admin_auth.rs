//! Registration, login, refresh rotation, and the wall between session tokens and API keys.

use gw_tests::Stack;
use serde_json::{json, Value};

async fn post(stack: &Stack, path: &str, body: Value) -> reqwest::Response {
    stack.http.post(format!("{}/api/v1{path}", stack.admin)).json(&body).send().await.unwrap()
}

async fn api_error(resp: reqwest::Response, status: u16) -> Value {
    assert_eq!(resp.status(), status);
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"]["code"].is_string() && body["error"]["message"].is_string(), "{body}");
    body
}

#[tokio::test]
async fn register_validates_and_rejects_duplicates() {
    let stack = Stack::start().await;
    let s = stack.register().await;
    let dup = post(
        &stack,
        "/auth/register",
        json!({"email": s.email.to_uppercase(), "password": "another password", "name": "X", "org_name": "Y"}),
    )
    .await;
    api_error(dup, 409).await;

    for bad in [
        json!({"email": "not-an-email", "password": "long enough pw", "name": "X", "org_name": "Y"}),
        json!({"email": "a@b.co", "password": "short", "name": "X", "org_name": "Y"}),
        json!({"email": "a@b.co", "password": "long enough pw", "name": " ", "org_name": "Y"}),
        json!({"email": "a@b.co", "password": "long enough pw", "name": "X"}),
        json!({"email": "a@b.co", "password": "long enough pw", "name": "X", "org_name": "Y", "plan": "enterprise"}),
    ] {
        api_error(post(&stack, "/auth/register", bad).await, 400).await;
    }
    let r = stack
        .http
        .post(format!("{}/api/v1/auth/register", stack.admin))
        .body("{oops")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    api_error(r, 400).await;
}

#[tokio::test]
async fn login_and_current_organization() {
    let stack = Stack::start().await;
    let s = stack.register().await;
    let ok = post(&stack, "/auth/login", json!({"email": s.email, "password": "correct horse battery"})).await;
    assert_eq!(ok.status(), 200);
    let tokens: Value = ok.json().await.unwrap();
    assert_eq!(tokens["token_type"], "Bearer");
    assert_eq!(tokens["role"], "owner");
    assert!(tokens["expires_in"].as_i64().unwrap() > 0);

    api_error(post(&stack, "/auth/login", json!({"email": s.email, "password": "wrong password!"})).await, 401).await;
    api_error(post(&stack, "/auth/login", json!({"email": "nobody@test.gw", "password": "whatever123"})).await, 401)
        .await;

    let org: Value = stack
        .http
        .get(format!("{}/api/v1/organizations/current", stack.admin))
        .bearer_auth(tokens["access_token"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(org["id"], s.org_id.to_string());
    assert_eq!(org["name"], "Test Org");
    assert_eq!(org["plan"], "free");
    assert!(org["data_residency"]["region"].is_string());
    assert!(org["metadata"].is_object());
}

#[tokio::test]
async fn refresh_rotates_and_reuse_revokes_the_family() {
    let stack = Stack::start().await;
    let s = stack.register().await;
    let r1 = post(&stack, "/auth/refresh", json!({"refresh_token": s.refresh_token})).await;
    assert_eq!(r1.status(), 200);
    let t1: Value = r1.json().await.unwrap();
    let next = t1["refresh_token"].as_str().unwrap().to_string();
    assert_ne!(next, s.refresh_token);
    assert!(t1["access_token"].is_string());

    // Presenting the already-rotated token again is reuse: the whole family dies.
    api_error(post(&stack, "/auth/refresh", json!({"refresh_token": s.refresh_token})).await, 401).await;
    api_error(post(&stack, "/auth/refresh", json!({"refresh_token": next})).await, 401).await;

    api_error(post(&stack, "/auth/refresh", json!({"refresh_token": "rt_garbage"})).await, 401).await;
}

#[tokio::test]
async fn api_keys_and_bad_tokens_are_refused_on_the_management_api() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    let url = format!("{}/api/v1/organizations/current", stack.admin);
    let b = api_error(stack.http.get(&url).bearer_auth(&key).send().await.unwrap(), 401).await;
    assert!(b["error"]["message"].as_str().unwrap().contains("API keys are not accepted"));
    api_error(stack.http.get(&url).send().await.unwrap(), 401).await;
    api_error(stack.http.get(&url).bearer_auth("eyJhbGciOiJIUzI1NiJ9.e30.bad").send().await.unwrap(), 401).await;
    // A token signed with another secret.
    let (forged, _) = gw_shared::jwt::issue_access_token(
        "not-the-secret-not-the-secret-xx",
        uuid::Uuid::new_v4(),
        uuid::Uuid::new_v4(),
        "owner",
        60,
    )
    .unwrap();
    api_error(stack.http.get(&url).bearer_auth(forged).send().await.unwrap(), 401).await;
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let stack = Stack::start().await;
    let r = stack.http.get(format!("{}/healthz", stack.admin)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = stack.http.get(format!("{}/readyz", stack.admin)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["checks"], json!({"postgres": "ok", "redis": "ok"}));
    let text = stack.http.get(format!("{}/metrics", stack.admin)).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("gw_admin_requests_total"), "{text}");
    let r = stack.http.get(format!("{}/api/v1/nope", stack.admin)).send().await.unwrap();
    api_error(r, 404).await;
}
