//! Database access for checking what the services wrote.

use std::time::{Duration, Instant};

use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::audit::AuditRecord;
use uuid::Uuid;

pub async fn connect() -> AsyncPgConnection {
    AsyncPgConnection::establish(&super::database_url()).await.expect("connect to postgres")
}

/// A new, migrated database on the shared Postgres server, for a stack whose gateway-wide state
/// (the route catalog) no other test may see or change. Returns its URL.
pub async fn fresh_database() -> String {
    use diesel_async::RunQueryDsl;
    let name = format!("gw_t_{}", Uuid::new_v4().simple());
    let base = super::database_url();
    let (prefix, _) = base.rsplit_once('/').expect("a database URL");
    let url = format!("{prefix}/{name}");
    let mut admin = connect().await;
    diesel::sql_query(format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create database");
    let u = url.clone();
    tokio::task::spawn_blocking(move || {
        gw_shared::db::run_migrations(&gw_shared::config::DatabaseConfig::at(&u)).expect("migrate the new database")
    })
    .await
    .expect("migrations thread");
    url
}

/// Makes a user a gateway operator (what `gw-admin operator grant` does), on the shared database.
pub async fn grant_operator(user_id: Uuid) {
    use diesel::prelude::*;
    use diesel_async::RunQueryDsl;
    use gw_shared::db::schema::gateway_operators;
    let mut conn = connect().await;
    diesel::insert_into(gateway_operators::table)
        .values(gateway_operators::user_id.eq(user_id))
        .execute(&mut conn)
        .await
        .expect("grant operator");
}

/// Sets an organization's plan (billing's job in production; SSO needs growth or higher).
pub async fn set_plan(org_id: Uuid, plan: &str) {
    use diesel::prelude::*;
    use diesel_async::RunQueryDsl;
    use gw_shared::db::schema::organizations;
    let mut conn = connect().await;
    diesel::update(organizations::table.filter(organizations::id.eq(org_id)))
        .set(organizations::plan.eq(plan))
        .execute(&mut conn)
        .await
        .expect("set plan");
}

/// Waits (up to 5 s) for the audit row of a request, as the flusher writes behind requests.
pub async fn audit_row(org_id: Uuid, request_id: Uuid) -> AuditRecord {
    audit_row_within(org_id, request_id, Duration::from_secs(5)).await
}

/// Waits up to `wait` for the audit row of a request (a stream read on after its client
/// left is written when the upstream has finished).
pub async fn audit_row_within(org_id: Uuid, request_id: Uuid, wait: Duration) -> AuditRecord {
    let mut conn = connect().await;
    let deadline = Instant::now() + wait;
    loop {
        if let Some(r) = gw_shared::db::audit_logs::find(&mut conn, org_id, request_id).await.expect("query") {
            return r;
        }
        assert!(Instant::now() < deadline, "audit row {request_id} never appeared");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// An audit row of `org` at `at` as the proxy writes one for a plain chat request that reached
/// no upstream: tests seed the log with it, changing what they look at.
pub fn record(org: Uuid, at: chrono::DateTime<chrono::Utc>) -> AuditRecord {
    AuditRecord {
        id: Uuid::now_v7(),
        org_id: org,
        endpoint: "/v1/chat/completions".into(),
        status_code: 200,
        cache_status: "miss".into(),
        created_at: at,
        routing: serde_json::json!([]),
        policy: serde_json::json!([]),
        ..Default::default()
    }
}

/// The newest mail of `kind` to `address` in the outbox (its body), and how many there are.
pub async fn outbox(address: &str, kind: &str) -> (String, usize) {
    use diesel::prelude::*;
    use diesel_async::RunQueryDsl;
    use gw_shared::db::schema::email_outbox as o;
    let mut conn = connect().await;
    let bodies: Vec<String> = o::table
        .filter(o::to_address.eq(address))
        .filter(o::kind.eq(kind))
        .order(o::created_at.desc())
        .select(o::body)
        .load(&mut conn)
        .await
        .expect("reading the outbox");
    let newest = <[String]>::first(&bodies).cloned().unwrap_or_default();
    (newest, bodies.len())
}

/// Runs one statement on the shared database; the database's refusal, if it refuses.
pub async fn try_execute(sql: &str) -> Result<usize, String> {
    use diesel_async::RunQueryDsl;
    let mut conn = connect().await;
    diesel::sql_query(sql).execute(&mut conn).await.map_err(|e| e.to_string())
}

/// Runs one statement on the shared database (a state no API reaches, set up for a test).
pub async fn execute(sql: &str) {
    use diesel_async::RunQueryDsl;
    let mut conn = connect().await;
    diesel::sql_query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The audit rows of an organization, now.
pub async fn audit_count(org_id: Uuid) -> i64 {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = connect().await;
    diesel::sql_query("SELECT count(*) AS n FROM audit_logs WHERE org_id = $1")
        .bind::<diesel::sql_types::Uuid, _>(org_id)
        .get_result::<N>(&mut conn)
        .await
        .expect("count audit rows")
        .n
}

/// The request ids of an organization's audit rows, now.
pub async fn audit_ids(org_id: Uuid) -> std::collections::HashSet<Uuid> {
    use diesel::prelude::*;
    use diesel_async::RunQueryDsl;
    use gw_shared::db::schema::audit_logs as a;
    let mut conn = connect().await;
    let ids: Vec<Uuid> =
        a::table.filter(a::org_id.eq(org_id)).select(a::id).load(&mut conn).await.expect("reading audit ids");
    ids.into_iter().collect()
}
