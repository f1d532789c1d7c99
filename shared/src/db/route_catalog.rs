//! The route catalog's versions (`route_catalog_versions`) and the gateway operators. A write
//! holds a transaction-level advisory lock, so versions are numbered without gaps or races, and
//! stores the whole catalog: a proxy reads one row to load one consistent version.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::Value;
use uuid::Uuid;

use super::schema::{gateway_operators, route_catalog_versions as v, users};
use crate::config::Routes;
use crate::error::{Error, Result};

/// The advisory lock every catalog write takes (an arbitrary constant of gw's own).
const WRITE_LOCK: i64 = 0x6777_726f_7574_6573; // "gwroutes"

/// One version as stored.
#[derive(Debug, Clone)]
pub struct Version {
    pub version: i64,
    pub routes: Routes,
    pub change: String,
    pub actor_user_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

#[derive(Queryable)]
struct Row {
    version: i64,
    routes: Value,
    change: String,
    actor_user_id: Option<Uuid>,
    created_at: DateTime<Utc>,
}

impl TryFrom<Row> for Version {
    type Error = Error;

    fn try_from(r: Row) -> Result<Version> {
        let routes = serde_json::from_value(r.routes)
            .map_err(|e| Error::Config(format!("route catalog version {} does not read: {e}", r.version)))?;
        Ok(Version {
            version: r.version,
            routes,
            change: r.change,
            actor_user_id: r.actor_user_id,
            created_at: r.created_at,
        })
    }
}

const COLUMNS: (v::version, v::routes, v::change, v::actor_user_id, v::created_at) =
    (v::version, v::routes, v::change, v::actor_user_id, v::created_at);

/// The version in force; `None` before the catalog was ever written.
pub async fn latest(conn: &mut AsyncPgConnection) -> Result<Option<Version>> {
    let row: Option<Row> = v::table.order(v::version.desc()).select(COLUMNS).first(conn).await.optional()?;
    row.map(Version::try_from).transpose()
}

/// The number of the version in force (0: none yet): what a proxy polls.
pub async fn latest_version(conn: &mut AsyncPgConnection) -> Result<i64> {
    let n: Option<i64> = v::table.select(diesel::dsl::max(v::version)).first(conn).await?;
    Ok(n.unwrap_or(0))
}

pub async fn get(conn: &mut AsyncPgConnection, version: i64) -> Result<Option<Version>> {
    let row: Option<Row> = v::table.find(version).select(COLUMNS).first(conn).await.optional()?;
    row.map(Version::try_from).transpose()
}

/// Versions, newest first, below `before` (a version number) when given.
pub async fn list(conn: &mut AsyncPgConnection, before: Option<i64>, limit: i64) -> Result<Vec<Version>> {
    let mut q = v::table.order(v::version.desc()).select(COLUMNS).limit(limit).into_boxed();
    if let Some(b) = before {
        q = q.filter(v::version.lt(b));
    }
    let rows: Vec<Row> = q.load(conn).await?;
    rows.into_iter().map(Version::try_from).collect()
}

/// Takes the write lock for the rest of the transaction: one catalog write at a time.
pub async fn lock(conn: &mut AsyncPgConnection) -> Result<()> {
    diesel::sql_query("SELECT pg_advisory_xact_lock($1)").bind::<BigInt, _>(WRITE_LOCK).execute(conn).await?;
    Ok(())
}

/// Stores `routes` as version `version` (inside the transaction holding [`lock`]).
pub async fn insert(
    conn: &mut AsyncPgConnection,
    version: i64,
    routes: &Routes,
    change: &str,
    actor_user_id: Option<Uuid>,
) -> Result<()> {
    let json = serde_json::to_value(routes).map_err(|e| Error::Invalid(format!("route catalog: {e}")))?;
    diesel::insert_into(v::table)
        .values((v::version.eq(version), v::routes.eq(json), v::change.eq(change), v::actor_user_id.eq(actor_user_id)))
        .execute(conn)
        .await?;
    Ok(())
}

/// Writes `routes` as version 1 unless a version exists; answers the version in force.
pub async fn seed(conn: &mut AsyncPgConnection, routes: &Routes, change: &str) -> Result<i64> {
    conn.transaction::<i64, Error, _>(async |conn| {
        lock(conn).await?;
        match latest_version(conn).await? {
            0 => {
                insert(conn, 1, routes, change, None).await?;
                Ok(1)
            }
            n => Ok(n),
        }
    })
    .await
}

pub async fn is_operator(conn: &mut AsyncPgConnection, user_id: Uuid) -> Result<bool> {
    let n: i64 =
        gateway_operators::table.filter(gateway_operators::user_id.eq(user_id)).count().get_result(conn).await?;
    Ok(n > 0)
}

/// Grants or revokes the operator role of the account with this (normalized) address; false
/// when there is no such account.
pub async fn set_operator(conn: &mut AsyncPgConnection, email_normalized: &str, operator: bool) -> Result<bool> {
    let user: Option<Uuid> = users::table
        .filter(users::email_normalized.eq(email_normalized))
        .select(users::id)
        .first(conn)
        .await
        .optional()?;
    let Some(user_id) = user else { return Ok(false) };
    if operator {
        diesel::insert_into(gateway_operators::table)
            .values(gateway_operators::user_id.eq(user_id))
            .on_conflict_do_nothing()
            .execute(conn)
            .await?;
    } else {
        diesel::delete(gateway_operators::table.filter(gateway_operators::user_id.eq(user_id))).execute(conn).await?;
    }
    Ok(true)
}

/// On a connection of its own (for a process whose runtimes are not up yet): seeds an empty
/// catalog with `seed`, then reads the version in force.
pub async fn seed_and_load(
    db: &crate::config::DatabaseConfig,
    seed_routes: &Routes,
    change: &str,
) -> Result<Option<Version>> {
    let mut conn = tokio::time::timeout(std::time::Duration::from_secs(5), super::connect(&db.url, db.pooler))
        .await
        .map_err(|_| Error::Pool("timed out connecting to Postgres".into()))?
        .map_err(|e| Error::Pool(e.to_string()))?;
    seed(&mut conn, seed_routes, change).await?;
    latest(&mut conn).await
}
