//! Writing responses downstream. Every response, success or error, carries the `x-gw-*` headers,
//! derived here from the request context and nowhere else. Once a response's end is written
//! (`ctx.body_done`), nothing more goes out.

use std::time::Duration;

use bytes::Bytes;
use gw_shared::headers;
use gw_shared::openai::SSE_DONE;
use gw_shared::pricing::format_cost;
use http::response::Parts;
use http::{HeaderName, HeaderValue, StatusCode};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::ctx::{Endpoint, RequestCtx};
use crate::error::ProxyError;

const REQUEST_ID: HeaderName = HeaderName::from_static(headers::REQUEST_ID);
const PROVIDER: HeaderName = HeaderName::from_static(headers::PROVIDER);
const MODEL: HeaderName = HeaderName::from_static(headers::MODEL);
const COST_USD: HeaderName = HeaderName::from_static(headers::COST_USD);
const LATENCY_MS: HeaderName = HeaderName::from_static(headers::LATENCY_MS);
const TTFT_MS: HeaderName = HeaderName::from_static(headers::TTFT_MS);
const CACHE: HeaderName = HeaderName::from_static(headers::CACHE);
const CACHE_SIMILARITY: HeaderName = HeaderName::from_static(headers::CACHE_SIMILARITY);
const POLICY_ACTION: HeaderName = HeaderName::from_static(headers::POLICY_ACTION);
const POLICY_REASON: HeaderName = HeaderName::from_static(headers::POLICY_REASON);
const EXPERIMENT: HeaderName = HeaderName::from_static(headers::EXPERIMENT);
const EXPERIMENT_VARIANT: HeaderName = HeaderName::from_static(headers::EXPERIMENT_VARIANT);
const PROMPT_TEMPLATE: HeaderName = HeaderName::from_static(headers::PROMPT_TEMPLATE);
const PROMPT_TEMPLATE_VERSION: HeaderName = HeaderName::from_static(headers::PROMPT_TEMPLATE_VERSION);
const LIMIT_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-limit-requests");
const REMAINING_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-requests");
const RESET_REQUESTS: HeaderName = HeaderName::from_static("x-ratelimit-reset-requests");
const LIMIT_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-limit-tokens");
const REMAINING_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-remaining-tokens");
const RESET_TOKENS: HeaderName = HeaderName::from_static("x-ratelimit-reset-tokens");

const NONE: HeaderValue = HeaderValue::from_static(headers::POLICY_NONE);
const GW: HeaderValue = HeaderValue::from_static("gw");
const JSON: HeaderValue = HeaderValue::from_static("application/json");
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream; charset=utf-8");
const NO_CACHE: HeaderValue = HeaderValue::from_static("no-cache");
const CHUNKED: HeaderValue = HeaderValue::from_static("chunked");
const NO: HeaderValue = HeaderValue::from_static("no");

fn ms(d: Duration) -> HeaderValue {
    HeaderValue::from(d.as_millis() as u64)
}

fn text(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or(NONE)
}

/// A response header with every gateway header, as the context says now. `ttft` becomes the
/// latency when nothing set it (the first token arrives with the whole body). Built as plain
/// `http` parts: Pingora's own `append_header` parses every (static) name again.
pub fn header(ctx: &mut RequestCtx, status: u16, content_type: HeaderValue) -> Result<Parts, ProxyError> {
    let latency = ctx.started.elapsed();
    let ttft = *ctx.ttft.get_or_insert(latency);
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = StatusCode::from_u16(status).map_err(|e| ProxyError::internal("response status", e))?;
    let h = &mut parts.headers;
    h.reserve(20);
    let mut id = [0u8; 36];
    let (provider, model) = match ctx.last_attempt() {
        _ if ctx.answered_by_gw => (GW, NONE),
        _ if ctx.cached_from.is_some() => match &ctx.cached_from {
            Some((p, m)) => (text(p), text(m)),
            None => (NONE, NONE),
        },
        Some(a) => (text(&a.provider), text(&a.upstream_model)),
        None => (NONE, NONE),
    };
    let (action, reason) = match ctx.policy_verdict() {
        Some(d) => (HeaderValue::from_static(d.action.label()), text(&d.reason)),
        None => (NONE, NONE),
    };
    h.insert(http::header::CONTENT_TYPE, content_type);
    h.insert(REQUEST_ID, text(ctx.request_id.hyphenated().encode_lower(&mut id)));
    h.insert(PROVIDER, provider);
    h.insert(MODEL, model);
    h.insert(COST_USD, text(&format_cost(ctx.cost)));
    h.insert(LATENCY_MS, ms(latency));
    h.insert(TTFT_MS, ms(ttft));
    h.insert(CACHE, HeaderValue::from_static(ctx.cache.label()));
    if let Some(s) = ctx.cache_similarity {
        h.insert(CACHE_SIMILARITY, text(&format!("{s:.4}")));
    }
    h.insert(POLICY_ACTION, action);
    h.insert(POLICY_REASON, reason);
    if let Some((template, version)) = ctx.template {
        h.insert(PROMPT_TEMPLATE, text(template.hyphenated().encode_lower(&mut id)));
        h.insert(PROMPT_TEMPLATE_VERSION, HeaderValue::from(version));
    }
    if let Some((experiment, variant)) = &ctx.experiment {
        h.insert(EXPERIMENT, text(experiment.hyphenated().encode_lower(&mut id)));
        h.insert(EXPERIMENT_VARIANT, text(variant));
    }
    if let Some(limits) = ctx.limits {
        let windows = [
            (limits.requests, [LIMIT_REQUESTS, REMAINING_REQUESTS, RESET_REQUESTS]),
            (limits.tokens, [LIMIT_TOKENS, REMAINING_TOKENS, RESET_TOKENS]),
        ];
        for (window, [limit, remaining, reset]) in windows {
            if let Some(w) = window {
                h.insert(limit, HeaderValue::from(w.limit));
                h.insert(remaining, HeaderValue::from(w.remaining));
                h.insert(reset, text(&reset_text(w.reset)));
            }
        }
    }
    Ok(parts)
}

/// A reset time as OpenAI writes it: `20ms`, `1.5s`, `6m0s`.
fn reset_text(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let s = format!("{:.3}", ms as f64 / 1000.0);
        format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
    } else {
        format!("{}m{}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

async fn send_header(session: &mut Session, ctx: &mut RequestCtx, parts: Parts) -> Result<(), ProxyError> {
    ctx.status = parts.status.as_u16();
    ctx.header_sent = true;
    ctx.header_at = Some(std::time::Instant::now());
    let header = ResponseHeader::from(parts);
    session.write_response_header(Box::new(header), false).await.map_err(|e| ProxyError::client_gone(&e))
}

/// Writes a complete JSON response.
pub async fn json(
    session: &mut Session,
    ctx: &mut RequestCtx,
    status: u16,
    body: Bytes,
    extra: Vec<(HeaderName, HeaderValue)>,
) -> Result<(), ProxyError> {
    let passed_through = ctx.passthrough && status == 200;
    if status == 200 && !passed_through {
        if let Some(trace) = ctx.trace.as_deref_mut() {
            trace.note_finish_reasons(&body);
        }
    }
    let body = match ctx.endpoint {
        _ if passed_through => body,
        Some(Endpoint::Messages) if status == 200 => as_message(ctx, &body),
        Some(Endpoint::Responses) if status == 200 => as_response(ctx, &body),
        _ => body,
    };
    let mut parts = header(ctx, status, JSON)?;
    parts.headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    for (name, value) in extra {
        parts.headers.insert(name, value);
    }
    send_header(session, ctx, parts).await?;
    if ctx.log_bodies {
        ctx.response_body = Some(String::from_utf8_lossy(&body).into_owned());
    }
    ctx.body_done = true;
    journal(ctx, true);
    session.write_response_body(Some(body), true).await.map_err(|e| ProxyError::client_gone(&e))?;
    Ok(())
}

/// A chat completion body as the Messages API's `message`.
fn as_message(ctx: &RequestCtx, body: &[u8]) -> Bytes {
    let chat: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let id = gw_shared::messages::message_id(ctx.request_id);
    let message = gw_shared::messages::message(&chat, &id, ctx.model.as_deref().unwrap_or_default(), &ctx.usage);
    Bytes::from(message.to_string())
}

/// A chat completion body as the Responses API's `response`.
fn as_response(ctx: &mut RequestCtx, body: &[u8]) -> Bytes {
    let model = ctx.model.clone().unwrap_or_default();
    let Some(echo) = ctx.responses_echo.as_deref_mut() else { return Bytes::copy_from_slice(body) };
    echo.model = model;
    let chat: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    Bytes::from(gw_shared::responses::response(echo, &chat, &ctx.usage).to_string())
}

/// The audit row as the answer's end goes out, into the journal first: a process killed after
/// those bytes are sent loses no row of a request it answered (`crate::audit_journal`). The
/// logging step queues the row with the journal's hold on it. `complete`: nothing about the
/// request changes after this write but its timings (a stream's error event is followed by
/// reading on and billing what the upstream produced, so its row is built again at the end).
fn journal(ctx: &mut RequestCtx, complete: bool) {
    let Some(journal) = ctx.journal.as_deref() else { return };
    if ctx.journaled.is_some() {
        return;
    }
    let Some(entry) = crate::pipeline::audit::record(ctx, journal.max_body) else { return };
    ctx.journaled = journal.keep(&entry);
    if complete {
        ctx.answered_row = Some(entry);
    }
}

/// Starts an SSE response; the body follows in pieces.
pub async fn start_stream(session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    // The model a re-framed stream names: the one that served the request (an experiment may
    // have changed it after the request was parsed).
    if let Some(model) = ctx.model.as_deref() {
        if let Some(events) = ctx.messages_events.as_deref_mut() {
            events.set_model(model);
        }
        if let Some(events) = ctx.responses_events.as_deref_mut() {
            events.set_model(model);
        }
    }
    let mut parts = header(ctx, 200, EVENT_STREAM)?;
    parts.headers.insert(http::header::CACHE_CONTROL, NO_CACHE);
    parts.headers.insert(http::header::TRANSFER_ENCODING, CHUNKED);
    parts.headers.insert(HeaderName::from_static("x-accel-buffering"), NO);
    send_header(session, ctx, parts).await
}

/// Most of a streamed answer kept for the audit row when bodies are logged (the row cuts it to
/// `audit_max_body_bytes`; this only bounds what is held meanwhile).
const STREAM_BODY_CAPTURE: usize = 1024 * 1024;

/// Writes a piece of a stream: the pipeline's chunks (re-framed for the Messages and Responses
/// APIs), or a passed-through stream's own events.
pub async fn stream_bytes(session: &mut Session, ctx: &mut RequestCtx, bytes: Bytes) -> Result<(), ProxyError> {
    if !ctx.passthrough {
        if let Some(trace) = ctx.trace.as_deref_mut() {
            trace.note_finish_reasons(&bytes);
        }
    }
    let bytes = match (ctx.passthrough, ctx.messages_events.as_mut(), ctx.responses_events.as_mut()) {
        (true, _, _) => bytes,
        (false, Some(events), _) => Bytes::from(events.frames(&bytes)),
        (false, None, Some(events)) => Bytes::from(events.frames(&bytes)),
        (false, None, None) => bytes,
    };
    if ctx.log_bodies {
        let kept = ctx.response_body.get_or_insert_with(String::new);
        if kept.len() < STREAM_BODY_CAPTURE {
            kept.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    session.write_response_body(Some(bytes), false).await.map_err(|e| ProxyError::client_gone(&e))
}

/// Ends a stream: a comment carrying the exact cost (SSE clients ignore comments), then `[DONE]`.
pub async fn finish_stream(session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    ctx.body_done = true;
    let mut tail = format!(": x-gw-cost-usd={}\n\n", format_cost(ctx.cost)).into_bytes();
    match (ctx.passthrough, ctx.messages_events.as_mut(), ctx.responses_events.as_mut()) {
        // The deployment's own `message_stop` has gone out.
        (true, _, _) => {}
        (false, Some(events), _) => tail.extend_from_slice(&events.finish(&ctx.usage)),
        // The Responses API's stream ends with `response.completed`, no `[DONE]`.
        (false, None, Some(events)) => tail.extend_from_slice(&events.finish(&ctx.usage)),
        (false, None, None) => tail.extend_from_slice(SSE_DONE),
    }
    journal(ctx, true);
    session.write_response_body(Some(Bytes::from(tail)), true).await.map_err(|e| ProxyError::client_gone(&e))
}

/// Answers with the error: the OpenAI error object and its status, or, once a stream has
/// started, its error event.
pub async fn error(session: &mut Session, ctx: &mut RequestCtx, err: &ProxyError) -> Result<(), ProxyError> {
    if ctx.body_done {
        return Ok(()); // the response is complete; nothing can be added
    }
    if ctx.header_sent {
        ctx.body_done = true;
        if !ctx.stream {
            return Ok(());
        }
        journal(ctx, false);
        let event = match ctx.endpoint {
            Some(e) if e.is_messages() => Bytes::from(err.messages_event(ctx.request_id)),
            Some(Endpoint::Responses) => match ctx.responses_events.as_mut() {
                Some(events) => {
                    let body = err.body();
                    let e = &body.error;
                    Bytes::from(events.error(
                        e.code.as_deref().unwrap_or(e.kind.as_str()),
                        &e.message,
                        e.param.as_deref(),
                    ))
                }
                None => err.sse_event(),
            },
            _ => err.sse_event(),
        };
        return session.write_response_body(Some(event), true).await.map_err(|e| ProxyError::client_gone(&e));
    }
    if err.closes_connection() {
        // The rest of the request was not read: the connection cannot carry another one.
        session.set_keepalive(None);
    }
    let body = match ctx.endpoint {
        Some(e) if e.is_messages() => err.messages_body(ctx.request_id),
        _ => serde_json::to_vec(&err.body()).map_err(|e| ProxyError::internal("error body", e))?,
    };
    json(session, ctx, err.status(), Bytes::from(body), err.extra_headers()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_read_like_openai_s() {
        assert_eq!(reset_text(Duration::from_millis(20)), "20ms");
        assert_eq!(reset_text(Duration::from_millis(1500)), "1.5s");
        assert_eq!(reset_text(Duration::from_millis(59_000)), "59s");
        assert_eq!(reset_text(Duration::from_millis(360_400)), "6m0s");
    }
}
