//! The route step: the model resolves to deployments, tried in order within the request's
//! deadline. Each attempt asks the provider's adapter for the request, makes the exchange through
//! the transport (or takes the in-process answer), and hands the answer back to the adapter.
//! A failure before anything reached the client moves on to the next deployment when the error
//! says it may.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gw_shared::openai::ChatRequest;
use gw_shared::pricing::{cost_usd, TokenUsage};
use gw_shared::providers::{Call, Endpoint, Exchange, StreamSetup, UpstreamError};
use gw_shared::routing::Deployment;
use pingora::proxy::Session;

use super::{relay, respond};
use crate::ctx::{Attempt, AttemptOutcome, RequestCtx};
use crate::error::ProxyError;
use crate::gateway::Gateway;
use crate::transport::Transport;

/// How long gw waits for the rest of a finished stream (the chunked terminator) so the
/// connection can go back to the pool.
const DRAIN: Duration = Duration::from_millis(500);

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let Some(req) = ctx.request.take() else {
        return Err(ProxyError::Internal("route step without a parsed request".into()));
    };
    let result = try_deployments(gw, session, ctx, &req).await;
    ctx.request = Some(req);
    result
}

async fn try_deployments(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    req: &ChatRequest,
) -> Result<(), ProxyError> {
    let route = gw.router.resolve(&req.model).ok_or_else(|| ProxyError::UnknownModel(req.model.clone()))?;
    let mut last = None;
    for dep in &route.deployments {
        if ctx.remaining().is_zero() {
            return Err(ProxyError::DeadlineExceeded(gw.request_timeout.as_secs()));
        }
        ctx.attempts.push(Attempt {
            provider: dep.provider.name.clone(),
            upstream_model: dep.upstream_model.clone(),
            outcome: AttemptOutcome::Answered,
            status: None,
            latency: None,
        });
        let result = attempt(gw, session, ctx, req, dep).await;
        let outcome = match &result {
            Ok(()) => AttemptOutcome::Answered,
            Err(e) if e.retryable() && !ctx.header_sent => AttemptOutcome::Retryable(e.label()),
            Err(e) => AttemptOutcome::Failed(e.label()),
        };
        if let Some(a) = ctx.attempts.last_mut() {
            a.outcome = outcome;
        }
        gw.metrics.upstream_attempts.with_label_values(&[&dep.provider.name, outcome.label()]).inc();
        match result {
            Ok(()) => return Ok(()),
            Err(e) if matches!(outcome, AttemptOutcome::Retryable(_)) => {
                gw.log_failure(ctx, &e);
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| ProxyError::Internal("model has no deployments".into())))
}

async fn attempt(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    req: &ChatRequest,
    dep: &Deployment,
) -> Result<(), ProxyError> {
    let provider = &dep.provider;
    let call = Call {
        endpoint: Endpoint::ChatCompletions,
        request: req,
        upstream_model: &dep.upstream_model,
        api_key: provider.api_key.as_deref(),
        base_path: provider.upstream.as_ref().map_or("", |u| u.base_path.as_str()),
        request_id: ctx.request_id,
        created: ctx.created_at.timestamp(),
    };
    let exchange = provider.adapter.build(&call).map_err(|e| ProxyError::internal("provider adapter", e))?;
    let sent = Instant::now();
    let (head, mut body) = match exchange {
        Exchange::Http(up) => {
            let url = provider
                .upstream
                .as_ref()
                .ok_or_else(|| ProxyError::Internal(format!("provider {} has no base_url", provider.name)))?;
            let send = gw.transport.send(&provider.name, url, up, req.stream, ctx.remaining());
            within_deadline(gw, ctx, send).await??
        }
        Exchange::Local(resp) => Transport::local(resp),
    };
    let latency = sent.elapsed();
    if let Some(a) = ctx.attempts.last_mut() {
        a.status = Some(head.status);
        a.latency = Some(latency);
    }
    gw.metrics.upstream_duration.with_label_values(&[&provider.name]).observe(latency.as_secs_f64());

    if head.status != 200 {
        let read = within_deadline(gw, ctx, gw.transport.read_all(&mut body, ctx.remaining())).await?;
        let bytes = read.unwrap_or_default();
        gw.transport.release(body).await;
        return Err(ProxyError::upstream(&provider.name, provider.adapter.map_error(head.status, &bytes)));
    }
    if req.stream {
        if !head.event_stream {
            return Err(ProxyError::upstream(&provider.name, UpstreamError::bad_response("not an event stream")));
        }
        let setup = StreamSetup {
            include_usage: req.include_usage,
            completion_id: call.completion_id(),
            model: dep.upstream_model.to_string(),
            created: call.created,
        };
        let translator = provider.adapter.stream(setup);
        relay::run(gw, session, ctx, dep, translator, &mut body).await?;
        if tokio::time::timeout(DRAIN, gw.transport.read_all(&mut body, DRAIN)).await.is_ok_and(|r| r.is_ok()) {
            gw.transport.release(body).await;
        }
        return Ok(());
    }
    let bytes = within_deadline(gw, ctx, gw.transport.read_all(&mut body, ctx.remaining())).await??;
    gw.transport.release(body).await;
    let completion =
        provider.adapter.parse_response(&call, &bytes).map_err(|e| ProxyError::upstream(&provider.name, e))?;
    settle(gw, ctx, dep, completion.usage);
    respond::json(session, ctx, 200, completion.body, None).await
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
        .map_err(|_| ProxyError::DeadlineExceeded(gw.request_timeout.as_secs()))
}

/// Usage and cost, from the upstream's own report.
pub fn settle(gw: &Gateway, ctx: &mut RequestCtx, dep: &Deployment, usage: Option<TokenUsage>) {
    match usage {
        Some(u) => {
            ctx.usage = u;
            ctx.cost = cost_usd(&dep.price, u);
        }
        None => {
            let provider: &Arc<str> = &dep.provider.name;
            gw.warn_log.warn(|| {
                format!("request {}: provider {provider} reported no usage; cost recorded as 0", ctx.request_id)
            });
        }
    }
}
