//! Writing responses downstream: every response, success or error, carries the nine `x-gw-*`
//! headers built from the request context.

use std::time::Duration;

use bytes::Bytes;
use gw_shared::headers;
use gw_shared::openai::{sse_event, ErrorBody};
use gw_shared::pricing::format_cost;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;

fn ms(d: Duration) -> String {
    d.as_millis().to_string()
}

/// A response header with the gateway metadata. `ttft` is the time to the first byte of the
/// answer: the first chunk of a stream, or the whole body otherwise.
pub fn header(ctx: &RequestCtx, status: u16, content_type: &str, ttft: Duration) -> pingora::Result<ResponseHeader> {
    let mut h = ResponseHeader::build(status, Some(16))?;
    h.insert_header("Content-Type", content_type)?;
    h.insert_header(headers::REQUEST_ID, ctx.request_id.to_string())?;
    h.insert_header(headers::PROVIDER, ctx.provider_header().to_string())?;
    h.insert_header(headers::MODEL, ctx.model_header().to_string())?;
    h.insert_header(headers::COST_USD, format_cost(ctx.cost))?;
    h.insert_header(headers::LATENCY_MS, ms(ctx.started.elapsed()))?;
    h.insert_header(headers::TTFT_MS, ms(ttft))?;
    h.insert_header(headers::CACHE, headers::CACHE_MISS)?;
    h.insert_header(headers::POLICY_ACTION, headers::POLICY_NONE)?;
    h.insert_header(headers::POLICY_REASON, headers::POLICY_NONE)?;
    Ok(h)
}

/// Writes a complete JSON response.
pub async fn json(session: &mut Session, ctx: &mut RequestCtx, status: u16, body: Vec<u8>) -> Result<(), ProxyError> {
    json_with(session, ctx, status, body, None).await
}

async fn json_with(
    session: &mut Session,
    ctx: &mut RequestCtx,
    status: u16,
    body: Vec<u8>,
    extra: Option<(&'static str, &'static str)>,
) -> Result<(), ProxyError> {
    let elapsed = ctx.started.elapsed();
    // Without a stream the first token reaches the client with the whole body.
    let ttft = *ctx.ttft.get_or_insert(elapsed);
    let mut h = header(ctx, status, "application/json", ttft)?;
    h.insert_header("Content-Length", body.len())?;
    if let Some((name, value)) = extra {
        h.insert_header(name, value)?;
    }
    ctx.status = status;
    ctx.header_sent = true;
    session.write_response_header(Box::new(h), false).await?;
    session.write_response_body(Some(Bytes::from(body)), true).await?;
    Ok(())
}

/// Starts an SSE response; the body follows in chunks.
pub async fn start_stream(session: &mut Session, ctx: &mut RequestCtx, ttft: Duration) -> Result<(), ProxyError> {
    let mut h = header(ctx, 200, "text/event-stream; charset=utf-8", ttft)?;
    h.insert_header("Cache-Control", "no-cache")?;
    h.insert_header("Transfer-Encoding", "chunked")?;
    h.insert_header("X-Accel-Buffering", "no")?;
    ctx.status = 200;
    ctx.header_sent = true;
    session.write_response_header(Box::new(h), false).await?;
    Ok(())
}

/// Writes the error as an OpenAI error object with its status.
pub async fn error(session: &mut Session, ctx: &mut RequestCtx, err: &ProxyError) -> Result<(), ProxyError> {
    let body = serde_json::to_vec(&err.body()).map_err(|e| ProxyError::Internal(e.to_string()))?;
    let extra = match err {
        ProxyError::MethodNotAllowed { allow, .. } => Some(("Allow", *allow)),
        ProxyError::BodyTooLarge(_) => {
            // Do not read (and discard) the rest of an oversized upload to keep the connection.
            session.set_keepalive(None);
            None
        }
        _ => None,
    };
    json_with(session, ctx, err.status(), body, extra).await
}

/// Ends a started stream with an error event: how OpenAI's SDKs learn of a failure after the
/// status line was sent.
pub async fn stream_error(session: &mut Session, body: &ErrorBody) -> Result<(), ProxyError> {
    let event = sse_event(body).map_err(|e| ProxyError::Internal(e.to_string()))?;
    session.write_response_body(Some(event), true).await?;
    Ok(())
}
