//! PostgreSQL access: the pool, the embedded migrations, and one module of queries per resource.
//! Every query that touches tenant data takes the `org_id` and filters on it.

pub mod admin_audit;
pub mod api_keys;
pub mod audit_copy;
pub mod audit_logs;
pub mod billing;
pub mod cache;
pub mod events;
pub mod experiments;
pub mod invalidations;
pub mod invites;
pub mod org_routes;
pub mod orgs;
pub mod policies;
pub mod policy_decisions;
pub mod prompt_templates;
pub mod provider_keys;
pub mod reconcile_runs;
pub mod refresh_tokens;
pub mod registrations;
pub mod rollups;
pub mod route_catalog;
pub mod schema;
pub mod seats;
pub mod service_accounts;
pub mod sessions;
pub mod sso;
pub mod teams;
pub mod usage_sync;
pub mod users;
pub mod webhook_deliveries;
pub mod webhook_fanout;
pub mod webhooks;

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::Connection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::pooled_connection::deadpool::{Object, Pool};
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::AsyncPgConnection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use crate::error::{Error, Result};

pub type DbPool = Pool<AsyncPgConnection>;
pub type DbConn = Object<AsyncPgConnection>;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../migrations");

/// Any number of processes may run migrations at once; this lock makes them take turns.
const MIGRATION_LOCK: i64 = 0x6777_6d69_6772; // "gwmigr"

pub fn pool(url: &str, size: usize) -> Result<DbPool> {
    Pool::builder(AsyncDieselConnectionManager::<AsyncPgConnection>::new(url))
        .max_size(size.max(1))
        .runtime(deadpool::Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(5)))
        .create_timeout(Some(Duration::from_secs(5)))
        .recycle_timeout(Some(Duration::from_secs(2)))
        .build()
        .map_err(|e| Error::Pool(e.to_string()))
}

/// Applies pending migrations; returns the versions applied. Blocking: call it outside an async
/// runtime (or from `spawn_blocking`).
pub fn run_migrations(url: &str) -> Result<Vec<String>> {
    let mut conn = AsyncConnectionWrapper::<AsyncPgConnection>::establish(url)
        .map_err(|e| Error::Pool(format!("cannot connect to the database: {e}")))?;
    conn.batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"))?;
    let result = conn
        .run_pending_migrations(MIGRATIONS)
        .map(|v| v.iter().map(|m| m.to_string()).collect())
        .map_err(|e| Error::Config(format!("migration failed: {e}")));
    conn.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"))?;
    result
}

/// Reverts every migration (used by the migration round-trip test).
pub fn revert_all_migrations(url: &str) -> Result<()> {
    let mut conn = AsyncConnectionWrapper::<AsyncPgConnection>::establish(url)
        .map_err(|e| Error::Pool(format!("cannot connect to the database: {e}")))?;
    conn.revert_all_migrations(MIGRATIONS).map_err(|e| Error::Config(format!("revert failed: {e}")))?;
    Ok(())
}

pub async fn ping(pool: &DbPool) -> Result<()> {
    use diesel_async::RunQueryDsl;
    let mut conn = pool.get().await?;
    diesel::sql_query("SELECT 1").execute(&mut conn).await?;
    Ok(())
}

diesel::define_sql_function!(fn lower(x: diesel::sql_types::Text) -> diesel::sql_types::Text);

/// Takes the transaction-scoped advisory lock `key` if no one holds it: what makes a background
/// job run on one replica at a time (the leader of the moment). Call inside the job's
/// transaction; the lock ends with it.
pub async fn try_leader_lock(conn: &mut AsyncPgConnection, key: i64) -> crate::error::Result<bool> {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Locked {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        locked: bool,
    }
    let lock: Locked = diesel::sql_query("SELECT pg_try_advisory_xact_lock($1) AS locked")
        .bind::<diesel::sql_types::BigInt, _>(key)
        .get_result(conn)
        .await?;
    Ok(lock.locked)
}

/// The count one organization's rows give `sql`: a `SELECT count(*) AS n ... WHERE org_id = $1
/// ...` (per-organization caps: templates, experiments).
pub async fn count_of_org(
    conn: &mut AsyncPgConnection,
    sql: &'static str,
    org_id: uuid::Uuid,
) -> crate::error::Result<i64> {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let c: Count = diesel::sql_query(sql).bind::<diesel::sql_types::Uuid, _>(org_id).get_result(conn).await?;
    Ok(c.n)
}
