//! Prometheus metrics of the admin process.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

pub struct Metrics {
    pub registry: Registry,
    pub requests: IntCounterVec,
    pub duration: HistogramVec,
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
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        Ok(Self { registry, requests, duration })
    }
}
