//! Per-deployment runtime state: a circuit breaker (consecutive failures open it for a cooldown,
//! then one trial request decides), requests in flight, a latency moving average, and the
//! deployment's own per-minute request and token caps. Atomics and one small mutex: read on
//! every request, never awaited.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

/// What the breaker says about sending a request now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Closed,
    /// The cooldown is over and this request is the one trial.
    Trial,
    Open,
}

#[derive(Debug, Default)]
pub struct DeploymentState {
    inflight: AtomicU32,
    /// Moving average of response-header latency in µs; 0 until the first sample.
    ewma_us: AtomicU64,
    failures: AtomicU32,
    /// Milliseconds (on the router's clock) until which the circuit is open; 0 when closed.
    open_until_ms: AtomicU64,
    trial: AtomicBool,
    window: Mutex<RateWindow>,
}

impl DeploymentState {
    /// Whether a request may go to this deployment at `now_ms`; at most one trial passes once the
    /// cooldown is over.
    pub fn gate(&self, now_ms: u64) -> Gate {
        let until = self.open_until_ms.load(Ordering::Acquire);
        if until == 0 {
            return Gate::Closed;
        }
        if now_ms < until {
            return Gate::Open;
        }
        if self.trial.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            Gate::Trial
        } else {
            Gate::Open
        }
    }

    pub fn is_open(&self, now_ms: u64) -> bool {
        let until = self.open_until_ms.load(Ordering::Acquire);
        until != 0 && (now_ms < until || self.trial.load(Ordering::Acquire))
    }

    pub fn record_success(&self) {
        self.failures.store(0, Ordering::Release);
        self.open_until_ms.store(0, Ordering::Release);
        self.trial.store(false, Ordering::Release);
    }

    /// Counts a failure; returns true when this failure opened (or re-opened) the circuit.
    pub fn record_failure(&self, now_ms: u64, threshold: u32, cooldown_ms: u64) -> bool {
        if self.trial.swap(false, Ordering::AcqRel) {
            self.open_until_ms.store(now_ms.saturating_add(cooldown_ms).max(1), Ordering::Release);
            return true;
        }
        let n = self.failures.fetch_add(1, Ordering::AcqRel).saturating_add(1);
        if n >= threshold {
            self.failures.store(0, Ordering::Release);
            self.open_until_ms.store(now_ms.saturating_add(cooldown_ms).max(1), Ordering::Release);
            return true;
        }
        false
    }

    /// A trial request that ended without a verdict (the client left) gives the slot back.
    pub fn release_trial(&self) {
        self.trial.store(false, Ordering::Release);
    }

    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Relaxed)
    }

    pub fn begin(&self) -> InflightGuard<'_> {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        InflightGuard(self)
    }

    pub fn latency_us(&self) -> u64 {
        self.ewma_us.load(Ordering::Relaxed)
    }

    pub fn observe_latency(&self, sample_us: u64, alpha: f64) {
        let old = self.ewma_us.load(Ordering::Relaxed);
        let new = if old == 0 { sample_us.max(1) } else { ewma(old, sample_us, alpha) };
        self.ewma_us.store(new, Ordering::Relaxed);
    }

    /// Takes one request from this replica's share of the per-minute caps (each cap divided by
    /// `share`, the replicas sharing it); false when either is reached.
    pub fn admit(&self, now_ms: u64, rpm: Option<u32>, tpm: Option<u64>, share: u64) -> bool {
        if rpm.is_none() && tpm.is_none() {
            return true;
        }
        let Ok(mut w) = self.window.lock() else { return true };
        w.roll(now_ms);
        let share = share.max(1) as f64;
        if rpm.is_some_and(|cap| w.estimate_requests(now_ms) >= (f64::from(cap) / share).max(1.0)) {
            return false;
        }
        if tpm.is_some_and(|cap| w.estimate_tokens(now_ms) >= (cap as f64 / share).max(1.0)) {
            return false;
        }
        w.requests += 1;
        true
    }

    /// Tokens a finished request used, for the token cap.
    pub fn add_tokens(&self, now_ms: u64, tokens: u64) {
        if let Ok(mut w) = self.window.lock() {
            w.roll(now_ms);
            w.tokens = w.tokens.saturating_add(tokens);
        }
    }
}

pub struct InflightGuard<'a>(&'a DeploymentState);

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

pub fn ewma(old: u64, sample: u64, alpha: f64) -> u64 {
    let v = alpha * sample as f64 + (1.0 - alpha) * old as f64;
    (v.round() as u64).max(1)
}

const MINUTE_MS: u64 = 60_000;

/// A sliding one-minute count, estimated from the current and the previous fixed minute (the
/// previous one weighted by how much of it still lies inside the last 60 s).
#[derive(Debug, Default)]
struct RateWindow {
    start_ms: u64,
    requests: u64,
    tokens: u64,
    prev_requests: u64,
    prev_tokens: u64,
}

impl RateWindow {
    fn roll(&mut self, now_ms: u64) {
        let start = now_ms - now_ms % MINUTE_MS;
        if start == self.start_ms {
            return;
        }
        if start == self.start_ms + MINUTE_MS {
            self.prev_requests = self.requests;
            self.prev_tokens = self.tokens;
        } else {
            self.prev_requests = 0;
            self.prev_tokens = 0;
        }
        self.start_ms = start;
        self.requests = 0;
        self.tokens = 0;
    }

    fn prev_weight(&self, now_ms: u64) -> f64 {
        1.0 - (now_ms.saturating_sub(self.start_ms) as f64 / MINUTE_MS as f64).min(1.0)
    }

    fn estimate_requests(&self, now_ms: u64) -> f64 {
        self.requests as f64 + self.prev_requests as f64 * self.prev_weight(now_ms)
    }

    fn estimate_tokens(&self, now_ms: u64) -> f64 {
        self.tokens as f64 + self.prev_tokens as f64 * self.prev_weight(now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_and_closes_after_a_good_trial() {
        let s = DeploymentState::default();
        assert_eq!(s.gate(0), Gate::Closed);
        assert!(!s.record_failure(10, 3, 1000));
        assert!(!s.record_failure(20, 3, 1000));
        assert!(s.record_failure(30, 3, 1000));
        assert_eq!(s.gate(31), Gate::Open);
        assert_eq!(s.gate(1029), Gate::Open);
        // One trial after the cooldown; others keep waiting for its verdict.
        assert_eq!(s.gate(1030), Gate::Trial);
        assert_eq!(s.gate(1031), Gate::Open);
        s.record_success();
        assert_eq!(s.gate(1032), Gate::Closed);
    }

    #[test]
    fn a_failed_trial_reopens_and_successes_reset_the_count() {
        let s = DeploymentState::default();
        s.record_failure(0, 1, 100);
        assert_eq!(s.gate(100), Gate::Trial);
        assert!(s.record_failure(100, 1, 100));
        assert_eq!(s.gate(150), Gate::Open);
        assert_eq!(s.gate(200), Gate::Trial);
        s.release_trial();
        assert_eq!(s.gate(201), Gate::Trial);
        s.record_success();
        s.record_failure(300, 2, 100);
        s.record_success();
        assert!(!s.record_failure(301, 2, 100), "a success in between resets the count");
    }

    #[test]
    fn inflight_is_counted_by_guards() {
        let s = DeploymentState::default();
        let a = s.begin();
        let b = s.begin();
        assert_eq!(s.inflight(), 2);
        drop(a);
        drop(b);
        assert_eq!(s.inflight(), 0);
    }

    #[test]
    fn latency_average_moves_toward_samples() {
        let s = DeploymentState::default();
        s.observe_latency(1000, 0.5);
        assert_eq!(s.latency_us(), 1000);
        s.observe_latency(2000, 0.5);
        assert_eq!(s.latency_us(), 1500);
        assert_eq!(ewma(100, 100, 0.3), 100);
    }

    #[test]
    fn caps_hold_over_a_sliding_minute() {
        let s = DeploymentState::default();
        assert!(s.admit(0, Some(2), None, 1));
        assert!(s.admit(1, Some(2), None, 1));
        assert!(!s.admit(2, Some(2), None, 1));
        // Three quarters into the next minute, a quarter of the previous one still counts:
        // 0.5, then 1.5 are under the cap; 2.5 is not.
        assert!(s.admit(105_000, Some(2), None, 1));
        assert!(s.admit(105_001, Some(2), None, 1));
        assert!(!s.admit(105_002, Some(2), None, 1));
        assert!(s.admit(300_000, Some(2), None, 1), "old minutes are forgotten");
        let t = DeploymentState::default();
        assert!(t.admit(0, None, Some(100), 1));
        t.add_tokens(0, 100);
        assert!(!t.admit(1, None, Some(100), 1));
        assert!(DeploymentState::default().admit(0, None, None, 1));
        // Shared by four replicas, each takes a quarter (never less than one).
        let q = DeploymentState::default();
        assert!(q.admit(0, Some(8), None, 4));
        assert!(q.admit(1, Some(8), None, 4));
        assert!(!q.admit(2, Some(8), None, 4));
        assert!(DeploymentState::default().admit(0, Some(2), None, 8));
    }
}
