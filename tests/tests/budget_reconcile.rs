//! Budgets that survive Redis (`docs/limits.md`): a Redis that restarts empty loses every budget
//! counter; the admin leader notices the missing epoch marker and raises each budget's counter
//! to the spend the audit log holds, for organizations, teams and keys alike, without waiting
//! for its schedule (an hour here). The counters are never lowered. On a private Redis.

use std::time::{Duration, Instant};

use gw_tests::{json_of, usd, PrivateRedis, Stack, StackOptions};
use rust_decimal::Decimal;
use serde_json::{json, Value};

fn chat() -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "count me"}]})
}

/// `GET {path}`'s budget counter (Redis) and spend (the audit log).
async fn counters(stack: &Stack, token: &str, path: &str) -> (Decimal, Decimal) {
    let v = json_of(stack.admin_get(path, token).await, 200).await;
    (usd(&v["budget"]["spend_usd"]), usd(&v["spend"]["spend_usd"]))
}

#[tokio::test]
async fn a_redis_restarted_empty_gets_every_budget_back_from_the_audit_log() {
    let mut redis = PrivateRedis::start();
    let stack = Stack::start_with(StackOptions {
        redis_url: Some(redis.url()),
        admin_config: "budget_reconcile_secs = 3600".into(),
        proxy_config: "audit_flush_interval_ms = 50".into(),
        ..Default::default()
    })
    .await;
    let s = stack.register().await;
    let t = &s.access_token;
    let budget = json!({"amount_usd": "10", "period": "day"});
    json_of(stack.admin_patch("/organizations/current", t, &json!({"budget": budget})).await, 200).await;
    let team = stack.create_team(&s, "metered").await;
    json_of(stack.admin_patch(&format!("/teams/{team}"), t, &json!({"budget": budget})).await, 200).await;
    let (key, key_id) = stack.key_with(&s, json!({"team_id": team, "budget": budget})).await;
    for _ in 0..3 {
        assert_eq!(stack.chat(&key, chat()).await.status(), 200);
    }
    let paths = [
        "/organizations/current/limits".to_string(),
        format!("/teams/{team}/limits"),
        format!("/api-keys/{key_id}/limits"),
    ];
    // The audit log holds the three requests, and Redis counted them.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut spent = Decimal::ZERO;
    for path in &paths {
        loop {
            let (counter, logged) = counters(&stack, t, path).await;
            if logged > Decimal::ZERO && counter == logged {
                spent = logged;
                break;
            }
            assert!(Instant::now() < deadline, "{path}: counter {counter}, audit log {logged}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    redis.stop_server();
    redis.start_server();
    // Rebuilt at once (the marker is gone), not at the hourly tick; each scope to its own spend.
    let deadline = Instant::now() + Duration::from_secs(10);
    for path in &paths {
        loop {
            match stack.admin_get(path, t).await.status().as_u16() {
                200 => {
                    let (counter, logged) = counters(&stack, t, path).await;
                    if counter == logged {
                        assert_eq!(counter, spent, "{path}");
                        break;
                    }
                }
                503 => {} // the admin's connections to the restarted Redis come back
                other => panic!("{path}: {other}"),
            }
            assert!(Instant::now() < deadline, "{path}: the budget counter was not rebuilt");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Spend goes on from there.
    assert_eq!(stack.chat(&key, chat()).await.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (counter, _) = counters(&stack, t, &paths[2]).await;
        if counter > spent {
            break;
        }
        assert!(Instant::now() < deadline, "the next request was not counted: {counter}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
