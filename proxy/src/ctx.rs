//! The per-request context: the single record of a request, filled step by step by the
//! pipeline. The `x-gw-*` headers (`pipeline::respond`) and the audit row (`pipeline::audit`)
//! are both derived from it, never from values computed on the side.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use gw_shared::cache::CacheStatus;
use gw_shared::db::api_keys::KeyAuth;
use gw_shared::db::teams::LiveTeam;
use gw_shared::limits::estimate::Estimate;
use gw_shared::limits::LimitState;
use gw_shared::openai::{ChatRequest, EmbeddingsRequest};
use gw_shared::policy::engine::{CompiledPolicy, OutputGuard};
use gw_shared::policy::PolicyDecision;
use gw_shared::pricing::TokenUsage;
use gw_shared::routing::ModelRoute;
use pingora_timeout::fast_timeout::fast_timeout;
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::error::ProxyError;
use crate::limiter::Admitted;

/// The `/v1` endpoints gw serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Models,
    ChatCompletions,
    Embeddings,
    /// Anthropic's Messages API: run as a chat request, answered in the Messages shapes.
    Messages,
    MessagesCountTokens,
    /// OpenAI's Responses API (stateless): run as a chat request, answered as a `response`.
    Responses,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Models => "/v1/models",
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Embeddings => "/v1/embeddings",
            Endpoint::Messages => "/v1/messages",
            Endpoint::MessagesCountTokens => "/v1/messages/count_tokens",
            Endpoint::Responses => "/v1/responses",
        }
    }

    /// Whether answers and errors take the Messages API's shapes.
    pub fn is_messages(self) -> bool {
        matches!(self, Endpoint::Messages | Endpoint::MessagesCountTokens)
    }

    /// What an adapter is asked to serve for this endpoint (`/v1/models` asks no adapter).
    pub fn provider_endpoint(self) -> gw_shared::providers::Endpoint {
        match self {
            Endpoint::Embeddings => gw_shared::providers::Endpoint::Embeddings,
            Endpoint::ChatCompletions
            | Endpoint::Models
            | Endpoint::Messages
            | Endpoint::MessagesCountTokens
            | Endpoint::Responses => gw_shared::providers::Endpoint::ChatCompletions,
        }
    }

    /// The `/v1` endpoint that serves what adapters call `e`.
    pub fn serving(e: gw_shared::providers::Endpoint) -> Self {
        match e {
            gw_shared::providers::Endpoint::ChatCompletions => Endpoint::ChatCompletions,
            gw_shared::providers::Endpoint::Embeddings => Endpoint::Embeddings,
        }
    }
}

/// How a request's tokens and cost were settled, once an upstream was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SettledBy {
    /// The upstream's own usage report.
    Usage,
    /// gw's estimate: the upstream's report never came (a stream the client left or that
    /// broke, an answer without usage).
    Estimate,
}

impl SettledBy {
    pub fn label(self) -> &'static str {
        match self {
            SettledBy::Usage => "usage",
            SettledBy::Estimate => "estimate",
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
    /// The provider's kind as the GenAI semantic conventions name it (`traces::spans::system_of`).
    pub system: &'static str,
    /// The attempt's span (its id goes upstream in `traceparent`).
    pub span_id: opentelemetry::trace::SpanId,
    pub began: Instant,
    /// When the attempt's exchange ended (its answer's last byte, or its failure).
    pub ended: Option<Instant>,
}

pub struct RequestCtx {
    pub request_id: Uuid,
    pub started: Instant,
    pub created_at: DateTime<Utc>,
    /// The request fails with 504 rather than run past this.
    pub deadline: Instant,
    /// The request's whole time bound (what a 504 names).
    pub timeout: Duration,
    pub endpoint: Option<Endpoint>,
    pub client_ip: Option<IpAddr>,
    pub key: Option<Arc<KeyAuth>>,
    pub team_id: Option<Uuid>,
    /// The team's record (its model allow-list, budget, rate limits and default policies).
    pub team: Option<Arc<LiveTeam>>,
    /// The model and its fallbacks the caller may use, in order (the resolve step's).
    pub routes: Vec<Arc<ModelRoute>>,
    /// The policies that apply to the request, in order (the resolve step's).
    pub applied: Vec<Arc<CompiledPolicy>>,
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
    /// What the upstreams bill for this request (every billed attempt), and its cost.
    pub usage: TokenUsage,
    pub cost: Decimal,
    /// How `usage` was learnt; `None` while no upstream was reached.
    pub settled_by: Option<SettledBy>,
    /// Status of the response the client got (499 when it left first).
    pub status: u16,
    pub error: Option<&'static str>,
    pub ttft: Option<Duration>,
    /// Whether the downstream response header has been written.
    pub header_sent: bool,
    /// Whether the response is complete (its end was written): nothing more goes out.
    pub body_done: bool,
    /// The header named a provider of its own (`/v1/models` answers as `gw`).
    pub answered_by_gw: bool,
    /// When the downstream response header was written.
    pub header_at: Option<Instant>,
    /// The caller's `User-Agent` (bounded), kept once in the audit log's dictionary.
    pub user_agent: Option<String>,
    /// The organization keeps bodies in its audit rows.
    /// The organization's data-residency region: deployments of another region are skipped.
    pub region: Option<Arc<str>>,
    pub log_bodies: bool,
    /// The answer as sent, when bodies are logged (bounded).
    pub response_body: Option<String>,
    /// The request body as the audit row keeps it, taken before the route step (which holds the
    /// request outside the context while it runs).
    pub logged_request: Option<String>,
    /// The prompt template and version the request rendered (the template step's).
    pub template: Option<(Uuid, i32)>,
    /// The experiment the request takes part in and its variant (the experiment step's).
    pub experiment: Option<(Uuid, Arc<str>)>,
    /// Counts the request as in flight until the context is dropped (a stopping process waits
    /// for these).
    pub in_flight: Option<crate::drain::Guard>,
    /// The process's audit journal, when on: the answer step writes the row there before the
    /// answer's last bytes (`pipeline::answer::write`).
    pub journal: Option<Arc<crate::audit_journal::Journal>>,
    /// The journaled row's hold on its journal file, handed to the audit queue with the row.
    pub journaled: Option<crate::audit_journal::Ticket>,
    /// The audit row as journaled at a complete answer's end: the logging step queues it (its
    /// timings brought up to date) instead of building it again, unless the request's outcome
    /// changed since (the last write failed).
    pub answered_row: Option<gw_shared::audit::AuditEntry>,
    /// A streamed Messages answer's re-framing of the pipeline's chunks.
    pub messages_events: Option<Box<gw_shared::messages::EventEncoder>>,
    /// What a Responses API answer repeats of its request.
    pub responses_echo: Option<Box<gw_shared::responses::Echo>>,
    /// A streamed Responses answer's re-framing of the pipeline's chunks.
    pub responses_events: Option<Box<gw_shared::responses::EventEncoder>>,
    /// The request's trace (W3C Trace Context), when the client sent one or gw exports spans.
    pub trace: Option<Box<crate::traces::TraceCtx>>,
    /// A Messages request as the client sent it, for an Anthropic deployment to get unchanged.
    pub messages_raw: Option<Box<MessagesRaw>>,
    /// A Responses request as the client sent it, for an OpenAI deployment serving the Responses
    /// API to get (docs/responses.md).
    pub responses_raw: Option<Box<ResponsesRaw>>,
    /// The attempt under way passes the client's body (Messages to an Anthropic deployment,
    /// Responses to one serving that API) and the deployment's answer back as they are
    /// (`pipeline::route`, docs/messages.md, docs/responses.md).
    pub passthrough: bool,
}

/// What a Responses request passes through to an OpenAI deployment serving that API.
#[derive(Debug)]
pub struct ResponsesRaw {
    pub body: bytes::Bytes,
    /// The model the body names.
    pub model: String,
    /// The body says `store` (`false`: `true` is refused); else gw adds it.
    pub store_sent: bool,
    /// It offers a hosted tool (left out of what is passed on).
    pub hosted_tools: bool,
}

/// What a Messages request passes through to an Anthropic deployment.
#[derive(Debug)]
pub struct MessagesRaw {
    pub body: bytes::Bytes,
    /// The model the body names.
    pub model: String,
    /// The client's `anthropic-beta` header (the features its body may use).
    pub beta: Option<http::HeaderValue>,
}

impl RequestCtx {
    pub fn new(request_timeout: Duration) -> Self {
        let started = Instant::now();
        Self {
            request_id: gw_shared::ids::new_id(),
            started,
            created_at: gw_shared::clock::now(),
            deadline: started + request_timeout,
            timeout: request_timeout,
            endpoint: None,
            client_ip: None,
            key: None,
            team_id: None,
            team: None,
            routes: Vec::new(),
            applied: Vec::new(),
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
            settled_by: None,
            status: 0,
            error: None,
            ttft: None,
            header_sent: false,
            body_done: false,
            answered_by_gw: false,
            header_at: None,
            user_agent: None,
            region: None,
            log_bodies: false,
            response_body: None,
            logged_request: None,
            template: None,
            experiment: None,
            in_flight: None,
            journal: None,
            journaled: None,
            answered_row: None,
            messages_events: None,
            responses_echo: None,
            responses_events: None,
            trace: None,
            messages_raw: None,
            responses_raw: None,
            passthrough: false,
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

    /// The team's model allow-list (`None`: every model).
    pub fn team_models(&self) -> Option<&[String]> {
        self.team.as_ref().and_then(|t| t.allowed_models.as_deref())
    }

    /// The 504 of a request that ran out of time.
    pub fn deadline_exceeded(&self) -> ProxyError {
        ProxyError::DeadlineExceeded(self.timeout.as_millis() as u64)
    }

    /// Runs `fut` within what is left of the request's deadline: each read has its own timeout,
    /// but a peer that trickles bytes must not stretch the whole past the deadline. Pingora's
    /// shared 10 ms timer wheel, not tokio's: arming a tokio timer from a busy worker wakes its
    /// driver (an eventfd write) on every request.
    pub async fn within_deadline<T>(&self, fut: impl std::future::Future<Output = T>) -> Result<T, ProxyError> {
        fast_timeout(self.remaining(), fut).await.map_err(|_| self.deadline_exceeded())
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
