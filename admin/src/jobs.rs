//! Background jobs of the control plane, one leader per cluster: each run takes a Postgres
//! advisory lock for the duration of its transaction, so when several admin replicas wake at
//! once only one does the work.

use std::sync::Arc;
use std::time::Duration;

use diesel::QueryableByName;
use diesel_async::{AsyncConnection, RunQueryDsl};
use gw_shared::db::rollups::UPKEEP_LOCK as AUDIT_LOCK;

use crate::state::AppState;

/// `pg_try_advisory_xact_lock` key of the session-pruning job ("gwprune").
const PRUNE_LOCK: i64 = 0x0067_7770_7275_6e65;
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Expired semantic-cache rows deleted per statement, and statements per run at most.
const EXPIRED_BATCH: i64 = 10_000;
const EXPIRED_BATCHES: usize = 20;

/// Months of partitions created ahead of time (a proxy creates a missing one itself too).
const MONTHS_AHEAD: i32 = 2;

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

/// The audit log's upkeep, on the leader only: partitions for the coming months, partitions
/// past retention dropped whole (never a bulk delete), and the hourly rollups brought up to
/// date. `None` when another replica holds the lock.
pub async fn audit_once(state: &AppState) -> Result<Option<usize>, String> {
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    let retention = state.cfg.admin.audit_retention_months;
    let metrics = state.metrics.clone();
    conn.transaction(async |conn| {
        if !gw_shared::db::try_leader_lock(conn, AUDIT_LOCK).await? {
            return Ok::<_, gw_shared::Error>(None);
        }
        diesel::sql_query(format!(
            "SELECT gw_audit_partition(now() + make_interval(months => m)) FROM generate_series(0, {MONTHS_AHEAD}) AS m"
        ))
        .execute(conn)
        .await?;
        if retention > 0 {
            #[derive(QueryableByName)]
            struct Dropped {
                #[diesel(sql_type = diesel::sql_types::Integer)]
                dropped: i32,
            }
            let d: Dropped = diesel::sql_query(format!(
                "SELECT gw_audit_drop_partitions(date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' \
                 - make_interval(months => {})) AS dropped",
                retention - 1
            ))
            .get_result(conn)
            .await?;
            if d.dropped > 0 {
                metrics.partitions_dropped.inc_by(d.dropped as u64);
                log::info!("audit retention: dropped {} monthly partition(s)", d.dropped);
            }
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
