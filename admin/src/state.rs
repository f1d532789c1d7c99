//! What every handler can reach.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{ApiError, ApiResult};
use crate::hashing::Hashing;
use crate::metrics::Metrics;
use gw_shared::config::Config;
use gw_shared::db::{DbConn, DbPool};
use gw_shared::redis::Invalidation;

pub struct AppState {
    pub cfg: Config,
    pub db: DbPool,
    /// The streaming replica's pool (`database.read_url`), when there is one: analytics reads and
    /// exports (`crate::replica`).
    pub read_db: Option<DbPool>,
    pub redis: gw_shared::redis::Pool,
    /// The Redis holding the response cache's L2 entries (`[redis] cache_url`; `redis` when unset).
    pub cache_redis: gw_shared::redis::Pool,
    pub jwt_secret: String,
    pub metrics: Arc<Metrics>,
    /// Password hashing, bounded: see `crate::hashing`.
    hashing: Hashing,
    /// The client for tenant-chosen URLs (SSO discovery, JWKS, token exchange): the one
    /// outbound guard.
    pub outbound: crate::outbound::Outbound,
    /// DNS lookups of e-mail domain proofs.
    pub domain_proof: crate::domain_proof::DomainProof,
    /// The time the webhook relay schedules by (a test may set it: `gw_shared::clock`).
    pub clock: gw_shared::clock::Clock,
    /// The billing provider; `None` in air-gapped mode or when not configured.
    pub billing: Option<Box<dyn crate::billing_provider::BillingProvider>>,
}

impl AppState {
    pub fn new(
        cfg: Config,
        db: DbPool,
        redis: gw_shared::redis::Pool,
        jwt_secret: String,
        metrics: Arc<Metrics>,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let hashing = Hashing::new(cfg.admin.max_concurrent_hashes, Duration::from_millis(cfg.admin.hash_wait_ms))?;
        let outbound = crate::outbound::Outbound::new(cfg.admin.outbound_allow.clone(), cfg.admin.dns_resolver)?;
        let domain_proof = crate::domain_proof::DomainProof::new(cfg.admin.dns_resolver)?;
        let billing = crate::billing_provider::Stripe::from_config(&cfg.billing)?
            .map(|s| Box::new(s) as Box<dyn crate::billing_provider::BillingProvider>);
        let cache_redis = match &cfg.redis.cache_url {
            Some(_) => gw_shared::redis::Pool::cache_from_config(
                &cfg.redis,
                gw_shared::redis::ConnOptions { connections: 1, ..Default::default() },
            )?,
            None => redis.clone(),
        };
        let read_db = gw_shared::db::read_pool(&cfg.database)?;
        Ok(AppState {
            cfg,
            db,
            read_db,
            redis,
            cache_redis,
            jwt_secret,
            metrics,
            hashing,
            outbound,
            domain_proof,
            clock: gw_shared::clock::Clock::from_env(),
            billing,
        })
    }

    /// The master keyring, or 503 naming what needs it: `needs` is that thing with its verb
    /// (`"provider keys need"`).
    pub fn keyring(&self, needs: &str) -> ApiResult<&gw_shared::crypto::Keyring> {
        self.cfg.secrets.keyring.as_ref().ok_or_else(|| {
            log::error!("{needs} GW_ENCRYPTION_KEY, which is not set");
            ApiError::Unavailable(format!("{needs} GW_ENCRYPTION_KEY"))
        })
    }

    pub async fn conn(&self) -> ApiResult<DbConn> {
        Ok(self.db.get().await?)
    }

    /// A connection for reads that may trail the primary by the replica's lag (analytics): the
    /// replica's when there is one, else the primary's. Exports use `crate::replica::Reader`.
    pub async fn read_conn(&self) -> ApiResult<DbConn> {
        Ok(self.read_db.as_ref().unwrap_or(&self.db).get().await?)
    }

    /// The route catalog in force (see `crate::route_catalog`).
    pub async fn routes(&self) -> ApiResult<gw_shared::config::Routes> {
        let mut conn = self.conn().await?;
        crate::route_catalog::routes(self, &mut conn).await
    }

    /// Announces invalidation-log entries a committed transaction recorded: a change that must
    /// reach the proxies records its entries in its own transaction
    /// ([`gw_shared::db::invalidations::record_all`]) and, once committed, calls this. A failure
    /// is logged (naming `what` changed); an entry not announced reaches the proxies at their
    /// next read of the log (within `gw_proxy::invalidation::SILENCE` and a second).
    pub async fn announce(&self, entries: &[(i64, Invalidation)], what: impl std::fmt::Display) {
        for (id, inv) in entries {
            if let Err(e) = gw_shared::redis::announce(&self.redis, *id, inv).await {
                log::warn!("could not announce {what} (invalidation {id}): the proxies read it from the log: {e}");
                return;
            }
        }
    }

    /// Runs a password hash or verification on a hashing thread; 503 with a hint when every
    /// thread stays busy for `hash_wait_ms`.
    pub async fn hash<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> ApiResult<T> {
        let result = self.hashing.run(f).await;
        if matches!(result, Err(ApiError::Unavailable(_))) {
            self.metrics.hash_busy.inc();
        }
        result
    }
}
