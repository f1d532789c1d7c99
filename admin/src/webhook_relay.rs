//! The webhook relay, in gw-admin beside the other background jobs: it hands the events outbox
//! to the subscribed endpoints (one delivery each) and attempts due deliveries, signed the
//! Standard Webhooks way (`webhook-id` = the event's id, unchanged across attempts,
//! `webhook-timestamp`, `webhook-signature` with one `v1,` signature per live secret). Deliveries
//! are claimed with a lease, so several admin replicas share the work without sending one twice
//! at once, and no database connection is held while a receiver answers. Each attempt runs on a
//! task of its own, at most `PER_ENDPOINT` at once per endpoint and `IN_FLIGHT` in all: a
//! hanging receiver holds its own slots (for at most the attempt's timeout), never another
//! endpoint's. A 2xx is success; anything else, or no answer in time, is a failed attempt,
//! retried 5 then 10 minutes later, `failed` after the third (`docs/webhooks.md`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use gw_shared::db::webhook_deliveries::{self as deliveries, Delivery, NewAttempt};
use gw_shared::db::webhooks;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::state::AppState;

/// Outbox events handed over per round.
const FAN_OUT_BATCH: i64 = 500;
/// Deliveries claimed per round.
const CLAIM_BATCH: i64 = 100;
/// How long a claimed delivery is this relay's before another may take it.
const LEASE_SECS: i64 = 120;
/// Attempts at once to one endpoint, and in all.
const PER_ENDPOINT: usize = 4;
const IN_FLIGHT: usize = 64;
/// Longest an attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of a receiver's answer kept with the attempt.
const KEPT_BODY_BYTES: usize = 1024;

struct Slots {
    all: Arc<Semaphore>,
    per_endpoint: Mutex<HashMap<Uuid, Arc<Semaphore>>>,
}

impl Slots {
    /// A slot for one attempt to `endpoint`, if both it and the relay have one free.
    fn take(&self, endpoint: Uuid) -> Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)> {
        let own = {
            let mut map = self.per_endpoint.lock().ok()?;
            // Endpoints with nothing in flight are forgotten, so the map stays small.
            map.retain(|_, s| s.available_permits() < PER_ENDPOINT);
            map.entry(endpoint).or_insert_with(|| Arc::new(Semaphore::new(PER_ENDPOINT))).clone()
        };
        let mine = own.try_acquire_owned().ok()?;
        let all = self.all.clone().try_acquire_owned().ok()?;
        Some((mine, all))
    }
}

/// Runs the relay until the process ends.
pub fn spawn(state: Arc<AppState>) {
    let slots = Arc::new(Slots { all: Arc::new(Semaphore::new(IN_FLIGHT)), per_endpoint: Mutex::new(HashMap::new()) });
    actix_web::rt::spawn(async move {
        let every = Duration::from_millis(state.cfg.admin.webhooks_poll_ms.max(50));
        loop {
            if let Err(e) = round(&state, &slots).await {
                state.metrics.job_failures.with_label_values(&["webhooks"]).inc();
                log::warn!("webhook relay: {e}");
            }
            actix_web::rt::time::sleep(every).await;
        }
    });
}

async fn round(state: &Arc<AppState>, slots: &Arc<Slots>) -> Result<(), String> {
    let claimed = {
        let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
        deliveries::fan_out(&mut conn, FAN_OUT_BATCH).await.map_err(|e| e.to_string())?;
        deliveries::claim_due(&mut conn, CLAIM_BATCH, chrono::Duration::seconds(LEASE_SECS))
            .await
            .map_err(|e| e.to_string())?
    };
    for d in claimed {
        match slots.take(d.endpoint_id) {
            Some(permits) => {
                let state = state.clone();
                actix_web::rt::spawn(async move {
                    if let Err(e) = attempt(&state, &d).await {
                        log::warn!("webhook delivery {}: {e}", d.id);
                    }
                    drop(permits);
                });
            }
            None => {
                let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
                deliveries::release(&mut conn, d.id).await.map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

/// One attempt at `d`, recorded whatever its outcome.
async fn attempt(state: &AppState, d: &Delivery) -> Result<(), String> {
    let ring = state.keyring("webhook delivery needs").map_err(|e| e.to_string())?;
    let target = {
        let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
        webhooks::target(&mut conn, ring, d.org_id, d.endpoint_id).await.map_err(|e| e.to_string())?
    };
    let started = Instant::now();
    let attempted_at = Utc::now();
    let outcome = match &target {
        None => Err("the endpoint no longer exists".to_string()),
        Some(t) if !t.enabled => Err("the endpoint is disabled".to_string()),
        Some(t) => send(state, t, d).await,
    };
    let latency_ms = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
    let (ok, status_code, error, body) = match &outcome {
        Ok((status, body)) if (200..300).contains(status) => {
            (true, Some(i32::from(*status)), None, Some(body.as_str()))
        }
        Ok((status, body)) => (false, Some(i32::from(*status)), None, Some(body.as_str())),
        Err(why) => (false, None, Some(why.as_str()), None),
    };
    let record = NewAttempt { attempted_at, status_code, latency_ms, error, response_body: body };
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    deliveries::record(&mut conn, d, &record, ok).await.map_err(|e| e.to_string())?;
    let label = if ok { "delivered" } else { "failed_attempt" };
    state.metrics.webhook_attempts.with_label_values(&[label]).inc();
    Ok(())
}

async fn send(state: &AppState, t: &webhooks::Target, d: &Delivery) -> Result<(u16, String), String> {
    let body = serde_json::to_vec(&d.body).map_err(|e| e.to_string())?;
    let id = d.event_id.to_string();
    let timestamp = Utc::now().timestamp();
    let mut signatures = Vec::with_capacity(t.secrets.len());
    for secret in &t.secrets {
        signatures.push(gw_shared::webhooks::sign(secret, &id, timestamp, &body).map_err(|e| e.to_string())?);
    }
    let headers = [
        ("content-type", "application/json".to_string()),
        ("user-agent", "gw-webhooks/1".to_string()),
        ("webhook-id", id),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", signatures.join(" ")),
    ];
    state.outbound.post(&t.url, &headers, body, ATTEMPT_TIMEOUT, KEPT_BODY_BYTES).await
}
