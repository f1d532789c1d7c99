//! The proxy as a server, beyond any one endpoint: idle keep-alive connections, SIGTERM drain,
//! what latency/TTFT headers measure, unknown URLs, Prometheus metrics. The tests that need a
//! config of their own, an exact metric count or to stop the proxy start private stacks.

use std::time::Duration;

use gw_tests::{db, expect_openai_error, header, user_message, Stack, StackOptions};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

#[tokio::test]
async fn idle_keepalive_connections_are_closed() {
    let opts = StackOptions { proxy_config: "keepalive_idle_secs = 1".into(), ..Default::default() };
    let stack = Stack::start_with(opts).await;
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
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut chunk))
        .await
        .expect("idle connection was kept open past keepalive_idle_secs")
        .unwrap_or(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn sigterm_flushes_every_audit_row() {
    // A flush interval far longer than the test: only the shutdown drain can write these rows.
    let opts = StackOptions { proxy_config: "audit_flush_interval_ms = 600000".into(), ..Default::default() };
    let stack = Stack::start_with(opts).await;
    let (session, key, _) = stack.org_with_key().await;
    let mut ids = Vec::new();
    for i in 0..40 {
        let body = json!({"model": "mock-model", "messages": user_message(&format!("req {i}"))});
        let resp = stack.chat(&key, body).await;
        assert_eq!(resp.status(), 200);
        ids.push(Uuid::parse_str(header(&resp, "x-gw-request-id")).unwrap());
    }
    // Stop the proxy right away: whatever is still queued must be written on the way out.
    stack.terminate_proxy().await;
    let mut conn = db::connect().await;
    for id in ids {
        let row = gw_shared::db::audit_logs::find(&mut conn, session.org_id, id).await.unwrap();
        assert!(row.is_some(), "audit row {id} lost at shutdown");
    }
}

#[tokio::test]
async fn latency_and_ttft_headers_measure_the_upstream() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    // The upstream takes 120 ms before its header and 150 ms more before the first chunk.
    let knobs = json!({"latency_ms": 120, "ttft_ms": 150});
    let resp = stack
        .chat(&key, json!({"model": "gpt-4o-mini", "messages": user_message("slow"), "stream": true, "mock": knobs}))
        .await;
    assert_eq!(resp.status(), 200);
    let ttft: u64 = header(&resp, "x-gw-ttft-ms").parse().unwrap();
    assert!(ttft >= 270, "ttft {ttft} ms is below the upstream's own 270 ms");
    let _ = resp.text().await.unwrap();

    let resp = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": user_message("slow"), "mock": knobs})).await;
    let latency: u64 = header(&resp, "x-gw-latency-ms").parse().unwrap();
    assert!(latency >= 120, "latency {latency} ms is below the upstream's own 120 ms");
}

#[tokio::test]
async fn unknown_url_is_404() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.http.get(format!("{}/v1/nope", stack.proxy)).bearer_auth(&key).send().await.unwrap();
    insta::assert_json_snapshot!(expect_openai_error(r, 404).await, @r#"
    {
      "error": {
        "code": "unknown_url",
        "message": "Unknown request URL: GET /v1/nope. Supported: GET /v1/models, POST /v1/chat/completions, POST /v1/embeddings.",
        "param": null,
        "type": "invalid_request_error"
      }
    }
    "#);
}

#[tokio::test]
async fn proxy_exposes_prometheus_metrics() {
    // A private stack: the count below must be this test's request alone.
    let stack = Stack::start().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.chat(&key, json!({"model": "mock-model", "messages": user_message("x")})).await;
    assert_eq!(r.status(), 200);
    // The request is counted in Pingora's logging phase, just after the response went out.
    let series = "gw_proxy_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 1";
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text =
            stack.http.get(format!("{}/metrics", stack.proxy_metrics)).send().await.unwrap().text().await.unwrap();
        if text.contains(series) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_one_megabyte_header_is_431_and_the_proxy_still_serves() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let url = format!("{}/v1/models", stack.proxy);
    let r = stack.http.get(&url).bearer_auth(&key).header("x-big", "a".repeat(1_000_000)).send().await.unwrap();
    let body = gw_tests::expect_openai_error(r, 431).await;
    assert_eq!(body["error"]["code"], "request_header_too_large");
    assert!(body["error"]["message"].as_str().unwrap().len() < 200);
    // Many headers, each small, over the block limit (32 KiB).
    let mut req = stack.http.get(&url).bearer_auth(&key);
    for i in 0..10 {
        req = req.header(format!("x-pad-{i}"), "b".repeat(4000));
    }
    gw_tests::expect_openai_error(req.send().await.unwrap(), 431).await;
    let r = stack.http.get(&url).bearer_auth(&key).send().await.unwrap();
    assert_eq!(r.status(), 200);
}
