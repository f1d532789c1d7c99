//! The gateway's shared state: what every request reads (routes, cached lookups, the limiter,
//! the response cache, the transport, the audit sink, metrics) and the bounds it runs within.
//! Built once at start-up; the pipeline's steps take it by reference. It knows no step.

use std::sync::Arc;
use std::time::Duration;

use gw_shared::crypto::Keyring;
use gw_shared::routing::Router;

use crate::audit_flusher::AuditSink;
use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::events::Outbox;
use crate::limiter::Limiter;
use crate::logline::RateLimitedLog;
use crate::metrics::Metrics;
use crate::response_cache::ResponseCache;
use crate::sources::Lookups;
use crate::throttle::AuthThrottle;
use crate::traffic_metrics::TrafficMetrics;
use crate::transport::Transport;

/// Bounds on what a client may send.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_header_bytes: usize,
    pub max_header_value_bytes: usize,
}

/// What the policy step may spend on a request's input, in bytes times passes
/// (`gw_shared::policy::engine::scan_work`).
#[derive(Debug, Clone, Copy)]
pub struct ScanBudget {
    /// Up to this much runs on the request's worker.
    pub inline: u64,
    /// Past this the request is refused.
    pub max: u64,
}

pub struct Gateway {
    pub router: Arc<Router>,
    /// Requests in flight (`crate::drain`).
    pub in_flight: crate::drain::InFlight,
    /// The audit journal (`crate::audit_journal`), unless `proxy.audit_journal` is off.
    pub journal: Option<Arc<crate::audit_journal::Journal>>,
    /// The process is stopping or handing its sockets over: answers close their connections.
    pub closing: crate::drain::Closing,
    pub lookups: Arc<Lookups>,
    pub cache: Arc<ResponseCache>,
    pub limiter: Arc<Limiter>,
    pub outbox: Arc<Outbox>,
    /// Completion tokens assumed for a request that sets no limit of its own (rate limits), and
    /// the cap a budget's reservation sends when the catalog knows no maximum output.
    pub default_max_tokens: u64,
    /// `[gateway_quota]`: per plan, what an organization may spend on the gateway's credentials.
    pub gateway_quota: std::collections::BTreeMap<String, gw_shared::limits::settings::ScopeLimits>,
    /// Opens organizations' provider keys; `None` when GW_ENCRYPTION_KEY is not set.
    pub keyring: Option<Keyring>,
    pub throttle: AuthThrottle,
    pub scan_budget: ScanBudget,
    /// Where scans past the inline budget run.
    pub scan_pool: Arc<crate::scan_pool::ScanPool>,
    pub transport: Transport,
    /// Most bytes read from an upstream stream after the client left it (or an output
    /// guardrail stopped it), to learn what the upstream bills (`stream_drain_max_bytes`).
    pub drain_max_bytes: usize,
    pub audit: AuditSink,
    /// The trace exporter, when `[telemetry]` names an endpoint.
    pub tracer: Option<Arc<crate::traces::Tracer>>,
    pub metrics: Arc<Metrics>,
    /// Requests, tokens and spend by model, provider and team (bounded labels).
    pub traffic: Arc<TrafficMetrics>,
    /// Longest body kept in an audit row when the organization logs bodies.
    pub audit_max_body: usize,
    pub limits: Limits,
    pub request_timeout: Duration,
    /// Idle keep-alive limit for client connections, in seconds.
    pub keepalive_idle_secs: u64,
    /// `proxy.trusted_proxies`: whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Unix time the process started: the `created` of every listed model.
    pub started_at: i64,
    /// Per-request warnings (5xx answers, missing usage), at most a line a second.
    pub warn_log: RateLimitedLog,
}

impl Gateway {
    /// A failed request or attempt, in the log: once a second at most, however many fail.
    pub fn log_failure(&self, ctx: &RequestCtx, err: &ProxyError) {
        let detail = match err {
            ProxyError::Upstream { error, .. } => format!(" ({})", error.detail),
            ProxyError::Internal(detail) => format!(" ({detail})"),
            _ => String::new(),
        };
        self.warn_log.warn(|| format!("request {}: {} {err}{detail}", ctx.request_id, err.status()));
    }
}
