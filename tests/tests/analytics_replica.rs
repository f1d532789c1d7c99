//! Analytics and exports read a streaming replica (`database.read_url`, started by the test from
//! the same Postgres binaries with `pg_basebackup`), and a replica that lags never makes an export
//! leave out what was committed before it began: the export waits for the replica to catch up,
//! else reads the primary, and says which (`x-gw-read-from`).

use std::time::{Duration, Instant};

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use gw_tests::*;
use serde_json::Value;
use uuid::Uuid;

async fn export(stack: &Stack, s: &Session) -> (String, Vec<Value>, Value) {
    let r = stack.admin_get("/analytics/compliance/export", &s.access_token).await;
    assert_eq!(r.status(), 200);
    let from = r.headers().get("x-gw-read-from").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let text = r.text().await.unwrap();
    let mut lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let summary = lines.pop().expect("a verification line");
    assert_eq!(summary["record_type"], "verification");
    (from, lines, summary)
}

/// The request-log page's ids (newest first, up to 100).
async fn listed(stack: &Stack, s: &Session) -> Vec<String> {
    let r = stack.admin_get("/analytics/logs?limit=100", &s.access_token).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    body["data"].as_array().unwrap().iter().map(|l| l["id"].as_str().unwrap().to_string()).collect()
}

async fn wait_listed(stack: &Stack, s: &Session, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while listed(stack, s).await.len() < n {
        assert!(Instant::now() < deadline, "the request log never showed {n} rows");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn replay(replica: &PrivatePostgres, pause: bool) {
    let mut conn = AsyncPgConnection::establish(&replica.url()).await.unwrap();
    let sql = if pause { "SELECT pg_wal_replay_pause()::text" } else { "SELECT pg_wal_replay_resume()::text" };
    diesel::sql_query(sql).execute(&mut conn).await.unwrap();
}

/// Rows of `org` the primary holds (what the proxy's flusher has written).
async fn on_primary(pg: &PrivatePostgres, org: Uuid) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = AsyncPgConnection::establish(&pg.url()).await.unwrap();
    diesel::sql_query("SELECT count(*) AS n FROM audit_logs WHERE org_id = $1")
        .bind::<diesel::sql_types::Uuid, _>(org)
        .get_result::<N>(&mut conn)
        .await
        .unwrap()
        .n
}

#[tokio::test]
async fn analytics_and_exports_read_the_replica_and_a_lagging_one_never_leaves_rows_out() {
    let pg = PrivatePostgres::start();
    let replica = pg.replica();
    let stack = Stack::start_with(StackOptions {
        database_url: Some(pg.url()),
        env: vec![("DATABASE_READ_URL".into(), replica.url())],
        ..Default::default()
    })
    .await;
    let (s, key, _) = stack.org_with_key().await;
    for i in 0..5 {
        stack.chat_request_id(&key, &format!("replicated {i}")).await;
    }
    wait_listed(&stack, &s, 5).await;

    // The replica stops replaying: rows written now reach the primary only.
    replay(&replica, true).await;
    let mut late = Vec::new();
    for i in 0..3 {
        late.push(stack.chat_request_id(&key, &format!("late {i}")).await.to_string());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while on_primary(&pg, s.org_id).await < 8 {
        assert!(Instant::now() < deadline, "the proxy never wrote the late rows");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Analytics read the replica: the late rows are not there yet.
    let shown = listed(&stack, &s).await;
    assert_eq!(shown.len(), 5, "analytics read the primary: {shown:?}");
    assert!(late.iter().all(|id| !shown.contains(id)));
    // An export does not leave them out: the replica has not caught up, so it reads the primary.
    let (from, lines, summary) = export(&stack, &s).await;
    assert_eq!(from, "primary");
    assert_eq!(lines.len(), 8, "{summary}");
    assert!(late.iter().all(|id| lines.iter().any(|l| l["id"] == id.as_str())));
    assert_eq!(summary["verified"], true, "{summary}");

    // Replaying again, the replica catches up: analytics show every row, and the export reads
    // the replica, with the same rows and the chain verified.
    replay(&replica, false).await;
    wait_listed(&stack, &s, 8).await;
    let (from, again, summary) = export(&stack, &s).await;
    assert_eq!(from, "replica");
    assert_eq!(again, lines, "the same rows from either");
    assert_eq!(summary["verified"], true, "{summary}");
}
