//! Budgets and rate limits, shared by every replica through Redis: one script call admits a
//! request (every level checked and counted at once); settling happens after the response, off
//! the request path, in a task of its own. When Redis cannot be reached the replica switches to
//! its own limiter (each limit divided by the expected replica count) without failing a request,
//! probes Redis a few times a second, and when it answers again adds the spend recorded meanwhile
//! to the shared counters and goes back to them. Budget alerts go to the events outbox
//! ([`crate::events`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gw_shared::limits::deployment_caps::DeploymentCaps;
use gw_shared::limits::events::budget_events;
use gw_shared::limits::local::LocalLimiter;
use gw_shared::limits::plan::{Admission, BudgetSettled, Plan, SettleOp, Settlement};
use gw_shared::limits::script::Scripts;
use gw_shared::redis::{Conn, ConnOptions, Pool};
use gw_shared::routing::{Caps, Deployment};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use pingora_timeout::fast_timeout::fast_timeout;
use uuid::Uuid;

use crate::events::Outbox;
use crate::logline::RateLimitedLog;
use crate::metrics::Metrics;

/// Settlements waiting for Redis, at most; past it a settlement's spend is deferred to the next
/// sync instead of queueing without bound behind a slow Redis.
const MAX_SETTLING: usize = 16_384;
/// Settlements per script call, at most (a script blocks Redis while it runs).
const SETTLE_BATCH: usize = 128;
/// How often a degraded replica asks Redis whether it is back.
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// How often each replica says it is alive, and how long a silent one still counts.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
const HEARTBEAT_TTL_MS: i64 = 5_000;
/// The replicas' heartbeats: a sorted set of instance ids by their last beat (ms).
pub const REPLICAS_KEY: &str = "gw:lim:replicas";

pub struct LimiterConfig {
    pub redis: gw_shared::config::RedisConfig,
    /// Longest wait for Redis on the request path before the replica decides it is down.
    pub timeout: Duration,
    /// Replicas assumed to share the limits until the first heartbeat says how many do.
    pub replicas: u64,
}

pub struct Limiter {
    cfg: LimiterConfig,
    /// The request path's connections. Made by the first request that needs one, so that their
    /// driver tasks (and every reconnection's) run on the proxy's worker runtime: a round trip
    /// then costs no hop to another thread and back, which on a busy core cost more than the
    /// script itself. The background service has a connection of its own. None if the
    /// configuration names no usable Redis.
    hot: Option<Pool>,
    /// Settlements waiting for the flusher, and whether a flusher runs.
    pending: Mutex<Vec<Settlement>>,
    flushing: AtomicBool,
    /// Settlements taken by the flusher and not yet answered.
    settling: AtomicUsize,
    scripts: Scripts,
    deployment_caps: DeploymentCaps,
    local: Mutex<LocalLimiter>,
    degraded: AtomicBool,
    /// This replica's name among the heartbeats.
    instance: String,
    outbox: Arc<Outbox>,
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
    pub fn new(cfg: LimiterConfig, outbox: Arc<Outbox>, metrics: Arc<Metrics>) -> Self {
        let replicas = cfg.replicas;
        let hot = connect(&cfg, 2)
            .map_err(|e| {
                log::error!("cannot set up the limiter's Redis connection: {e}; limiting on this replica alone")
            })
            .ok();
        metrics.limits_replicas.set(i64::try_from(replicas).unwrap_or(i64::MAX));
        Self {
            cfg,
            hot,
            pending: Mutex::new(Vec::new()),
            flushing: AtomicBool::new(false),
            settling: AtomicUsize::new(0),
            scripts: Scripts::default(),
            deployment_caps: DeploymentCaps::default(),
            local: Mutex::new(LocalLimiter::new(replicas)),
            degraded: AtomicBool::new(false),
            instance: Uuid::now_v7().to_string(),
            outbox,
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
            if let Some(pool) = &self.hot {
                let started = std::time::Instant::now();
                let admit = async {
                    let mut conn = pool.get().await.map_err(|e| e.to_string())?;
                    self.scripts.admit(&mut conn, &plan).await.map_err(|e| e.to_string())
                };
                let result = fast_timeout(self.cfg.timeout, admit).await;
                self.metrics.limit_admit_duration.observe(started.elapsed().as_secs_f64());
                match result {
                    Ok(Ok(admission)) => {
                        self.local().observe(&plan, &admission);
                        self.count(&admission, "redis");
                        return Admitted { plan, admission, shared: true };
                    }
                    Ok(Err(e)) => self.degrade(&e),
                    Err(_) => self.degrade("no answer in time"),
                }
            }
        }
        let admission = self.local().admit(&plan, Self::now_ms());
        self.count(&admission, "local");
        Admitted { plan, admission, shared: false }
    }

    /// Claims an attempt on `dep` against its per-minute caps: shared through Redis (`Shared`
    /// when it fit, or it has no caps), or, while Redis is away, this replica's share of them (`Local`, for
    /// [`gw_shared::routing::Router::take`] to check); None when a shared cap is reached.
    pub async fn take_deployment(&self, dep: &Deployment) -> Option<Caps> {
        if !dep.capped() {
            // Nothing to count: the routing's own claim is all.
            return Some(Caps::Shared);
        }
        let local = Caps::Local { replicas: self.local().replicas() };
        if self.degraded.load(Ordering::Acquire) {
            return Some(local);
        }
        let Some(pool) = &self.hot else { return Some(local) };
        let id = dep.caps_id();
        let take = async {
            let mut conn = pool.get().await.map_err(|e| e.to_string())?;
            self.deployment_caps.take(&mut conn, &id, dep.rpm, dep.tpm).await.map_err(|e| e.to_string())
        };
        match fast_timeout(self.cfg.timeout, take).await {
            Ok(Ok(true)) => Some(Caps::Shared),
            Ok(Ok(false)) => None,
            Ok(Err(e)) => {
                self.degrade(&e);
                Some(local)
            }
            Err(_) => {
                self.degrade("no answer in time");
                Some(local)
            }
        }
    }

    /// Adds an answer's tokens to `dep`'s shared token window (off the request path).
    pub fn deployment_tokens(self: &Arc<Self>, dep: &Deployment, tokens: u64) {
        if dep.tpm.is_none() || tokens == 0 || self.degraded.load(Ordering::Acquire) {
            return;
        }
        let Some(pool) = self.hot.clone() else { return };
        let (limiter, id) = (self.clone(), dep.caps_id());
        tokio::spawn(async move {
            let add = async {
                let mut conn = pool.get().await.map_err(|e| e.to_string())?;
                limiter.deployment_caps.add_tokens(&mut conn, &id, tokens).await.map_err(|e| e.to_string())
            };
            if let Ok(Err(e)) | Err(e) =
                tokio::time::timeout(limiter.cfg.timeout * 4, add).await.map_err(|_| "no answer in time".to_string())
            {
                limiter.log.warn(|| format!("deployment token count not shared: {e}"));
            }
        });
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
                self.local().replicas()
            );
        }
    }

    /// Settles an admitted request that used `tokens` and cost `cost_nanos`. Never waits: a
    /// flusher task on the caller's runtime (beside the connection's driver) sends what has
    /// gathered as one script call and, while that call is out, gathers the next batch. A lone
    /// request's settlement leaves at once; under load each call carries many.
    pub fn settle(self: &Arc<Self>, admitted: Admitted, tokens: u64, cost_nanos: i64) {
        let settlement = admitted.plan.settlement(&admitted.admission, tokens, cost_nanos);
        if settlement.ops.is_empty() {
            return;
        }
        if !admitted.shared {
            let settled = self.local().settle(&settlement);
            self.alert(settlement.org_id, &settled);
            return;
        }
        let Some(pool) = self.hot.clone() else {
            self.local().defer(&settlement);
            return;
        };
        {
            let mut pending = self.pending();
            if pending.len() + self.settling.load(Ordering::Acquire) >= MAX_SETTLING {
                drop(pending);
                // Its reservations expire in Redis; its spend is kept here and synced later.
                self.local().defer(&settlement);
                self.log.warn(|| "too many settlements waiting for Redis: spend deferred to the next sync".into());
                return;
            }
            pending.push(settlement);
        }
        if !self.flushing.swap(true, Ordering::AcqRel) {
            let limiter = self.clone();
            tokio::spawn(async move { limiter.flush(pool).await });
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<Settlement>> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn take_pending(&self) -> Vec<Settlement> {
        let mut pending = self.pending();
        let n = pending.len().min(SETTLE_BATCH);
        let batch: Vec<Settlement> = pending.drain(..n).collect();
        self.settling.fetch_add(batch.len(), Ordering::AcqRel);
        batch
    }

    async fn flush(&self, pool: Pool) {
        loop {
            let batch = self.take_pending();
            if batch.is_empty() {
                self.flushing.store(false, Ordering::Release);
                // A settlement pushed after the take but before the store saw a flusher running.
                let more = !self.pending().is_empty();
                if more && !self.flushing.swap(true, Ordering::AcqRel) {
                    continue;
                }
                return;
            }
            let n = batch.len();
            self.settle_shared(&pool, batch).await;
            self.settling.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// Queues the budget events a settlement made due.
    fn alert(&self, org_id: Uuid, settled: &[BudgetSettled]) {
        let now = chrono::Utc::now();
        for s in settled {
            for ev in budget_events(org_id, s, now) {
                self.outbox.emit(ev);
            }
        }
    }

    /// Settles a batch: one script call per hash slot (a script may only touch one slot's keys on
    /// a cluster), all sent at once, so each node gets its calls pipelined on one connection.
    async fn settle_shared(&self, pool: &Pool, batch: Vec<Settlement>) {
        let groups = gw_shared::limits::slots::group_by_slot(batch);
        let wait = self.cfg.timeout * 4;
        let conn = match tokio::time::timeout(wait, pool.get()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return self.defer_all(groups.iter().flatten(), &e.to_string()),
            Err(_) => return self.defer_all(groups.iter().flatten(), "no answer in time"),
        };
        // Each slot's call has its own time bound: one slow node (a failover) leaves the others'
        // settlements landed, and only its own are kept here.
        let calls = groups.iter().map(|group| {
            let mut conn = conn.clone();
            async move {
                match tokio::time::timeout(wait, self.scripts.settle_many(&mut conn, group)).await {
                    Ok(Ok(settled)) => Ok(settled),
                    Ok(Err(e)) => Err(e.to_string()),
                    // Whether it landed is unknown: kept here, as when Redis is down.
                    Err(_) => Err("no answer in time".to_string()),
                }
            }
        });
        let answers = futures::future::join_all(calls).await;
        let mut why = None;
        let mut unsettled = Vec::new();
        for (group, answer) in groups.iter().zip(answers) {
            match answer {
                Ok(settled) => {
                    for (s, settled) in group.iter().zip(settled) {
                        self.alert(s.org_id, &settled);
                    }
                }
                Err(e) => {
                    why.get_or_insert(e);
                    unsettled.extend(group.iter());
                }
            }
        }
        if let Some(why) = why {
            self.defer_all(unsettled.into_iter(), &why);
        }
    }

    /// Keeps settlements Redis did not take in this replica's limiter (synced when it answers)
    /// and switches to it.
    fn defer_all<'a>(&self, unsettled: impl Iterator<Item = &'a Settlement>, why: &str) {
        let mut local = self.local();
        for s in unsettled {
            local.defer(s);
        }
        drop(local);
        self.degrade(why);
    }

    /// Adds spend recorded on this replica to the shared counters; true when all of it landed.
    async fn sync(&self, conn: &mut Conn) -> bool {
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

    /// Says this replica is alive and learns how many are (the divisor if Redis goes away).
    async fn heartbeat(&self, pool: &Pool) {
        if self.degraded.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut conn) = pool.get().await else { return };
        let now = Self::now_ms();
        let mut pipe = redis::pipe();
        pipe.zadd(REPLICAS_KEY, &self.instance, now)
            .ignore()
            .zrembyscore(REPLICAS_KEY, "-inf", now - HEARTBEAT_TTL_MS)
            .ignore()
            .zcard(REPLICAS_KEY)
            .pexpire(REPLICAS_KEY, HEARTBEAT_TTL_MS * 2)
            .ignore();
        let beat = pipe.query_async::<(u64,)>(&mut conn);
        match tokio::time::timeout(self.cfg.timeout * 4, beat).await {
            Ok(Ok((live,))) => {
                let live = live.max(1);
                self.local().set_replicas(live);
                self.metrics.limits_replicas.set(i64::try_from(live).unwrap_or(i64::MAX));
            }
            // The admission path notices an unreachable Redis; the last number seen stays.
            Ok(Err(e)) => self.log.warn(|| format!("limiter heartbeat failed: {e}")),
            Err(_) => self.log.warn(|| "limiter heartbeat: no answer in time".to_string()),
        }
    }

    async fn probe(&self, pool: &Pool) {
        let degraded = self.degraded.load(Ordering::Acquire);
        if degraded {
            let ping = async {
                let mut conn = pool.get().await.map_err(|e| e.to_string())?;
                redis::cmd("PING").query_async::<String>(&mut conn).await.map_err(|e| e.to_string())
            };
            if !matches!(tokio::time::timeout(self.cfg.timeout * 4, ping).await, Ok(Ok(_))) {
                return;
            }
        }
        let Ok(mut conn) = pool.get().await else { return };
        if self.sync(&mut conn).await && degraded {
            self.local().forget();
            self.degraded.store(false, Ordering::Release);
            self.metrics.limits_degraded.set(0);
            log::info!("Redis answers again: rate limits and budgets are shared again");
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

/// The limiter's background work: the Redis connection, settlements and probes.
pub struct LimiterService(pub Arc<Limiter>);

#[async_trait]
impl BackgroundService for LimiterService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        crate::priority::background_thread();
        let limiter = self.0.clone();
        let pool = match connect(&limiter.cfg, 1) {
            Ok(c) => c,
            Err(e) => {
                log::error!("cannot set up the limiter's Redis connection: {e}; limiting on this replica alone");
                limiter.degrade("no connection");
                return;
            }
        };
        let mut tick = tokio::time::interval(PROBE_EVERY);
        let mut beat = tokio::time::interval(HEARTBEAT_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => limiter.probe(&pool).await,
                _ = beat.tick() => limiter.heartbeat(&pool).await,
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        break;
                    }
                }
            }
        }
        // Let the settlements in flight land (their budget events go to the outbox).
        for _ in 0..40 {
            if !limiter.flushing.load(Ordering::Acquire) && limiter.settling.load(Ordering::Acquire) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let Ok(mut conn) = pool.get().await else { return };
        limiter.sync(&mut conn).await;
        // A replica that stops no longer counts (the others' shares grow at their next beat).
        let mut leave = redis::cmd("ZREM");
        leave.arg(REPLICAS_KEY).arg(&limiter.instance);
        let _ = tokio::time::timeout(limiter.cfg.timeout * 4, leave.query_async::<i64>(&mut conn)).await;
    }
}

/// Multiplexed connections that are remade when they fail, established on first use.
fn connect(cfg: &LimiterConfig, connections: usize) -> gw_shared::Result<Pool> {
    let timeout = (cfg.timeout * 4).max(Duration::from_millis(200));
    Pool::from_config(&cfg.redis, ConnOptions { connections, connect_timeout: timeout, response_timeout: timeout })
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
