//! The webhook relay, in gw-admin beside the other background jobs: it hands the events outbox
//! to the subscribed endpoints (one delivery each) and attempts due deliveries, signed the
//! Standard Webhooks way (`webhook-id` = the event's id, unchanged across attempts,
//! `webhook-timestamp`, `webhook-signature` with one `v1,` signature per live secret). Deliveries
//! are claimed with a lease, so several admin replicas share the work without sending one twice
//! at once, and no database connection is held while a receiver answers. Each attempt runs on a
//! task of its own, at most `PER_ENDPOINT` at once per endpoint and `IN_FLIGHT` in all: a
//! hanging receiver holds its own slots (for at most the attempt's timeout), never another
//! endpoint's. A 2xx is success; anything else, or no answer in time, is a failed attempt,
//! retried 5 then 10 minutes later, `failed` after the third (`docs/webhooks.md`). Times are the
//! relay's clock (`gw_shared::clock`). The relay also announces expired API keys and prunes the
//! delivery history past its retention.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gw_shared::db::webhook_deliveries::{self as deliveries, Claim, Delivery, NewAttempt};
use gw_shared::db::{api_keys, webhook_fanout, webhooks};
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
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of a receiver's answer kept with the attempt.
const KEPT_BODY_BYTES: usize = 1024;
/// Expired keys announced per round, and how often the relay looks.
const EXPIRED_BATCH: i64 = 500;
const EXPIRY_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(1);
/// Finished deliveries pruned per statement, and how often.
const PRUNE_BATCH: i64 = 5_000;
const PRUNE_EVERY: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// When the relay last did its slower chores, by its clock.
#[derive(Default)]
struct Chores {
    expiry: Option<chrono::DateTime<chrono::Utc>>,
    prune: Option<chrono::DateTime<chrono::Utc>>,
}

impl Chores {
    /// Whether a chore last done at `last` is due again at `now` (and marks it done).
    fn due(
        last: &mut Option<chrono::DateTime<chrono::Utc>>,
        now: chrono::DateTime<chrono::Utc>,
        every: chrono::TimeDelta,
    ) -> bool {
        let due = last.is_none_or(|l| now - l >= every || now < l);
        if due {
            *last = Some(now);
        }
        due
    }
}

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
        let mut chores = Chores::default();
        loop {
            if let Err(e) = round(&state, &slots, &mut chores).await {
                state.metrics.job_failures.with_label_values(&["webhooks"]).inc();
                log::warn!("webhook relay: {e}");
            }
            state.metrics.webhook_relay.with_label_values(&["round"]).inc();
            actix_web::rt::time::sleep(every).await;
        }
    });
}

async fn round(state: &Arc<AppState>, slots: &Arc<Slots>, chores: &mut Chores) -> Result<(), String> {
    let now = state.clock.now();
    let claimed = {
        let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
        if Chores::due(&mut chores.expiry, now, EXPIRY_EVERY) {
            api_keys::announce_expired(&mut conn, now, EXPIRED_BATCH).await.map_err(|e| e.to_string())?;
        }
        if Chores::due(&mut chores.prune, now, PRUNE_EVERY) {
            let days = i64::from(state.cfg.admin.webhook_history_days.max(1));
            let pruned = deliveries::prune(&mut conn, now - chrono::Duration::days(days), PRUNE_BATCH)
                .await
                .map_err(|e| e.to_string())?;
            if pruned > 0 {
                log::info!("webhook history: {pruned} deliveries older than {days} days pruned");
            }
        }
        let f = webhook_fanout::fan_out(&mut conn, now, FAN_OUT_BATCH).await.map_err(|e| e.to_string())?;
        let m = &state.metrics.webhook_relay;
        m.with_label_values(&["delivery"]).inc_by(f.deliveries as u64);
        m.with_label_values(&["coalesced"]).inc_by(f.coalesced as u64);
        m.with_label_values(&["dropped"]).inc_by(f.dropped as u64);
        m.with_label_values(&["mail"]).inc_by(f.mails as u64);
        deliveries::claim_due(&mut conn, now, CLAIM_BATCH, chrono::Duration::seconds(LEASE_SECS))
            .await
            .map_err(|e| e.to_string())?
    };
    for d in claimed {
        match slots.take(d.endpoint_id) {
            Some(permits) => {
                let state = state.clone();
                actix_web::rt::spawn(async move {
                    if let Err(e) = attempt(&state, &d, false).await {
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

/// Claims one delivery and attempts it at once (a retry by hand); `None` when it is missing, an
/// error string when an attempt at it is under way.
pub async fn attempt_now(state: &AppState, org_id: uuid::Uuid, id: uuid::Uuid) -> Result<Option<Delivery>, AttemptNow> {
    let claim = {
        let mut conn = state.db.get().await.map_err(|e| AttemptNow::Failed(e.to_string()))?;
        deliveries::claim_one(&mut conn, org_id, id, state.clock.now(), chrono::Duration::seconds(LEASE_SECS))
            .await
            .map_err(|e| AttemptNow::Failed(e.to_string()))?
    };
    match claim {
        Claim::Missing => Ok(None),
        Claim::InFlight => Err(AttemptNow::InFlight),
        Claim::Claimed(d) => attempt(state, &d, true).await.map(Some).map_err(AttemptNow::Failed),
    }
}

/// Why a retry by hand made no attempt.
pub enum AttemptNow {
    InFlight,
    Failed(String),
}

/// One attempt at `d`, recorded whatever its outcome; the delivery as it then is.
async fn attempt(state: &AppState, d: &Delivery, manual: bool) -> Result<Delivery, String> {
    let ring = state.keyring("webhook delivery needs").map_err(|e| e.to_string())?;
    let target = {
        let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
        webhooks::target(&mut conn, ring, d.org_id, d.endpoint_id).await.map_err(|e| e.to_string())?
    };
    let started = Instant::now();
    let attempted_at = state.clock.now();
    let outcome = match &target {
        None => Err("the endpoint no longer exists".to_string()),
        Some(t) if !t.enabled && !manual => Err("the endpoint is disabled".to_string()),
        Some(t) => send(state, t, d, attempted_at.timestamp()).await,
    };
    let latency_ms = i32::try_from(started.elapsed().as_millis()).unwrap_or(i32::MAX);
    let (ok, status_code, error, body) = match &outcome {
        Ok((status, body)) if (200..300).contains(status) => {
            (true, Some(i32::from(*status)), None, Some(body.as_str()))
        }
        Ok((status, body)) if (300..400).contains(status) => {
            (false, Some(i32::from(*status)), Some("a redirect, not followed"), Some(body.as_str()))
        }
        Ok((status, body)) => (false, Some(i32::from(*status)), None, Some(body.as_str())),
        Err(why) => (false, None, Some(why.as_str()), None),
    };
    let record = NewAttempt { attempted_at, status_code, latency_ms, error, response_body: body, manual };
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    let after = deliveries::record(&mut conn, d, &record, ok).await.map_err(|e| e.to_string())?;
    let label = if ok { "delivered" } else { "failed_attempt" };
    state.metrics.webhook_attempts.with_label_values(&[label]).inc();
    Ok(after)
}

async fn send(state: &AppState, t: &webhooks::Target, d: &Delivery, timestamp: i64) -> Result<(u16, String), String> {
    let body = serde_json::to_vec(&d.body).map_err(|e| e.to_string())?;
    let id = d.event_id.to_string();
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
