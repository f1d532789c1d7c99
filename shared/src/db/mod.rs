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
pub mod pooler;
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
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use diesel_async::AsyncPgConnection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use futures::FutureExt;

use crate::config::{DatabaseConfig, Pooler};
use crate::error::{Error, Result};

pub type DbPool = Pool<AsyncPgConnection>;
pub type DbConn = Object<AsyncPgConnection>;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../migrations");

/// Any number of processes may run migrations at once; this lock makes them take turns.
const MIGRATION_LOCK: i64 = 0x6777_6d69_6772; // "gwmigr"

/// A pool of at most `size` connections to `db.url` (through the pooler adapter when `db.pooler`
/// says so).
pub fn pool(db: &DatabaseConfig, size: usize) -> Result<DbPool> {
    let mut manager = ManagerConfig::<AsyncPgConnection>::default();
    let pooler = db.pooler;
    manager.custom_setup = Box::new(move |url| connect(url, pooler).boxed());
    Pool::builder(AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(&db.url, manager))
        .max_size(size.max(1))
        .runtime(deadpool::Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(5)))
        .create_timeout(Some(Duration::from_secs(5)))
        .recycle_timeout(Some(Duration::from_secs(2)))
        .build()
        .map_err(|e| Error::Pool(e.to_string()))
}

/// The replica's pool, when `db.read_url` names one (through the pooler adapter as `url` is).
pub fn read_pool(db: &DatabaseConfig) -> Result<Option<DbPool>> {
    match &db.read_url {
        None => Ok(None),
        Some(url) => pool(&DatabaseConfig { url: url.clone(), ..db.clone() }, db.read_pool_size).map(Some),
    }
}

/// One diesel connection to `url`, through the pooler adapter when `pooler` says so.
pub async fn connect(url: &str, pooler: Pooler) -> diesel::ConnectionResult<AsyncPgConnection> {
    use diesel_async::AsyncConnection;
    match pooler {
        Pooler::None => AsyncPgConnection::establish(url).await,
        Pooler::Transaction => {
            let client = raw_client(url, pooler).await.map_err(diesel::ConnectionError::BadConnection)?;
            AsyncPgConnection::try_from(client).await
        }
    }
}

/// A tokio-postgres client to `url` (its connection driven by a task of its own), through the
/// pooler adapter when `pooler` says so. Errors are said without the URL (it may hold a password).
pub async fn raw_client(url: &str, pooler: Pooler) -> std::result::Result<tokio_postgres::Client, String> {
    tokio::time::timeout(CONNECT_TIMEOUT, raw_client_now(url, pooler))
        .await
        .unwrap_or_else(|_| Err(format!("no connection within {CONNECT_TIMEOUT:?}")))
}

/// Longest a new connection may take (a server that does not answer must not hold a caller).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

async fn raw_client_now(url: &str, pooler: Pooler) -> std::result::Result<tokio_postgres::Client, String> {
    let (client, driver) = match pooler {
        Pooler::None => {
            let (client, conn) =
                tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
            (client, conn.boxed())
        }
        Pooler::Transaction => {
            let config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| e.to_string())?;
            let port = config.get_ports().first().copied().unwrap_or(5432);
            match config.get_hosts().first() {
                Some(tokio_postgres::config::Host::Tcp(host)) => {
                    let socket = tokio::net::TcpStream::connect((host.as_str(), port))
                        .await
                        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
                    socket.set_nodelay(true).map_err(|e| e.to_string())?;
                    let (client, conn) = config
                        .connect_raw(pooler::Unnamed::new(socket), tokio_postgres::NoTls)
                        .await
                        .map_err(|e| e.to_string())?;
                    (client, conn.boxed())
                }
                Some(tokio_postgres::config::Host::Unix(dir)) => {
                    let path = dir.join(format!(".s.PGSQL.{port}"));
                    let socket = tokio::net::UnixStream::connect(&path)
                        .await
                        .map_err(|e| format!("cannot connect to {}: {e}", path.display()))?;
                    let (client, conn) = config
                        .connect_raw(pooler::Unnamed::new(socket), tokio_postgres::NoTls)
                        .await
                        .map_err(|e| e.to_string())?;
                    (client, conn.boxed())
                }
                None => return Err("the database URL names no host".into()),
            }
        }
    };
    tokio::spawn(async move {
        if let Err(e) = driver.await {
            log::debug!("postgres connection ended: {e}");
        }
    });
    Ok(client)
}

/// Applies pending migrations; returns the versions applied. Blocking: call it outside an async
/// runtime (or from `spawn_blocking`). Runs on `db.migration_url()`: straight to the primary,
/// since the lock that makes concurrent runs take turns is a session's.
pub fn run_migrations(db: &DatabaseConfig) -> Result<Vec<String>> {
    let url = db.migration_url()?;
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
