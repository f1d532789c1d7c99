//! The hourly metered usage sync (`docs/billing.md`): on the leader, each completed hour of each
//! organization on a metered plan goes into the ledger with what it sends (from the hourly
//! rollups), and hours already sent that late audit rows changed get an adjustment; then due
//! sends go to the billing provider as meter events whose identifier (organization, usage, hour,
//! revision) makes every retry, resume or duplicate count once. A send that keeps failing backs
//! off, doubling up to an hour, and after `usage_max_attempts` tries is given up with
//! `usage.sync_failed` on the outbox and in the organization's trail. Never runs in air-gapped
//! mode, without a provider, or without a metered plan.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use diesel_async::AsyncConnection;
use gw_shared::billing::meter::event_time;
use gw_shared::db::usage_sync::{self, Due, Outcome};
use gw_shared::webhooks::payloads::{usage_sync_failed, SyncFailure};

use crate::billing_provider::{MeterEvent, ProviderError};
use crate::state::AppState;

/// `pg_try_advisory_xact_lock` key of the sync's planning ("gwusage").
const SYNC_LOCK: i64 = 0x0067_7775_7361_6765;
/// Sends claimed per batch.
const BATCH: i64 = 50;
/// Batches per run at most, so a long catch-up leaves room for the next run's planning.
const BATCHES: usize = 20;
/// How long a claimed send is this replica's before another may take it (the same identifier).
const LEASE: TimeDelta = TimeDelta::minutes(2);

pub fn spawn(state: Arc<AppState>) {
    let b = &state.cfg.billing;
    if b.airgap || b.meters.is_empty() || state.billing.is_none() {
        return;
    }
    actix_web::rt::spawn(async move {
        let every = Duration::from_secs(state.cfg.billing.usage_sync_secs.max(1));
        loop {
            if let Err(e) = run_once(&state).await {
                state.metrics.job_failures.with_label_values(&["usage_sync"]).inc();
                log::warn!("usage sync: {e}");
            }
            actix_web::rt::time::sleep(every).await;
        }
    });
}

/// One run: plan (leader only), then send what is due.
pub async fn run_once(state: &AppState) -> Result<(), String> {
    let now = state.clock.now();
    let settle = TimeDelta::seconds(i64::try_from(state.cfg.billing.usage_settle_secs).unwrap_or(i64::MAX / 2));
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    let meters = &state.cfg.billing.meters;
    let planned = conn
        .transaction(async |conn| {
            if !gw_shared::db::try_leader_lock(conn, SYNC_LOCK).await? {
                return Ok::<_, gw_shared::Error>(None);
            }
            Ok(Some(usage_sync::plan(conn, meters, now - settle, now).await?))
        })
        .await
        .map_err(|e| e.to_string())?;
    if let Some(p) = planned.filter(|p| p.hours + p.adjustments > 0) {
        log::info!(
            "usage sync: {} hour(s) planned, {} send(s) and {} adjustment(s) queued",
            p.hours,
            p.sends,
            p.adjustments
        );
    }
    for _ in 0..BATCHES {
        let due = usage_sync::claim(&mut conn, now, LEASE, BATCH).await.map_err(|e| e.to_string())?;
        if due.is_empty() {
            break;
        }
        for d in &due {
            send(state, &mut conn, d, now).await?;
        }
    }
    Ok(())
}

async fn send(
    state: &AppState,
    conn: &mut diesel_async::AsyncPgConnection,
    d: &Due,
    now: DateTime<Utc>,
) -> Result<(), String> {
    let Some(provider) = state.billing.as_deref() else {
        return Ok(());
    };
    let event = MeterEvent {
        event_name: &d.event_name,
        customer: &d.customer_id,
        value: d.quantity,
        identifier: &d.identifier,
        timestamp: event_time(d.hour, now).timestamp(),
    };
    let answer = provider.meter_event(&event).await;
    let b = &state.cfg.billing;
    match answer {
        // Stripe refuses an identifier it already counted once its idempotency key has expired
        // (a send resumed long after a crash): counted is what the ledger wants to know.
        Err(ProviderError::Refused { code: Some(code), .. }) if code == "resource_already_exists" => {
            state.metrics.usage_sends.with_label_values(&["sent"]).inc();
            let answer = d.identifier.clone();
            usage_sync::finish(conn, d, Outcome::Sent { answer: &answer }, now).await.map_err(|e| e.to_string())
        }
        Ok(answer) => {
            state.metrics.usage_sends.with_label_values(&["sent"]).inc();
            usage_sync::finish(conn, d, Outcome::Sent { answer: &answer }, now).await.map_err(|e| e.to_string())
        }
        Err(e) if u32::try_from(d.attempts).unwrap_or(u32::MAX) < b.usage_max_attempts => {
            state.metrics.usage_sends.with_label_values(&["retry"]).inc();
            let error = e.to_string();
            let at = now + backoff(b.usage_retry_secs, d.attempts);
            log::warn!("usage sync: {} (try {}) failed, again at {at}: {error}", d.identifier, d.attempts);
            usage_sync::finish(conn, d, Outcome::Retry { error: &error, at }, now).await.map_err(|e| e.to_string())
        }
        Err(e) => {
            state.metrics.usage_sends.with_label_values(&["failed"]).inc();
            let error = e.to_string();
            log::error!("usage sync: {} given up after {} tries: {error}", d.identifier, d.attempts);
            give_up(conn, d, &error, now).await.map_err(|e| e.to_string())
        }
    }
}

/// The ledger row failed, `usage.sync_failed` on the outbox and the trail entry, in one
/// transaction.
async fn give_up(
    conn: &mut diesel_async::AsyncPgConnection,
    d: &Due,
    error: &str,
    now: DateTime<Utc>,
) -> gw_shared::Result<()> {
    conn.transaction(async |conn| {
        usage_sync::finish(conn, d, Outcome::GaveUp { error }, now).await?;
        let f = SyncFailure {
            usage: &d.usage,
            event_name: &d.event_name,
            hour: d.hour,
            revision: d.revision,
            quantity: d.quantity,
            attempts: d.attempts,
            identifier: &d.identifier,
            error,
        };
        gw_shared::db::events::emit(conn, usage_sync_failed(d.org_id, &f)).await?;
        let detail = serde_json::json!({"usage": d.usage, "hour": d.hour, "revision": d.revision,
                                        "quantity": d.quantity, "attempts": d.attempts, "error": error});
        let resource = ("organization", Some(d.org_id.to_string()));
        let entry =
            gw_shared::db::admin_audit::Event::system(d.org_id, None, "billing.usage_sync_failed", resource, detail);
        gw_shared::db::admin_audit::insert(conn, &entry).await?;
        Ok(())
    })
    .await
}

/// The wait after the `attempts`th failed try: `base` seconds, doubling, at most an hour.
fn backoff(base_secs: u64, attempts: i32) -> TimeDelta {
    let doublings = u32::try_from(attempts.saturating_sub(1)).unwrap_or(0).min(20);
    let secs = base_secs.saturating_mul(1u64 << doublings).min(3600);
    TimeDelta::seconds(i64::try_from(secs).unwrap_or(3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_doubling_up_to_an_hour() {
        let waits: Vec<i64> = (1..=8).map(|n| backoff(60, n).num_seconds()).collect();
        assert_eq!(waits, [60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(backoff(60, 0).num_seconds(), 60);
        assert_eq!(backoff(u64::MAX, 3).num_seconds(), 3600);
    }
}
