//! An upstream's stream: upstream bytes → SSE events → the adapter's translator → the output
//! guardrails → the client. Every event that arrived in one upstream read leaves in one
//! downstream write. The loop knows no provider format: a new adapter brings its translator.
//! A passed-through stream (`ctx.passthrough`) goes out as the deployment's own events;
//! its translation still runs, for billing, the cache and traces.
//!
//! However the stream ends, what the upstream bills is billed. When the client leaves, or an
//! output guardrail stops the answer (its error goes out at once), the upstream is still read,
//! without forwarding, up to the request's deadline and `stream_drain_max_bytes`, until its usage
//! arrives; failing that (the upstream broke, the cap was reached) the attempt is billed at an
//! estimate. A stream that breaks after content is billed too, whether or not another
//! deployment is tried next.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::{BufMut, BytesMut};
use eventsource_stream2::{Event, EventStreamError, Eventsource};
use futures::{FutureExt, Stream, StreamExt};
use gw_shared::policy::{PolicyAction, PolicyDecision, Stage};
use gw_shared::providers::{Flow, StreamSink, StreamTranslator, UpstreamError};
use pingora::proxy::Session;

use super::{bill, guard, keep, write, Upstream};
use crate::ctx::{RequestCtx, SettledBy};
use crate::error::ProxyError;
use crate::state::Gateway;
use crate::transport::Body;

/// The upstream side of a stream: how to read its events and until when.
pub struct StreamIn {
    pub translator: Box<dyn StreamTranslator>,
    /// The attempt's end (its own total timeout or the request's deadline).
    pub deadline: Instant,
    /// The protocol has no end event: a clean end of the body completes the stream (Gemini).
    pub ends_at_eof: bool,
}

/// How the relay loop ended.
enum End {
    /// The upstream said the stream is complete.
    Done,
    /// The body ended without the stream's end.
    Cut,
    /// The output guardrails stopped the answer.
    Blocked,
    /// Writing to the client failed.
    Gone(ProxyError),
    /// Reading or translating the upstream failed.
    Failed(ProxyError),
}

pub async fn stream(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    up: &Upstream<'_>,
    input: StreamIn,
    body: &mut Body,
) -> Result<(), ProxyError> {
    let StreamIn { mut translator, deadline, ends_at_eof } = input;
    let mut sink = guard::sink(ctx);
    if keep::records(ctx) {
        sink.record();
    }
    let read = AtomicUsize::new(0);
    let counter = &read;
    let transport = &gw.transport;
    let chunks = futures::stream::unfold(body, move |b| async move {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match transport.next_chunk(b, remaining).await {
            Ok(Some(c)) => {
                counter.fetch_add(c.len(), Ordering::Relaxed);
                Some((Ok(c), b))
            }
            Ok(None) => None,
            Err(e) => Some((Err(e), b)),
        }
    });
    let mut events = std::pin::pin!(chunks.eventsource());
    let provider = &up.dep.provider.name;
    let mut out = Out { sink, raw: ctx.passthrough.then(BytesMut::new) };
    let mut end = relay(session, ctx, &mut events, &mut *translator, &mut out, ends_at_eof, provider).await;
    if let (true, Some(encoder)) = (ctx.passthrough && ctx.header_sent, ctx.responses_events.as_deref_mut()) {
        // An event gw adds (an error) follows the deployment's own that went out.
        encoder.resume_after(translator.last_sequence());
    }
    let Out { mut sink, mut raw } = out;
    if matches!(end, End::Done) {
        sink.finish_filter();
        if sink.blocked.is_some() {
            end = End::Blocked;
        }
    }
    guard::stream_decisions(gw, ctx, &sink);

    match end {
        End::Done => {
            sink.saw_content();
            if let Err(e) = flush(session, ctx, &mut sink, &mut raw).await {
                bill_stream(gw, ctx, up, &sink, true);
                return Err(e);
            }
            if !ctx.header_sent {
                // Nothing at all came: another deployment may do better.
                bill_stream(gw, ctx, up, &sink, true);
                return Err(ProxyError::upstream(
                    provider,
                    UpstreamError::bad_response("the stream ended without data"),
                ));
            }
            let own = bill_stream(gw, ctx, up, &sink, true);
            keep::stream(gw, ctx, up.dep, &mut sink, own).await;
            write::finish_stream(session, ctx).await
        }
        End::Blocked => {
            let err = blocked(ctx, &mut sink);
            // The client learns at once; what the upstream bills is learnt after.
            if let Err(e) = write::error(session, ctx, &err).await {
                log::debug!("request {}: could not send the block: {e}", ctx.request_id);
            }
            let done = drain(gw, ctx, &mut events, &mut *translator, &mut sink, &read, ends_at_eof).await;
            bill_stream(gw, ctx, up, &sink, done);
            Err(err)
        }
        End::Gone(e) => {
            let done = drain(gw, ctx, &mut events, &mut *translator, &mut sink, &read, ends_at_eof).await;
            bill_stream(gw, ctx, up, &sink, done);
            Err(e)
        }
        End::Cut | End::Failed(_) if !ctx.header_sent => {
            // Nothing reached the client: the attempt's error, which may be retried elsewhere.
            // What the upstream produced before it broke is billed all the same.
            if sink.completion_bytes > 0 || sink.usage.is_some() {
                bill_stream(gw, ctx, up, &sink, false);
            }
            Err(match end {
                End::Failed(e) => e,
                _ => ProxyError::upstream(provider, UpstreamError::bad_response("the stream ended without data")),
            })
        }
        End::Cut | End::Failed(_) => {
            sink.saw_content();
            let flushed = flush(session, ctx, &mut sink, &mut raw).await;
            bill_stream(gw, ctx, up, &sink, false);
            flushed?;
            Err(match end {
                End::Failed(e @ ProxyError::Upstream { .. }) => e,
                End::Failed(_) => ProxyError::StreamBroken { provider: provider.clone(), why: "broke off" },
                _ => ProxyError::StreamBroken { provider: provider.clone(), why: "ended early" },
            })
        }
    }
}

/// What the relay loop writes: the translator's chunks, or (passing through) the upstream's
/// own events.
struct Out {
    sink: StreamSink,
    raw: Option<BytesMut>,
}

/// An upstream event as it came, for a passed-through stream.
fn push_event(raw: &mut BytesMut, ev: &Event) {
    if !ev.event.is_empty() {
        raw.put_slice(b"event: ");
        raw.put_slice(ev.event.as_bytes());
        raw.put_u8(b'\n');
    }
    for line in ev.data.split('\n') {
        raw.put_slice(b"data: ");
        raw.put_slice(line.as_bytes());
        raw.put_u8(b'\n');
    }
    raw.put_u8(b'\n');
}

/// The most of a passed-through stream held back before its first content.
const PASSTHROUGH_HOLD_BYTES: usize = 256 * 1024;

/// Whether a passed-through event is the model's output going out: any Messages block's delta,
/// any Responses `*.delta` (thinking and reasoning included, which the translation does not
/// count as content).
fn passed_content(event: &str) -> bool {
    event == "content_block_delta" || (event.starts_with("response.") && event.ends_with(".delta"))
}

/// Relays events until the stream ends one way or another.
async fn relay<S>(
    session: &mut Session,
    ctx: &mut RequestCtx,
    events: &mut std::pin::Pin<&mut S>,
    translator: &mut dyn StreamTranslator,
    out: &mut Out,
    ends_at_eof: bool,
    provider: &std::sync::Arc<str>,
) -> End
where
    S: Stream<Item = Result<Event, EventStreamError<ProxyError>>>,
{
    loop {
        // Gather what is already here; write it out before waiting for more.
        let next = match events.next().now_or_never() {
            Some(next) => next,
            None => {
                if let Err(e) = flush(session, ctx, &mut out.sink, &mut out.raw).await {
                    return End::Gone(e);
                }
                events.next().await
            }
        };
        let sink = &mut out.sink;
        match next {
            None if ends_at_eof && (ctx.header_sent || sink.pending() > 0) => return End::Done,
            None => return End::Cut,
            Some(Ok(ev)) => {
                let flow = translator.event(&ev.event, &ev.data, sink);
                if let (Some(raw), Ok(_)) = (out.raw.as_mut(), &flow) {
                    push_event(raw, &ev);
                    // Events wait for the first content (a failure before it can fall back), but
                    // never more than a bounded amount of them.
                    if passed_content(&ev.event) || raw.len() > PASSTHROUGH_HOLD_BYTES {
                        sink.saw_content();
                    }
                }
                match flow {
                    _ if sink.blocked.is_some() => return End::Blocked,
                    Ok(Flow::Continue) => {}
                    Ok(Flow::Done) => return End::Done,
                    Err(e) => return End::Failed(ProxyError::upstream(provider, e)),
                }
            }
            Some(Err(e)) => return End::Failed(read_error(provider, e)),
        }
    }
}

fn read_error(provider: &std::sync::Arc<str>, e: EventStreamError<ProxyError>) -> ProxyError {
    if e.is_transport() {
        return match e.into_transport() {
            Some(e) => e,
            None => ProxyError::Internal("event stream error lost its cause".into()),
        };
    }
    ProxyError::upstream(provider, UpstreamError::bad_response(format!("bad event stream: {e}")))
}

/// Reads the rest of a stream nobody receives, for its usage: until its end, an error, the
/// request's deadline or `stream_drain_max_bytes`. True when the stream reached its end.
async fn drain<S>(
    gw: &Gateway,
    ctx: &RequestCtx,
    events: &mut std::pin::Pin<&mut S>,
    translator: &mut dyn StreamTranslator,
    sink: &mut StreamSink,
    read: &AtomicUsize,
    ends_at_eof: bool,
) -> bool
where
    S: Stream<Item = Result<Event, EventStreamError<ProxyError>>>,
{
    sink.forward_nothing();
    let started = read.load(Ordering::Relaxed);
    let done = loop {
        if read.load(Ordering::Relaxed).saturating_sub(started) > gw.drain_max_bytes {
            break false;
        }
        match ctx.within_deadline(events.next()).await {
            Ok(Some(Ok(ev))) => match translator.event(&ev.event, &ev.data, sink) {
                Ok(Flow::Continue) => {}
                Ok(Flow::Done) => break true,
                Err(_) => break false,
            },
            Ok(None) => break ends_at_eof,
            Ok(Some(Err(_))) | Err(_) => break false,
        }
        sink.take();
    };
    gw.metrics.stream_drains.with_label_values(&[if done { "usage" } else { "estimate" }]).inc();
    done
}

/// Bills a stream's attempt: from its usage when the stream reached its end and reported it,
/// else at an estimate. Returns this attempt's cost.
fn bill_stream(
    gw: &Gateway,
    ctx: &mut RequestCtx,
    up: &Upstream<'_>,
    sink: &StreamSink,
    complete: bool,
) -> rust_decimal::Decimal {
    match sink.usage {
        Some(u) if complete => bill::charge(gw, ctx, up.dep, u, SettledBy::Usage),
        seen => bill::charge_estimate(gw, ctx, up, seen, sink.completion_bytes),
    }
}

/// The error that ends a stream the output guardrails stopped, with its decision recorded even
/// when no guardrail of the request made it (a chunk the guardrails could not read).
fn blocked(ctx: &mut RequestCtx, sink: &mut StreamSink) -> ProxyError {
    let recorded = ctx.policy.iter().any(|d| d.stage == Stage::Output && d.action == PolicyAction::Blocked);
    if let (false, Some(b)) = (recorded, sink.blocked.as_ref()) {
        ctx.policy.push(PolicyDecision {
            policy: b.policy.clone(),
            guardrail: b.guardrail,
            action: PolicyAction::Blocked,
            stage: Stage::Output,
            reason: b.reason.clone(),
            entities: Vec::new(),
        });
    }
    guard::blocked(sink)
}

/// Writes what the sink gathered; the first write starts the response. It waits for the first
/// chunk with content (at most the role chunk waits with it): that moment is the TTFT the header
/// reports, and a failure before it can still fall back to another deployment.
async fn flush(
    session: &mut Session,
    ctx: &mut RequestCtx,
    sink: &mut StreamSink,
    raw: &mut Option<BytesMut>,
) -> Result<(), ProxyError> {
    if !ctx.header_sent && !sink.content_seen {
        return Ok(());
    }
    let chunks = sink.take();
    let bytes = match raw {
        // The translation was only for billing, the cache and traces.
        Some(raw) => {
            if let (Some(trace), Some(c)) = (ctx.trace.as_deref_mut(), &chunks) {
                trace.note_finish_reasons(c);
            }
            if raw.is_empty() {
                return Ok(());
            }
            raw.split().freeze()
        }
        None => match chunks {
            Some(c) => c,
            None => return Ok(()),
        },
    };
    if !ctx.header_sent {
        ctx.ttft = Some(ctx.started.elapsed());
        write::start_stream(session, ctx).await?;
    }
    write::stream_bytes(session, ctx, bytes).await
}
