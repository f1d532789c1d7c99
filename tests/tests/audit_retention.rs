//! Retention drops whole monthly partitions of the audit log (never a bulk delete), on a
//! database of the test's own: dropping partitions on the shared one would take other tests'
//! rows with it.

use std::time::{Duration, Instant};

use chrono::{Months, TimeDelta, Utc};
use diesel::sql_types::BigInt;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use gw_shared::audit::AuditRecord;
use gw_tests::{PrivatePostgres, Stack, StackOptions};
use uuid::Uuid;

#[derive(QueryableByName)]
struct N {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn count(conn: &mut AsyncPgConnection, sql: &str) -> i64 {
    diesel::sql_query(sql).get_result::<N>(conn).await.unwrap().n
}

fn row(org: Uuid, at: chrono::DateTime<Utc>) -> AuditRecord {
    gw_tests::db::record(org, at)
}

#[tokio::test]
async fn months_past_retention_are_dropped_as_partitions() {
    let pg = PrivatePostgres::start();
    let mut conn = AsyncPgConnection::establish(&pg.url()).await.unwrap();
    let org = Uuid::now_v7();
    let now = Utc::now();
    let old = now.checked_sub_months(Months::new(5)).unwrap();
    let last_month = now.checked_sub_months(Months::new(1)).unwrap();
    let rows = vec![row(org, old), row(org, old + TimeDelta::hours(1)), row(org, last_month), row(org, now)];
    gw_shared::db::audit_logs::insert_batch(&mut conn, &rows).await.unwrap();
    let old_partition = format!("audit_logs_y{}", old.format("%Ym%m"));
    let exists = format!("SELECT count(*) AS n FROM pg_class WHERE relname = '{old_partition}'");
    assert_eq!(count(&mut conn, &exists).await, 1);

    // Keep this month and the one before: the job drops the older months whole.
    let _stack = Stack::start_with(StackOptions {
        database_url: Some(pg.url()),
        admin_config: "audit_retention_months = 2".into(),
        ..Default::default()
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&mut conn, &exists).await > 0 {
        assert!(Instant::now() < deadline, "{old_partition} was never dropped");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left = count(&mut conn, &format!("SELECT count(*) AS n FROM audit_logs WHERE org_id = '{org}'")).await;
    assert_eq!(left, 2, "the rows of this month and last month stay");
    // Partitions for the coming months exist ahead of time.
    let next = now.checked_add_months(Months::new(2)).unwrap();
    let ahead = format!("SELECT count(*) AS n FROM pg_class WHERE relname = 'audit_logs_y{}'", next.format("%Ym%m"));
    assert_eq!(count(&mut conn, &ahead).await, 1);
}

#[derive(QueryableByName)]
struct Text {
    #[diesel(sql_type = diesel::sql_types::Text)]
    text: String,
}

/// Retention detaches a month while a writer's transaction is open on the log: it waits for that
/// transaction without taking a lock anyone else waits for, so other writers and readers go on,
/// and it completes once the transaction ends.
#[tokio::test]
async fn retention_never_stops_writers_or_readers() {
    use diesel_async::SimpleAsyncConnection;
    let pg = PrivatePostgres::start();
    let mut conn = AsyncPgConnection::establish(&pg.url()).await.unwrap();
    let org = Uuid::now_v7();
    let now = Utc::now();
    let old = now.checked_sub_months(Months::new(5)).unwrap();
    gw_shared::db::audit_logs::insert_batch(&mut conn, &[row(org, old), row(org, now)]).await.unwrap();
    let old_partition = format!("audit_logs_y{}", old.format("%Ym%m"));
    let exists = format!("SELECT count(*) AS n FROM pg_class WHERE relname = '{old_partition}'");

    // A writer's transaction, open: it holds ROW EXCLUSIVE on audit_logs until it commits.
    let mut holder = AsyncPgConnection::establish(&pg.url()).await.unwrap();
    holder.batch_execute("BEGIN").await.unwrap();
    gw_shared::db::audit_logs::insert_batch(&mut holder, &[row(org, now)]).await.unwrap();

    let _stack = Stack::start_with(StackOptions {
        database_url: Some(pg.url()),
        admin_config: "audit_retention_months = 2".into(),
        ..Default::default()
    })
    .await;
    // The upkeep reaches the detach and waits for the open transaction.
    let waiting = "SELECT count(*) AS n FROM pg_stat_activity \
                   WHERE query LIKE 'ALTER TABLE audit_logs DETACH PARTITION%' AND wait_event_type = 'Lock'";
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&mut conn, waiting).await == 0 {
        let doing: Vec<Text> = diesel::sql_query(
            "SELECT coalesce(query, '') || ' / ' || coalesce(wait_event_type, '') AS text FROM pg_stat_activity \
             WHERE backend_type = 'client backend'",
        )
        .load(&mut conn)
        .await
        .unwrap();
        let doing: Vec<String> = doing.into_iter().map(|t| t.text).collect();
        assert!(Instant::now() < deadline, "the upkeep never waited in a detach: {doing:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nobody holds or waits for the lock that would stop the log.
    let exclusive = "SELECT count(*) AS n FROM pg_locks \
                     WHERE relation = 'audit_logs'::regclass AND mode = 'AccessExclusiveLock'";
    assert_eq!(count(&mut conn, exclusive).await, 0);
    // Another writer and a reader go on meanwhile.
    let mut writer = AsyncPgConnection::establish(&pg.url()).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        gw_shared::db::audit_logs::insert_batch(&mut writer, &[row(org, now + TimeDelta::seconds(1))]),
    )
    .await
    .expect("a writer waited for the retention upkeep")
    .unwrap();
    let rows = format!(
        "SELECT count(*) AS n FROM audit_logs WHERE org_id = '{org}' AND created_at >= now() - interval '1 day'"
    );
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(30), count(&mut writer, &rows)).await.expect("a reader waited"),
        2
    );
    assert_eq!(count(&mut conn, &exists).await, 1, "still attached while the transaction reads the log");

    // The transaction ends: the month is detached and dropped.
    holder.batch_execute("COMMIT").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&mut conn, &exists).await > 0 {
        assert!(Instant::now() < deadline, "{old_partition} was never dropped");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left = format!("SELECT count(*) AS n FROM audit_logs WHERE org_id = '{org}'");
    assert_eq!(count(&mut conn, &left).await, 3, "this month's rows stay, the old month's are gone");
}

/// Writers on several replicas meeting a month nobody made yet all make it at once: one table,
/// attached once, and no writer sees an error.
#[tokio::test]
async fn a_month_made_by_many_writers_at_once_is_made_once() {
    let pg = PrivatePostgres::start();
    let at = Utc::now().checked_add_months(Months::new(7)).unwrap();
    let attempts = (0..8).map(|_| {
        let url = pg.url();
        async move {
            let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
            diesel::sql_query(format!("SELECT gw_audit_partition('{}'::timestamptz)", at.to_rfc3339()))
                .execute(&mut conn)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    });
    let results = futures::future::join_all(attempts).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let mut conn = AsyncPgConnection::establish(&pg.url()).await.unwrap();
    let name = format!("audit_logs_y{}", at.format("%Ym%m"));
    let attached = format!(
        "SELECT count(*) AS n FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'audit_logs'::regclass AND c.relname = '{name}'"
    );
    assert_eq!(count(&mut conn, &attached).await, 1);
}
