//! The route step: the models the resolve step admitted (the requested one, then its
//! fallbacks) are tried in turn; each model's deployments in the order its strategy gives, each
//! claimed through its circuit breaker and caps, for `retries` extra rounds with backoff, all
//! within the request's deadline. Each attempt asks the provider's adapter for the request, makes
//! the exchange through the transport (or takes the in-process answer), has the adapter read it,
//! and hands it to the answer step. A failure before anything reached the client moves on when
//! the error says it may.

mod count;
pub(crate) mod credentials;

pub use count::anthropic_count;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gw_shared::db::provider_keys::OrgProviderKeys;
use gw_shared::providers::{AdapterError, Call, Endpoint, Exchange, StreamSetup, UpstreamError};
use gw_shared::routing::{AttemptVerdict, Caps, Deployment};
use pingora::proxy::Session;
use pingora_timeout::fast_timeout::fast_timeout;

use super::answer::{self, Prompt, StreamIn, Upstream};
use crate::ctx::{Attempt, AttemptOutcome, RequestCtx};
use crate::error::ProxyError;
use crate::state::Gateway;
use crate::transport::{AttemptTimeouts, Transport};

/// How long gw waits for the rest of a finished stream (the chunked terminator) so the
/// connection can go back to the pool.
const TERMINATOR_WAIT: Duration = Duration::from_millis(500);

/// What the route step knows of the request it routes.
trait Routed {
    fn model(&self) -> &str;
    fn stream(&self) -> bool;
    /// A rough prompt size for the lowest-cost strategy (4 bytes a token).
    fn prompt_hint(&self) -> u32;
}

impl Routed for Prompt<'_> {
    fn model(&self) -> &str {
        match self {
            Prompt::Chat(r) => &r.model,
            Prompt::Embeddings(r) => &r.model,
        }
    }

    fn stream(&self) -> bool {
        matches!(self, Prompt::Chat(r) if r.stream)
    }

    fn prompt_hint(&self) -> u32 {
        let bytes: usize = match self {
            Prompt::Chat(r) => r.messages().iter().map(|m| m.to_string().len()).sum(),
            Prompt::Embeddings(r) => r.texts().map_or(0, |t| t.iter().map(String::len).sum()),
        };
        u32::try_from(bytes / 4).unwrap_or(u32::MAX)
    }
}

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    super::audit::keep_request_body(ctx, gw.audit_max_body);
    if let Some(req) = ctx.request.take() {
        let result = try_routes(gw, session, ctx, Prompt::Chat(&req)).await;
        ctx.request = Some(req);
        return result;
    }
    if let Some(req) = ctx.embeddings.take() {
        let result = try_routes(gw, session, ctx, Prompt::Embeddings(&req)).await;
        ctx.embeddings = Some(req);
        return result;
    }
    Err(ProxyError::Internal("route step without a parsed request".into()))
}

async fn try_routes(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    req: Prompt<'_>,
) -> Result<(), ProxyError> {
    let models = ctx.routes.clone();
    let org_keys = credentials::for_request(gw, ctx).await?;
    // Only the lowest-cost strategy looks at the prompt's size.
    let wants_hint = models.iter().any(|m| m.strategy == gw_shared::config::Strategy::LowestCost);
    let hint = if wants_hint { req.prompt_hint() } else { 0 };
    let mut last: Option<ProxyError> = None;
    let mut out_of_region = false;
    for route in &models {
        for round in 0..=route.retries {
            if round > 0 {
                backoff(ctx, route.retry_backoff, round).await?;
            }
            for dep in gw.router.plan(route, hint) {
                // Data residency: a deployment of another region is never used.
                if dep.region.as_deref().is_some_and(|r| ctx.region.as_deref().is_some_and(|own| own != r)) {
                    out_of_region = true;
                    continue;
                }
                if ctx.remaining().is_zero() {
                    return Err(ctx.deadline_exceeded());
                }
                // The circuit first (it may refuse without counting anything), then the caps.
                let Some(gate) = gw.router.take(&dep, Caps::Shared) else { continue };
                let within = match gw.limiter.take_deployment(&dep).await {
                    Some(Caps::Shared) => true,
                    Some(Caps::Local { replicas }) => gw.router.within_local_caps(&dep, replicas),
                    None => false,
                };
                if !within {
                    gw.router.give_back(&dep, gate);
                    continue;
                }
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
    if let (None, true, Some(region)) = (&last, out_of_region, ctx.region.as_deref()) {
        return Err(ProxyError::NotInRegion { model: req.model().to_string(), region: region.to_string() });
    }
    Err(last.unwrap_or_else(|| ProxyError::NoDeployment(req.model().to_string())))
}

/// Sleeps before another round: exponential from `base`, with jitter, never past the deadline.
async fn backoff(ctx: &RequestCtx, base: Duration, round: u32) -> Result<(), ProxyError> {
    let factor = 2u32.saturating_pow(round.saturating_sub(1).min(10));
    let jitter = 0.5 + rand::random::<f64>();
    let wait = base.saturating_mul(factor).mul_f64(jitter);
    if wait >= ctx.remaining() {
        return Err(ctx.deadline_exceeded());
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
    req: Prompt<'_>,
    dep: &Arc<Deployment>,
    org_keys: &OrgProviderKeys,
) -> Result<(), ProxyError> {
    let org_id = ctx.key.as_ref().map(|k| k.org_id).unwrap_or_default();
    let own = match credentials::secret_for(gw, org_keys, org_id, &dep.provider) {
        Ok(s) => s,
        Err(e) => {
            gw.router.record(dep, AttemptVerdict::NoVerdict);
            return Err(e);
        }
    };
    let api_key = own.as_deref().or(dep.configured_key());
    let mut result = exchange_once(gw, session, ctx, req, dep, api_key, own.is_some()).await;
    // During a rotation's overlap, a refused new secret is retried once with the replaced one.
    if own.is_some() && refused_credential(&result) && !ctx.header_sent {
        if let Some(previous) = credentials::previous_for(gw, org_keys, org_id, &dep.provider) {
            result = exchange_once(gw, session, ctx, req, dep, Some(&previous), true).await;
        }
    }
    let header_latency = ctx.attempts.last().and_then(|a| a.latency);
    gw.router.record(dep, verdict(&result, header_latency));
    result
}

/// One exchange on `dep` with `api_key`, recorded as an attempt, counted in the metrics.
async fn exchange_once(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    req: Prompt<'_>,
    dep: &Arc<Deployment>,
    api_key: Option<&str>,
    org_key: bool,
) -> Result<(), ProxyError> {
    let began = Instant::now();
    ctx.attempts.push(Attempt {
        provider: dep.provider.name.clone(),
        upstream_model: dep.upstream_model.clone(),
        outcome: AttemptOutcome::Answered,
        status: None,
        latency: None,
        spent: None,
        region: dep.region.clone(),
        org_key,
        system: crate::traces::spans::system_of(&dep.provider.kind),
        span_id: crate::traces::context::new_span_id(),
        began,
        ended: None,
    });
    let result = {
        let _inflight = dep.state.begin();
        attempt(gw, session, ctx, req, dep, api_key).await
    };
    if let Some(a) = ctx.attempts.last_mut() {
        if a.latency.is_none() {
            a.spent = Some(began.elapsed());
        }
        a.ended = Some(Instant::now());
    }
    let outcome = match &result {
        Ok(()) => AttemptOutcome::Answered,
        Err(e) if e.retryable() && !ctx.header_sent => AttemptOutcome::Retryable(e.label()),
        Err(e) => AttemptOutcome::Failed(e.label()),
    };
    if let Some(a) = ctx.attempts.last_mut() {
        a.outcome = outcome;
    }
    gw.metrics.upstream_attempts.with_label_values(&[&dep.provider.name, outcome.label()]).inc();
    if let AttemptOutcome::Retryable(kind) | AttemptOutcome::Failed(kind) = outcome {
        gw.traffic.upstream_errors.with_label_values(&[&dep.provider.name, kind]).inc();
    }
    result
}

/// Whether the upstream refused the credential itself (401 or 403).
fn refused_credential(result: &Result<(), ProxyError>) -> bool {
    matches!(
        result,
        Err(ProxyError::Upstream { error, .. })
            if matches!(error.failure, gw_shared::providers::UpstreamFailure::Unavailable { status: Some(401 | 403) })
    )
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
    req: Prompt<'_>,
    dep: &Deployment,
    api_key: Option<&str>,
) -> Result<(), ProxyError> {
    let provider = &dep.provider;
    let created = ctx.created_at.timestamp();
    ctx.passthrough = matches!(req, Prompt::Chat(r) if passes_through(ctx, dep, r));
    // A request passed through goes up as its own body: no translation is built for it.
    let messages = ctx.messages_raw.as_deref().filter(|_| ctx.passthrough);
    let responses = ctx.responses_raw.as_deref().filter(|_| ctx.passthrough);
    let exchange = match (req, messages, responses) {
        (Prompt::Chat(_), Some(raw), _) => messages_request(raw, dep, api_key),
        (Prompt::Chat(_), None, Some(raw)) => responses_request(raw, dep, api_key),
        (Prompt::Chat(r), None, None) => provider.adapter.build(&call(Endpoint::ChatCompletions, r, dep, api_key, ctx)),
        (Prompt::Embeddings(r), ..) => {
            provider.adapter.build_embeddings(&call(Endpoint::Embeddings, r, dep, api_key, ctx))
        }
    };
    let responses = responses.is_some();
    let exchange = exchange.map_err(|e| match e {
        AdapterError::Unsupported(m) => ProxyError::Unsupported(m),
        AdapterError::Config(m) => ProxyError::Internal(format!("provider {} adapter: {m}", provider.name)),
    })?;
    // This attempt ends at its own total timeout or the request's deadline, whichever is first.
    let attempt_deadline = match dep.timeouts.total {
        Some(t) => ctx.deadline.min(Instant::now() + t),
        None => ctx.deadline,
    };
    let bound = Bound {
        deadline: attempt_deadline,
        own: attempt_deadline < ctx.deadline,
        provider: provider.name.clone(),
        timeout_ms: ctx.timeout.as_millis() as u64,
    };
    let stream = req.stream();
    let sent = Instant::now();
    let (head, mut body) = match exchange {
        Exchange::Http(mut up) => {
            if let (Some(trace), Some(a)) = (ctx.trace.as_deref(), ctx.attempts.last()) {
                up.headers.extend(trace.upstream_headers(a.span_id));
            }
            let url = provider
                .upstream
                .as_ref()
                .ok_or_else(|| ProxyError::Internal(format!("provider {} has no base_url", provider.name)))?;
            let remaining = bound.remaining();
            let timeouts = AttemptTimeouts {
                connect: dep.timeouts.connect.min(remaining),
                first_byte: dep.timeouts.first_byte.min(remaining),
            };
            let send = gw.transport.send(&provider.name, url, up, stream, timeouts, provider.public_only);
            bound.run(send).await??
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
        let read = bound.run(gw.transport.read_all(&mut body, bound.remaining())).await?;
        let bytes = read.unwrap_or_default();
        gw.transport.release(body).await;
        return Err(ProxyError::upstream(&provider.name, provider.adapter.map_error(head.status, &bytes)));
    }
    let up = Upstream { dep, prompt: req };
    if let Prompt::Chat(r) = req {
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
            let input = StreamIn {
                translator: match responses {
                    true => Box::new(gw_shared::providers::responses::ResponsesStream::new(setup)),
                    false => provider.adapter.stream(setup),
                },
                deadline: attempt_deadline,
                ends_at_eof: !responses && provider.adapter.stream_ends_at_eof(),
            };
            let result = answer::stream(gw, session, ctx, &up, input, &mut body).await;
            // A stream that completed goes back to the pool once its terminator is read; any
            // other is closed (the answer step read on as far as it was allowed to).
            if result.is_ok()
                && tokio::time::timeout(TERMINATOR_WAIT, gw.transport.read_all(&mut body, TERMINATOR_WAIT))
                    .await
                    .is_ok_and(|r| r.is_ok())
            {
                gw.transport.release(body).await;
            }
            return result;
        }
    }
    let bytes = bound.run(gw.transport.read_all(&mut body, bound.remaining())).await??;
    gw.transport.release(body).await;
    let completion = match req {
        Prompt::Chat(_) if responses => gw_shared::providers::responses::parse_response(&bytes).inspect_err(|_| {
            if let Some(u) = gw_shared::providers::responses::reported_usage(&bytes) {
                answer::charge_reported(gw, ctx, dep, u);
            }
        }),
        Prompt::Chat(r) => provider.adapter.parse_response(&call(Endpoint::ChatCompletions, r, dep, None, ctx), &bytes),
        Prompt::Embeddings(r) => {
            provider.adapter.parse_embeddings(&call(Endpoint::Embeddings, r, dep, None, ctx), &bytes)
        }
    }
    .map_err(|e| ProxyError::upstream(&provider.name, e))?;
    let raw = ctx.passthrough.then_some(bytes);
    answer::plain(gw, session, ctx, &up, completion, raw).await
}

/// Whether a Messages request goes to an Anthropic deployment (a Responses request to an
/// OpenAI one serving the Responses API) as the client sent it (its model aside) and the answer
/// comes back as the deployment sent it: when nothing gw does reads or changes either (no
/// policy applies, so no guardrail reads a field the translation would not show it; no template
/// or token cap added), as a client calling the provider directly would see it. Otherwise it is
/// translated like every other dialect.
fn passes_through(ctx: &RequestCtx, dep: &Deployment, req: &gw_shared::openai::ChatRequest) -> bool {
    let speaks_it = match (ctx.messages_raw.as_deref(), ctx.responses_raw.as_deref()) {
        (Some(_), _) => dep.provider.kind == "anthropic",
        (None, Some(_)) => dep.provider.options.responses_api,
        (None, None) => false,
    };
    speaks_it && ctx.applied.is_empty() && ctx.output_guard.is_none() && !req.edited()
}

/// The upstream request of a Messages request passed through: the client's body at
/// `{base_url}/messages` with the Anthropic key and version, and the `anthropic-beta` features
/// gw can bill.
fn messages_request(
    raw: &crate::ctx::MessagesRaw,
    dep: &Deployment,
    api_key: Option<&str>,
) -> Result<Exchange, AdapterError> {
    use gw_shared::providers::{anthropic, UpstreamRequest};
    let body = gw_shared::messages::passthrough_body(&raw.body, &raw.model, &dep.upstream_model)
        .map_err(AdapterError::config)?;
    let mut headers = anthropic::credentials(api_key, dep.provider.options.api_version.as_deref())?;
    if let Some(beta) = raw.beta.as_ref().and_then(gw_shared::messages::billable_betas) {
        headers.push((http::HeaderName::from_static("anthropic-beta"), beta));
    }
    let base_path = dep.provider.upstream.as_ref().map_or("", |u| u.base_path.as_str());
    Ok(Exchange::Http(UpstreamRequest { path: format!("{base_path}{}", anthropic::MESSAGES_PATH), headers, body }))
}

/// The upstream request of a Responses request passed through: the client's body at
/// `{base_url}/responses` with the OpenAI key.
fn responses_request(
    raw: &crate::ctx::ResponsesRaw,
    dep: &Deployment,
    api_key: Option<&str>,
) -> Result<Exchange, AdapterError> {
    use gw_shared::providers::{openai, responses, UpstreamRequest};
    let body =
        responses::passthrough_body(&raw.body, raw.store_sent, raw.hosted_tools, &raw.model, &dep.upstream_model)
            .map_err(AdapterError::config)?;
    let base_path = dep.provider.upstream.as_ref().map_or("", |u| u.base_path.as_str());
    Ok(Exchange::Http(UpstreamRequest {
        path: format!("{base_path}{}", responses::RESPONSES_PATH),
        headers: openai::bearer(api_key)?,
        body,
    }))
}

/// What the adapter is told about this attempt.
fn call<'a, R>(
    endpoint: Endpoint,
    request: &'a R,
    dep: &'a Deployment,
    api_key: Option<&'a str>,
    ctx: &RequestCtx,
) -> Call<'a, R> {
    let provider = &dep.provider;
    Call {
        endpoint,
        request,
        upstream_model: &dep.upstream_model,
        api_key,
        base_path: provider.upstream.as_ref().map_or("", |u| u.base_path.as_str()),
        options: &provider.options,
        request_id: ctx.request_id,
        created: ctx.created_at.timestamp(),
    }
}

/// An attempt's time bound: its own total timeout (an upstream timeout, so the next deployment
/// may be tried) or the request's deadline (the end of the request).
struct Bound {
    deadline: Instant,
    own: bool,
    provider: Arc<str>,
    /// The request's deadline, for its 504.
    timeout_ms: u64,
}

impl Bound {
    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    async fn run<T>(&self, fut: impl std::future::Future<Output = T>) -> Result<T, ProxyError> {
        fast_timeout(self.remaining(), fut).await.map_err(|_| {
            if self.own {
                ProxyError::UpstreamTimeout { provider: self.provider.clone() }
            } else {
                ProxyError::DeadlineExceeded(self.timeout_ms)
            }
        })
    }
}
