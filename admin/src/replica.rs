//! Exports read from the streaming replica (`database.read_url`) without trailing the primary.
//!
//! An export is read in batches, each on a connection of its own (a slow client never holds one).
//! On a replica, each batch could see an older or newer state than the last: a lagging replica
//! would leave out rows committed before the export began, and two replicas behind one address
//! could even go back. So an export reads the replica only once it has replayed the primary's WAL
//! up to where it stood when the export began (waiting up to [`CATCH_UP`], else reading the primary
//! throughout), and every later batch reads a connection that has replayed at least as far as
//! the one before it (the floor rises; a connection below it is waited on, then the export moves
//! to the primary). The audit log is append-only, so each batch then sees every row the export's
//! start saw: the same rows as one snapshot, without holding one open for the whole download.
//! The primary's position is its WAL *insert* position: with `synchronous_commit = off` a
//! transaction is visible before its commit record is flushed, and the replica has the
//! transaction only once it has replayed past that record.

use std::time::{Duration, Instant};

use diesel::sql_types::{Bool, Text};
use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use gw_shared::db::{DbConn, DbPool};

use crate::state::AppState;

/// How long an export waits for the replica to catch up before reading the primary.
pub const CATCH_UP: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(50);

/// Where an export reads, and the WAL position every batch must have reached.
pub struct Reader {
    primary: DbPool,
    /// The replica and the floor (an LSN, as text) while the export reads it.
    replica: Option<(DbPool, String)>,
}

#[derive(QueryableByName)]
struct Replayed {
    /// Not a standby (the read URL names a primary): nothing to wait for.
    #[diesel(sql_type = Bool)]
    primary: bool,
    #[diesel(sql_type = Bool)]
    reached: bool,
    #[diesel(sql_type = Text)]
    at: String,
}

/// Whether `conn` has replayed up to `floor`, and how far it has.
async fn replayed(conn: &mut DbConn, floor: &str) -> gw_shared::Result<Replayed> {
    Ok(diesel::sql_query(
        "SELECT NOT pg_is_in_recovery() AS primary, \
         coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false) AS reached, \
         coalesce(pg_last_wal_replay_lsn()::text, $1) AS at",
    )
    .bind::<Text, _>(floor)
    .get_result(conn)
    .await?)
}

/// A connection of `pool` that has replayed up to `floor`, within `CATCH_UP`; with it, how far it
/// has replayed.
async fn caught_up(pool: &DbPool, floor: &str) -> Option<(DbConn, String)> {
    let deadline = Instant::now() + CATCH_UP;
    loop {
        if let Ok(mut conn) = pool.get().await {
            match replayed(&mut conn, floor).await {
                Ok(r) if r.primary => return Some((conn, floor.to_string())),
                Ok(r) if r.reached => return Some((conn, r.at)),
                Ok(_) => {}
                Err(e) => log::warn!("reading the replica's position failed: {e}"),
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

impl Reader {
    /// Where an export starting now reads: the replica once it has caught up with the primary's
    /// current position, else the primary.
    pub async fn for_export(state: &AppState) -> gw_shared::Result<Reader> {
        let primary = state.db.clone();
        let Some(pool) = &state.read_db else { return Ok(Reader { primary, replica: None }) };
        #[derive(QueryableByName)]
        struct Lsn {
            #[diesel(sql_type = Text)]
            lsn: String,
        }
        let start: Lsn = {
            let mut conn = primary.get().await?;
            diesel::sql_query("SELECT pg_current_wal_insert_lsn()::text AS lsn").get_result(&mut conn).await?
        };
        match caught_up(pool, &start.lsn).await {
            Some((_, at)) => Ok(Reader { primary, replica: Some((pool.clone(), at)) }),
            None => {
                log::warn!(
                    "an export reads the primary: the replica has not replayed {} within {CATCH_UP:?}",
                    start.lsn
                );
                Ok(Reader { primary, replica: None })
            }
        }
    }

    /// `replica` or `primary`: what the export reads now (the `x-gw-read-from` header).
    pub fn source(&self) -> &'static str {
        if self.replica.is_some() {
            "replica"
        } else {
            "primary"
        }
    }

    /// A connection for the next batch.
    pub async fn conn(&mut self) -> gw_shared::Result<DbConn> {
        if let Some((pool, floor)) = &self.replica {
            if let Some((conn, at)) = caught_up(pool, floor).await {
                self.replica = Some((pool.clone(), at));
                return Ok(conn);
            }
            log::warn!("an export moves to the primary: the replica fell behind where it had read");
            self.replica = None;
        }
        Ok(self.primary.get().await?)
    }
}
