//! Background jobs of the control plane, one leader per cluster: each run takes a Postgres
//! advisory lock for the duration of its transaction, so when several admin replicas wake at
//! once only one does the work.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::AsyncConnection;
use gw_shared::db::rollups::UPKEEP_LOCK as AUDIT_LOCK;

use crate::state::AppState;

/// `pg_try_advisory_xact_lock` key of the session-pruning job ("gwprune").
const PRUNE_LOCK: i64 = 0x0067_7770_7275_6e65;
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Expired semantic-cache rows deleted per statement, and statements per run at most.
const EXPIRED_BATCH: i64 = 10_000;
const EXPIRED_BATCHES: usize = 20;

pub fn spawn(state: Arc<AppState>) {
    let pruning = state.clone();
    actix_web::rt::spawn(async move {
        loop {
            if let Err(e) = prune_once(&pruning).await {
                log::warn!("session pruning failed: {e}");
            }
            actix_web::rt::time::sleep(PRUNE_EVERY).await;
        }
    });
    actix_web::rt::spawn(async move {
        let every = Duration::from_secs(state.cfg.admin.rollup_interval_secs.max(1));
        loop {
            let started = std::time::Instant::now();
            match audit_once(&state).await {
                Ok(Some(hours)) => {
                    state.metrics.rollup_duration.observe(started.elapsed().as_secs_f64());
                    if hours > 0 {
                        log::debug!("audit rollups: {hours} hour(s) aggregated");
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    state.metrics.job_failures.with_label_values(&["audit"]).inc();
                    log::warn!("audit rollups and partitions failed: {e}");
                }
            }
            actix_web::rt::time::sleep(every).await;
        }
    });
}

/// The audit log's upkeep, on the leader only: partitions for the coming months and partitions
/// past retention detached and dropped whole (never a bulk delete), each in a short statement of
/// its own (`partitions`); then, in a transaction apart, feedback past retention pruned and the
/// hourly rollups brought up to date. `None` when another replica holds the rollups' lock.
pub async fn audit_once(state: &AppState) -> Result<Option<usize>, String> {
    match crate::partitions::upkeep(state).await {
        Ok(Some(dropped)) if dropped > 0 => {
            state.metrics.partitions_dropped.inc_by(dropped as u64);
            log::info!("audit retention: dropped {dropped} monthly partition(s)");
        }
        Ok(_) => {}
        // The rollups do not depend on it: they run, and the partitions are tried again next time.
        Err(e) => {
            state.metrics.job_failures.with_label_values(&["audit_partitions"]).inc();
            log::warn!("audit partitions: {e}");
        }
    }
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    let retention = state.cfg.admin.audit_retention_months;
    conn.transaction(async |conn| {
        if !gw_shared::db::try_leader_lock(conn, AUDIT_LOCK).await? {
            return Ok::<_, gw_shared::Error>(None);
        }
        if retention > 0 {
            // Feedback scores (and their comments) go with the requests they were given for.
            let cutoff = state.clock.now() - chrono::Duration::days(31 * i64::from(retention));
            gw_shared::db::experiments::prune_feedback(conn, cutoff, 10_000).await?;
        }
        Ok(Some(gw_shared::db::rollups::run(conn, state.clock.now()).await?))
    })
    .await
    .map_err(|e| e.to_string())
}

/// Deletes refresh tokens and sessions that ended over a day ago, and expired semantic-cache
/// entries.
pub async fn prune_once(state: &AppState) -> Result<(), String> {
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    let pruned = conn
        .transaction(async |conn| {
            if !gw_shared::db::try_leader_lock(conn, PRUNE_LOCK).await? {
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
