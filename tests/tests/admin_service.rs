//! gw-admin as a service: `/healthz`, `/readyz`, `/metrics`, unknown paths and methods. On the
//! test binary's shared stack.

use gw_tests::{expect_api_error, Stack};
use serde_json::{json, Value};

async fn metrics_text(stack: &Stack) -> String {
    stack.http.get(format!("{}/metrics", stack.admin)).send().await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn healthz_is_ok() {
    let stack = Stack::shared().await;
    let r = stack.http.get(format!("{}/healthz", stack.admin)).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn readyz_checks_both_stores() {
    let stack = Stack::shared().await;
    let r = stack.http.get(format!("{}/readyz", stack.admin)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["checks"], json!({"postgres": "ok", "redis": "ok"}));
}

#[tokio::test]
async fn metrics_are_exposed() {
    let stack = Stack::shared().await;
    let text = metrics_text(&stack).await;
    assert!(text.contains("gw_admin_requests_total"), "{text}");
}

#[tokio::test]
async fn unknown_api_path_is_404() {
    let stack = Stack::shared().await;
    let r = stack.http.get(format!("{}/api/v1/nope", stack.admin)).send().await.unwrap();
    let b = expect_api_error(r, 404).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "not_found",
        "fields": [],
        "message": "route not found"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "not_found");
}

#[tokio::test]
async fn exotic_method_is_refused_and_never_becomes_a_metric_label() {
    let stack = Stack::shared().await;
    let foobar = reqwest::Method::from_bytes(b"FOOBAR").unwrap();
    let r = stack.http.request(foobar.clone(), format!("{}/api/v1/api-keys", stack.admin)).send().await.unwrap();
    assert!(!r.status().is_server_error(), "{}", r.status());
    let b = expect_api_error(r, 405).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "method_not_allowed",
        "fields": [],
        "message": "method not allowed on this path; allowed: GET, POST"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "method_not_allowed");
    let r = stack.http.request(foobar, format!("{}/api/v1/nope", stack.admin)).send().await.unwrap();
    assert!(!r.status().is_server_error(), "{}", r.status());
    // A method a client makes up is counted, under `other`: it cannot mint new series.
    let text = metrics_text(&stack).await;
    assert!(!text.contains("FOOBAR"), "{text}");
    assert!(text.contains(r#"method="other""#), "{text}");
}
