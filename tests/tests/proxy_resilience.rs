//! The request path under attack and under outage: a spray of random keys does not become a
//! Postgres query per request, unknown teams are remembered, and a Postgres outage longer than
//! the key cache's lifetime fails no request for keys already known.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gw_tests::{user_message, PrivatePostgres, PrivateRedis, Stack, StackOptions};
use serde_json::json;

/// A counter from the proxy's `/metrics`, 0 when absent.
const KEY_QUERIES: &str = "gw_proxy_store_queries_total{lookup=\"api_key\"}";
const TEAM_QUERIES: &str = "gw_proxy_store_queries_total{lookup=\"team\"}";

fn random_key() -> String {
    format!("sk_live_{}", uuid::Uuid::new_v4().simple()) + "abcdefgh"
}

#[tokio::test]
async fn ten_thousand_random_keys_cost_a_bounded_number_of_postgres_queries() {
    // A private proxy and Redis: the spray throttles its client address (127.0.0.1) for a
    // minute, at the default limit.
    let redis = PrivateRedis::start();
    let stack = Stack::start_with(StackOptions {
        proxy_config: "audit_flush_interval_ms = 50".into(),
        redis_url: Some(redis.url()),
        ..Default::default()
    })
    .await;
    let (_, key, _) = stack.org_with_key().await;
    let models = format!("{}/v1/models", stack.proxy);
    assert_eq!(stack.http.get(&models).bearer_auth(&key).send().await.unwrap().status(), 200);
    let before = stack.proxy_metric(KEY_QUERIES).await as u64;

    let valid_ok = Arc::new(AtomicU64::new(0));
    let statuses = futures::stream::iter(0..10_000u32)
        .map(|i| {
            let (http, url, key, valid_ok) = (stack.http.clone(), models.clone(), key.clone(), valid_ok.clone());
            async move {
                // Every 100th request uses the real key: it must keep working throughout.
                if i % 100 == 0 {
                    let r = http.get(&url).bearer_auth(&key).send().await.unwrap();
                    assert_eq!(r.status(), 200, "the valid key stopped working during the spray");
                    valid_ok.fetch_add(1, Ordering::Relaxed);
                }
                http.get(&url).bearer_auth(random_key()).send().await.unwrap().status().as_u16()
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<u16>>()
        .await;
    let queries = (stack.proxy_metric(KEY_QUERIES).await as u64) - before;
    let unauthorized = statuses.iter().filter(|s| **s == 401).count();
    let throttled = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(unauthorized + throttled, 10_000, "every random key is refused");
    assert_eq!(valid_ok.load(Ordering::Relaxed), 100);
    // The documented bound: `auth_failures_per_minute` (60) lookups per client address per
    // minute reach Postgres; the rest are refused with 429 without one.
    assert!(queries <= 60, "{queries} Postgres queries for 10,000 random keys");
    assert!(throttled >= 9_900, "only {throttled} throttled");
    let r = stack.http.get(&models).bearer_auth(random_key()).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "auth_throttled");
}

#[tokio::test]
async fn an_unknown_team_is_remembered_as_unknown() {
    let stack = Stack::start_with(StackOptions::default()).await;
    let (_, key, _) = stack.org_with_key().await;
    let team = uuid::Uuid::new_v4().to_string();
    let before = stack.proxy_metric(TEAM_QUERIES).await as u64;
    for _ in 0..50 {
        let r = stack
            .http
            .get(format!("{}/v1/models", stack.proxy))
            .bearer_auth(&key)
            .header("x-gw-team", &team)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
    }
    assert_eq!((stack.proxy_metric(TEAM_QUERIES).await as u64) - before, 1, "one query, then the negative cache");
}

#[tokio::test]
async fn postgres_outage_longer_than_the_key_cache_fails_no_request() {
    let pg = PrivatePostgres::start();
    // Key entries are fresh for 2 s: the outage below lasts more than twice that.
    let stack = Stack::start_with(StackOptions {
        database_url: Some(pg.url()),
        proxy_config: "audit_flush_interval_ms = 50\nkey_cache_ttl_secs = 2\nkey_cache_max_stale_secs = 300".into(),
        ..Default::default()
    })
    .await;
    let (session, key, _) = stack.org_with_key().await;
    let body = json!({"model": "mock-model", "messages": user_message("still there?")});
    assert_eq!(stack.chat(&key, body.clone()).await.status(), 200);

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (stack_http, url, key, body) = (stack.http.clone(), stack.proxy.clone(), key.clone(), body.clone());
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r =
                    stack_http.post(format!("{url}/v1/chat/completions")).bearer_auth(&key).json(&body).send().await;
                match r {
                    Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    Ok(r) => {
                        eprintln!("failed during the outage: {} {}", r.status(), r.text().await.unwrap_or_default());
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(e) => {
                        eprintln!("failed during the outage: {e}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    pg.stop_server();
    let during = ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let served_in_outage = ok.load(Ordering::Relaxed) - during;
    // Back on the same port at once: nothing holds it.
    let restarted = Instant::now();
    assert!(pg.start_server(), "Postgres did not start again on port {}: {}", pg.port, pg.log());
    assert!(restarted.elapsed() < Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "requests failed because of the outage");
    assert!(served_in_outage > 50, "only {served_in_outage} requests served during the outage");
    let stale = stack.proxy_metric("gw_proxy_cache_stale_served_total{lookup=\"api_key\"}").await as u64;
    assert!(stale > 0, "the outage never needed a stale entry: the test did not outlast the cache");

    // The audit rows written behind those requests land once Postgres is back.
    let answered = ok.load(Ordering::Relaxed) + 1;
    let mut conn = {
        use diesel_async::AsyncConnection;
        diesel_async::AsyncPgConnection::establish(&pg.url()).await.unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        use diesel::prelude::*;
        use diesel_async::RunQueryDsl;
        use gw_shared::db::schema::audit_logs;
        let rows: i64 = audit_logs::table
            .filter(audit_logs::org_id.eq(session.org_id))
            .filter(audit_logs::status_code.eq(200))
            .count()
            .get_result(&mut conn)
            .await
            .unwrap();
        if rows as u64 >= answered {
            assert_eq!(rows as u64, answered, "duplicate audit rows");
            break;
        }
        assert!(Instant::now() < deadline, "{rows} audit rows for {answered} answered requests");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn behind_a_trusted_load_balancer_one_sprayer_does_not_throttle_everyone_on_any_replica() {
    // gw-proxy sees every request from 127.0.0.1, its load balancer; the clients are named in
    // X-Forwarded-For.
    let redis = PrivateRedis::start();
    let stack = Stack::start_with(StackOptions {
        proxy_config: "audit_flush_interval_ms = 50\nauth_failures_per_minute = 5\ntrusted_proxies = [\"127.0.0.0/8\"]"
            .into(),
        redis_url: Some(redis.url()),
        ..Default::default()
    })
    .await;
    let models = format!("{}/v1/models", stack.proxy);
    let from = |client: &'static str| {
        let (http, url) = (stack.http.clone(), models.clone());
        async move { http.get(&url).bearer_auth(random_key()).header("x-forwarded-for", client).send().await.unwrap() }
    };
    for _ in 0..5 {
        assert_eq!(from("203.0.113.7").await.status(), 401);
    }
    assert_eq!(from("203.0.113.7").await.status(), 429, "the sprayer is throttled");
    // A header the sprayer adds itself is to the left of the load balancer's hop: ignored.
    let spoofed = stack
        .http
        .get(&models)
        .bearer_auth(random_key())
        .header("x-forwarded-for", "198.51.100.99, 203.0.113.7")
        .send()
        .await
        .unwrap();
    assert_eq!(spoofed.status(), 429);
    // Another client behind the same load balancer is not.
    assert_eq!(from("203.0.113.8").await.status(), 401);
    // A replica learns the count through Redis: the sprayer's first failure there brings the
    // total back, and the replica throttles it from then on; the other client still passes.
    let (_replica, url) = stack.proxy_replica().await;
    let on_replica = |client: &'static str| {
        let (http, url) = (stack.http.clone(), format!("{url}/v1/models"));
        async move { http.get(&url).bearer_auth(random_key()).header("x-forwarded-for", client).send().await.unwrap() }
    };
    assert_eq!(on_replica("203.0.113.7").await.status(), 401);
    assert_eq!(on_replica("203.0.113.7").await.status(), 429, "the replica throttles the sprayer too");
    assert_eq!(on_replica("203.0.113.8").await.status(), 401);
}
