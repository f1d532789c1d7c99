//! Authentication of `/v1` requests: the SHA-256 of the bearer key is looked up in an in-process
//! cache, then Postgres. Revocations arrive over Redis pub/sub (see `invalidation`); the cache
//! TTL bounds staleness if such a message is ever lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use gw_shared::db::api_keys::{self, KeyAuth};
use gw_shared::db::DbPool;
use gw_shared::keys::{self, KeyHash};
use moka::future::Cache;
use moka::Expiry;

use crate::error::ProxyError;
use crate::metrics::Metrics;

/// The permission every `/v1` call needs.
pub const PROXY_PERMISSION: &str = "proxy:llm";

/// A cached lookup: the key's record, or `None` for "no such key".
type Entry = Option<Arc<KeyAuth>>;

struct EntryExpiry {
    ttl: Duration,
    negative_ttl: Duration,
}

impl Expiry<KeyHash, Entry> for EntryExpiry {
    fn expire_after_create(&self, _key: &KeyHash, value: &Entry, _now: Instant) -> Option<Duration> {
        Some(if value.is_some() { self.ttl } else { self.negative_ttl })
    }
}

pub struct KeyCache {
    cache: Cache<KeyHash, Entry>,
    /// Bumped by every invalidation: a lookup that raced one is not trusted (see `lookup`).
    epoch: AtomicU64,
    db: DbPool,
    metrics: Arc<Metrics>,
}

impl KeyCache {
    pub fn new(db: DbPool, metrics: Arc<Metrics>, capacity: u64, ttl: Duration, negative_ttl: Duration) -> Self {
        let cache = Cache::builder().max_capacity(capacity).expire_after(EntryExpiry { ttl, negative_ttl }).build();
        Self { cache, epoch: AtomicU64::new(0), db, metrics }
    }

    async fn lookup(&self, hash: KeyHash) -> Result<Entry, ProxyError> {
        let before = self.epoch.load(Ordering::Acquire);
        let entry = self.load(hash).await?;
        if self.epoch.load(Ordering::Acquire) != before {
            // An invalidation landed while this lookup was in flight, so the row it cached may
            // predate a revocation. The invalidation is published after the revocation commits,
            // so a second read sees it.
            self.cache.invalidate(&hash).await;
            return self.load(hash).await;
        }
        Ok(entry)
    }

    async fn load(&self, hash: KeyHash) -> Result<Entry, ProxyError> {
        let db = self.db.clone();
        let metrics = self.metrics.clone();
        // Concurrent misses for one key share a single Postgres query.
        self.cache
            .try_get_with(hash, async move {
                let mut conn = db.get().await.map_err(|e| e.to_string())?;
                let found = api_keys::find_by_hash(&mut conn, &hash).await.map_err(|e| e.to_string())?;
                metrics.key_lookups.with_label_values(&[if found.is_some() { "found" } else { "unknown" }]).inc();
                Ok::<_, String>(found.map(Arc::new))
            })
            .await
            .map_err(|e: Arc<String>| {
                self.metrics.key_lookups.with_label_values(&["error"]).inc();
                log::error!("api key lookup failed: {e}");
                ProxyError::AuthBackend
            })
    }

    /// Authenticates the raw `Authorization` header value and checks the proxy permission.
    pub async fn authenticate(&self, header: Option<&[u8]>) -> Result<Arc<KeyAuth>, ProxyError> {
        let header = header.ok_or(ProxyError::MissingAuth)?;
        let token = keys::parse_bearer(header).ok_or(ProxyError::MalformedAuth)?;
        if keys::looks_like_jwt(token) {
            return Err(ProxyError::SessionTokenOnProxy);
        }
        let shown = redacted(token);
        let key = self.lookup(keys::hash_secret(token)).await?.ok_or_else(|| ProxyError::InvalidKey(shown.clone()))?;
        if key.revoked_at.is_some() {
            return Err(ProxyError::RevokedKey(shown));
        }
        if key.expires_at.is_some_and(|t| t <= Utc::now()) {
            return Err(ProxyError::ExpiredKey(shown));
        }
        if !key.permissions.iter().any(|p| p == PROXY_PERMISSION) {
            return Err(ProxyError::PermissionDenied(PROXY_PERMISSION));
        }
        Ok(key)
    }

    pub async fn invalidate(&self, hash: &KeyHash) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.cache.invalidate(hash).await;
    }

    pub fn invalidate_all(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.cache.invalidate_all();
    }
}

/// What of a presented key may appear in an error message or a log: its first characters only.
fn redacted(token: &str) -> String {
    let shown: String = token.chars().take(keys::DISPLAY_PREFIX_LEN.min(token.len() / 2)).collect();
    format!("{shown}****")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_never_shows_the_secret() {
        let k = keys::generate_api_key();
        let r = redacted(&k.secret);
        assert!(r.starts_with(&k.prefix));
        assert!(!r.contains(&k.secret[keys::DISPLAY_PREFIX_LEN..]));
        assert_eq!(redacted("abcd"), "ab****");
    }
}
