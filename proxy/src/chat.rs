//! `POST /v1/chat/completions`: parse, resolve the model, try its deployments in order, answer.

use std::time::Instant;

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use gw_shared::config::ProviderKind;
use gw_shared::openai::{sse_event, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ErrorBody, SSE_DONE};
use gw_shared::pricing::{cost_usd, format_cost, TokenUsage};
use gw_shared::providers::{mock, openai};
use gw_shared::routing::Deployment;
use pingora::proxy::Session;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::gateway::Gateway;
use crate::respond;
use crate::upstream::{AttemptError, AttemptErrorKind, UpstreamCall};

/// How one deployment's attempt ended, when it did not answer the client.
enum Failure {
    /// Nothing was sent downstream and another deployment may do better.
    Retry(ProxyError),
    /// Final: the client has its answer (or the request itself is at fault).
    Fail(ProxyError),
}

impl From<ProxyError> for Failure {
    fn from(e: ProxyError) -> Self {
        Failure::Fail(e)
    }
}

pub async fn completions(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let body = crate::body::read_bounded(session, gw.max_body).await?;
    let req = ChatCompletionRequest::from_json(&body)
        .map_err(|p| ProxyError::BadRequest { message: p.message, param: p.param })?;
    ctx.model = Some(req.model.clone());
    ctx.stream = req.is_stream();
    let route = gw.router.resolve(&req.model).ok_or_else(|| ProxyError::UnknownModel(req.model.clone()))?;

    let mut last = None;
    for (i, dep) in route.deployments.iter().enumerate() {
        ctx.attempts += 1;
        ctx.provider = Some(dep.provider.name.clone());
        ctx.upstream_model = Some(dep.upstream_model.clone());
        let result = match dep.provider.kind {
            ProviderKind::Mock => answer_mock(session, ctx, &req, dep).await.map_err(Failure::Fail),
            ProviderKind::Openai => answer_openai(gw, session, ctx, &req, dep).await,
        };
        let outcome = match &result {
            Ok(()) => "ok",
            Err(Failure::Retry(_)) => "retryable_error",
            Err(Failure::Fail(_)) => "error",
        };
        gw.metrics.upstream_attempts.with_label_values(&[&dep.provider.name, outcome]).inc();
        match result {
            Ok(()) => return Ok(()),
            Err(Failure::Fail(e)) => return Err(e),
            Err(Failure::Retry(e)) => {
                if i + 1 < route.deployments.len() {
                    log::warn!("request {}: deployment {} failed, trying the next: {e}", ctx.request_id, i);
                }
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| ProxyError::Internal("model has no deployments".into())))
}

fn completion_id(ctx: &RequestCtx) -> String {
    format!("chatcmpl-{}", ctx.request_id.simple())
}

fn settle(ctx: &mut RequestCtx, dep: &Deployment, usage: TokenUsage) {
    ctx.usage = usage;
    ctx.cost = cost_usd(&dep.price, usage);
}

async fn answer_mock(
    session: &mut Session,
    ctx: &mut RequestCtx,
    req: &ChatCompletionRequest,
    dep: &Deployment,
) -> Result<(), ProxyError> {
    let id = completion_id(ctx);
    let created = ctx.created_at.timestamp();
    if !req.is_stream() {
        let resp = mock::complete(req, &id, &dep.upstream_model, created);
        settle(ctx, dep, resp.usage.as_ref().map(|u| u.tokens()).unwrap_or_default());
        let body = serde_json::to_vec(&resp).map_err(|e| ProxyError::Internal(e.to_string()))?;
        return respond::json(session, ctx, 200, body).await;
    }
    let chunks = mock::stream_chunks(req, &id, &dep.upstream_model, created);
    let ttft = ctx.started.elapsed();
    ctx.ttft = Some(ttft);
    respond::start_stream(session, ctx, ttft).await?;
    for chunk in chunks {
        if let Some(u) = &chunk.usage {
            settle(ctx, dep, u.tokens());
            if !req.wants_usage_chunk() {
                continue;
            }
        }
        write_event(session, &chunk).await?;
    }
    finish_stream(session, ctx).await
}

async fn write_event<T: serde::Serialize>(session: &mut Session, payload: &T) -> Result<(), ProxyError> {
    let bytes = sse_event(payload).map_err(|e| ProxyError::Internal(e.to_string()))?;
    session.write_response_body(Some(bytes), false).await?;
    Ok(())
}

/// Ends a stream: a comment carrying the exact cost (SSE clients ignore comments), then `[DONE]`.
async fn finish_stream(session: &mut Session, ctx: &RequestCtx) -> Result<(), ProxyError> {
    let trailer = format!(": x-gw-cost-usd={}\n\n", format_cost(ctx.cost));
    session.write_response_body(Some(Bytes::from(trailer)), false).await?;
    session.write_response_body(Some(Bytes::from_static(SSE_DONE)), true).await?;
    Ok(())
}

fn upstream_failure(err: AttemptError) -> Failure {
    match err.kind {
        AttemptErrorKind::Timeout => Failure::Retry(ProxyError::UpstreamTimeout(err.message)),
        AttemptErrorKind::BadResponse => Failure::Retry(ProxyError::UpstreamBadResponse(err.message)),
        AttemptErrorKind::Connect | AttemptErrorKind::Io => {
            Failure::Retry(ProxyError::UpstreamUnavailable(err.message))
        }
    }
}

async fn answer_openai(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    req: &ChatCompletionRequest,
    dep: &Deployment,
) -> Result<(), Failure> {
    let provider = &dep.provider.name;
    let url = dep
        .provider
        .upstream
        .as_ref()
        .ok_or_else(|| ProxyError::Internal(format!("provider {provider} has no base_url")))?;
    let body = openai::chat_request_body(req, &dep.upstream_model).map_err(|e| ProxyError::Internal(e.to_string()))?;
    let sent = Instant::now();
    let mut call = gw
        .upstreams
        .post_json(
            provider,
            url,
            dep.provider.api_key.as_deref(),
            openai::CHAT_COMPLETIONS_PATH,
            Bytes::from(body),
            req.is_stream(),
        )
        .await
        .map_err(upstream_failure)?;
    let upstream_latency = sent.elapsed();
    ctx.upstream_latency = Some(upstream_latency);
    gw.metrics.upstream_duration.with_label_values(&[provider]).observe(upstream_latency.as_secs_f64());

    if call.status != 200 {
        return Err(rejected(gw, &mut call, provider).await);
    }
    if req.is_stream() {
        stream_openai(gw, session, ctx, req, dep, call).await
    } else {
        let bytes = gw.upstreams.read_body(&mut call, provider).await.map_err(upstream_failure)?;
        gw.upstreams.release(call).await;
        let resp: ChatCompletion = serde_json::from_slice(&bytes).map_err(|e| {
            Failure::Retry(ProxyError::UpstreamBadResponse(format!(
                "upstream provider '{provider}' returned an invalid chat completion: {e}"
            )))
        })?;
        let usage = match &resp.usage {
            Some(u) => u.tokens(),
            None => {
                log::warn!("request {}: provider {provider} reported no usage; cost recorded as 0", ctx.request_id);
                TokenUsage::default()
            }
        };
        settle(ctx, dep, usage);
        let body = serde_json::to_vec(&resp).map_err(|e| ProxyError::Internal(e.to_string()))?;
        respond::json(session, ctx, 200, body).await.map_err(Failure::Fail)
    }
}

/// Turns a non-200 upstream answer into our error: 5xx and 429 may be retried elsewhere; other
/// client errors pass through with the upstream's own message.
async fn rejected(gw: &Gateway, call: &mut UpstreamCall, provider: &str) -> Failure {
    let status = call.status;
    let body = gw.upstreams.read_body(call, provider).await.unwrap_or_default();
    // The upstream's own words about 429/5xx can name gw's provider account: they go to the log.
    if status == 429 || status >= 500 || status == 401 || status == 403 {
        let detail = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
        log::warn!("upstream provider {provider} answered HTTP {status}: {detail}");
    }
    match status {
        429 => Failure::Retry(ProxyError::UpstreamRateLimited(format!(
            "Upstream provider '{provider}' is rate limiting requests; retry later."
        ))),
        s if s >= 500 => Failure::Retry(ProxyError::UpstreamUnavailable(format!(
            "Upstream provider '{provider}' returned HTTP {s}."
        ))),
        // 401/403 from the upstream is our credential's problem, not the client's.
        401 | 403 => Failure::Retry(ProxyError::UpstreamUnavailable(format!(
            "Upstream provider '{provider}' refused gw's credentials (HTTP {status})."
        ))),
        // Statuses about the client's own request pass through with the upstream's message;
        // hop-level ones (407, 411, 426, ...) are gw's business, not the client's.
        s @ (400 | 404 | 409 | 413 | 415 | 422) => {
            let body = serde_json::from_slice::<ErrorBody>(&body).unwrap_or_else(|_| {
                ErrorBody::new(
                    format!("Upstream provider '{provider}' rejected the request with HTTP {s}"),
                    "invalid_request_error",
                    None,
                    None,
                )
            });
            Failure::Fail(ProxyError::UpstreamRejected { status: s, body })
        }
        s => Failure::Retry(ProxyError::UpstreamBadResponse(format!(
            "Upstream provider '{provider}' returned unexpected HTTP {s}"
        ))),
    }
}

async fn stream_openai(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    req: &ChatCompletionRequest,
    dep: &Deployment,
    mut call: UpstreamCall,
) -> Result<(), Failure> {
    let provider = dep.provider.name.as_str();
    if !call.content_type.starts_with("text/event-stream") {
        return Err(Failure::Retry(ProxyError::UpstreamBadResponse(format!(
            "Upstream provider '{provider}' did not answer with an event stream"
        ))));
    }
    let wants_usage = req.wants_usage_chunk();
    let mut usage: Option<TokenUsage> = None;
    let mut done = false;
    let mut broken: Option<String> = None;
    {
        // Bounded like a buffered body: an upstream that never ends an event cannot grow the
        // parser's buffer without limit.
        let limit = gw.upstreams.max_body();
        let body = futures::stream::unfold((&mut call.session, 0usize), move |(s, seen)| async move {
            match s.read_response_body().await {
                Ok(Some(b)) => {
                    let seen = seen + b.len();
                    let item = if seen > limit {
                        Err(pingora::Error::explain(pingora::ErrorType::ReadError, "stream over the size limit"))
                    } else {
                        Ok(b)
                    };
                    Some((item, (s, seen)))
                }
                Ok(None) => None,
                Err(e) => Some((Err(e), (s, seen))),
            }
        });
        let mut events = std::pin::pin!(body.eventsource());
        while let Some(ev) = events.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    broken = Some(format!("the stream from upstream provider '{provider}' broke: {e}"));
                    break;
                }
            };
            if ev.data.trim() == "[DONE]" {
                done = true;
                break;
            }
            let mut chunk: ChatCompletionChunk = match serde_json::from_str(&ev.data) {
                Ok(c) => c,
                Err(e) => {
                    let msg = serde_json::from_str::<ErrorBody>(&ev.data)
                        .map(|b| format!("upstream provider '{provider}' failed mid-stream: {}", b.error.message))
                        .unwrap_or_else(|_| {
                            format!("upstream provider '{provider}' sent an invalid stream chunk: {e}")
                        });
                    broken = Some(msg);
                    break;
                }
            };
            if !ctx.header_sent {
                let ttft = ctx.started.elapsed();
                ctx.ttft = Some(ttft);
                respond::start_stream(session, ctx, ttft).await.map_err(Failure::Fail)?;
            }
            let usage_only = chunk.choices.is_empty();
            if let Some(u) = &chunk.usage {
                usage = Some(u.tokens());
                if !wants_usage {
                    chunk.usage = None;
                }
            }
            if usage_only && !wants_usage {
                continue;
            }
            write_event(session, &chunk).await.map_err(Failure::Fail)?;
        }
    }
    if !ctx.header_sent {
        let why = broken.unwrap_or_else(|| format!("upstream provider '{provider}' ended the stream without data"));
        return Err(Failure::Retry(ProxyError::UpstreamBadResponse(why)));
    }
    match usage {
        Some(u) => settle(ctx, dep, u),
        None => log::warn!("request {}: provider {provider} streamed no usage; cost recorded as 0", ctx.request_id),
    }
    if !done && broken.is_none() {
        broken = Some(format!("upstream provider '{provider}' ended the stream early"));
    }
    if let Some(why) = broken {
        // The status line is long gone; an error event is how OpenAI's SDKs learn of it.
        ctx.error_type = Some("upstream_stream_broken");
        log::warn!("request {}: {why}", ctx.request_id);
        let body = ErrorBody::new(why, "api_error", Some("upstream_stream_broken"), None);
        respond::stream_error(session, &body).await.map_err(Failure::Fail)?;
        return Ok(());
    }
    finish_stream(session, ctx).await.map_err(Failure::Fail)?;
    // Drain what follows [DONE] (the chunked terminator) so the connection can go back to the
    // pool; an upstream that lingers is not worth holding the request for.
    let drain = gw.upstreams.read_body(&mut call, provider);
    if let Ok(Ok(_)) = tokio::time::timeout(std::time::Duration::from_millis(500), drain).await {
        gw.upstreams.release(call).await;
    }
    Ok(())
}
