//! The invalidation log (`invalidation_log`): what changed, for the proxies, in commit order.
//! A change records its invalidations with [`record`] inside its own transaction, so none is
//! committed without them; Redis only announces the new ids ([`crate::redis::announce`]).
//!
//! Ids are commit-ordered: [`record`] first takes a transaction-scoped advisory lock, held until
//! the transaction ends, so no two transactions hold unrecorded ids at once. A reader that sees
//! id `n` therefore sees every committed id below it, and a gap below `n` is an id whose
//! transaction rolled back, never one still to come. Callers record last in their transaction
//! (after their own row locks), so the lock is held only for the commit.
//! Entries are global (a message names its organization where it has one) and carry no secret:
//! an API key appears as its SHA-256.

use diesel::sql_types::{BigInt, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::error::Result;
use crate::redis::Invalidation;

/// Entries read per catch-up query, at most (a proxy further behind clears everything).
pub const CATCH_UP_MAX: i64 = 10_000;

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    message: String,
}

#[derive(QueryableByName)]
struct Bounds {
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    first: Option<i64>,
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    last: Option<i64>,
}

/// `pg_advisory_xact_lock` key serializing the log's writers ("gwinvlog").
const WRITERS_LOCK: i64 = 0x6777_696e_766c_6f67;

/// Appends `inv`; its id.
pub async fn record(conn: &mut AsyncPgConnection, inv: &Invalidation) -> Result<i64> {
    diesel::sql_query("SELECT pg_advisory_xact_lock($1)").bind::<BigInt, _>(WRITERS_LOCK).execute(conn).await?;
    let row: Id = diesel::sql_query("INSERT INTO invalidation_log (message) VALUES ($1) RETURNING id")
        .bind::<Text, _>(inv.encode())
        .get_result(conn)
        .await?;
    Ok(row.id)
}

/// The oldest and newest ids kept (0 when the log is empty).
pub async fn bounds(conn: &mut AsyncPgConnection) -> Result<(i64, i64)> {
    let b: Bounds =
        diesel::sql_query("SELECT min(id) AS first, max(id) AS last FROM invalidation_log").get_result(conn).await?;
    Ok((b.first.unwrap_or(0), b.last.unwrap_or(0)))
}

/// Entries after `after`, oldest first, at most `limit`. An entry that no longer decodes (a
/// newer writer's kind) reads as `All`: forgetting everything is always safe.
pub async fn since(conn: &mut AsyncPgConnection, after: i64, limit: i64) -> Result<Vec<(i64, Invalidation)>> {
    let rows: Vec<Row> =
        diesel::sql_query("SELECT id, message FROM invalidation_log WHERE id > $1 ORDER BY id LIMIT $2")
            .bind::<BigInt, _>(after)
            .bind::<BigInt, _>(limit)
            .load(conn)
            .await?;
    Ok(rows.into_iter().map(|r| (r.id, Invalidation::decode(&r.message).unwrap_or(Invalidation::All))).collect())
}

/// Deletes entries older than `keep_secs`, always keeping the newest; how many went.
pub async fn prune(conn: &mut AsyncPgConnection, keep_secs: i64) -> Result<usize> {
    Ok(diesel::sql_query(
        "DELETE FROM invalidation_log WHERE created_at < now() - make_interval(secs => $1::float8) \
         AND id < (SELECT max(id) FROM invalidation_log)",
    )
    .bind::<BigInt, _>(keep_secs)
    .execute(conn)
    .await?)
}

/// Records each of `invs`; the entries, for announcing once the transaction commits.
pub async fn record_all(
    conn: &mut AsyncPgConnection,
    invs: impl IntoIterator<Item = Invalidation>,
) -> Result<Vec<(i64, Invalidation)>> {
    let mut out = Vec::new();
    for inv in invs {
        out.push((record(conn, &inv).await?, inv));
    }
    Ok(out)
}

/// Records the invalidation of each API key by its stored SHA-256; the entries, for
/// announcing once the transaction commits. A stored hash that is not 32 bytes long names no
/// key any proxy can hold (they are cached by their SHA-256): it is skipped.
pub async fn record_keys(conn: &mut AsyncPgConnection, hashes: &[Vec<u8>]) -> Result<Vec<(i64, Invalidation)>> {
    let mut out = Vec::with_capacity(hashes.len());
    for hash in hashes {
        let Ok(hash) = <[u8; 32]>::try_from(hash.as_slice()) else {
            log::warn!("a stored API key hash is {} bytes long, not 32: nothing to invalidate", hash.len());
            continue;
        };
        let inv = Invalidation::ApiKey(hash);
        out.push((record(conn, &inv).await?, inv));
    }
    Ok(out)
}
