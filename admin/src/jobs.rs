//! Background jobs of the control plane, one leader per cluster: each run takes a Postgres
//! advisory lock for the duration of its transaction, so when several admin replicas wake at
//! once only one does the work.

use std::sync::Arc;
use std::time::Duration;

use diesel::sql_types::Bool;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, RunQueryDsl};

use crate::state::AppState;

/// `pg_try_advisory_xact_lock` key of the session-pruning job ("gwprune").
const PRUNE_LOCK: i64 = 0x0067_7770_7275_6e65;
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Expired semantic-cache rows deleted per statement, and statements per run at most.
const EXPIRED_BATCH: i64 = 10_000;
const EXPIRED_BATCHES: usize = 20;

#[derive(QueryableByName)]
struct Locked {
    #[diesel(sql_type = Bool)]
    locked: bool,
}

pub fn spawn(state: Arc<AppState>) {
    actix_web::rt::spawn(async move {
        loop {
            if let Err(e) = prune_once(&state).await {
                log::warn!("session pruning failed: {e}");
            }
            actix_web::rt::time::sleep(PRUNE_EVERY).await;
        }
    });
}

/// Deletes refresh tokens and sessions that ended over a day ago, and expired semantic-cache
/// entries.
pub async fn prune_once(state: &AppState) -> Result<(), String> {
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    let pruned = conn
        .transaction(async |conn| {
            let lock: Locked = diesel::sql_query(format!("SELECT pg_try_advisory_xact_lock({PRUNE_LOCK}) AS locked"))
                .get_result(conn)
                .await?;
            if !lock.locked {
                return Ok::<_, gw_shared::Error>(None);
            }
            let ended = gw_shared::db::sessions::prune(conn, chrono::Duration::days(1)).await?;
            // Expired semantic-cache entries are never answered (lookups skip them) but take room.
            let mut expired = 0;
            for _ in 0..EXPIRED_BATCHES {
                let n = gw_shared::db::cache::delete_expired(conn, EXPIRED_BATCH).await?;
                expired += n;
                if n < EXPIRED_BATCH as usize {
                    break;
                }
            }
            Ok(Some((ended, expired)))
        })
        .await
        .map_err(|e| e.to_string())?;
    if let Some(((tokens, sessions), expired)) = pruned {
        if tokens + sessions + expired > 0 {
            log::info!(
                "pruned {tokens} refresh token(s), {sessions} session(s) and {expired} expired semantic cache entries"
            );
        }
    }
    Ok(())
}
