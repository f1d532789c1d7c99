//! The one cached-lookup-with-invalidation mechanism of the data plane. Every cached source
//! (API keys, teams, organizations, policy documents, provider keys, cache settings: see
//! `crate::sources`) goes through it.
//!
//! Tiers: the in-process cache (moka), then the shared Redis copy, then Postgres. A request
//! never queries Postgres for something the process read within `fresh_for`; unknown keys are
//! remembered as unknown (`negative_for`). Concurrent misses for one key share one load. While
//! the store is unreachable the last good answer (a value, or "there is none") is served for up
//! to `stale_for`, and for a short
//! while after a failure nobody retries the store (so an outage does not become one failing
//! query per request). Invalidations remove entries outright, stale ones included, so a
//! revocation published on Redis ends a key even while Postgres is down.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gw_shared::redis::Pool as RedisPool;
use gw_shared::redis::{get_stamped, put_stamped, Stamped};
use moka::future::Cache;
use moka::ops::compute::{CompResult, Op};
use moka::Expiry;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::logline::RateLimitedLog;
use crate::metrics::Metrics;

/// Where entries come from: the shared Redis copy, then the store of record.
#[async_trait]
pub trait Source: Send + Sync + 'static {
    type Key: Hash + Eq + Clone + Send + Sync + 'static;
    type Value: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Metric label naming the lookup.
    fn name(&self) -> &'static str;
    /// Redis key of the shared copy.
    fn redis_key(&self, key: &Self::Key) -> String;
    /// Reads the store of record (Postgres). `Ok(None)`: no such thing.
    async fn load(&self, key: &Self::Key) -> Result<Option<Self::Value>, String>;
}

struct Slot<V> {
    value: Option<Arc<V>>,
    /// When the value was read from the store of record.
    read_at: Instant,
    /// Bytes the entry is counted as (see [`Slot::new`]).
    weight: u32,
}

// Derived Clone would require `V: Clone`; the value sits behind an Arc.
impl<V> Clone for Slot<V> {
    fn clone(&self) -> Self {
        Self { value: self.value.clone(), read_at: self.read_at, weight: self.weight }
    }
}

/// Bytes an entry holds besides its value's serialized form: the key, the slot, moka's node.
const SLOT_OVERHEAD: usize = 160;

impl<V: Serialize> Slot<V> {
    /// An entry weighed by its value's serialized size, which tracks the heap it holds (strings,
    /// lists) within a small factor and costs nothing but a count on a store read.
    fn new(value: Option<V>, read_at: Instant) -> Self {
        let mut size = Counter(0);
        if let Some(v) = &value {
            // Counting cannot fail; a value that does not serialize is weighed by its overhead.
            let _ = serde_json::to_writer(&mut size, v);
        }
        let weight = u32::try_from(SLOT_OVERHEAD + std::mem::size_of::<V>() + size.0).unwrap_or(u32::MAX);
        Self { value: value.map(Arc::new), read_at, weight }
    }
}

/// Counts what is written to it.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct SlotExpiry {
    negative_for: Duration,
    stale_for: Duration,
}

impl SlotExpiry {
    /// Entries outlive their freshness so they can be served while the store is down: "this
    /// organization has no policy" is as much a last good answer as a policy is.
    fn ttl<V>(&self, _slot: &Slot<V>) -> Duration {
        self.stale_for.max(self.negative_for)
    }
}

// Counted from the store read, not from insertion: a copy taken from Redis is already aged.
impl<K, V> Expiry<K, Slot<V>> for SlotExpiry {
    fn expire_after_create(&self, _k: &K, v: &Slot<V>, _now: Instant) -> Option<Duration> {
        Some(self.ttl(v).saturating_sub(v.read_at.elapsed()))
    }

    fn expire_after_update(&self, _k: &K, v: &Slot<V>, _now: Instant, _left: Option<Duration>) -> Option<Duration> {
        Some(self.ttl(v).saturating_sub(v.read_at.elapsed()))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct LookupConfig {
    /// Bytes each lookup's in-process tier may hold.
    pub max_bytes: u64,
    pub fresh_for: Duration,
    pub negative_for: Duration,
    pub stale_for: Duration,
    /// Longest wait for Redis or Postgres.
    pub store_timeout: Duration,
}

/// Why a lookup has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupError {
    /// The store is unreachable and nothing usable is cached.
    Unavailable,
    /// The caller may not query the store now (see `Lookup::get`), and no tier had the entry.
    NotAllowed,
}

/// Which tiers a refresh may answer from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tiers {
    All,
    StoreOnly,
}

/// Asked before a store query for an unknown key (see `Lookup::get`).
pub type Admit<'a> = &'a (dyn Fn() -> bool + Sync);

/// Pause after a store failure during which lookups serve stale entries without trying again.
const STORE_BACKOFF: Duration = Duration::from_secs(1);

pub struct Lookup<S: Source> {
    source: S,
    cache: Cache<S::Key, Slot<S::Value>>,
    redis: RedisPool,
    cfg: LookupConfig,
    /// Bumped by every invalidation: a load that raced one is not trusted.
    epoch: AtomicU64,
    /// Milliseconds since `origin` until which the store is considered down.
    down_until: AtomicU64,
    origin: Instant,
    metrics: Arc<Metrics>,
    log: RateLimitedLog,
}

impl<S: Source> Lookup<S> {
    pub fn new(source: S, redis: RedisPool, cfg: LookupConfig, metrics: Arc<Metrics>) -> Self {
        let cache = Cache::builder()
            .max_capacity(cfg.max_bytes)
            .weigher(|_k: &S::Key, slot: &Slot<S::Value>| slot.weight)
            .expire_after(SlotExpiry { negative_for: cfg.negative_for, stale_for: cfg.stale_for })
            .build();
        Self {
            source,
            cache,
            redis,
            cfg,
            epoch: AtomicU64::new(0),
            down_until: AtomicU64::new(0),
            origin: Instant::now(),
            metrics,
            log: RateLimitedLog::new(module_path!(), Duration::from_secs(5)),
        }
    }

    /// Whether the in-process tier holds a value (not only remembered unknowns): what it can
    /// still serve while both stores are down.
    pub async fn holds_any(&self) -> bool {
        // An entry is listed once moka has admitted it, which its pending tasks do.
        self.cache.run_pending_tasks().await;
        self.cache.iter().any(|(_, slot)| slot.value.is_some())
    }

    fn fresh(&self, slot: &Slot<S::Value>) -> bool {
        slot.read_at.elapsed() < if slot.value.is_some() { self.cfg.fresh_for } else { self.cfg.negative_for }
    }

    fn store_down(&self) -> bool {
        let now = self.origin.elapsed().as_millis() as u64;
        now < self.down_until.load(Ordering::Relaxed)
    }

    fn mark_down(&self) {
        let until = (self.origin.elapsed() + STORE_BACKOFF).as_millis() as u64;
        self.down_until.store(until, Ordering::Relaxed);
    }

    /// The value for `key`; `Ok(None)` when it does not exist. `admit` is asked just before
    /// Postgres would be queried for a key this process does not know; when it says no, the
    /// in-process and Redis tiers still answer, but Postgres is not asked.
    pub async fn get(&self, key: &S::Key, admit: Admit<'_>) -> Result<Option<Arc<S::Value>>, LookupError> {
        if let Some(slot) = self.cache.get(key).await {
            if self.fresh(&slot) {
                return Ok(slot.value);
            }
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let (found, loaded) = self.refresh(key, admit).await?;
        if loaded && self.epoch.load(Ordering::Acquire) != epoch {
            // An invalidation landed between this load and its entry going into the cache, so
            // the entry may predate the change (a revocation, a creation); the invalidation is
            // published after the change commits. A value found is read again from the store;
            // "unknown" is answered but not remembered, so the next request looks again (a
            // second read here would let every invalidation multiply a spray of unknown keys).
            self.cache.invalidate(key).await;
            if found.is_some() {
                let slot = self.fetch(key, None, Tiers::StoreOnly).await?;
                let value = slot.value.clone();
                self.cache.insert(key.clone(), slot).await;
                return Ok(value);
            }
        }
        Ok(found)
    }

    /// The entry after a refresh, and whether this call loaded it (rather than finding it
    /// fresh, or serving it stale).
    async fn refresh(&self, key: &S::Key, admit: Admit<'_>) -> Result<(Option<Arc<S::Value>>, bool), LookupError> {
        let loaded = std::sync::atomic::AtomicBool::new(false);
        let result = self
            .cache
            .entry_by_ref(key)
            .and_try_compute_with(|existing| async {
                let existing = existing.map(|e| e.into_value());
                // Another request refreshed it while this one waited for the entry.
                if existing.as_ref().is_some_and(|s| self.fresh(s)) {
                    return Ok(Op::Nop);
                }
                // Throttling is for keys nobody knows; one this process knew may always be re-read.
                let known = existing.as_ref().is_some_and(|s| s.value.is_some());
                if existing.is_some() && self.store_down() {
                    self.metrics.cache_stale_served.with_label_values(&[self.source.name()]).inc();
                    return Ok(Op::Nop);
                }
                let before = self.epoch.load(Ordering::Acquire);
                let fetched = match self.fetch(key, if known { None } else { Some(admit) }, Tiers::All).await {
                    // Invalidated while loading: what was read may predate the change, and
                    // requests waiting on this entry would take it as fresh. Read the store.
                    Ok(slot) if slot.value.is_some() && self.epoch.load(Ordering::Acquire) != before => {
                        self.fetch(key, None, Tiers::StoreOnly).await
                    }
                    other => other,
                };
                match fetched {
                    Ok(slot) => {
                        loaded.store(true, Ordering::Relaxed);
                        Ok(Op::Put(slot))
                    }
                    Err(e) => match existing {
                        // The last good answer, within `stale_for` (older entries have expired).
                        Some(_) if e == LookupError::Unavailable => {
                            self.metrics.cache_stale_served.with_label_values(&[self.source.name()]).inc();
                            Ok(Op::Nop)
                        }
                        _ => Err(e),
                    },
                }
            })
            .await?;
        let value = match result {
            CompResult::Inserted(e) | CompResult::ReplacedWith(e) | CompResult::Unchanged(e) => e.into_value().value,
            CompResult::StillNone(_) | CompResult::Removed(_) => None,
        };
        Ok((value, loaded.load(Ordering::Relaxed)))
    }

    /// Redis, then Postgres (writing the result back to Redis).
    async fn fetch(&self, key: &S::Key, admit: Option<Admit<'_>>, tiers: Tiers) -> Result<Slot<S::Value>, LookupError> {
        let name = self.source.name();
        let redis_key = self.source.redis_key(key);
        let shared = match tiers {
            Tiers::All => {
                tokio::time::timeout(self.cfg.store_timeout, get_stamped::<S::Value>(&self.redis, &redis_key)).await
            }
            Tiers::StoreOnly => Ok(Ok(None)),
        };
        match shared {
            Ok(Ok(Some(copy))) => {
                self.metrics.lookups.with_label_values(&[name, "redis"]).inc();
                let age = Duration::from_millis(
                    chrono::Utc::now().timestamp_millis().saturating_sub(copy.at_ms).max(0) as u64,
                );
                let read_at = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
                return Ok(Slot::new(Some(copy.v), read_at));
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) => self.log.warn(|| format!("{name} lookup: Redis unavailable ({e}); asking Postgres")),
            Err(_) => self.log.warn(|| format!("{name} lookup: Redis timed out; asking Postgres")),
        }
        if admit.is_some_and(|admit| !admit()) {
            return Err(LookupError::NotAllowed);
        }
        if self.store_down() {
            return Err(LookupError::Unavailable);
        }
        self.metrics.store_queries.with_label_values(&[name]).inc();
        let loaded = tokio::time::timeout(self.cfg.store_timeout, self.source.load(key)).await;
        let value = match loaded {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                self.mark_down();
                self.metrics.lookups.with_label_values(&[name, "error"]).inc();
                self.log.warn(|| format!("{name} lookup: Postgres unavailable ({e})"));
                return Err(LookupError::Unavailable);
            }
            Err(_) => {
                self.mark_down();
                self.metrics.lookups.with_label_values(&[name, "error"]).inc();
                self.log.warn(|| format!("{name} lookup: Postgres timed out"));
                return Err(LookupError::Unavailable);
            }
        };
        self.metrics.lookups.with_label_values(&[name, if value.is_some() { "found" } else { "unknown" }]).inc();
        if let Some(v) = &value {
            let copy = Stamped::now(v);
            let ttl = self.cfg.fresh_for.as_secs().max(1);
            if let Ok(Err(e)) =
                tokio::time::timeout(self.cfg.store_timeout, put_stamped(&self.redis, &redis_key, &copy, ttl)).await
            {
                self.log.warn(|| format!("{name} lookup: could not share the entry on Redis ({e})"));
            }
        }
        Ok(Slot::new(value, Instant::now()))
    }

    pub async fn invalidate(&self, key: &S::Key) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.cache.invalidate(key).await;
    }

    pub fn invalidate_all(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.cache.invalidate_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_weigh_their_serialized_size() {
        let none = Slot::<String>::new(None, Instant::now()).weight as usize;
        let big = Slot::new(Some("x".repeat(10_000)), Instant::now()).weight as usize;
        assert_eq!(none, SLOT_OVERHEAD + std::mem::size_of::<String>());
        assert_eq!(big, none + 10_002);
    }
}
