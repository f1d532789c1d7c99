//! Prometheus metrics of the proxy, created once at start-up (served by `crate::ops`).

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

pub struct Metrics {
    pub registry: Registry,
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub upstream_duration: HistogramVec,
    pub upstream_attempts: IntCounterVec,
    /// Cached lookups that missed the in-process tier, by where they were answered.
    pub lookups: IntCounterVec,
    /// Queries the request path sent to Postgres, by lookup.
    pub store_queries: IntCounterVec,
    /// Entries served past their freshness because the store was unreachable.
    pub cache_stale_served: IntCounterVec,
    pub auth_throttled: IntCounter,
    pub audit_enqueued: IntCounter,
    pub audit_dropped: IntCounter,
    pub audit_written: IntCounter,
    pub audit_flush_errors: IntCounter,
    pub audit_queue: IntGauge,
    /// Bytes in the audit spool waiting to be replayed.
    pub audit_spool_bytes: IntGauge,
    /// Records written to the spool, and records replayed from it into Postgres.
    pub audit_spilled: IntCounter,
    /// Audit rows the journal could not take (a full or broken disk): queued unprotected.
    pub audit_journal_failures: IntCounter,
    pub audit_replayed: IntCounter,
    /// Time to write one audit batch (a transaction: chain, COPY, heads).
    pub audit_flush_duration: prometheus::Histogram,
    /// 1 while a provider passes its health check.
    pub provider_healthy: IntGaugeVec,
    /// The route catalog version this proxy routes with (0: the configuration file's).
    pub routes_version: IntGauge,
    /// The newest version this proxy knows of, whether or not it could apply it.
    pub routes_latest: IntGauge,
    /// Route catalogs this proxy could not load or build (it kept the last good one).
    pub routes_failures: IntCounter,
    /// Route catalogs applied.
    pub routes_reloads: IntCounter,
    /// Admissions against rate limits and budgets, by where they were decided and the outcome.
    pub limit_decisions: IntCounterVec,
    pub limit_redis_errors: IntCounter,
    pub limit_admit_duration: prometheus::Histogram,
    /// 1 while Redis is unreachable and the replica limits on its own.
    pub limits_degraded: IntGauge,
    pub limits_replicas: IntGauge,
    /// The newest invalidation-log id this replica has applied.
    pub invalidation_applied: IntGauge,
    /// Reads of the invalidation log from Postgres, by why (`gap`, `reconnect`, `silence`), and
    /// whole-cache clears (`cleared`) when the gap was older than the log's retention.
    pub invalidation_catch_ups: IntCounterVec,
    pub events_written: IntCounter,
    pub events_dropped: IntCounter,
    /// Streams read on after the client left or a guardrail stopped them, by how they were
    /// billed (`usage` when their usage arrived, else `estimate`).
    pub stream_drains: IntCounterVec,
    /// Policy decisions by guardrail kind, action and stage (never policy names or values).
    pub policy_decisions: IntCounterVec,
    /// Guardrails that failed internally, by kind.
    pub policy_guardrail_errors: IntCounterVec,
    pub policy_step: prometheus::Histogram,
    /// Input scans past the inline budget: sent to the scan pool, or refused as too large.
    pub policy_scans: IntCounterVec,
    /// Response-cache lookups by result (`L1`, `L2`, `L3`, `miss`, `bypass`).
    pub cache_lookups: IntCounterVec,
    /// Answers written to a tier, by tier and outcome (`ok`, `error`, `dropped`).
    pub cache_stores: IntCounterVec,
    /// Lookups a tier could not answer (error or timeout), by tier.
    pub cache_errors: IntCounterVec,
    /// Time a lookup spent in each tier.
    pub cache_lookup_duration: HistogramVec,
    /// Time to embed one prompt locally.
    pub cache_embedding: prometheus::Histogram,
}

impl Metrics {
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("gw_proxy_requests_total", "Requests answered by the proxy"),
            &["endpoint", "status"],
        )?;
        let buckets = vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
        let request_duration = HistogramVec::new(
            HistogramOpts::new("gw_proxy_request_duration_seconds", "Time to the response header")
                .buckets(buckets.clone()),
            &["endpoint"],
        )?;
        let upstream_duration = HistogramVec::new(
            HistogramOpts::new("gw_proxy_upstream_duration_seconds", "Upstream time to response header")
                .buckets(buckets),
            &["provider"],
        )?;
        let upstream_attempts = IntCounterVec::new(
            Opts::new("gw_proxy_upstream_attempts_total", "Upstream attempts by outcome"),
            &["provider", "outcome"],
        )?;
        let lookups = IntCounterVec::new(
            Opts::new("gw_proxy_lookups_total", "Cached lookups that missed the in-process tier, by outcome"),
            &["lookup", "result"],
        )?;
        let store_queries = IntCounterVec::new(
            Opts::new("gw_proxy_store_queries_total", "Postgres queries made on the request path"),
            &["lookup"],
        )?;
        let cache_stale_served = IntCounterVec::new(
            Opts::new("gw_proxy_cache_stale_served_total", "Entries served stale while Postgres was unreachable"),
            &["lookup"],
        )?;
        let auth_throttled = IntCounter::new(
            "gw_proxy_auth_throttled_total",
            "Requests refused because their address failed authentication too often",
        )?;
        let audit_enqueued = IntCounter::new("gw_audit_enqueued_total", "Audit records queued")?;
        let audit_dropped =
            IntCounter::new("gw_audit_dropped_total", "Audit records dropped because the queue was full")?;
        let audit_written = IntCounter::new("gw_audit_written_total", "Audit records written to Postgres")?;
        let audit_flush_errors = IntCounter::new("gw_audit_flush_errors_total", "Failed audit batch writes")?;
        let audit_queue = IntGauge::new("gw_audit_queue_depth", "Audit records waiting to be written")?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(request_duration.clone()))?;
        registry.register(Box::new(upstream_duration.clone()))?;
        registry.register(Box::new(upstream_attempts.clone()))?;
        let provider_healthy = IntGaugeVec::new(
            Opts::new("gw_proxy_provider_healthy", "1 while the provider passes its health check"),
            &["provider"],
        )?;
        registry.register(Box::new(provider_healthy.clone()))?;
        let routes_version =
            IntGauge::new("gw_proxy_routes_version", "Route catalog version in use (0: the configuration file)")?;
        let routes_latest =
            IntGauge::new("gw_proxy_routes_latest_version", "Newest route catalog version known, applied or not")?;
        let routes_failures = IntCounter::new(
            "gw_proxy_routes_reload_failures_total",
            "Route catalogs that could not be loaded or built (the last good one stays in use)",
        )?;
        let routes_reloads = IntCounter::new("gw_proxy_routes_reloads_total", "Route catalogs applied")?;
        registry.register(Box::new(routes_version.clone()))?;
        registry.register(Box::new(routes_latest.clone()))?;
        registry.register(Box::new(routes_failures.clone()))?;
        registry.register(Box::new(routes_reloads.clone()))?;
        registry.register(Box::new(lookups.clone()))?;
        registry.register(Box::new(store_queries.clone()))?;
        registry.register(Box::new(cache_stale_served.clone()))?;
        registry.register(Box::new(auth_throttled.clone()))?;
        registry.register(Box::new(audit_enqueued.clone()))?;
        registry.register(Box::new(audit_dropped.clone()))?;
        registry.register(Box::new(audit_written.clone()))?;
        registry.register(Box::new(audit_flush_errors.clone()))?;
        registry.register(Box::new(audit_queue.clone()))?;
        let audit_spool_bytes = IntGauge::new("gw_audit_spool_bytes", "Bytes of audit records spooled to disk")?;
        let audit_spilled = IntCounter::new("gw_audit_spilled_total", "Audit records written to the spool")?;
        let audit_replayed = IntCounter::new("gw_audit_replayed_total", "Spooled audit records written to Postgres")?;
        let audit_flush_duration = prometheus::Histogram::with_opts(
            HistogramOpts::new("gw_audit_flush_duration_seconds", "Time to write one audit batch")
                .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]),
        )?;
        registry.register(Box::new(audit_spool_bytes.clone()))?;
        registry.register(Box::new(audit_spilled.clone()))?;
        let audit_journal_failures =
            IntCounter::new("gw_audit_journal_failures_total", "Audit rows the journal could not take")?;
        registry.register(Box::new(audit_journal_failures.clone()))?;
        registry.register(Box::new(audit_replayed.clone()))?;
        registry.register(Box::new(audit_flush_duration.clone()))?;
        let limit_decisions = IntCounterVec::new(
            Opts::new("gw_limits_decisions_total", "Admissions against rate limits and budgets"),
            &["source", "outcome"],
        )?;
        let limit_redis_errors =
            IntCounter::new("gw_limits_redis_errors_total", "Limiter calls to Redis that failed or timed out")?;
        let limit_admit_duration = prometheus::Histogram::with_opts(
            HistogramOpts::new(
                "gw_limits_admit_duration_seconds",
                "Time a request waited for its admission (Redis round trip)",
            )
            .buckets(vec![0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.05, 0.25]),
        )?;
        let limits_degraded =
            IntGauge::new("gw_limits_degraded", "1 while Redis is unreachable and this replica limits on its own")?;
        let limits_replicas = IntGauge::new(
            "gw_limits_replicas",
            "Proxy replicas sharing the limits, by their heartbeats: each one's share while Redis is away",
        )?;
        let events_written = IntCounter::new("gw_events_written_total", "Events written to the outbox")?;
        let events_dropped = IntCounter::new("gw_events_dropped_total", "Events dropped because their queue was full")?;
        registry.register(Box::new(limit_decisions.clone()))?;
        registry.register(Box::new(limit_redis_errors.clone()))?;
        registry.register(Box::new(limit_admit_duration.clone()))?;
        registry.register(Box::new(limits_degraded.clone()))?;
        registry.register(Box::new(limits_replicas.clone()))?;
        let invalidation_applied =
            IntGauge::new("gw_invalidation_applied_id", "The newest invalidation-log id this replica has applied")?;
        let invalidation_catch_ups = IntCounterVec::new(
            Opts::new(
                "gw_invalidation_catch_ups_total",
                "Invalidation-log reads from Postgres by reason (gap, reconnect, silence); cleared: every cache dropped",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(invalidation_applied.clone()))?;
        registry.register(Box::new(invalidation_catch_ups.clone()))?;
        registry.register(Box::new(events_written.clone()))?;
        registry.register(Box::new(events_dropped.clone()))?;
        let stream_drains = IntCounterVec::new(
            Opts::new(
                "gw_stream_drains_total",
                "Upstream streams read to their end for billing, by how they were billed",
            ),
            &["settled_by"],
        )?;
        registry.register(Box::new(stream_drains.clone()))?;
        let policy_decisions = IntCounterVec::new(
            Opts::new("gw_policy_decisions_total", "Policy decisions by guardrail, action and stage"),
            &["guardrail", "action", "stage"],
        )?;
        let policy_guardrail_errors = IntCounterVec::new(
            Opts::new("gw_policy_guardrail_errors_total", "Guardrails that failed internally"),
            &["guardrail"],
        )?;
        let policy_step = prometheus::Histogram::with_opts(
            HistogramOpts::new("gw_policy_step_duration_seconds", "Time the policy step took on a request's input")
                .buckets(vec![0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.05]),
        )?;
        registry.register(Box::new(policy_decisions.clone()))?;
        registry.register(Box::new(policy_guardrail_errors.clone()))?;
        registry.register(Box::new(policy_step.clone()))?;
        let policy_scans = IntCounterVec::new(
            Opts::new(
                "gw_policy_scans_total",
                "Input scans past the inline budget, by where they went (pool, refused)",
            ),
            &["outcome"],
        )?;
        registry.register(Box::new(policy_scans.clone()))?;
        let cache_lookups =
            IntCounterVec::new(Opts::new("gw_cache_lookups_total", "Response-cache lookups by result"), &["result"])?;
        let cache_stores = IntCounterVec::new(
            Opts::new("gw_cache_stores_total", "Answers written to a cache tier, by outcome"),
            &["tier", "outcome"],
        )?;
        let cache_errors = IntCounterVec::new(
            Opts::new("gw_cache_errors_total", "Cache lookups a tier could not answer (error or timeout)"),
            &["tier"],
        )?;
        let cache_lookup_duration = HistogramVec::new(
            HistogramOpts::new("gw_cache_lookup_duration_seconds", "Time a cache lookup spent in each tier").buckets(
                vec![
                    0.000005, 0.00001, 0.000025, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25,
                ],
            ),
            &["tier"],
        )?;
        let cache_embedding = prometheus::Histogram::with_opts(
            HistogramOpts::new("gw_cache_embedding_duration_seconds", "Time to embed one prompt locally")
                .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0]),
        )?;
        registry.register(Box::new(cache_lookups.clone()))?;
        registry.register(Box::new(cache_stores.clone()))?;
        registry.register(Box::new(cache_errors.clone()))?;
        registry.register(Box::new(cache_lookup_duration.clone()))?;
        registry.register(Box::new(cache_embedding.clone()))?;
        Ok(Self {
            cache_lookups,
            cache_stores,
            cache_errors,
            cache_lookup_duration,
            cache_embedding,
            registry,
            policy_decisions,
            policy_guardrail_errors,
            policy_step,
            policy_scans,
            requests,
            request_duration,
            upstream_duration,
            upstream_attempts,
            provider_healthy,
            routes_version,
            routes_latest,
            routes_failures,
            routes_reloads,
            lookups,
            store_queries,
            cache_stale_served,
            auth_throttled,
            audit_enqueued,
            audit_dropped,
            audit_written,
            audit_flush_errors,
            audit_queue,
            audit_spool_bytes,
            audit_spilled,
            audit_journal_failures,
            audit_replayed,
            audit_flush_duration,
            limit_decisions,
            limit_redis_errors,
            limit_admit_duration,
            limits_degraded,
            limits_replicas,
            invalidation_applied,
            invalidation_catch_ups,
            events_written,
            events_dropped,
            stream_drains,
        })
    }
}

impl Metrics {
    /// The registry in the Prometheus text format: status, body and content type.
    pub fn render(&self) -> (u16, Vec<u8>, String) {
        let encoder = TextEncoder::new();
        let mut buf = Vec::new();
        match encoder.encode(&self.registry.gather(), &mut buf) {
            Ok(()) => (200, buf, encoder.format_type().to_string()),
            Err(e) => (500, format!("metrics encoding failed: {e}\n").into_bytes(), "text/plain".into()),
        }
    }
}
