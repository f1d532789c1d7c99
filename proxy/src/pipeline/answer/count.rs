//! `POST /v1/messages/count_tokens`: Anthropic's own count when an Anthropic deployment would serve
//! the request (`route::anthropic_count`), else the prompt's tokens as gw's limits estimate them
//! (four bytes a token plus the chat framing, images at their ceiling).

use bytes::Bytes;
use pingora::proxy::Session;

use super::write;
use crate::ctx::RequestCtx;
use crate::error::ProxyError;

pub async fn count_tokens(session: &mut Session, ctx: &mut RequestCtx, counted: Option<u64>) -> Result<(), ProxyError> {
    let tokens = match (counted, &ctx.request) {
        (Some(n), _) => n,
        (None, Some(r)) => gw_shared::limits::estimate::chat(r, 0).prompt_tokens,
        (None, None) => 0,
    };
    ctx.answered_by_gw = true;
    let body = serde_json::json!({ "input_tokens": tokens }).to_string();
    write::json(session, ctx, 200, Bytes::from(body), Vec::new()).await
}
