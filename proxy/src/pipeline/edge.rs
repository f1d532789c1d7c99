//! The first step: which endpoint, and whether the request's headers are within bounds.

use gw_shared::openai::validate::echo;
use pingora::proxy::Session;

use crate::ctx::Endpoint;
use crate::error::ProxyError;
use crate::state::Gateway;

/// The endpoint a path names (whatever the method), with the method it takes.
fn named(session: &Session) -> Option<(Endpoint, http::Method, &'static str)> {
    Some(match session.req_header().uri.path().trim_end_matches('/') {
        "/v1/models" => (Endpoint::Models, http::Method::GET, "GET"),
        "/v1/chat/completions" => (Endpoint::ChatCompletions, http::Method::POST, "POST"),
        "/v1/embeddings" => (Endpoint::Embeddings, http::Method::POST, "POST"),
        "/v1/messages" => (Endpoint::Messages, http::Method::POST, "POST"),
        "/v1/messages/count_tokens" => (Endpoint::MessagesCountTokens, http::Method::POST, "POST"),
        "/v1/responses" => (Endpoint::Responses, http::Method::POST, "POST"),
        _ => return None,
    })
}

/// The endpoint a path names, before anything else is checked: its errors (a 431, a 405) take
/// that endpoint's dialect.
pub fn addressed(session: &Session) -> Option<Endpoint> {
    named(session).map(|(e, _, _)| e)
}

/// The endpoint a request addresses, or 404/405.
pub fn endpoint(session: &Session) -> Result<Endpoint, ProxyError> {
    let req = session.req_header();
    let path = req.uri.path();
    let Some((endpoint, allowed, allow)) = named(session) else {
        return Err(ProxyError::NotFound { method: echo(req.method.as_str()), path: echo(path) });
    };
    if req.method != allowed {
        return Err(ProxyError::MethodNotAllowed { method: echo(req.method.as_str()), path: endpoint.path(), allow });
    }
    Ok(endpoint)
}

/// 431 for a header block or a single header value over its limit. Pingora itself refuses a
/// block over 1 MiB with 400 before gw sees it.
pub fn check_headers(gw: &Gateway, session: &Session) -> Result<(), ProxyError> {
    let req = session.req_header();
    let mut total = req.uri.to_string().len();
    for (name, value) in req.headers.iter() {
        let size = name.as_str().len() + value.len() + 4;
        if value.len() > gw.limits.max_header_value_bytes {
            return Err(ProxyError::HeaderTooLarge(format!(
                "Request header '{}' is larger than the {}-byte limit.",
                echo(name.as_str()),
                gw.limits.max_header_value_bytes
            )));
        }
        total += size;
    }
    if total > gw.limits.max_header_bytes {
        return Err(ProxyError::HeaderTooLarge(format!(
            "Request headers are larger than the {}-byte limit.",
            gw.limits.max_header_bytes
        )));
    }
    Ok(())
}
