//! The Pingora `ProxyHttp` implementation. gw answers every request itself in `request_filter`
//! by running the pipeline (the upstream exchange happens there, through the pooled connector);
//! `logging` hands the audit row, derived from the context, to the flusher.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gw_shared::routing::Router;
use pingora::proxy::{ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};

use crate::audit_flusher::AuditSink;
use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::limiter::Limiter;
use crate::logline::RateLimitedLog;
use crate::lookup::Lookup;
use crate::metrics::Metrics;
use crate::pipeline::auth::KeySource;
use crate::pipeline::limits::OrgSource;
use crate::pipeline::provider_keys::ProviderKeySource;
use crate::pipeline::team::TeamSource;
use crate::pipeline::{self, respond};
use crate::throttle::AuthThrottle;
use crate::traffic_metrics::{status_class, TrafficMetrics};
use crate::transport::Transport;
use gw_shared::crypto::Keyring;

/// Bounds on what a client may send.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_header_bytes: usize,
    pub max_header_value_bytes: usize,
}

pub struct Gateway {
    pub router: Router,
    pub keys: Arc<Lookup<KeySource>>,
    pub teams: Arc<Lookup<TeamSource>>,
    pub provider_keys: Arc<Lookup<ProviderKeySource>>,
    pub orgs: Arc<Lookup<OrgSource>>,
    pub policies: Arc<Lookup<crate::pipeline::policy::PolicySource>>,
    pub compiled: crate::pipeline::policy::Compiled,
    pub cache_settings: Arc<Lookup<crate::pipeline::cache::CacheSettingsSource>>,
    pub cache: Arc<crate::response_cache::ResponseCache>,
    pub limiter: Arc<Limiter>,
    /// Completion tokens assumed for a request that sets no limit of its own.
    pub default_max_tokens: u64,
    /// Opens organizations' provider keys; `None` when GW_ENCRYPTION_KEY is not set.
    pub keyring: Option<Keyring>,
    pub throttle: AuthThrottle,
    pub transport: Transport,
    pub audit: AuditSink,
    pub metrics: Arc<Metrics>,
    /// Requests, tokens and spend by model, provider and team (bounded labels).
    pub traffic: TrafficMetrics,
    /// Longest body kept in an audit row when the organization logs bodies.
    pub audit_max_body: usize,
    pub limits: Limits,
    pub request_timeout: Duration,
    /// Idle keep-alive limit for client connections, in seconds.
    pub keepalive_idle_secs: u64,
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

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::new(self.request_timeout)
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> pingora::Result<bool> {
        // Pingora keeps an idle HTTP/1.1 connection open forever (`Some(0)`); bound it instead.
        if session.get_keepalive() == Some(0) {
            session.set_keepalive(Some(self.keepalive_idle_secs));
        }
        ctx.client_ip = session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip());
        ctx.user_agent = session
            .req_header()
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(pipeline::audit::audit_text);
        let Err(err) = pipeline::run(self, session, ctx).await else { return Ok(true) };
        ctx.error = Some(err.label());
        if let ProxyError::ClientGone(why) = err {
            ctx.status = 499;
            log::debug!("request {}: client gone: {why}", ctx.request_id);
            return Ok(true);
        }
        if err.status() >= 500 {
            self.log_failure(ctx, &err);
        }
        if let Err(e) = respond::error(session, ctx, &err).await {
            ctx.status = 499;
            log::debug!("request {}: could not send the error: {e}", ctx.request_id);
        }
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut RequestCtx) -> pingora::Result<Box<HttpPeer>> {
        // Never reached: request_filter answers every request.
        Err(Error::explain(ErrorType::InternalError, "gw answers every request in request_filter"))
    }

    async fn logging(&self, _session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        let endpoint = ctx.endpoint.map(|e| e.path()).unwrap_or("unknown");
        let status = ctx.status.to_string();
        self.metrics.requests.with_label_values(&[endpoint, &status]).inc();
        self.metrics.request_duration.with_label_values(&[endpoint]).observe(ctx.started.elapsed().as_secs_f64());
        self.count_traffic(ctx, endpoint);
        pipeline::limits::settle(self, ctx);
        if let Some(entry) = pipeline::audit::record(ctx, self.audit_max_body) {
            self.audit.record(entry);
        }
    }
}

impl Gateway {
    /// The per-model, per-team series of one finished request.
    fn count_traffic(&self, ctx: &RequestCtx, endpoint: &str) {
        let t = &self.traffic;
        let status = status_class(ctx.status);
        let model = t.model(ctx.model.as_deref());
        let provider = match &ctx.cached_from {
            Some((p, _)) => Some(&**p),
            None => ctx.last_attempt().filter(|_| !ctx.answered_by_gw).map(|a| &*a.provider),
        };
        t.by_model.with_label_values(&[model, t.provider(provider), status]).inc();
        let team = t.team(ctx.team_id);
        t.by_team.with_label_values(&[&team, status]).inc();
        let u = &ctx.usage;
        for (kind, n) in [
            ("prompt", u.prompt_tokens),
            ("completion", u.completion_tokens),
            ("cached", u.cached_tokens),
            ("reasoning", u.reasoning_tokens),
        ] {
            if n > 0 {
                t.tokens.with_label_values(&[model, kind]).inc_by(u64::from(n));
            }
        }
        if let Ok(cost) = f64::try_from(ctx.cost) {
            if cost > 0.0 {
                t.cost.with_label_values(&[model]).inc_by(cost);
                t.team_cost.with_label_values(&[&team]).inc_by(cost);
            }
        }
        if let Some(overhead) = ctx.overhead() {
            t.overhead.observe(overhead.as_secs_f64());
        }
        if let Some(ttft) = ctx.ttft {
            t.ttft.with_label_values(&[endpoint]).observe(ttft.as_secs_f64());
        }
    }
}
