//! The audit log loses nothing through a Postgres outage: with Postgres stopped for 30 s while
//! the proxy serves a steady load, every request is answered, and once Postgres is back the
//! audit rows equal the responses, each exactly once, and the chain verifies. A private
//! Postgres (the test stops it) and a private stack.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gw_tests::{user_message, PrivatePostgres, Stack, StackOptions};
use serde_json::json;
use uuid::Uuid;

const OUTAGE: Duration = Duration::from_secs(30);
/// Concurrent clients, each pausing between requests: about 500 requests/s in all.
const CLIENTS: usize = 10;
const PAUSE: Duration = Duration::from_millis(18);

#[tokio::test]
async fn a_postgres_outage_under_load_loses_and_duplicates_no_audit_row() {
    let pg = PrivatePostgres::start();
    let stack = Stack::start_with(StackOptions {
        database_url: Some(pg.url()),
        proxy_config: "key_cache_ttl_secs = 2\nkey_cache_max_stale_secs = 600".into(),
        ..Default::default()
    })
    .await;
    let (session, key, _) = stack.org_with_key().await;
    let body = json!({"model": "mock-model", "messages": user_message("through the outage")});
    assert_eq!(stack.chat(&key, body.clone()).await.status(), 200);

    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let answered: Arc<Mutex<Vec<Uuid>>> = Arc::new(Mutex::new(Vec::new()));
    let mut load = Vec::new();
    for _ in 0..CLIENTS {
        let (http, url, key, body) = (stack.http.clone(), stack.proxy.clone(), key.clone(), body.clone());
        let (stop, failed, answered) = (stop.clone(), failed.clone(), answered.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = http.post(format!("{url}/v1/chat/completions")).bearer_auth(&key).json(&body).send().await;
                match r {
                    Ok(r) if r.status() == 200 => {
                        let id: Option<Uuid> = r
                            .headers()
                            .get("x-gw-request-id")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok());
                        let _ = r.bytes().await;
                        answered.lock().unwrap().extend(id);
                    }
                    Ok(r) => {
                        eprintln!("failed during the outage: {} {}", r.status(), r.text().await.unwrap_or_default());
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("failed during the outage: {e}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(PAUSE).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg.stop_server();
    let stopped = Instant::now();
    let before = answered.lock().unwrap().len();
    tokio::time::sleep(OUTAGE).await;
    let during = answered.lock().unwrap().len() - before;
    let rate = during as f64 / stopped.elapsed().as_secs_f64();
    eprintln!("served {during} requests in the {} s outage ({rate:.0}/s)", OUTAGE.as_secs());
    assert!(pg.start_server(), "Postgres did not start again on port {}: {}", pg.port, pg.log());
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "requests failed because of the outage");
    assert!(during > 1000, "only {during} requests during the outage: the load never happened");
    assert!(stack.proxy_metric("gw_audit_spilled_total").await > 0.0, "nothing went to the spool");
    assert_eq!(stack.proxy_metric("gw_audit_dropped_total").await, 0.0);

    // Every answered request has its row once the spool has been replayed.
    let mut want: Vec<Uuid> = answered.lock().unwrap().clone();
    want.sort();
    let mut conn = {
        use diesel_async::AsyncConnection;
        diesel_async::AsyncPgConnection::establish(&pg.url()).await.unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        use diesel::prelude::*;
        use diesel_async::RunQueryDsl;
        use gw_shared::db::schema::audit_logs;
        let (rows, distinct): (i64, i64) = audit_logs::table
            .filter(audit_logs::org_id.eq(session.org_id))
            .filter(audit_logs::status_code.eq(200))
            .select((diesel::dsl::count_star(), diesel::dsl::count(audit_logs::id).aggregate_distinct()))
            .first(&mut conn)
            .await
            .unwrap();
        assert_eq!(rows, distinct, "duplicate audit rows");
        // +1: the request made before the load.
        if rows as usize > want.len() {
            assert_eq!(rows as usize, want.len() + 1, "more rows than responses");
            break;
        }
        assert!(Instant::now() < deadline, "{rows} audit rows for {} answered requests", want.len() + 1);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    {
        use diesel::prelude::*;
        use diesel_async::RunQueryDsl;
        use gw_shared::db::schema::audit_logs;
        let mut got: Vec<Uuid> = audit_logs::table
            .filter(audit_logs::org_id.eq(session.org_id))
            .filter(audit_logs::id.eq_any(&want))
            .select(audit_logs::id)
            .load(&mut conn)
            .await
            .unwrap();
        got.sort();
        assert_eq!(got, want, "the rows are exactly the answered requests");
    }
    assert_eq!(stack.proxy_metric("gw_audit_spool_bytes").await, 0.0, "the spool was replayed in full");

    // The chain holds every row once, in one unbroken line.
    let from = (chrono::Utc::now() - chrono::TimeDelta::hours(1)).format("%Y-%m-%dT%H:%M:%SZ");
    let to = (chrono::Utc::now() + chrono::TimeDelta::minutes(1)).format("%Y-%m-%dT%H:%M:%SZ");
    let r = stack.admin_get(&format!("/analytics/compliance/export?from={from}&to={to}"), &session.access_token).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let summary: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(summary["verified"], true, "{summary}");
    assert_eq!(summary["rows"].as_u64().unwrap() as usize, want.len() + 1);
}
