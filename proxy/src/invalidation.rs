//! Listens on the Redis invalidation channel and evicts what the control plane changed, from
//! every cache the data plane owns. On every (re)connect all of them are cleared, since messages
//! sent while disconnected are lost.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use gw_shared::redis::{Invalidation, INVALIDATION_CHANNEL};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::Notify;

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
            Invalidation::CachePurge { org_id, model } => self.responses.purge_local(*org_id, *model),
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

pub struct InvalidationListener {
    pub redis_url: String,
    pub caches: Caches,
}

impl InvalidationListener {
    async fn listen(&self) -> Result<(), deadpool_redis::redis::RedisError> {
        let client = deadpool_redis::redis::Client::open(self.redis_url.as_str())?;
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(INVALIDATION_CHANNEL).await?;
        self.caches.clear();
        log::info!("subscribed to {INVALIDATION_CHANNEL}");
        let mut messages = pubsub.on_message();
        while let Some(msg) = messages.next().await {
            let payload: String = match msg.get_payload() {
                Ok(p) => p,
                Err(e) => {
                    log::warn!("undecodable invalidation message: {e}");
                    continue;
                }
            };
            match Invalidation::decode(&payload) {
                Some(inv) => self.caches.apply(&inv).await,
                None => log::warn!(
                    "unknown invalidation message {:?}",
                    gw_shared::providers::log_snippet(payload.as_bytes())
                ),
            }
        }
        Ok(())
    }
}

#[async_trait]
impl BackgroundService for InvalidationListener {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let started = tokio::time::Instant::now();
            tokio::select! {
                res = self.listen() => {
                    match res {
                        Ok(()) => log::warn!("invalidation subscription ended; reconnecting"),
                        Err(e) => log::warn!("invalidation subscription failed: {e}; retrying in {backoff:?}"),
                    }
                    // Whatever was published while we were away is lost: forget everything.
                    self.caches.clear();
                }
                _ = shutdown.changed() => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => return,
            }
            // A subscription that lived a while was healthy: start the backoff over.
            backoff = if started.elapsed() > Duration::from_secs(10) {
                Duration::from_millis(100)
            } else {
                (backoff * 2).min(Duration::from_secs(5))
            };
        }
    }
}
