//! Failed authentications per client address: past the limit within a window, gw stops looking
//! unknown keys (and teams) up in Postgres for that address until the window ends, so a spray of
//! random keys cannot become a Postgres query per request. Keys already cached keep working.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::sync::Cache;

struct Window {
    opened: Instant,
    failures: AtomicU32,
}

pub struct AuthThrottle {
    limit: u32,
    window: Duration,
    // Entries expire `window` after the first failure: a fixed window per address.
    windows: Cache<IpAddr, Arc<Window>>,
}

impl AuthThrottle {
    pub fn new(limit_per_window: u32, window: Duration) -> Self {
        Self {
            limit: limit_per_window,
            window,
            windows: Cache::builder().max_capacity(200_000).time_to_live(window).build(),
        }
    }

    /// Whether requests from `ip` may still cause store lookups of unknown credentials.
    pub fn allows(&self, ip: Option<IpAddr>) -> bool {
        let Some(ip) = ip else { return true };
        self.windows.get(&ip).is_none_or(|w| w.failures.load(Ordering::Relaxed) < self.limit)
    }

    pub fn failed(&self, ip: Option<IpAddr>) {
        if let Some(ip) = ip {
            let w =
                self.windows.get_with(ip, || Arc::new(Window { opened: Instant::now(), failures: AtomicU32::new(0) }));
            w.failures.fetch_add(1, Ordering::Relaxed);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttles_per_address() {
        let t = AuthThrottle::new(3, Duration::from_secs(60));
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        for _ in 0..3 {
            assert!(t.allows(a));
            t.failed(a);
        }
        assert!(!t.allows(a));
        assert!(t.allows(b));
        assert!(t.allows(None));
        assert!((1..=60).contains(&t.retry_after(a)));
    }

    #[test]
    fn windows_end() {
        let t = AuthThrottle::new(1, Duration::from_millis(50));
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        t.failed(a);
        assert!(!t.allows(a));
        std::thread::sleep(Duration::from_millis(120));
        t.windows.run_pending_tasks();
        assert!(t.allows(a));
    }
}
