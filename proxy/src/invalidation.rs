//! Keeps every cache the data plane owns in step with the control plane's changes. Each change
//! is an entry of the invalidation log in Postgres ([`gw_shared::db::invalidations`]); Redis
//! pub/sub announces each new entry, and the admin leader announces the newest id every second.
//! A replica applies announced entries in order; when it sees a gap (an announcement it
//! missed), hears no beat for [`SILENCE`] (Redis unreachable, or a subscription that died
//! without a word) or subscribes again, it reads the entries after the last one it applied
//! from Postgres. Only when its gap is older than the log's retention does it clear everything.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use gw_shared::db::invalidations;
use gw_shared::db::DbPool;
use gw_shared::redis::{Announcement, Invalidation, INVALIDATION_CHANNEL};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::Notify;

use crate::metrics::Metrics;
use crate::response_cache::ResponseCache;
use crate::sources::Lookups;

/// Every cache filled from Postgres: the cached lookups and the response cache.
pub struct Caches {
    pub lookups: Arc<Lookups>,
    pub responses: Arc<ResponseCache>,
    /// Wakes the route catalog's watcher (`crate::routes_watch`).
    pub routes: Arc<Notify>,
}

impl Caches {
    pub async fn apply(&self, inv: &Invalidation) {
        let l = &self.lookups;
        match inv {
            Invalidation::ApiKey(hash) => l.keys.invalidate(hash).await,
            Invalidation::Team { org_id, team_id } => l.teams.invalidate(&(*org_id, *team_id)).await,
            Invalidation::ProviderKeys { org_id } => l.provider_keys.invalidate(org_id).await,
            Invalidation::Org { org_id } => l.orgs.invalidate(org_id).await,
            // The compiled copy carries its version: the next read compiles the new one in its place.
            Invalidation::Policy { org_id } => l.policies.invalidate(org_id).await,
            Invalidation::CacheSettings { org_id } => l.cache_settings.invalidate(org_id).await,
            Invalidation::CachePurge { org_id, model } => {
                // The new purge generation comes with the settings, read again.
                l.cache_settings.invalidate(org_id).await;
                self.responses.purge_local(*org_id, *model);
            }
            Invalidation::Routes { .. } => self.routes.notify_one(),
            // Tables are kept by version: the next read finds the new version.
            Invalidation::OrgRoutes { org_id } => l.org_routes.lookup.invalidate(org_id).await,
            Invalidation::Template { org_id, template_id } => l.templates.invalidate(&(*org_id, *template_id)).await,
            Invalidation::Experiments { org_id } => l.experiments.invalidate(org_id).await,
            Invalidation::All => self.clear(),
        }
    }

    pub fn clear(&self) {
        self.lookups.clear();
        // A purge may have been missed too, and a new route catalog.
        self.responses.clear_local();
        self.routes.notify_one();
    }
}

/// No announcement for this long: the replica reads the log from Postgres and checks its
/// subscription (a PING that must come back within [`PING_WAIT`]).
pub const SILENCE: Duration = Duration::from_secs(3);
const PING_WAIT: Duration = Duration::from_secs(1);
/// Longest wait for a subscription to be confirmed.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(2);

pub struct InvalidationListener {
    pub redis: gw_shared::redis::Pool,
    pub db: DbPool,
    pub caches: Caches,
    pub metrics: Arc<Metrics>,
    /// The newest log id applied; None until the log has been read once.
    pub applied: tokio::sync::Mutex<Option<i64>>,
}

enum Ended {
    /// The subscription closed or failed.
    Lost(String),
    /// Silent past [`SILENCE`] and no answer to a PING.
    Dead,
}

impl InvalidationListener {
    pub fn new(redis: gw_shared::redis::Pool, db: DbPool, caches: Caches, metrics: Arc<Metrics>) -> Self {
        Self { redis, db, caches, metrics, applied: tokio::sync::Mutex::new(None) }
    }

    /// Applies the log's entries after the last one applied (up to at least `through`, when
    /// given). The first read only learns where the log stands: the caches start empty.
    async fn catch_up(&self, reason: &str) {
        let mut applied = self.applied.lock().await;
        if let Err(e) = self.catch_up_locked(&mut applied, reason).await {
            log::warn!("cannot read the invalidation log ({e}); will retry");
        }
    }

    async fn catch_up_locked(&self, applied: &mut Option<i64>, reason: &str) -> Result<(), String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        let (first, last) = invalidations::bounds(&mut conn).await.map_err(|e| e.to_string())?;
        let Some(mut after) = *applied else {
            // Whatever was cached before this read may predate entries we will never see.
            self.caches.clear();
            self.set_applied(applied, last);
            return Ok(());
        };
        if last < after {
            // The log went back (a restored or failed-over database): what it holds now cannot
            // be matched with what was applied.
            log::warn!("the invalidation log ends at {last}, before {after} applied here: clearing every cache");
            self.metrics.invalidation_catch_ups.with_label_values(&["cleared"]).inc();
            self.caches.clear();
            self.set_applied(applied, last);
            return Ok(());
        }
        if last == after {
            return Ok(());
        }
        self.metrics.invalidation_catch_ups.with_label_values(&[reason]).inc();
        if first > after + 1 || last - after > invalidations::CATCH_UP_MAX {
            log::warn!("invalidations {}..{first} are past the log's retention: clearing every cache", after + 1);
            self.metrics.invalidation_catch_ups.with_label_values(&["cleared"]).inc();
            self.caches.clear();
            self.set_applied(applied, last);
            return Ok(());
        }
        let mut stale = Vec::new();
        while after < last {
            let entries =
                invalidations::since(&mut conn, after, invalidations::CATCH_UP_MAX).await.map_err(|e| e.to_string())?;
            let Some(&(newest, _)) = entries.last() else { break };
            for (_, inv) in &entries {
                self.caches.apply(inv).await;
                stale.extend(inv.cache_key());
            }
            after = newest;
            self.set_applied(applied, newest);
        }
        self.forget_shared(stale);
        Ok(())
    }

    fn set_applied(&self, applied: &mut Option<i64>, id: i64) {
        *applied = Some(id);
        self.metrics.invalidation_applied.set(id);
    }

    /// The shared copies the entries read from the log make stale: the admin deletes them before
    /// announcing, but an entry read from the log may never have been announced (the admin could
    /// not reach Redis). Off the listener's path, one key a command (they may live on different
    /// cluster nodes), all within a few seconds.
    fn forget_shared(&self, keys: Vec<String>) {
        if keys.is_empty() {
            return;
        }
        let redis = self.redis.clone();
        tokio::spawn(async move {
            let del = async {
                let mut conn = redis.get().await.map_err(|e| e.to_string())?;
                for key in &keys {
                    redis::cmd("DEL").arg(key).query_async::<i64>(&mut conn).await.map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(())
            };
            if let Ok(Err(e)) | Err(e) =
                tokio::time::timeout(Duration::from_secs(5), del).await.map_err(|_| "timed out".to_string())
            {
                log::debug!("shared copies not dropped ({e}); they age out with their TTL");
            }
        });
    }

    async fn on_announcement(&self, a: Announcement) {
        match a {
            Announcement::Entry(id, inv) => {
                let mut applied = self.applied.lock().await;
                match *applied {
                    Some(last) if id <= last => {}
                    Some(last) if id == last + 1 => {
                        self.caches.apply(&inv).await;
                        self.set_applied(&mut applied, id);
                    }
                    // An announcement missed (or the log not read yet): read it from the log.
                    _ => {
                        if let Err(e) = self.catch_up_locked(&mut applied, "gap").await {
                            log::warn!("cannot read the invalidation log ({e}); applying the announcement alone");
                            self.caches.apply(&inv).await;
                        }
                    }
                }
            }
            Announcement::Heartbeat(latest) => {
                // Behind, or ahead of a log that went back.
                let behind = self.applied.lock().await.is_none_or(|last| latest != last);
                if behind {
                    self.catch_up("gap").await;
                }
            }
            Announcement::Bare(inv) => self.caches.apply(&inv).await,
        }
    }

    async fn listen(&self) -> Ended {
        let subscribed = tokio::time::timeout(SUBSCRIBE_WAIT, async {
            let mut pubsub = self.redis.pubsub().await?;
            pubsub.subscribe(INVALIDATION_CHANNEL).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        let pubsub = match subscribed {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => return Ended::Lost(e.to_string()),
            Err(_) => return Ended::Lost("no answer to SUBSCRIBE in time".into()),
        };
        log::info!("subscribed to {INVALIDATION_CHANNEL}");
        // What was announced while unsubscribed is in the log.
        self.catch_up("reconnect").await;
        let (mut sink, mut messages) = pubsub.split();
        loop {
            let msg = tokio::select! {
                msg = messages.next() => msg,
                _ = tokio::time::sleep(SILENCE) => {
                    self.catch_up("silence").await;
                    // Quiet is fine (no admin may be running) as long as the connection answers.
                    match tokio::time::timeout(PING_WAIT, sink.ping::<redis::Value>()).await {
                        Ok(Ok(_)) => continue,
                        _ => return Ended::Dead,
                    }
                }
            };
            let Some(msg) = msg else { return Ended::Lost("the subscription closed".into()) };
            let payload: String = match msg.get_payload() {
                Ok(p) => p,
                Err(e) => {
                    log::warn!("undecodable invalidation message: {e}");
                    continue;
                }
            };
            match Announcement::decode(&payload) {
                Some(a) => self.on_announcement(a).await,
                None => log::warn!(
                    "unknown invalidation message {:?}",
                    gw_shared::providers::log_snippet(payload.as_bytes())
                ),
            }
        }
    }
}

#[async_trait]
impl BackgroundService for InvalidationListener {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let started = tokio::time::Instant::now();
            tokio::select! {
                ended = self.listen() => match ended {
                    Ended::Lost(e) => log::warn!("invalidation subscription lost: {e}; retrying in {backoff:?}"),
                    Ended::Dead => log::warn!("invalidation subscription silent and unanswering; subscribing again"),
                },
                _ = shutdown.changed() => return,
            }
            // While unsubscribed, the log is read directly.
            self.catch_up("silence").await;
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => return,
            }
            backoff = if started.elapsed() > Duration::from_secs(10) {
                Duration::from_millis(100)
            } else {
                (backoff * 2).min(Duration::from_secs(1))
            };
        }
    }
}
