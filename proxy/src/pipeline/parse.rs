//! Reads the body once (bounded: a declared or actual size over the limit is a 413 before more
//! than the limit is buffered) and parses and validates it into the context.

use bytes::{Bytes, BytesMut};
use gw_shared::openai::{ChatRequest, EmbeddingsRequest};
use pingora::proxy::Session;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::state::Gateway;

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let body = ctx.within_deadline(read_bounded(session, gw.limits.max_body_bytes)).await??;
    let req = ChatRequest::parse(&body).map_err(|p| ProxyError::BadRequest { message: p.message, param: p.param })?;
    ctx.model = Some(req.model.clone());
    ctx.stream = req.stream;
    ctx.request = Some(req);
    Ok(())
}

/// A Messages API request (`/v1/messages` or its `count_tokens`), run as the chat request it
/// amounts to.
pub async fn run_messages(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let (raw, map) = read_object(gw, session, ctx).await?;
    let count_only = ctx.endpoint == Some(crate::ctx::Endpoint::MessagesCountTokens);
    let chat = gw_shared::messages::chat_body(&map, count_only).map_err(|p| bad(p.message, p.param))?;
    let req = ChatRequest::from_map(chat).map_err(|p| bad(p.message, p.param))?;
    let beta = anthropic_beta(session.req_header());
    ctx.messages_raw = Some(Box::new(crate::ctx::MessagesRaw { body: raw, model: req.model.clone(), beta }));
    ctx.model = Some(req.model.clone());
    ctx.stream = req.stream;
    if req.stream {
        ctx.messages_events = Some(Box::new(gw_shared::messages::EventEncoder::new(
            gw_shared::messages::message_id(ctx.request_id),
            req.model.clone(),
        )));
    }
    ctx.request = Some(req);
    Ok(())
}

/// A Responses API request, run as the chat request it amounts to.
pub async fn run_responses(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    use gw_shared::responses;
    let (raw, map) = read_object(gw, session, ctx).await?;
    let chat = responses::chat_body(&map).map_err(|p| bad(p.message, p.param))?;
    let req = ChatRequest::from_map(chat).map_err(|p| bad(p.message, p.param))?;
    ctx.responses_raw = Some(Box::new(crate::ctx::ResponsesRaw {
        body: raw,
        model: req.model.clone(),
        store_sent: map.get("store").is_some_and(|s| !s.is_null()),
        hosted_tools: responses::offers_hosted_tools(&map),
    }));
    ctx.model = Some(req.model.clone());
    ctx.stream = req.stream;
    let echo = responses::Echo::new(&map, responses::response_id(ctx.request_id), ctx.created_at.timestamp());
    if req.stream {
        ctx.responses_events = Some(Box::new(responses::EventEncoder::new(echo.clone())));
    }
    ctx.responses_echo = Some(Box::new(echo));
    ctx.request = Some(req);
    Ok(())
}

fn bad(message: String, param: Option<String>) -> ProxyError {
    ProxyError::BadRequest { message, param }
}

/// The body of another dialect's request (translated to chat by its module): its bytes and the
/// JSON object they hold.
async fn read_object(
    gw: &Gateway,
    session: &mut Session,
    ctx: &RequestCtx,
) -> Result<(bytes::Bytes, serde_json::Map<String, serde_json::Value>), ProxyError> {
    let body = ctx.within_deadline(read_bounded(session, gw.limits.max_body_bytes)).await??;
    let value: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| bad(format!("We could not parse the JSON body of your request: {e}"), None))?;
    match value {
        serde_json::Value::Object(map) => Ok((body, map)),
        _ => Err(bad("The request body must be a JSON object.".into(), None)),
    }
}

pub async fn run_embeddings(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let body = ctx.within_deadline(read_bounded(session, gw.limits.max_body_bytes)).await??;
    let req =
        EmbeddingsRequest::parse(&body).map_err(|p| ProxyError::BadRequest { message: p.message, param: p.param })?;
    ctx.model = Some(req.model.clone());
    ctx.embeddings = Some(req);
    Ok(())
}

async fn read_bounded(session: &mut Session, max: usize) -> Result<Bytes, ProxyError> {
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(ProxyError::BodyTooLarge(max));
    }
    let mut buf = BytesMut::with_capacity(declared.map_or(4096, |n| n as usize));
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > max {
                    return Err(ProxyError::BodyTooLarge(max));
                }
                if buf.is_empty() && declared.is_none_or(|n| n as usize == chunk.len()) {
                    // The whole body in one piece: keep it without a copy.
                    buf = BytesMut::from(&chunk[..]);
                } else {
                    buf.extend_from_slice(&chunk);
                }
            }
            Ok(None) => return Ok(buf.freeze()),
            Err(e) => {
                return Err(match e.etype() {
                    pingora::ErrorType::ReadError | pingora::ErrorType::ConnectionClosed => ProxyError::client_gone(&e),
                    _ => ProxyError::BadRequest {
                        message: format!("Could not read the request body: {}", e.etype().as_str()),
                        param: None,
                    },
                })
            }
        }
    }
}

/// The client's `anthropic-beta` values, several headers as one list.
fn anthropic_beta(req: &pingora::http::RequestHeader) -> Option<http::HeaderValue> {
    let values: Vec<&[u8]> = req.headers.get_all("anthropic-beta").iter().map(|v| v.as_bytes()).collect();
    match values.as_slice() {
        [] => None,
        [one] => http::HeaderValue::from_bytes(one).ok(),
        many => http::HeaderValue::from_bytes(&many.join(&b","[..])).ok(),
    }
}
