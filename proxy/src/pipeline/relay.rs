//! The stream loop: upstream bytes → SSE events → the adapter's translator → the client. Every
//! event that arrived in one upstream read leaves in one downstream write. The loop knows no
//! provider format: a new adapter brings its translator and this stays as it is.

use std::time::Instant;

/// The upstream side of a stream: how to read its events and until when.
pub struct StreamIn {
    pub translator: Box<dyn StreamTranslator>,
    /// The attempt's end (its own total timeout or the request's deadline).
    pub deadline: Instant,
    /// The protocol has no end event: a clean end of the body completes the stream (Gemini).
    pub ends_at_eof: bool,
    /// The output guardrails the chunks pass through, if any.
    pub filter: Option<Box<dyn ChunkFilter>>,
}

use eventsource_stream2::Eventsource;
use futures::{FutureExt, StreamExt};
use gw_shared::providers::{ChunkFilter, Flow, StreamSink, StreamTranslator, UpstreamError};
use gw_shared::routing::Deployment;
use pingora::proxy::Session;

use super::{respond, route};
use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::gateway::Gateway;
use crate::transport::Body;

pub async fn run(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    dep: &Deployment,
    input: StreamIn,
    body: &mut Body,
) -> Result<(), ProxyError> {
    let provider = &dep.provider.name;
    let transport = &gw.transport;
    let StreamIn { mut translator, deadline, ends_at_eof, filter } = input;
    let mut sink = match filter {
        Some(f) => StreamSink::filtered(f),
        None => StreamSink::new(),
    };
    if super::cache::records(ctx) {
        sink.record();
    }
    let ended: Result<bool, ProxyError> = {
        let chunks = futures::stream::unfold(body, move |b| async move {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match transport.next_chunk(b, remaining).await {
                Ok(Some(c)) => Some((Ok(c), b)),
                Ok(None) => None,
                Err(e) => Some((Err(e), b)),
            }
        });
        let mut events = std::pin::pin!(chunks.eventsource());
        loop {
            // Gather what is already here; write it out before waiting for more.
            let next = match events.next().now_or_never() {
                Some(next) => next,
                None => {
                    if let Err(e) = flush(session, ctx, &mut sink).await {
                        break Err(e);
                    }
                    events.next().await
                }
            };
            match next {
                None => break Ok(ends_at_eof && (ctx.header_sent || sink.pending() > 0)),
                Some(Ok(ev)) => match translator.event(&ev.event, &ev.data, &mut sink) {
                    _ if sink.blocked.is_some() => break Err(blocked(gw, ctx, &mut sink)),
                    Ok(Flow::Continue) => {}
                    Ok(Flow::Done) => break Ok(true),
                    Err(e) => break Err(ProxyError::upstream(provider, e)),
                },
                Some(Err(e)) if e.is_transport() => match e.into_transport() {
                    Some(e) => break Err(e),
                    None => break Err(ProxyError::Internal("event stream error lost its cause".into())),
                },
                Some(Err(e)) => {
                    break Err(ProxyError::upstream(
                        provider,
                        UpstreamError::bad_response(format!("bad event stream: {e}")),
                    ))
                }
            }
        }
    };
    let ended = match ended {
        Ok(true) => {
            sink.finish_filter();
            if sink.blocked.is_some() {
                Err(blocked(gw, ctx, &mut sink))
            } else {
                Ok(true)
            }
        }
        other => other,
    };
    for d in sink.decisions() {
        gw.metrics.policy_decisions.with_label_values(&[d.guardrail, d.action.label(), d.stage.label()]).inc();
        ctx.policy.push(d);
    }
    // Usage already seen is settled even when the client left: the upstream spent the tokens.
    let flushed = match &ended {
        Err(ProxyError::ClientGone(_)) => Ok(()),
        // Nothing has reached the client and the stream did not complete: leave the way open for
        // the next deployment rather than start a response with a role chunk and nothing else.
        _ if !ctx.header_sent && !matches!(ended, Ok(true)) => Ok(()),
        _ => {
            sink.saw_content();
            flush(session, ctx, &mut sink).await
        }
    };
    if sink.usage.is_some() || ended.as_ref().is_ok_and(|done| *done) {
        route::settle(gw, ctx, dep, sink.usage);
    }
    flushed?;
    match ended {
        // Nothing reached the client yet: the error is the attempt's, and may be retried.
        Err(e) if !ctx.header_sent => Err(e),
        Err(ProxyError::Upstream { provider, error }) => Err(ProxyError::Upstream { provider, error }),
        Err(ProxyError::ClientGone(why)) => Err(ProxyError::ClientGone(why)),
        Err(e @ ProxyError::PolicyBlocked { .. }) => Err(e),
        Err(_) => Err(ProxyError::StreamBroken { provider: provider.clone(), why: "broke off" }),
        Ok(_) if !ctx.header_sent => {
            Err(ProxyError::upstream(provider, UpstreamError::bad_response("the stream ended without data")))
        }
        Ok(false) => Err(ProxyError::StreamBroken { provider: provider.clone(), why: "ended early" }),
        Ok(true) => {
            super::cache::keep_stream(gw, ctx, dep, &mut sink).await;
            respond::finish_stream(session, ctx).await
        }
    }
}

/// The output guardrails stopped the stream: the error that ends it, and its event.
fn blocked(gw: &Gateway, ctx: &RequestCtx, sink: &mut StreamSink) -> ProxyError {
    let b = sink.blocked.take().unwrap_or_else(|| gw_shared::policy::engine::OutputBlocked {
        policy: String::new(),
        guardrail: "output",
        reason: "the answer was blocked".into(),
    });
    super::policy::blocked_event(gw, ctx, &b.policy, b.guardrail, &b.reason);
    ProxyError::PolicyBlocked { policy: b.policy, reason: b.reason }
}

/// Writes what the sink gathered; the first write starts the response. It waits for the first
/// chunk with content (at most the role chunk waits with it): that moment is the TTFT the header
/// reports, and a failure before it can still fall back to another deployment.
async fn flush(session: &mut Session, ctx: &mut RequestCtx, sink: &mut StreamSink) -> Result<(), ProxyError> {
    if !ctx.header_sent && !sink.content_seen {
        return Ok(());
    }
    let Some(bytes) = sink.take() else { return Ok(()) };
    if !ctx.header_sent {
        ctx.ttft = Some(ctx.started.elapsed());
        respond::start_stream(session, ctx).await?;
    }
    respond::stream_bytes(session, ctx, bytes).await
}
