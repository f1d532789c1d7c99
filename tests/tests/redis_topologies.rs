//! gw on the Redis its users scale onto, each started here with `redis-server` and stopped by
//! PID: a 3-master Redis Cluster (organizations on every node, no degraded mode, purges that
//! reach the owning node, revocations on every replica), a 6-node cluster losing a primary
//! under load, and invalidations that survive an admin cut off from Redis and a subscription
//! that silently stops delivering. (The whole limits test file also runs against a cluster and
//! a TLS-only Redis: `GW_TEST_REDIS=cluster|tls`, in `scripts/test`.)

use std::time::{Duration, Instant};

use futures::future::join_all;
use gw_shared::limits::plan::Plan;
use gw_tests::topology::{RedisCluster, RedisSentinel, Relay, TlsRedis};
use gw_tests::*;
use serde_json::{json, Value};

fn body(text: &str) -> Value {
    json!({"model": "mock-model", "messages": user_message(text), "max_tokens": 20})
}

async fn metric(http: &reqwest::Client, metrics: &str, series: &str) -> f64 {
    let text = http.get(format!("{metrics}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok())).unwrap_or(0.0)
}

/// A stack on `cluster` with two more proxy replicas: (stack, replicas, every proxy's URL and
/// metrics address).
async fn on_cluster(cluster: &RedisCluster) -> (Stack, Vec<Proc>, Vec<(String, String)>) {
    let stack = Stack::start_with(StackOptions {
        redis_url: Some(cluster.seeds()[0].clone()),
        redis_config: cluster.config(),
        ..Default::default()
    })
    .await;
    let mut procs = Vec::new();
    let mut proxies = vec![(stack.proxy.clone(), stack.proxy_metrics.clone())];
    for _ in 0..2 {
        let (proc, url, metrics) = stack.proxy_replica_with_metrics().await;
        procs.push(proc);
        proxies.push((url, metrics));
    }
    (stack, procs, proxies)
}

/// Organizations (session and key) until every primary owns at least one's slot.
async fn orgs_on_every_node(stack: &Stack, cluster: &RedisCluster, key: Value) -> Vec<(Session, String, String)> {
    let mut orgs = Vec::new();
    let mut nodes = std::collections::BTreeSet::new();
    while nodes.len() < cluster.live().len() || orgs.len() < 6 {
        let s = stack.register().await;
        let (k, id) = stack.key_with(&s, key.clone()).await;
        nodes.insert(cluster.primary_of(&Plan::prefix(s.org_id)));
        orgs.push((s, k, id));
        assert!(orgs.len() < 60, "60 organizations and still a node without one");
    }
    orgs
}

#[tokio::test]
async fn on_a_three_master_cluster_replicas_share_limits_on_every_node_without_degrading() {
    let cluster = RedisCluster::start(3, 0);
    let (stack, _procs, proxies) = on_cluster(&cluster).await;
    let orgs = orgs_on_every_node(
        &stack,
        &cluster,
        json!({"budget": {"amount_usd": 100, "period": "day"}, "rate_limits": {"rpm": 100000}}),
    )
    .await;
    let b = body("spread over the cluster");
    let sends = orgs.iter().enumerate().flat_map(|(i, (_, key, _))| {
        let b = &b;
        let stack = &stack;
        let proxies = &proxies;
        (0..3).map(move |j| async move { stack.chat_with(&proxies[(i + j) % 3].0, key, b, &[]).await.status() })
    });
    let statuses = join_all(sends).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    // Every organization's spend settled in its own slot (the batches mix organizations).
    for (s, _, id) in &orgs {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let v: Value =
                stack.admin_get(&format!("/api-keys/{id}/limits"), &s.access_token).await.json().await.unwrap();
            if usd(&v["budget"]["spend_usd"]) > rust_decimal::Decimal::ZERO {
                break;
            }
            assert!(Instant::now() < deadline, "org {}'s spend never settled: {v}", s.org_id);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for (_, metrics) in &proxies {
        assert_eq!(metric(&stack.http, metrics, "gw_limits_degraded").await, 0.0);
        assert_eq!(metric(&stack.http, metrics, "gw_limits_redis_errors_total").await, 0.0);
        assert_eq!(metric(&stack.http, metrics, "gw_limits_replicas").await, 3.0);
    }
}

#[tokio::test]
async fn on_a_cluster_an_rpm_limit_admits_exactly_n_per_minute_and_a_revoked_key_is_refused_everywhere() {
    let cluster = RedisCluster::start(3, 0);
    let (stack, _procs, proxies) = on_cluster(&cluster).await;
    let s = stack.register().await;
    let (key, _) = stack.key_with(&s, json!({"rate_limits": {"rpm": 20}})).await;
    // Within one minute (the window), whatever the clock says now.
    let second = chrono::Utc::now().timestamp() % 60;
    if second > 45 {
        tokio::time::sleep(Duration::from_secs((61 - second) as u64)).await;
    }
    let b = body("count me on the cluster");
    let sends = (0..60).map(|i| stack.chat_with(&proxies[i % 3].0, &key, &b, &[]));
    let statuses: Vec<u16> = join_all(sends).await.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 20, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 40);

    // Every replica knows the key (its lookup cached); a revocation reaches all three.
    let (other, other_id) = stack.key_with(&s, json!({})).await;
    for (proxy, _) in &proxies {
        assert_eq!(stack.chat_with(proxy, &other, &b, &[]).await.status(), 200);
    }
    assert_eq!(stack.admin_delete(&format!("/api-keys/{other_id}"), &s.access_token).await.status(), 204);
    let revoked = Instant::now();
    for (proxy, _) in &proxies {
        loop {
            let status = stack.chat_with(proxy, &other, &b, &[]).await.status();
            if status == 401 {
                break;
            }
            assert!(revoked.elapsed() < Duration::from_secs(1), "{proxy} still admits a key revoked 1 s ago");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn on_a_cluster_a_purge_leaves_no_entry_of_the_organization_on_any_node() {
    let cluster = RedisCluster::start(3, 0);
    let (stack, _procs, _) = on_cluster(&cluster).await;
    let (s, key, _) = stack.org_with_key().await;
    let r = stack.admin_put("/organizations/current/cache", &s.access_token, &json!({"l1": true, "l2": true})).await;
    assert_eq!(r.status(), 200);
    let pattern = format!("{}*", gw_shared::cache::key::org_prefix(s.org_id));
    for i in 0..30 {
        let b = json!({"model": "gpt-4o-mini", "messages": user_message(&format!("question {i}"))});
        assert_eq!(stack.chat_with(&stack.proxy, &key, &b, &[]).await.status(), 200);
    }
    // L2 is written behind the answers.
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.keys_matching(&pattern).iter().filter(|k| !k.contains(":ledger:")).count() < 30 {
        assert!(Instant::now() < deadline, "L2 never held the 30 answers");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = stack.admin_post("/organizations/current/cache/purge", &s.access_token, &json!({})).await;
    assert_eq!(r.status(), 200);
    let out: Value = r.json().await.unwrap();
    assert_eq!(out["l2_deleted"], 30);
    assert_eq!(cluster.keys_matching(&pattern), Vec::<String>::new());
}

#[tokio::test]
async fn a_cluster_primary_lost_under_load_fails_no_request_and_every_replica_recovers() {
    let mut cluster = RedisCluster::start(3, 1);
    let (stack, _procs, proxies) = on_cluster(&cluster).await;
    let s = stack.register().await;
    let (key, _) = stack
        .key_with(&s, json!({"budget": {"amount_usd": 100, "period": "day"}, "rate_limits": {"rpm": 100000}}))
        .await;
    let primary = cluster.primary_of(&Plan::prefix(s.org_id));
    let b = body("through the failover");
    let load = |rounds: usize| {
        let (stack, proxies, key, b) = (&stack, &proxies, &key, &b);
        async move {
            let mut failed = Vec::new();
            for round in 0..rounds {
                let sends = (0..6).map(|i| stack.chat_with(&proxies[(round + i) % 3].0, key, b, &[]));
                for r in join_all(sends).await {
                    if r.status() != 200 {
                        failed.push(r.status().as_u16());
                    }
                }
            }
            failed
        }
    };
    assert_eq!(load(5).await, Vec::<u16>::new());
    cluster.stop(primary);
    // Longer than the failover takes (node timeout 1 s, then the replica's election).
    let stopped = Instant::now();
    let mut failed = Vec::new();
    while stopped.elapsed() < Duration::from_secs(4) {
        failed.extend(load(1).await);
    }
    assert_eq!(failed, Vec::<u16>::new(), "requests failed while a primary was lost");
    cluster.wait_until_ok(&cluster.live());
    assert_ne!(cluster.primary_of(&Plan::prefix(s.org_id)), primary);
    let deadline = Instant::now() + Duration::from_secs(15);
    for (_, metrics) in &proxies {
        while metric(&stack.http, metrics, "gw_limits_degraded").await != 0.0 {
            assert!(Instant::now() < deadline, "a replica stayed degraded after the failover");
            failed.extend(load(1).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(failed, Vec::<u16>::new());
}

/// Sends with `key` through `proxy` until it is refused (401); how long that took.
async fn until_refused(stack: &Stack, proxy: &str, key: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if stack.chat_with(proxy, key, &body("still valid?"), &[]).await.status() == 401 {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "{proxy} still admits the revoked key after {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A stack with a relay between one side and Redis (the admin's side when `admin_relayed`, else the
/// proxy's), and a key the proxy has already admitted (its lookup cached): the key's secret and id.
async fn relayed(admin_relayed: bool) -> (PrivateRedis, Relay, Stack, Session, String, String) {
    let redis = PrivateRedis::start();
    let relay = Relay::start(redis.port);
    let (proxy_url, admin_url) = if admin_relayed { (redis.url(), relay.url()) } else { (relay.url(), redis.url()) };
    let stack = Stack::start_with(StackOptions {
        redis_url: Some(proxy_url),
        admin_env: vec![("REDIS_URL".into(), admin_url)],
        ..Default::default()
    })
    .await;
    let s = stack.register().await;
    let (key, id) = stack.key_with(&s, json!({})).await;
    assert_eq!(stack.chat_with(&stack.proxy, &key, &body("hello"), &[]).await.status(), 200);
    (redis, relay, stack, s, key, id)
}

#[tokio::test]
async fn a_revocation_made_while_the_admin_cannot_reach_redis_lands_when_it_can() {
    let (_redis, relay, stack, s, key, id) = relayed(true).await;
    relay.refuse();
    assert_eq!(stack.admin_delete(&format!("/api-keys/{id}"), &s.access_token).await.status(), 204);
    tokio::time::sleep(Duration::from_millis(500)).await;
    relay.forward();
    until_refused(&stack, &stack.proxy, &key, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_revocation_lands_though_the_subscription_silently_stops_delivering() {
    let (_redis, relay, stack, s, key, id) = relayed(false).await;
    relay.stall();
    assert_eq!(stack.admin_delete(&format!("/api-keys/{id}"), &s.access_token).await.status(), 204);
    // docs/redis.md: silence for 3 s, then the log is read from Postgres.
    until_refused(&stack, &stack.proxy, &key, Duration::from_secs(5)).await;
    assert!(stack.proxy_metric("gw_invalidation_catch_ups_total{reason=\"silence\"}").await >= 1.0);
}

#[tokio::test]
async fn through_sentinel_a_primary_lost_under_load_fails_no_request_and_limits_resume() {
    let mut sentinel = RedisSentinel::start();
    let stack = Stack::start_with(StackOptions {
        // The host of `url` is not used with Sentinel: the sentinel names the primary.
        redis_url: Some("redis://127.0.0.1:1".into()),
        redis_config: sentinel.config(),
        ..Default::default()
    })
    .await;
    let s = stack.register().await;
    let (key, id) = stack
        .key_with(&s, json!({"budget": {"amount_usd": 100, "period": "day"}, "rate_limits": {"rpm": 100000}}))
        .await;
    let b = body("through the sentinel's failover");
    for _ in 0..5 {
        assert_eq!(stack.chat_with(&stack.proxy, &key, &b, &[]).await.status(), 200);
    }
    assert_eq!(stack.proxy_metric("gw_limits_degraded").await, 0.0);
    let primary = sentinel.primary;
    sentinel.stop(primary);
    let stopped = Instant::now();
    while sentinel.current_primary() == primary {
        assert_eq!(stack.chat_with(&stack.proxy, &key, &b, &[]).await.status(), 200);
        assert!(stopped.elapsed() < Duration::from_secs(20), "the sentinel never promoted the replica");
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while stack.proxy_metric("gw_limits_degraded").await != 0.0 {
        assert_eq!(stack.chat_with(&stack.proxy, &key, &b, &[]).await.status(), 200);
        assert!(Instant::now() < deadline, "the proxy stayed degraded after the failover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The new primary counts: what the admin reads there includes the spend since.
    let v: Value = stack.admin_get(&format!("/api-keys/{id}/limits"), &s.access_token).await.json().await.unwrap();
    assert!(usd(&v["budget"]["spend_usd"]) > rust_decimal::Decimal::ZERO, "{v}");
}

#[tokio::test]
async fn a_tls_redis_asking_for_client_certificates_answers_only_with_one() {
    use gw_shared::config::RedisTlsConfig;
    use gw_shared::redis::{ConnOptions, Pool, Topology};
    let redis = TlsRedis::start();
    let ping = |tls: RedisTlsConfig| {
        let url = redis.url();
        async move {
            let pool = Pool::new(Topology::Standalone(url), &tls, ConnOptions::default()).unwrap();
            gw_shared::redis::ping(&pool).await
        }
    };
    let with_cert = RedisTlsConfig {
        ca_file: Some(redis.certs.path("ca.crt")),
        cert_file: Some(redis.certs.path("client.crt")),
        key_file: Some(redis.certs.path("client.key")),
    };
    ping(with_cert).await.unwrap();
    let ca_only = RedisTlsConfig { ca_file: Some(redis.certs.path("ca.crt")), ..Default::default() };
    assert!(ping(ca_only).await.is_err(), "a client without a certificate was served");
    // The system's roots do not include the test CA.
    assert!(ping(RedisTlsConfig::default()).await.is_err(), "an unknown CA was trusted");
}

#[tokio::test]
async fn invalidation_log_writers_take_turns_so_ids_become_visible_in_order() {
    use diesel_async::AsyncConnection;
    use gw_shared::db::invalidations::record;
    use gw_shared::redis::Invalidation;
    // The log is migrated by the harness's first stack.
    let _stack = Stack::shared().await;
    let (mut a, mut b) = (db::connect().await, db::connect().await);
    let inv = Invalidation::Org { org_id: uuid::Uuid::now_v7() };
    let (recorded_tx, recorded_rx) = tokio::sync::oneshot::channel();
    let (commit_tx, commit_rx) = tokio::sync::oneshot::channel::<()>();
    let first_inv = inv.clone();
    let first = tokio::spawn(async move {
        a.transaction(async |c| {
            let id = record(c, &first_inv).await?;
            let _ = recorded_tx.send(id);
            let _ = commit_rx.await;
            Ok::<_, gw_shared::Error>(id)
        })
        .await
    });
    let first_id = recorded_rx.await.unwrap();
    let second = tokio::spawn(async move { b.transaction(async |c| record(c, &inv).await).await });
    // While the first writer has not committed, the second waits for its turn (an id taken now
    // could become visible before the first's and be read past it).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "a second writer took an id while the first was uncommitted");
    commit_tx.send(()).unwrap();
    assert_eq!(first.await.unwrap().unwrap(), first_id);
    assert!(second.await.unwrap().unwrap() > first_id);
}
