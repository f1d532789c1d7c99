//! Failed authentications per client address: past the limit within a window, gw stops looking
//! unknown keys (and teams) up in Postgres for that address until the window ends, so a spray of
//! random keys cannot become a Postgres query per request. Keys already cached keep working.
//!
//! A store lookup reserves one unit of the address's budget before it runs and gives it back if
//! the key turns out to exist, so however many lookups run at once, an address causes at most
//! `limit` failed lookups per window on one replica.
//!
//! Replicas share the count through Redis: every failure is added to the address's counter for
//! the current fixed window (aligned to Unix time, so every replica names the same one), and the
//! total that comes back (this window's and the previous one's, so that a window's end does not
//! reset a spray half-way) closes the local window once it reaches the limit. A replica that has
//! not seen the address yet thus lets one more failed lookup through before it throttles it too:
//! across `n` replicas at most `limit + n` per window. Redis being slow or down leaves each
//! replica throttling on its own count.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use moka::sync::Cache;

/// Where replicas add up their failures.
pub struct SharedCounts {
    pub redis: gw_shared::redis::Pool,
    /// Longest wait for Redis before the replica keeps to its own count.
    pub timeout: Duration,
}

struct Window {
    opened: Instant,
    failures: AtomicU32,
    /// Lookups under way whose outcome is not known yet.
    pending: AtomicU32,
}

pub struct AuthThrottle {
    limit: u32,
    window: Duration,
    // Entries expire `window` after they were created: a fixed window per address.
    windows: Cache<IpAddr, Arc<Window>>,
    shared: Option<SharedCounts>,
}

impl AuthThrottle {
    pub fn new(limit_per_window: u32, window: Duration, shared: Option<SharedCounts>) -> Self {
        Self {
            limit: limit_per_window,
            window,
            windows: Cache::builder().max_capacity(200_000).time_to_live(window).build(),
            shared,
        }
    }

    /// Adds one failure of `ip` to the replicas' shared count; the total they reached.
    async fn add_shared(&self, ip: IpAddr) -> Option<u32> {
        let shared = self.shared.as_ref()?;
        let secs = self.window.as_secs().max(1);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
        let key = gw_shared::redis::auth_failures_key(ip, now / secs);
        let previous = gw_shared::redis::auth_failures_key(ip, (now / secs).saturating_sub(1));
        let add = async {
            let mut conn = shared.redis.get().await.ok()?;
            let (now, before): (u32, Option<u32>) = redis::pipe()
                .incr(&key, 1u32)
                .expire(&key, (2 * secs) as i64)
                .ignore()
                .get(&previous)
                .query_async(&mut conn)
                .await
                .ok()?;
            Some(now.saturating_add(before.unwrap_or(0)))
        };
        tokio::time::timeout(shared.timeout, add).await.ok().flatten()
    }

    fn window(&self, ip: IpAddr) -> Arc<Window> {
        self.windows.get_with(ip, || {
            Arc::new(Window { opened: Instant::now(), failures: AtomicU32::new(0), pending: AtomicU32::new(0) })
        })
    }

    /// The budget of one request from `ip`.
    pub fn pass(&self, ip: Option<IpAddr>) -> Pass<'_> {
        Pass { throttle: self, ip, reserved: OnceLock::new(), settled: AtomicU32::new(0) }
    }

    /// Seconds until `ip`'s window ends (at least 1).
    pub fn retry_after(&self, ip: Option<IpAddr>) -> u64 {
        let left = ip
            .and_then(|ip| self.windows.get(&ip))
            .map(|w| self.window.saturating_sub(w.opened.elapsed()))
            .unwrap_or(self.window);
        left.as_secs().max(1)
    }
}

/// One request's standing with the throttle. Dropping it releases an unsettled reservation.
pub struct Pass<'a> {
    throttle: &'a AuthThrottle,
    ip: Option<IpAddr>,
    reserved: OnceLock<Arc<Window>>,
    settled: AtomicU32,
}

impl Pass<'_> {
    /// Whether this request may look an unknown credential up in the store; if so, one unit of
    /// the address's budget is held until the outcome is known.
    pub fn admit(&self) -> bool {
        let Some(ip) = self.ip else { return true };
        if self.reserved.get().is_some() {
            return true;
        }
        let w = self.throttle.window(ip);
        let mut pending = w.pending.load(Ordering::Acquire);
        loop {
            if w.failures.load(Ordering::Acquire).saturating_add(pending) >= self.throttle.limit {
                return false;
            }
            match w.pending.compare_exchange_weak(pending, pending + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => pending = now,
            }
        }
        let _ = self.reserved.set(w);
        true
    }

    /// The credential was refused: it counts against the address, here and (when shared) on
    /// every replica.
    pub async fn failed(&self) {
        let Some(ip) = self.ip else { return };
        let w = self.reserved.get().cloned().unwrap_or_else(|| self.throttle.window(ip));
        w.failures.fetch_add(1, Ordering::AcqRel);
        self.release();
        if let Some(total) = self.throttle.add_shared(ip).await {
            if total >= self.throttle.limit {
                w.failures.fetch_max(self.throttle.limit, Ordering::AcqRel);
            }
        }
    }

    fn release(&self) {
        if let Some(w) = self.reserved.get() {
            if self.settled.swap(1, Ordering::AcqRel) == 0 {
                w.pending.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[tokio::test]
    async fn throttles_per_address() {
        let t = AuthThrottle::new(3, Duration::from_secs(60), None);
        for _ in 0..3 {
            let p = t.pass(ip(1));
            assert!(p.admit());
            p.failed().await;
        }
        assert!(!t.pass(ip(1)).admit());
        assert!(t.pass(ip(2)).admit());
        assert!(t.pass(None).admit());
        assert!((1..=60).contains(&t.retry_after(ip(1))));
    }

    #[tokio::test]
    async fn concurrent_lookups_cannot_overshoot() {
        let t = AuthThrottle::new(3, Duration::from_secs(60), None);
        let passes: Vec<_> = (0..10).map(|_| t.pass(ip(1))).collect();
        let admitted = passes.iter().filter(|p| p.admit()).count();
        assert_eq!(admitted, 3);
        for p in &passes {
            p.failed().await;
        }
        assert!(!t.pass(ip(1)).admit());
    }

    #[tokio::test]
    async fn a_known_key_gives_its_reservation_back() {
        let t = AuthThrottle::new(1, Duration::from_secs(60), None);
        for _ in 0..5 {
            let p = t.pass(ip(1));
            assert!(p.admit());
            // dropped without failing: the key existed
        }
        let p = t.pass(ip(1));
        assert!(p.admit());
        p.failed().await;
        assert!(!t.pass(ip(1)).admit());
    }

    #[tokio::test]
    async fn windows_end() {
        let t = AuthThrottle::new(1, Duration::from_millis(50), None);
        t.pass(ip(1)).failed().await;
        assert!(!t.pass(ip(1)).admit());
        std::thread::sleep(Duration::from_millis(120));
        t.windows.run_pending_tasks();
        assert!(t.pass(ip(1)).admit());
    }
}
