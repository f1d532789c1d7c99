//! What every handler can reach.

use std::sync::Arc;
use std::time::Duration;

use gw_shared::config::Config;
use gw_shared::db::{DbConn, DbPool};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;

pub struct AppState {
    pub cfg: Config,
    pub db: DbPool,
    pub redis: deadpool_redis::Pool,
    pub jwt_secret: String,
    pub metrics: Arc<Metrics>,
    /// Bounds the password hashes computed at once: each holds ~19 MiB and a blocking thread.
    hashing: Semaphore,
    /// The client SSO uses to reach identity providers (discovery, JWKS, token exchange).
    pub oidc_http: reqwest::Client,
}

impl AppState {
    pub fn new(
        cfg: Config,
        db: DbPool,
        redis: deadpool_redis::Pool,
        jwt_secret: String,
        metrics: Arc<Metrics>,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let hashing = Semaphore::new(cfg.admin.max_concurrent_hashes.max(1));
        let oidc_http = reqwest::Client::builder()
            // Identity providers must not redirect token or JWKS requests (SSRF hardening).
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(AppState { cfg, db, redis, jwt_secret, metrics, hashing, oidc_http })
    }

    pub async fn conn(&self) -> ApiResult<DbConn> {
        Ok(self.db.get().await?)
    }

    /// A slot to hash or verify one password; 503 with a hint when every slot stays busy for
    /// `hash_wait_ms` (the process's memory stays bounded under a login flood).
    pub async fn hash_slot(&self) -> ApiResult<SemaphorePermit<'_>> {
        let wait = Duration::from_millis(self.cfg.admin.hash_wait_ms);
        match tokio::time::timeout(wait, self.hashing.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => {
                self.metrics.hash_busy.inc();
                Err(ApiError::Unavailable("too many sign-ins at once; retry in a few seconds".into()))
            }
        }
    }
}
