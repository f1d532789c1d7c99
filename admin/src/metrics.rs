//! Prometheus metrics of the admin process.

use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry};

pub struct Metrics {
    pub registry: Registry,
    pub requests: IntCounterVec,
    pub duration: HistogramVec,
    /// Sign-ins refused because every password-hashing slot stayed busy.
    pub hash_busy: IntCounter,
    /// Sign-in and sign-up attempts refused by throttling, by `scope` (`ip`, `account`).
    pub throttled: IntCounterVec,
    /// Refresh-token reuse detections (each revokes a session).
    pub refresh_reuse: IntCounter,
}

impl Metrics {
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("gw_admin_requests_total", "Management API requests"),
            &["route", "method", "status"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new("gw_admin_request_duration_seconds", "Management API latency"),
            &["route"],
        )?;
        let hash_busy = IntCounter::new("gw_admin_hash_busy_total", "Sign-ins refused: every hashing slot busy")?;
        let throttled = IntCounterVec::new(
            Opts::new("gw_admin_auth_throttled_total", "Sign-in and sign-up attempts refused by throttling"),
            &["scope"],
        )?;
        let refresh_reuse =
            IntCounter::new("gw_admin_refresh_reuse_total", "Refresh-token reuse detections (session revoked)")?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(hash_busy.clone()))?;
        registry.register(Box::new(throttled.clone()))?;
        registry.register(Box::new(refresh_reuse.clone()))?;
        Ok(Self { registry, requests, duration, hash_busy, throttled, refresh_reuse })
    }
}
