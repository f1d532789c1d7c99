//! The route step: the model (or alias) resolves to a route; the caller's allow-lists must admit
//! it. Its deployments are tried in the order its strategy gives, each claimed through its circuit
//! breaker and caps, for `retries` extra rounds with backoff, then the fallback models' in turn,
//! all within the request's deadline. Each attempt asks the provider's adapter for the request,
//! makes the exchange through the transport (or takes the in-process answer), and hands the
//! answer back to the adapter. A failure before anything reached the client moves on when the
//! error says it may.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gw_shared::db::provider_keys::OrgProviderKeys;
use gw_shared::openai::{ChatRequest, EmbeddingsRequest};
use gw_shared::pricing::{cost_usd, TokenUsage};
use gw_shared::providers::{AdapterError, Call, Endpoint, Exchange, StreamSetup, UpstreamError};
use gw_shared::routing::{AttemptVerdict, Deployment, ModelRoute};
use pingora::proxy::Session;

use super::{access, provider_keys, relay, respond};
use crate::ctx::{Attempt, AttemptOutcome, RequestCtx};
use crate::error::ProxyError;
use crate::gateway::Gateway;
use crate::transport::{AttemptTimeouts, Transport};

/// How long gw waits for the rest of a finished stream (the chunked terminator) so the
/// connection can go back to the pool.
const DRAIN: Duration = Duration::from_millis(500);

/// Most models tried for one request (the model and its fallbacks).
const MAX_MODELS: usize = 8;

/// The parsed request, whichever endpoint it came to.
#[derive(Clone, Copy)]
enum Req<'a> {
    Chat(&'a ChatRequest),
    Embeddings(&'a EmbeddingsRequest),
}

impl Req<'_> {
    fn model(&self) -> &str {
        match self {
            Req::Chat(r) => &r.model,
            Req::Embeddings(r) => &r.model,
        }
    }

    fn stream(&self) -> bool {
        matches!(self, Req::Chat(r) if r.stream)
    }

    /// A rough prompt size for the lowest-cost strategy (4 bytes a token).
    fn prompt_hint(&self) -> u32 {
        let bytes: usize = match self {
            Req::Chat(r) => r.messages().iter().map(|m| m.to_string().len()).sum(),
            Req::Embeddings(r) => r.texts().map_or(0, |t| t.iter().map(String::len).sum()),
        };
        u32::try_from(bytes / 4).unwrap_or(u32::MAX)
    }
}

fn path_of(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::ChatCompletions => "/v1/chat/completions",
        Endpoint::Embeddings => "/v1/embeddings",
    }
}

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    if let Some(req) = ctx.request.take() {
        let result = try_routes(gw, session, ctx, Req::Chat(&req)).await;
        ctx.request = Some(req);
        return result;
    }
    if let Some(req) = ctx.embeddings.take() {
        let result = try_routes(gw, session, ctx, Req::Embeddings(&req)).await;
        ctx.embeddings = Some(req);
        return result;
    }
    Err(ProxyError::Internal("route step without a parsed request".into()))
}

/// The model and its fallbacks the caller may use, in order, each once.
pub fn chain(gw: &Gateway, ctx: &RequestCtx) -> Result<Vec<Arc<ModelRoute>>, ProxyError> {
    let model = ctx.model.as_deref().unwrap_or_default();
    let endpoint = match ctx.endpoint {
        Some(crate::ctx::Endpoint::Embeddings) => Endpoint::Embeddings,
        _ => Endpoint::ChatCompletions,
    };
    let key_models = ctx.key.as_ref().and_then(|k| k.allowed_models.as_deref());
    let team_models = ctx.team_models.as_deref();
    let route = gw
        .router
        .resolve(model)
        .filter(|r| access::allowed(key_models, team_models, r))
        .ok_or_else(|| ProxyError::UnknownModel(model.to_string()))?;
    if route.endpoint() != endpoint {
        return Err(ProxyError::WrongEndpoint {
            model: model.to_string(),
            path: path_of(endpoint),
            serves: path_of(route.endpoint()),
        });
    }
    let mut out = vec![route];
    let mut i = 0;
    while i < out.len() && out.len() < MAX_MODELS {
        let fallbacks = out[i].fallbacks.clone();
        for f in fallbacks {
            if out.len() >= MAX_MODELS {
                break;
            }
            let Some(r) = gw.router.resolve(&f) else { continue };
            if access::allowed(key_models, team_models, &r) && !out.iter().any(|o| o.name == r.name) {
                out.push(r);
            }
        }
        i += 1;
    }
    Ok(out)
}

async fn try_routes(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx, req: Req<'_>) -> Result<(), ProxyError> {
    let models = match ctx.routes.take() {
        Some(routes) => routes,
        None => chain(gw, ctx)?,
    };
    let org_keys = provider_keys::for_request(gw, ctx).await?;
    // Only the lowest-cost strategy looks at the prompt's size.
    let wants_hint = models.iter().any(|m| m.strategy == gw_shared::config::Strategy::LowestCost);
    let hint = if wants_hint { req.prompt_hint() } else { 0 };
    let mut last: Option<ProxyError> = None;
    for route in &models {
        for round in 0..=route.retries {
            if round > 0 {
                backoff(gw, ctx, route.retry_backoff, round).await?;
            }
            for dep in gw.router.plan(route, hint) {
                if ctx.remaining().is_zero() {
                    return Err(ProxyError::DeadlineExceeded(gw.request_timeout.as_millis() as u64));
                }
                let Some(_gate) = gw.router.take(&dep) else { continue };
                match try_one(gw, session, ctx, req, &dep, &org_keys).await {
                    Ok(()) => return Ok(()),
                    Err(e) if e.retryable() && !ctx.header_sent => {
                        gw.log_failure(ctx, &e);
                        last = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Err(last.unwrap_or_else(|| ProxyError::NoDeployment(req.model().to_string())))
}

/// Sleeps before another round: exponential from `base`, with jitter, never past the deadline.
async fn backoff(gw: &Gateway, ctx: &RequestCtx, base: Duration, round: u32) -> Result<(), ProxyError> {
    let factor = 2u32.saturating_pow(round.saturating_sub(1).min(10));
    let jitter = 0.5 + rand::random::<f64>();
    let wait = base.saturating_mul(factor).mul_f64(jitter);
    if wait >= ctx.remaining() {
        return Err(ProxyError::DeadlineExceeded(gw.request_timeout.as_millis() as u64));
    }
    tokio::time::sleep(wait).await;
    Ok(())
}

/// One attempt on one deployment, with its bookkeeping: the attempt record, the in-flight count,
/// the circuit breaker's verdict and the metrics.
async fn try_one(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    req: Req<'_>,
    dep: &Arc<Deployment>,
    org_keys: &OrgProviderKeys,
) -> Result<(), ProxyError> {
    let org_id = ctx.key.as_ref().map(|k| k.org_id).unwrap_or_default();
    let own = match provider_keys::secret_for(gw, org_keys, org_id, &dep.provider.name) {
        Ok(s) => s,
        Err(e) => {
            gw.router.record(dep, AttemptVerdict::NoVerdict);
            return Err(e);
        }
    };
    ctx.attempts.push(Attempt {
        provider: dep.provider.name.clone(),
        upstream_model: dep.upstream_model.clone(),
        outcome: AttemptOutcome::Answered,
        status: None,
        latency: None,
        spent: None,
        region: dep.region.clone(),
        org_key: own.is_some(),
    });
    let api_key = own.as_deref().or(dep.configured_key());
    let began = std::time::Instant::now();
    let result = {
        let _inflight = dep.state.begin();
        attempt(gw, session, ctx, req, dep, api_key).await
    };
    if let Some(a) = ctx.attempts.last_mut().filter(|a| a.latency.is_none()) {
        a.spent = Some(began.elapsed());
    }
    let outcome = match &result {
        Ok(()) => AttemptOutcome::Answered,
        Err(e) if e.retryable() && !ctx.header_sent => AttemptOutcome::Retryable(e.label()),
        Err(e) => AttemptOutcome::Failed(e.label()),
    };
    let header_latency = ctx.attempts.last().and_then(|a| a.latency);
    if let Some(a) = ctx.attempts.last_mut() {
        a.outcome = outcome;
    }
    gw.router.record(dep, verdict(&result, header_latency));
    gw.metrics.upstream_attempts.with_label_values(&[&dep.provider.name, outcome.label()]).inc();
    if let AttemptOutcome::Retryable(kind) | AttemptOutcome::Failed(kind) = outcome {
        gw.traffic.upstream_errors.with_label_values(&[&dep.provider.name, kind]).inc();
    }
    result
}

/// What an attempt says about its deployment's health.
fn verdict(result: &Result<(), ProxyError>, header_latency: Option<Duration>) -> AttemptVerdict {
    match result {
        Ok(()) => AttemptVerdict::Success { header_latency: header_latency.unwrap_or_default() },
        // The client's own doing, or a request this provider cannot express: nothing learned.
        Err(ProxyError::ClientGone(_) | ProxyError::Unsupported(_) | ProxyError::DeadlineExceeded(_)) => {
            AttemptVerdict::NoVerdict
        }
        Err(ProxyError::Upstream { error, .. })
            if matches!(error.failure, gw_shared::providers::UpstreamFailure::Rejected { .. }) =>
        {
            AttemptVerdict::NoVerdict
        }
        // The answer's content, not the deployment's health.
        Err(ProxyError::Internal(_) | ProxyError::PolicyBlocked { .. } | ProxyError::GuardrailFailed { .. }) => {
            AttemptVerdict::NoVerdict
        }
        Err(_) => AttemptVerdict::Failure,
    }
}

/// The exchange of one attempt, bounded by the deployment's own timeouts and the deadline.
async fn attempt(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    req: Req<'_>,
    dep: &Deployment,
    api_key: Option<&str>,
) -> Result<(), ProxyError> {
    let provider = &dep.provider;
    let base_path = provider.upstream.as_ref().map_or("", |u| u.base_path.as_str());
    let created = ctx.created_at.timestamp();
    let exchange = match req {
        Req::Chat(r) => provider.adapter.build(&Call {
            endpoint: Endpoint::ChatCompletions,
            request: r,
            upstream_model: &dep.upstream_model,
            api_key,
            base_path,
            options: &provider.options,
            request_id: ctx.request_id,
            created,
        }),
        Req::Embeddings(r) => provider.adapter.build_embeddings(&Call {
            endpoint: Endpoint::Embeddings,
            request: r,
            upstream_model: &dep.upstream_model,
            api_key,
            base_path,
            options: &provider.options,
            request_id: ctx.request_id,
            created,
        }),
    };
    let exchange = exchange.map_err(|e| match e {
        AdapterError::Unsupported(m) => ProxyError::Unsupported(m),
        AdapterError::Config(m) => ProxyError::Internal(format!("provider {} adapter: {m}", provider.name)),
    })?;
    // This attempt ends at its own total timeout or the request's deadline, whichever is first.
    let attempt_deadline = match dep.timeouts.total {
        Some(t) => ctx.deadline.min(Instant::now() + t),
        None => ctx.deadline,
    };
    let bound =
        Bound { deadline: attempt_deadline, own: attempt_deadline < ctx.deadline, provider: provider.name.clone() };
    let stream = req.stream();
    let sent = Instant::now();
    let (head, mut body) = match exchange {
        Exchange::Http(up) => {
            let url = provider
                .upstream
                .as_ref()
                .ok_or_else(|| ProxyError::Internal(format!("provider {} has no base_url", provider.name)))?;
            let remaining = bound.remaining();
            let timeouts = AttemptTimeouts {
                connect: dep.timeouts.connect.min(remaining),
                first_byte: dep.timeouts.first_byte.min(remaining),
            };
            let send = gw.transport.send(&provider.name, url, up, stream, timeouts);
            bound.run(gw, send).await??
        }
        Exchange::Local(resp) => Transport::local(resp),
    };
    let latency = sent.elapsed();
    if let Some(a) = ctx.attempts.last_mut() {
        a.status = Some(head.status);
        a.latency = Some(latency);
    }
    gw.metrics.upstream_duration.with_label_values(&[&provider.name]).observe(latency.as_secs_f64());

    if !(200..300).contains(&head.status) {
        let read = bound.run(gw, gw.transport.read_all(&mut body, bound.remaining())).await?;
        let bytes = read.unwrap_or_default();
        gw.transport.release(body).await;
        return Err(ProxyError::upstream(&provider.name, provider.adapter.map_error(head.status, &bytes)));
    }
    if let Req::Chat(r) = req {
        if r.stream {
            if !head.event_stream {
                return Err(ProxyError::upstream(&provider.name, UpstreamError::bad_response("not an event stream")));
            }
            let setup = StreamSetup {
                include_usage: r.include_usage,
                completion_id: format!("chatcmpl-{}", ctx.request_id.simple()),
                model: dep.upstream_model.to_string(),
                created,
            };
            let input = relay::StreamIn {
                translator: provider.adapter.stream(setup),
                deadline: attempt_deadline,
                ends_at_eof: provider.adapter.stream_ends_at_eof(),
                filter: ctx.output_guard.clone().map(|g| {
                    Box::new(gw_shared::policy::stream::GuardedStream::new(g))
                        as Box<dyn gw_shared::providers::ChunkFilter>
                }),
            };
            relay::run(gw, session, ctx, dep, input, &mut body).await?;
            if tokio::time::timeout(DRAIN, gw.transport.read_all(&mut body, DRAIN)).await.is_ok_and(|r| r.is_ok()) {
                gw.transport.release(body).await;
            }
            return Ok(());
        }
    }
    let bytes = bound.run(gw, gw.transport.read_all(&mut body, bound.remaining())).await??;
    gw.transport.release(body).await;
    let completion = match req {
        Req::Chat(r) => provider.adapter.parse_response(
            &Call {
                endpoint: Endpoint::ChatCompletions,
                request: r,
                upstream_model: &dep.upstream_model,
                api_key: None,
                base_path,
                options: &provider.options,
                request_id: ctx.request_id,
                created,
            },
            &bytes,
        ),
        Req::Embeddings(r) => provider.adapter.parse_embeddings(
            &Call {
                endpoint: Endpoint::Embeddings,
                request: r,
                upstream_model: &dep.upstream_model,
                api_key: None,
                base_path,
                options: &provider.options,
                request_id: ctx.request_id,
                created,
            },
            &bytes,
        ),
    }
    .map_err(|e| ProxyError::upstream(&provider.name, e))?;
    settle(gw, ctx, dep, completion.usage);
    let raw = completion.body;
    let body = match (req, ctx.output_guard.clone()) {
        (Req::Chat(_), Some(guard)) => super::policy::guard_completion(gw, ctx, guard, &raw)?,
        _ => raw.clone(),
    };
    super::cache::keep(gw, ctx, dep, raw).await;
    respond::json(session, ctx, 200, body, Vec::new()).await
}

/// An attempt's time bound: its own total timeout (an upstream timeout, so the next deployment
/// may be tried) or the request's deadline (the end of the request).
struct Bound {
    deadline: Instant,
    own: bool,
    provider: Arc<str>,
}

impl Bound {
    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    async fn run<T>(&self, gw: &Gateway, fut: impl std::future::Future<Output = T>) -> Result<T, ProxyError> {
        tokio::time::timeout(self.remaining(), fut).await.map_err(|_| {
            if self.own {
                ProxyError::UpstreamTimeout { provider: self.provider.clone() }
            } else {
                ProxyError::DeadlineExceeded(gw.request_timeout.as_millis() as u64)
            }
        })
    }
}

/// Runs `fut` within what is left of the request's deadline: each read has its own timeout, but a
/// peer that trickles bytes must not stretch the whole past the deadline.
pub async fn within_deadline<T>(
    gw: &Gateway,
    ctx: &RequestCtx,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, ProxyError> {
    tokio::time::timeout(ctx.remaining(), fut)
        .await
        .map_err(|_| ProxyError::DeadlineExceeded(gw.request_timeout.as_millis() as u64))
}

/// Usage and cost, from the upstream's own report.
pub fn settle(gw: &Gateway, ctx: &mut RequestCtx, dep: &Deployment, usage: Option<TokenUsage>) {
    match usage {
        Some(u) => {
            ctx.usage = u;
            ctx.cost = cost_usd(&dep.price, u);
            gw.router.add_tokens(dep, u64::from(u.total()));
        }
        None => {
            let provider: &Arc<str> = &dep.provider.name;
            gw.warn_log.warn(|| {
                format!("request {}: provider {provider} reported no usage; cost recorded as 0", ctx.request_id)
            });
        }
    }
}
