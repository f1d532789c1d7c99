//! Bad input and bad upstreams get a clear OpenAI-style error and the right status.

use gw_tests::{header, Stack, GW_HEADERS};
use serde_json::{json, Value};

async fn expect_error(resp: reqwest::Response, status: u16) -> Value {
    assert_eq!(resp.status(), status);
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h} on a {status}");
    }
    let body: Value = resp.json().await.unwrap();
    let err = body["error"].as_object().unwrap_or_else(|| panic!("no error object: {body}"));
    for f in ["message", "type", "param", "code"] {
        assert!(err.contains_key(f), "error lacks {f}: {body}");
    }
    assert!(!err["message"].as_str().unwrap().is_empty());
    body
}

async fn post_raw(stack: &Stack, key: Option<&str>, body: impl Into<reqwest::Body>) -> reqwest::Response {
    let mut req = stack.http.post(format!("{}/v1/chat/completions", stack.proxy)).body(body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn request_validation_errors() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;

    let b = expect_error(post_raw(&stack, Some(&key), "{\"model\": ").await, 400).await;
    assert_eq!(b["error"]["type"], "invalid_request_error");

    let b =
        expect_error(post_raw(&stack, Some(&key), r#"{"messages":[{"role":"user","content":"x"}]}"#).await, 400).await;
    assert_eq!(b["error"]["param"], "model");

    let b = expect_error(post_raw(&stack, Some(&key), r#"{"model":"gpt-4o-mini"}"#).await, 400).await;
    assert_eq!(b["error"]["param"], "messages");

    let b = expect_error(post_raw(&stack, Some(&key), r#"{"model":"gpt-4o-mini","messages":[]}"#).await, 400).await;
    assert_eq!(b["error"]["param"], "messages");

    let b = expect_error(
        post_raw(&stack, Some(&key), r#"{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}"#).await,
        404,
    )
    .await;
    assert_eq!(b["error"]["code"], "model_not_found");

    // The test config limits bodies to 64 KiB.
    let big = format!(r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"{}"}}]}}"#, "a".repeat(70_000));
    let b = expect_error(post_raw(&stack, Some(&key), big).await, 413).await;
    assert_eq!(b["error"]["code"], "request_too_large");

    // Wrong method and unknown path.
    let r = stack.http.get(format!("{}/v1/chat/completions", stack.proxy)).bearer_auth(&key).send().await.unwrap();
    expect_error(r, 405).await;
    let r = stack.http.get(format!("{}/v1/nope", stack.proxy)).bearer_auth(&key).send().await.unwrap();
    expect_error(r, 404).await;
}

#[tokio::test]
async fn body_over_the_limit_streamed_without_length_is_refused() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..20).map(|_| Ok(vec![b' '; 8192])).collect();
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let resp = post_raw(&stack, Some(&key), body).await;
    expect_error(resp, 413).await;
}

#[tokio::test]
async fn authorization_errors() {
    let stack = Stack::start().await;
    let body = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}"#;

    let b = expect_error(post_raw(&stack, None, body).await, 401).await;
    assert_eq!(b["error"]["code"], "invalid_api_key");

    let r = stack
        .http
        .post(format!("{}/v1/chat/completions", stack.proxy))
        .header("authorization", "Basic dXNlcjpwYXNz")
        .body(body)
        .send()
        .await
        .unwrap();
    expect_error(r, 401).await;

    let b =
        expect_error(post_raw(&stack, Some("sk_live_notARealKey000000000000000000000000000"), body).await, 401).await;
    assert!(!b["error"]["message"].as_str().unwrap().contains("notARealKey000000000000000000000000000"));

    // A session token is not an API key.
    let s = stack.register().await;
    let b = expect_error(post_raw(&stack, Some(&s.access_token), body).await, 401).await;
    assert!(b["error"]["message"].as_str().unwrap().contains("Session tokens"));
}

#[tokio::test]
async fn upstream_down_is_502_with_message() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.chat(&key, json!({"model": "dead-model", "messages": [{"role": "user", "content": "x"}]})).await;
    assert_eq!(header(&r, "x-gw-provider"), "dead");
    let b = expect_error(r, 502).await;
    assert_eq!(b["error"]["code"], "upstream_unavailable");
    assert!(b["error"]["message"].as_str().unwrap().contains("dead"));

    let r = stack
        .chat(&key, json!({"model": "dead-model", "stream": true, "messages": [{"role": "user", "content": "x"}]}))
        .await;
    expect_error(r, 502).await;
}

#[tokio::test]
async fn upstream_garbage_is_502() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    stack.mock_config(json!({"malformed": true})).await;
    let r = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]})).await;
    let b = expect_error(r, 502).await;
    assert_eq!(b["error"]["code"], "upstream_bad_response");

    let r = stack
        .chat(&key, json!({"model": "gpt-4o-mini", "stream": true, "messages": [{"role": "user", "content": "x"}]}))
        .await;
    let b = expect_error(r, 502).await;
    assert_eq!(b["error"]["code"], "upstream_bad_response");
}

#[tokio::test]
async fn upstream_client_error_passes_through_and_5xx_becomes_502() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    stack.mock_config(json!({"status": 400})).await;
    let r = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]})).await;
    let b = expect_error(r, 400).await;
    assert!(b["error"]["message"].as_str().unwrap().contains("mock upstream failure"));

    stack.mock_config(json!({"status": 500})).await;
    let r = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]})).await;
    expect_error(r, 502).await;

    stack.mock_config(json!({"status": 429})).await;
    let r = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]})).await;
    expect_error(r, 429).await;
}

#[tokio::test]
async fn proxy_exposes_prometheus_metrics() {
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.chat(&key, json!({"model": "mock-model", "messages": [{"role": "user", "content": "x"}]})).await;
    assert_eq!(r.status(), 200);
    let text = stack.http.get(format!("{}/metrics", stack.proxy_metrics)).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("gw_proxy_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 1"), "{text}");
}

#[tokio::test]
async fn hostile_model_names_cannot_wedge_the_audit_log() {
    let stack = Stack::start().await;
    let (session, key, _) = stack.org_with_key().await;
    // Postgres TEXT refuses NUL; a huge name must not bloat the row either.
    let nul = stack.chat(&key, json!({"model": "bad\u{0}model", "messages": [{"role": "user", "content": "x"}]})).await;
    let nul_id = uuid::Uuid::parse_str(header(&nul, "x-gw-request-id")).unwrap();
    expect_error(nul, 404).await;
    let long =
        stack.chat(&key, json!({"model": "m".repeat(10_000), "messages": [{"role": "user", "content": "x"}]})).await;
    expect_error(long, 404).await;
    let ok = stack.chat(&key, json!({"model": "mock-model", "messages": [{"role": "user", "content": "x"}]})).await;
    let ok_id = uuid::Uuid::parse_str(header(&ok, "x-gw-request-id")).unwrap();
    assert_eq!(ok.status(), 200);
    let row = gw_tests::db::audit_row(session.org_id, ok_id).await;
    assert_eq!(row.status_code, 200);
    let row = gw_tests::db::audit_row(session.org_id, nul_id).await;
    assert_eq!(row.status_code, 404);
    assert_eq!(row.model.as_deref(), Some("badmodel"));
}

#[tokio::test]
async fn idle_keepalive_connections_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stack = gw_tests::Stack::start_with(gw_tests::StackOptions {
        proxy_config: "keepalive_idle_secs = 1".into(),
        ..Default::default()
    })
    .await;
    let addr = stack.proxy.trim_start_matches("http://").to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    conn.write_all(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n").await.unwrap();
    // The 401 answer, read to its end.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&buf).contains("}}") {
        let n = conn.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed before the response");
        buf.extend_from_slice(&chunk[..n]);
    }
    assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 401"));
    // Idle past the limit: the proxy closes its end.
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), conn.read(&mut chunk))
        .await
        .expect("idle connection was kept open past keepalive_idle_secs")
        .unwrap_or(0);
    assert_eq!(n, 0);
}
