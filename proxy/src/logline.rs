//! Log lines that would otherwise repeat once per request (a store outage, a full queue): at most
//! one line per interval, saying how many were held back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct RateLimitedLog {
    /// Log target (the module that logs), so filters and readers see where a line came from.
    target: &'static str,
    interval_ms: u64,
    origin: Instant,
    /// Milliseconds since `origin` of the last line written (0: none yet).
    last: AtomicU64,
    suppressed: AtomicU64,
}

impl RateLimitedLog {
    pub fn new(target: &'static str, interval: Duration) -> Self {
        Self {
            target,
            interval_ms: interval.as_millis().max(1) as u64,
            origin: Instant::now(),
            last: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether a line may be written now; if so, how many were held back since the last one.
    fn admit(&self) -> Option<u64> {
        let now = self.origin.elapsed().as_millis() as u64 + self.interval_ms;
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && now < last + self.interval_ms {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self.last.compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }

    pub fn warn(&self, line: impl FnOnce() -> String) {
        if let Some(held) = self.admit() {
            if held > 0 {
                log::warn!(target: self.target, "{} ({held} similar lines suppressed)", line());
            } else {
                log::warn!(target: self.target, "{}", line());
            }
        }
    }

    pub fn error(&self, line: impl FnOnce() -> String) {
        if let Some(held) = self.admit() {
            if held > 0 {
                log::error!(target: self.target, "{} ({held} similar lines suppressed)", line());
            } else {
                log::error!(target: self.target, "{}", line());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval() {
        let l = RateLimitedLog::new("test", Duration::from_secs(60));
        assert_eq!(l.admit(), Some(0));
        for _ in 0..1000 {
            assert_eq!(l.admit(), None);
        }
        assert_eq!(l.suppressed.load(Ordering::Relaxed), 1000);
        let fast = RateLimitedLog::new("test", Duration::from_millis(1));
        assert_eq!(fast.admit(), Some(0));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(fast.admit(), Some(0));
    }
}
