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
    /// Time one audit upkeep run took (partitions, retention, hourly rollups).
    pub rollup_duration: prometheus::Histogram,
    /// Monthly audit partitions dropped by retention.
    pub partitions_dropped: IntCounter,
    /// Background job runs that failed, by job.
    pub job_failures: IntCounterVec,
    /// Webhook delivery attempts by outcome (`delivered`, `failed_attempt`).
    pub webhook_attempts: IntCounterVec,
    /// Events the webhook relay handled, by what became of them (`delivery`, `coalesced`,
    /// `dropped`, `mail`), and its rounds (`round`: tests wait on it).
    pub webhook_relay: IntCounterVec,
    /// Reconciliation runs, by outcome (`matched`, `discrepancies`, `failed`).
    pub reconcile_runs: IntCounterVec,
    /// Mail delivery attempts, by kind and outcome (`sent`, `retry`, `failed`).
    pub mail: IntCounterVec,
    /// Usage sends to the billing provider by outcome (`sent`, `retry`, `failed`).
    pub usage_sends: IntCounterVec,
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
        let rollup_duration = prometheus::Histogram::with_opts(
            HistogramOpts::new("gw_admin_audit_upkeep_duration_seconds", "Time one audit upkeep run took")
                .buckets(vec![0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0]),
        )?;
        let partitions_dropped = IntCounter::new(
            "gw_admin_audit_partitions_dropped_total",
            "Monthly audit partitions dropped by retention",
        )?;
        let job_failures =
            IntCounterVec::new(Opts::new("gw_admin_job_failures_total", "Background job runs that failed"), &["job"])?;
        let reconcile_runs = IntCounterVec::new(
            Opts::new("gw_admin_reconcile_runs_total", "Spend reconciliation runs by outcome"),
            &["outcome"],
        )?;
        registry.register(Box::new(rollup_duration.clone()))?;
        registry.register(Box::new(partitions_dropped.clone()))?;
        registry.register(Box::new(job_failures.clone()))?;
        registry.register(Box::new(reconcile_runs.clone()))?;
        let mail = IntCounterVec::new(
            Opts::new("gw_admin_mail_total", "Mail delivery attempts by kind and outcome"),
            &["kind", "outcome"],
        )?;
        registry.register(Box::new(mail.clone()))?;
        let webhook_attempts = IntCounterVec::new(
            Opts::new("gw_admin_webhook_attempts_total", "Webhook delivery attempts by outcome"),
            &["outcome"],
        )?;
        registry.register(Box::new(webhook_attempts.clone()))?;
        let webhook_relay = IntCounterVec::new(
            Opts::new("gw_admin_webhook_relay_total", "Webhook relay rounds and what became of events"),
            &["what"],
        )?;
        registry.register(Box::new(webhook_relay.clone()))?;
        let usage_sends = IntCounterVec::new(
            Opts::new("gw_admin_usage_sends_total", "Metered usage sends to the billing provider by outcome"),
            &["outcome"],
        )?;
        registry.register(Box::new(usage_sends.clone()))?;
        Ok(Self {
            registry,
            requests,
            duration,
            hash_busy,
            throttled,
            refresh_reuse,
            rollup_duration,
            partitions_dropped,
            job_failures,
            webhook_attempts,
            webhook_relay,
            reconcile_runs,
            mail,
            usage_sends,
        })
    }
}
