//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of gw's `/v1` surface (its operations, the
//! `x-gw-*` request and response headers, gw's error codes), served without a key, before any
//! other step, like the admin API's own document. The document is `proxy/openapi.json`, built
//! into the binary; `tests/python/test_v1_openapi.py` validates it and checks it against the
//! running proxy.

use bytes::Bytes;
use pingora::proxy::Session;

use super::answer;
use crate::ctx::RequestCtx;
use crate::error::ProxyError;

pub const PATH: &str = "/v1/openapi.json";

static DOCUMENT: &str = include_str!("../../openapi.json");

/// Whether the request asks for the document (405 for another method on its path).
pub fn asked(session: &Session) -> Result<bool, ProxyError> {
    let req = session.req_header();
    if req.uri.path().trim_end_matches('/') != PATH {
        return Ok(false);
    }
    if req.method != http::Method::GET {
        let method = gw_shared::openai::validate::echo(req.method.as_str());
        return Err(ProxyError::MethodNotAllowed { method, path: PATH, allow: "GET" });
    }
    Ok(true)
}

pub async fn run(session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    ctx.answered_by_gw = true;
    answer::json(session, ctx, 200, Bytes::from_static(DOCUMENT.as_bytes()), Vec::new()).await
}
