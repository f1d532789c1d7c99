//! The audit log at scale: sustained ingest into Postgres through the proxy's writer (chain
//! linking plus binary COPY, in batches of 1024, four writers at once, as the flusher runs
//! them), then the overview and filtered request-log latency over one organization holding a
//! million rows, through the admin API of a running stack. Prints rows/s and p50/p95. Run
//! through `tests/bench/audit.sh`.
//!
//! Usage: audit-bench [rows] [orgs-for-the-spread-ingest]
//!        audit-bench ingest [rows-per-case]   (ingest only: 1, 4 and 50 organizations)

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use gw_shared::audit::{AuditEntry, AuditRecord};
use gw_shared::db::audit_copy::AuditCopier;
use gw_tests::{Stack, StackOptions};
use rust_decimal::Decimal;
use serde_json::json;
use tokio::sync::Semaphore;
use uuid::Uuid;

const BATCH: usize = 1024;
const WRITERS: usize = 4;
const MODELS: &[&str] = &["gpt-4o-mini", "gpt-4o", "claude-sonnet-4-5", "gemini-2.5-flash", "mock-model"];

fn row(org: Uuid, teams: &[Uuid], i: usize, span_secs: i64) -> AuditEntry {
    let now = Utc::now();
    let at = now - TimeDelta::seconds(span_secs) + TimeDelta::milliseconds((i as i64 * 997) % (span_secs * 1000));
    let status = if i.is_multiple_of(50) {
        502
    } else if i.is_multiple_of(97) {
        429
    } else {
        200
    };
    let model = MODELS[i % MODELS.len()];
    let record = AuditRecord {
        id: Uuid::now_v7(),
        org_id: org,
        team_id: Some(teams[i % teams.len()]),
        api_key_id: Some(teams[(i / 7) % teams.len()]),
        endpoint: "/v1/chat/completions".into(),
        model: Some(model.into()),
        provider: Some("openai".into()),
        upstream_model: Some(model.into()),
        status_code: status,
        error_type: (status != 200).then(|| "upstream_error".into()),
        stream: i.is_multiple_of(3),
        prompt_tokens: 200 + (i % 300) as i32,
        completion_tokens: 50 + (i % 120) as i32,
        total_tokens: 250 + (i % 300) as i32 + (i % 120) as i32,
        cost_usd: Decimal::new(1500 + (i % 900) as i64, 8),
        latency_ms: 80 + ((i * 7919) % 1900) as i32,
        upstream_latency_ms: Some(70),
        ttft_ms: None,
        cache_status: ["miss", "bypass", "L1", "miss", "L2"][(i / 5) % 5].into(),
        policy_action: (i.is_multiple_of(40)).then(|| "redacted".into()),
        attempts: 1,
        created_at: at,
        routing: json!([{"provider": "openai", "model": model, "outcome": "answered", "status": status, "latency_ms": 70}]),
        policy: json!([]),
        overhead_us: Some(150),
        client_ip: Some("10.0.0.1/32".parse().unwrap()),
        ..Default::default()
    };
    AuditEntry { record, user_agent: Some("bench/1.0".into()) }
}

/// Writes `rows` through `WRITERS` concurrent batch writers; returns rows per second.
async fn ingest(copier: Arc<AuditCopier>, rows: Vec<AuditEntry>) -> f64 {
    let started = Instant::now();
    let n = rows.len();
    let slots = Arc::new(Semaphore::new(WRITERS));
    let mut tasks = Vec::new();
    let mut rows = rows;
    while !rows.is_empty() {
        let rest = rows.split_off(rows.len().min(BATCH));
        let batch = std::mem::replace(&mut rows, rest);
        let permit = slots.clone().acquire_owned().await.unwrap();
        let copier = copier.clone();
        tasks.push(tokio::spawn(async move {
            copier.write(&batch, false).await.expect("write a batch");
            drop(permit);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / started.elapsed().as_secs_f64()
}

fn pct(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i].as_secs_f64() * 1e3
}

async fn timed(stack: &Stack, token: &str, path: &str, n: usize) -> (f64, f64) {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = stack.admin_get(path, token).await;
        assert_eq!(r.status(), 200, "{path}");
        let _ = r.bytes().await.unwrap();
        samples.push(t.elapsed());
    }
    (pct(&mut samples, 0.5), pct(&mut samples, 0.95))
}

/// The admin job's aggregation, under its lock (the stack's job may be running its first pass).
async fn upkeep(conn: &mut diesel_async::AsyncPgConnection) -> usize {
    use diesel_async::{AsyncConnection, RunQueryDsl};
    conn.transaction(async |conn| {
        diesel::sql_query(format!("SELECT pg_advisory_xact_lock({})", gw_shared::db::rollups::UPKEEP_LOCK))
            .execute(conn)
            .await?;
        gw_shared::db::rollups::run(conn, Utc::now()).await
    })
    .await
    .unwrap()
}

/// Ingest alone, as a cluster's writers meet it: rows arrive interleaved across `orgs`
/// organizations (as requests do) and are cut into batches in arrival order, so every batch holds
/// rows of every organization and four writers take batches as they free up, the flusher's way.
/// One organization's rows form one chain, so its figure is the chain's own limit.
async fn ingest_cases(per_case: usize) {
    let db_url = gw_tests::database_url();
    let copier = Arc::new(AuditCopier::new(&gw_shared::config::DatabaseConfig::at(&db_url)));
    let teams: Vec<Uuid> = (0..8).map(|_| Uuid::now_v7()).collect();
    let run = Uuid::now_v7().as_u128() & !0xffff;
    // Warm the connections, the partitions and the organizations' chain heads.
    let warm: Vec<AuditEntry> =
        (0..2048).map(|i| row(Uuid::from_u128(run + (i % 50) as u128), &teams, i, 60)).collect();
    ingest(copier.clone(), warm).await;
    for orgs in [1usize, 4, 50] {
        let rows: Vec<AuditEntry> =
            (0..per_case).map(|i| row(Uuid::from_u128(run + (i % orgs) as u128), &teams, i, 60)).collect();
        let rate = ingest(copier.clone(), rows).await;
        println!("ingest, {orgs:>2} organization(s), {WRITERS} writers: {per_case:>8} rows  {rate:>9.0} rows/s");
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("ingest") {
        let per_case = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200_000);
        return ingest_cases(per_case).await;
    }
    let total: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let spread_orgs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(50);
    // The stack's upkeep job runs once at start and then sleeps: this bench runs the same
    // aggregation itself between the ingest and the reads, so the ingest is measured alone.
    let stack =
        Stack::start_with(StackOptions { admin_config: "rollup_interval_secs = 86400".into(), ..Default::default() })
            .await;
    let s = stack.register().await;
    let db_url = gw_tests::database_url();
    let copier = Arc::new(AuditCopier::new(&gw_shared::config::DatabaseConfig::at(&db_url)));
    let mut conn = {
        use diesel_async::AsyncConnection;
        diesel_async::AsyncPgConnection::establish(&db_url).await.unwrap()
    };
    // Whatever earlier runs left to aggregate, before anything is timed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    upkeep(&mut conn).await;
    let teams: Vec<Uuid> = (0..8).map(|_| Uuid::now_v7()).collect();
    let span = 30 * 24 * 3600;

    // Many organizations at once: writers rarely wait on one another's chain head.
    let spread: Vec<AuditEntry> = (0..total / 5)
        .map(|i| row(Uuid::from_u128(0xbe4c_0000 + (i % spread_orgs) as u128), &teams, i, 3600))
        .collect();
    let n = spread.len();
    let rate = ingest(copier.clone(), spread).await;
    println!("ingest, {spread_orgs} organizations:           {n:>9} rows  {rate:>9.0} rows/s");

    // One organization: every batch appends to the same chain, one writer at a time.
    let rows: Vec<AuditEntry> = (0..total).map(|i| row(s.org_id, &teams, i, span)).collect();
    let rate = ingest(copier.clone(), rows).await;
    println!("ingest, one organization:           {total:>9} rows  {rate:>9.0} rows/s");

    // The upkeep job's aggregation over the month just written (every hour received rows).
    let started = Instant::now();
    let hours = upkeep(&mut conn).await;
    println!("rollups of {hours} hours after the ingest: {:.1} s", started.elapsed().as_secs_f64());
    let token = &s.access_token;
    let from = (Utc::now() - TimeDelta::days(31)).format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let r = stack.admin_get(&format!("/analytics/overview?from={from}"), token).await;
    let o: serde_json::Value = r.json().await.unwrap();
    assert_eq!(o["requests"].as_u64(), Some(total as u64), "{o}");

    for (name, path) in [
        ("overview, 30 days", format!("/analytics/overview?from={from}")),
        ("overview, 30 days by model", format!("/analytics/overview?from={from}&group_by=model")),
        ("overview, 30 days by day", format!("/analytics/overview?from={from}&group_by=day")),
        ("overview, 7 days, one team", format!("/analytics/overview?period=7d&team_id={}", teams[0])),
        ("logs, newest 50", format!("/analytics/logs?from={from}")),
        ("logs, team + status=error", format!("/analytics/logs?from={from}&team_id={}&status=error", teams[1])),
        ("logs, model + cache=L2", format!("/analytics/logs?from={from}&model=gpt-4o&cache=L2")),
        ("logs, model + status=404 (no match)", format!("/analytics/logs?from={from}&model=gpt-4o&status=404")),
        ("logs, policy_action=redacted", format!("/analytics/logs?from={from}&policy_action=redacted")),
        ("logs, key", format!("/analytics/logs?from={from}&key_id={}", teams[2])),
    ] {
        let (p50, p95) = timed(&stack, token, &path, 40).await;
        println!("{name:<36} p50 {p50:>8.1} ms   p95 {p95:>8.1} ms");
    }
    println!("org {}", s.org_id);
}
