//! The leader's beat on the invalidation channel: twice a second, the newest invalidation-log id
//! (`gw_shared::redis::heartbeat`). A proxy that hears of an id it has not applied reads the
//! log; one that hears nothing for a few seconds reads it too and checks its subscription. Once
//! an hour the leader also prunes entries past `admin.invalidation_retention_secs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel_async::AsyncConnection;
use gw_shared::db::invalidations;

use crate::state::AppState;

/// `pg_try_advisory_xact_lock` key of the beat ("gwinvbea").
const LOCK: i64 = 0x6777_696e_7662_6561;
pub const BEAT_EVERY: Duration = Duration::from_millis(500);
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

pub fn spawn(state: Arc<AppState>) {
    actix_web::rt::spawn(async move {
        let mut tick = actix_web::rt::time::interval(BEAT_EVERY);
        let mut pruned: Option<Instant> = None;
        loop {
            tick.tick().await;
            let prune = pruned.is_none_or(|t| t.elapsed() >= PRUNE_EVERY);
            match beat_once(&state, prune).await {
                Ok(true) if prune => pruned = Some(Instant::now()),
                Ok(_) => {}
                Err(e) => {
                    state.metrics.job_failures.with_label_values(&["invalidation_beat"]).inc();
                    log::debug!("invalidation beat: {e}");
                }
            }
        }
    });
}

/// One beat, on the leader only; whether this replica led.
async fn beat_once(state: &AppState, prune: bool) -> Result<bool, String> {
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    let keep = i64::try_from(state.cfg.admin.invalidation_retention_secs.max(60)).unwrap_or(i64::MAX);
    let latest = conn
        .transaction(async |conn| {
            if !gw_shared::db::try_leader_lock(conn, LOCK).await? {
                return Ok::<_, gw_shared::Error>(None);
            }
            if prune {
                let n = invalidations::prune(conn, keep).await?;
                if n > 0 {
                    log::debug!("invalidation log: {n} entries past retention deleted");
                }
            }
            Ok(Some(invalidations::bounds(conn).await?.1))
        })
        .await
        .map_err(|e| e.to_string())?;
    let Some(latest) = latest else { return Ok(false) };
    if let Err(e) = gw_shared::redis::heartbeat(&state.redis, latest).await {
        state.metrics.job_failures.with_label_values(&["invalidation_beat"]).inc();
        log::debug!("invalidation beat not sent: {e}");
    }
    Ok(true)
}
