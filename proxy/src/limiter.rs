//! Budgets and rate limits, shared by every replica through Redis: one script call admits a
//! request (every level checked and counted at once); settling happens after the response, off
//! the request path, in a background task. When Redis cannot be reached the replica switches to
//! its own limiter (each limit divided by the expected replica count) without failing a request,
//! probes Redis a few times a second, and when it answers again adds the spend recorded meanwhile
//! to the shared counters and goes back to them. Budget alerts go to the events outbox.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use gw_shared::db::{events, DbPool};
use gw_shared::limits::events::{budget_events, NewEvent};
use gw_shared::limits::local::LocalLimiter;
use gw_shared::limits::plan::{Admission, BudgetSettled, Plan, SettleOp, Settlement};
use gw_shared::limits::script::Scripts;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::logline::RateLimitedLog;
use crate::metrics::Metrics;

/// Settlements and events waiting for the background task, at most.
const QUEUE: usize = 16_384;
/// How often a degraded replica asks Redis whether it is back.
const PROBE_EVERY: Duration = Duration::from_millis(250);

pub struct LimiterConfig {
    pub redis_url: String,
    /// Longest wait for Redis on the request path before the replica decides it is down.
    pub timeout: Duration,
    /// Replicas expected to share the limits while each limits on its own.
    pub replicas: u64,
}

struct Job {
    settlement: Settlement,
}

pub struct Limiter {
    cfg: LimiterConfig,
    /// Made by the background service, on its runtime (the connection's driver task lives there).
    conn: OnceLock<ConnectionManager>,
    scripts: Scripts,
    local: Mutex<LocalLimiter>,
    degraded: AtomicBool,
    jobs: mpsc::Sender<Job>,
    jobs_rx: tokio::sync::Mutex<mpsc::Receiver<Job>>,
    events: mpsc::Sender<NewEvent>,
    events_rx: tokio::sync::Mutex<mpsc::Receiver<NewEvent>>,
    db: DbPool,
    metrics: Arc<Metrics>,
    log: RateLimitedLog,
}

/// A request's admission, kept in its context until it settles.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub plan: Plan,
    pub admission: Admission,
    /// Counted in Redis (else in this replica's own limiter).
    pub shared: bool,
}

impl Limiter {
    pub fn new(cfg: LimiterConfig, db: DbPool, metrics: Arc<Metrics>) -> Self {
        let (jobs, jobs_rx) = mpsc::channel(QUEUE);
        let (events, events_rx) = mpsc::channel(QUEUE);
        let replicas = cfg.replicas;
        Self {
            cfg,
            conn: OnceLock::new(),
            scripts: Scripts::default(),
            local: Mutex::new(LocalLimiter::new(replicas)),
            degraded: AtomicBool::new(false),
            jobs,
            jobs_rx: tokio::sync::Mutex::new(jobs_rx),
            events,
            events_rx: tokio::sync::Mutex::new(events_rx),
            db,
            metrics,
            log: RateLimitedLog::new(module_path!(), Duration::from_secs(5)),
        }
    }

    fn local(&self) -> std::sync::MutexGuard<'_, LocalLimiter> {
        self.local.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now_ms() -> i64 {
        chrono::Utc::now().timestamp_millis()
    }

    /// Checks and counts the request at every level. Never fails: without Redis the replica's
    /// own limiter decides.
    pub async fn admit(&self, plan: Plan) -> Admitted {
        if !self.degraded.load(Ordering::Acquire) {
            if let Some(conn) = self.conn.get() {
                let mut conn = conn.clone();
                match tokio::time::timeout(self.cfg.timeout, self.scripts.admit(&mut conn, &plan)).await {
                    Ok(Ok(admission)) => {
                        self.local().observe(&plan, &admission);
                        self.count(&admission, "redis");
                        return Admitted { plan, admission, shared: true };
                    }
                    Ok(Err(e)) => self.degrade(&format!("{e}")),
                    Err(_) => self.degrade("no answer in time"),
                }
            }
        }
        let admission = self.local().admit(&plan, Self::now_ms());
        self.count(&admission, "local");
        Admitted { plan, admission, shared: false }
    }

    fn count(&self, a: &Admission, source: &str) {
        let outcome = if a.admitted() { "admitted" } else { "refused" };
        self.metrics.limit_decisions.with_label_values(&[source, outcome]).inc();
    }

    fn degrade(&self, why: &str) {
        self.metrics.limit_redis_errors.inc();
        if !self.degraded.swap(true, Ordering::AcqRel) {
            self.metrics.limits_degraded.set(1);
            log::error!(
                "Redis is unreachable for rate limits and budgets ({why}): limiting on this replica alone, \
                 each limit divided by {} replicas, until it answers again",
                self.cfg.replicas
            );
        }
    }

    /// Settles an admitted request that used `tokens` and cost `cost_nanos`. Never waits.
    pub fn settle(&self, admitted: Admitted, tokens: u64, cost_nanos: i64) {
        let settlement = admitted.plan.settlement(&admitted.admission, tokens, cost_nanos);
        if settlement.ops.is_empty() {
            return;
        }
        if !admitted.shared {
            let settled = self.local().settle(&settlement);
            self.alert(settlement.org_id, &settled);
            return;
        }
        if let Err(e) = self.jobs.try_send(Job { settlement }) {
            let job = match e {
                mpsc::error::TrySendError::Full(j) | mpsc::error::TrySendError::Closed(j) => j,
            };
            // Its reservations expire in Redis; its spend is kept here and synced later.
            self.local().defer(&job.settlement);
            self.log.warn(|| "the settlement queue is full: spend deferred to the next sync".into());
        }
    }

    /// Queues the budget events a settlement made due.
    fn alert(&self, org_id: Uuid, settled: &[BudgetSettled]) {
        let now = chrono::Utc::now();
        for s in settled {
            for ev in budget_events(org_id, s, now) {
                if self.events.try_send(ev).is_err() {
                    self.metrics.events_dropped.inc();
                    self.log.error(|| "the events queue is full: a budget event was dropped".into());
                }
            }
        }
    }

    async fn settle_shared(&self, conn: &mut ConnectionManager, s: Settlement) {
        match tokio::time::timeout(self.cfg.timeout * 4, self.scripts.settle(conn, &s)).await {
            Ok(Ok(settled)) => self.alert(s.org_id, &settled),
            Ok(Err(e)) => {
                self.local().defer(&s);
                self.degrade(&format!("{e}"));
            }
            Err(_) => {
                self.local().defer(&s);
                self.degrade("no answer in time");
            }
        }
    }

    /// Adds spend recorded on this replica to the shared counters; true when all of it landed.
    async fn sync(&self, conn: &mut ConnectionManager) -> bool {
        let pending = self.local().take_unsynced();
        let mut ok = true;
        for u in pending {
            if !ok {
                self.local().restore(u);
                continue;
            }
            let org_id = org_of(&u.keys[0]);
            let s = Settlement {
                org_id,
                request_id: "-".into(),
                ops: vec![SettleOp::Budget {
                    check: u.check.clone(),
                    keys: u.keys.clone(),
                    ttl_ms: u.ttl_ms,
                    actual_nanos: u.nanos,
                }],
            };
            match tokio::time::timeout(self.cfg.timeout * 4, self.scripts.settle(conn, &s)).await {
                Ok(Ok(settled)) => self.alert(org_id, &settled),
                _ => {
                    ok = false;
                    self.local().restore(u);
                }
            }
        }
        ok
    }

    async fn probe(&self, conn: &mut ConnectionManager) {
        let degraded = self.degraded.load(Ordering::Acquire);
        if degraded {
            let cmd = redis::cmd("PING");
            let ping = cmd.query_async::<String>(conn);
            if !matches!(tokio::time::timeout(self.cfg.timeout * 4, ping).await, Ok(Ok(_))) {
                return;
            }
        }
        if self.sync(conn).await && degraded {
            self.local().forget();
            self.degraded.store(false, Ordering::Release);
            self.metrics.limits_degraded.set(0);
            log::info!("Redis answers again: rate limits and budgets are shared again");
        }
    }

    async fn write_events(&self, batch: &[NewEvent]) -> bool {
        let result = async {
            let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
            events::insert_new(&mut conn, batch).await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(Duration::from_secs(10), result).await {
            Ok(Ok(n)) => {
                self.metrics.events_written.inc_by(n as u64);
                true
            }
            Ok(Err(e)) => {
                self.log.warn(|| format!("could not write {} events to the outbox: {e}", batch.len()));
                false
            }
            Err(_) => {
                self.log.warn(|| "writing events to the outbox timed out".into());
                false
            }
        }
    }
}

/// The organization a counter key belongs to (`gw:lim:{<org>}:...`).
fn org_of(key: &str) -> Uuid {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .and_then(|(id, _)| id.parse().ok())
        .unwrap_or_default()
}

/// The limiter's background work: the Redis connection, settlements, probes and the outbox.
pub struct LimiterService(pub Arc<Limiter>);

#[async_trait]
impl BackgroundService for LimiterService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let limiter = self.0.clone();
        let client = match redis::Client::open(limiter.cfg.redis_url.as_str()) {
            Ok(c) => c,
            Err(e) => {
                log::error!("invalid Redis URL for the limiter: {e}; limiting on this replica alone");
                limiter.degrade("invalid URL");
                return;
            }
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(limiter.cfg.timeout * 4))
            .set_response_timeout(Some(limiter.cfg.timeout * 4))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = match ConnectionManager::new_lazy_with_config(client, config) {
            Ok(c) => c,
            Err(e) => {
                log::error!("cannot set up the limiter's Redis connection: {e}");
                limiter.degrade("no connection");
                return;
            }
        };
        let _ = limiter.conn.set(conn.clone());

        let events = {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut rx = limiter.events_rx.lock().await;
                let mut batch = Vec::with_capacity(256);
                let mut backoff = Duration::from_millis(100);
                loop {
                    if batch.is_empty() && rx.recv_many(&mut batch, 256).await == 0 {
                        return;
                    }
                    if limiter.write_events(&batch).await {
                        batch.clear();
                        backoff = Duration::from_millis(100);
                    } else {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                }
            })
        };
        let probes = {
            let limiter = limiter.clone();
            let mut conn = conn.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(PROBE_EVERY);
                loop {
                    tick.tick().await;
                    limiter.probe(&mut conn).await;
                }
            })
        };
        let mut rx = limiter.jobs_rx.lock().await;
        let mut batch = Vec::with_capacity(64);
        loop {
            tokio::select! {
                n = rx.recv_many(&mut batch, 64) => {
                    if n == 0 {
                        break;
                    }
                    // Concurrent calls share the multiplexed connection: one pipelined write.
                    let work = batch.drain(..).map(|job| {
                        let mut conn = conn.clone();
                        let limiter = &limiter;
                        async move { limiter.settle_shared(&mut conn, job.settlement).await }
                    });
                    futures::future::join_all(work).await;
                }
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        // Settle what is queued, then stop.
                        while let Ok(job) = rx.try_recv() {
                            let mut conn = conn.clone();
                            limiter.settle_shared(&mut conn, job.settlement).await;
                        }
                        break;
                    }
                }
            }
        }
        probes.abort();
        // Give the outbox writer a moment with what the last settlements produced.
        tokio::time::sleep(Duration::from_millis(200)).await;
        events.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_organization() {
        let org = Uuid::now_v7();
        assert_eq!(org_of(&format!("{}:b:org:total", Plan::prefix(org))), org);
        assert_eq!(org_of("nonsense"), Uuid::nil());
    }
}
