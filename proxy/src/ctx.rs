//! The per-request context: the single record of a request, filled step by step by the
//! pipeline. The `x-gw-*` headers (`pipeline::respond`) and the audit row (`pipeline::audit`)
//! are both derived from it, never from values computed on the side.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use gw_shared::cache::CacheStatus;
use gw_shared::db::api_keys::KeyAuth;
use gw_shared::limits::estimate::Estimate;
use gw_shared::limits::LimitState;
use gw_shared::openai::{ChatRequest, EmbeddingsRequest};
use gw_shared::policy::engine::OutputGuard;
use gw_shared::policy::PolicyDecision;
use gw_shared::pricing::TokenUsage;
use gw_shared::routing::ModelRoute;
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::limiter::Admitted;
use crate::pipeline::team::LiveTeam;

/// The `/v1` endpoints gw serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Models,
    ChatCompletions,
    Embeddings,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Models => "/v1/models",
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Embeddings => "/v1/embeddings",
        }
    }
}

/// How one upstream attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// This attempt answered the client.
    Answered,
    /// Failed before anything reached the client; the next deployment may be tried.
    Retryable(&'static str),
    /// Failed for good (the client's request was at fault, or the response had started).
    Failed(&'static str),
}

impl AttemptOutcome {
    /// Metric label: an attempt whose stream broke counts as a failure, not a success.
    pub fn label(self) -> &'static str {
        match self {
            AttemptOutcome::Answered => "ok",
            AttemptOutcome::Retryable(_) => "retryable_error",
            // The client left: not the upstream's failure.
            AttemptOutcome::Failed("client_disconnected") => "client_gone",
            AttemptOutcome::Failed(_) => "error",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub provider: Arc<str>,
    pub upstream_model: Arc<str>,
    pub outcome: AttemptOutcome,
    /// The upstream's status, when one arrived.
    pub status: Option<u16>,
    /// Time to the upstream's response header.
    pub latency: Option<Duration>,
    /// Time the attempt took when it failed before a header (connect errors, timeouts).
    pub spent: Option<Duration>,
    pub region: Option<Arc<str>>,
    /// Whose credential the attempt used: the organization's own provider key or gw's.
    pub org_key: bool,
}

pub struct RequestCtx {
    pub request_id: Uuid,
    pub started: Instant,
    pub created_at: DateTime<Utc>,
    /// The request fails with 504 rather than run past this.
    pub deadline: Instant,
    pub endpoint: Option<Endpoint>,
    pub client_ip: Option<IpAddr>,
    pub key: Option<Arc<KeyAuth>>,
    pub team_id: Option<Uuid>,
    /// The team's model allow-list (`None`: every model).
    pub team_models: Option<Arc<[String]>>,
    /// The team's record (its budget and rate limits).
    pub team: Option<Arc<LiveTeam>>,
    /// The model and its fallbacks the caller may use, resolved once.
    pub routes: Option<Vec<Arc<ModelRoute>>>,
    /// The request's admission against limits and budgets, until it settles.
    pub admitted: Option<Admitted>,
    /// The model the client asked for (kept even when the body fails validation later).
    pub model: Option<String>,
    pub request: Option<ChatRequest>,
    pub embeddings: Option<EmbeddingsRequest>,
    pub stream: bool,
    pub limits: Option<LimitState>,
    /// The request's size as the limits step estimated it (when any limit applied).
    pub estimate: Option<Estimate>,
    pub policy: Vec<PolicyDecision>,
    /// What the request's policies do to the answer (cloned per attempt); `None`: nothing.
    pub output_guard: Option<OutputGuard>,
    pub cache: CacheStatus,
    /// What the cache step decided for this request (key, tiers, TTL), when it took part.
    pub cache_plan: Option<crate::response_cache::Plan>,
    /// On a hit: what the cached answer cost when produced, its similarity (L3), and who
    /// produced it (the provider and model the headers name).
    pub cache_saved: Decimal,
    pub cache_similarity: Option<f32>,
    pub cached_from: Option<(Arc<str>, Arc<str>)>,
    pub attempts: Vec<Attempt>,
    pub usage: TokenUsage,
    pub cost: Decimal,
    /// Status of the response the client got (499 when it left first).
    pub status: u16,
    pub error: Option<&'static str>,
    pub ttft: Option<Duration>,
    /// Whether the downstream response header has been written.
    pub header_sent: bool,
    /// The header named a provider of its own (`/v1/models` answers as `gw`).
    pub answered_by_gw: bool,
    /// When the downstream response header was written.
    pub header_at: Option<Instant>,
    /// The caller's `User-Agent` (bounded), kept once in the audit log's dictionary.
    pub user_agent: Option<String>,
    /// The organization keeps bodies in its audit rows.
    pub log_bodies: bool,
    /// The answer as sent, when bodies are logged (bounded).
    pub response_body: Option<String>,
}

impl RequestCtx {
    pub fn new(request_timeout: Duration) -> Self {
        let started = Instant::now();
        Self {
            request_id: gw_shared::ids::new_id(),
            started,
            created_at: Utc::now(),
            deadline: started + request_timeout,
            endpoint: None,
            client_ip: None,
            key: None,
            team_id: None,
            team_models: None,
            team: None,
            routes: None,
            admitted: None,
            model: None,
            request: None,
            embeddings: None,
            stream: false,
            limits: None,
            estimate: None,
            policy: Vec::new(),
            output_guard: None,
            cache: CacheStatus::Bypass,
            cache_plan: None,
            cache_saved: Decimal::ZERO,
            cache_similarity: None,
            cached_from: None,
            attempts: Vec::new(),
            usage: TokenUsage::default(),
            cost: Decimal::ZERO,
            status: 0,
            error: None,
            ttft: None,
            header_sent: false,
            answered_by_gw: false,
            header_at: None,
            user_agent: None,
            log_bodies: false,
            response_body: None,
        }
    }

    /// The attempt that answered, or the last one tried.
    pub fn last_attempt(&self) -> Option<&Attempt> {
        self.attempts.last()
    }

    /// The strongest policy decision, which the `x-gw-policy-*` headers report.
    pub fn policy_verdict(&self) -> Option<&PolicyDecision> {
        self.policy.iter().max_by_key(|d| d.action)
    }

    /// The gateway's own share of the time to the response header: everything but the
    /// upstream attempts' time to their headers.
    pub fn overhead(&self) -> Option<Duration> {
        let to_header = self.header_at?.saturating_duration_since(self.started);
        let upstream: Duration = self.attempts.iter().filter_map(|a| a.latency.or(a.spent)).sum();
        Some(to_header.saturating_sub(upstream))
    }

    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use gw_shared::policy::{PolicyAction, Stage};

    #[test]
    fn strongest_policy_decision_wins() {
        let mut ctx = RequestCtx::new(Duration::from_secs(1));
        assert!(ctx.policy_verdict().is_none());
        for action in [PolicyAction::Redacted, PolicyAction::Blocked, PolicyAction::Flagged] {
            ctx.policy.push(PolicyDecision {
                policy: "p".into(),
                guardrail: "g",
                action,
                stage: Stage::Input,
                reason: action.label().into(),
                entities: vec![],
            });
        }
        assert_eq!(ctx.policy_verdict().map(|d| d.action), Some(PolicyAction::Blocked));
    }

    #[test]
    fn labels() {
        assert_eq!(CacheStatus::default().label(), "bypass");
        assert_eq!(AttemptOutcome::Failed("upstream_stream_broken").label(), "error");
        assert_eq!(Endpoint::ChatCompletions.path(), "/v1/chat/completions");
    }
}
