//! The proxy's operations listener: `/healthz` answers while the process runs, `/readyz` only
//! while a request could be served (a store answers, or keys looked up earlier are held),
//! `/metrics` the Prometheus text, anything else 404.

use gw_tests::{PrivatePostgres, PrivateRedis, Stack, StackOptions};
use serde_json::Value;

async fn get(stack: &Stack, path: &str) -> (u16, String) {
    let r = stack.http.get(format!("{}{path}", stack.proxy_metrics)).send().await.expect("ops request");
    (r.status().as_u16(), r.text().await.expect("ops body"))
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).expect("JSON body")
}

#[tokio::test]
async fn the_operations_listener_answers_health_readiness_and_metrics() {
    let stack = Stack::shared().await;
    let (status, body) = get(&stack, "/healthz").await;
    assert_eq!(status, 200);
    insta::assert_json_snapshot!(json(&body), @r#"
    {
      "status": "ok"
    }
    "#);
    let (status, body) = get(&stack, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let ready = json(&body);
    assert_eq!(
        (ready["status"].as_str(), ready["postgres"].as_str(), ready["redis"].as_str()),
        (Some("ready"), Some("up"), Some("up"))
    );
    let (status, body) = get(&stack, "/metrics").await;
    assert_eq!(status, 200);
    assert!(body.contains("gw_proxy_requests_total") || body.contains("# TYPE"), "{body}");
}

#[tokio::test]
async fn an_unknown_operations_path_is_not_found() {
    let stack = Stack::shared().await;
    let (status, body) = get(&stack, "/").await;
    assert_eq!(status, 404);
    insta::assert_json_snapshot!(json(&body), @r#"
    {
      "error": "not found: /metrics, /healthz or /readyz"
    }
    "#);
}

// One private Postgres per test binary (their ports are picked per process), so the outage
// cases run in order in one test.
#[tokio::test]
async fn readiness_follows_the_stores() {
    let pg = PrivatePostgres::start();
    let mut redis = PrivateRedis::start();
    let stack = Stack::start_with(StackOptions {
        database_url: Some(pg.url()),
        redis_url: Some(redis.url()),
        ..Default::default()
    })
    .await;
    assert_eq!(get(&stack, "/readyz").await.0, 200);

    // Both stores down, no key looked up yet: nothing could be served.
    pg.stop_server();
    redis.stop_server();
    let (status, body) = get(&stack, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    insta::assert_json_snapshot!(json(&body), @r#"
    {
      "keys_cached": false,
      "postgres": "down",
      "redis": "down",
      "status": "not_ready"
    }
    "#);
    assert_eq!(get(&stack, "/healthz").await.0, 200);

    // Either store back is enough.
    redis.start_server();
    let (status, body) = get(&stack, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["redis"], "up");

    // So is Postgres alone.
    assert!(pg.start_server());
    redis.stop_server();
    let (status, body) = get(&stack, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((json(&body)["postgres"].as_str(), json(&body)["redis"].as_str()), (Some("up"), Some("down")));
}
