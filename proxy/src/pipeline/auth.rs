//! Authentication: the SHA-256 of the bearer key, looked up in the cached key lookup (in-process,
//! then Redis, then Postgres; revocations arrive over Redis). Addresses that fail too often stop
//! causing Postgres lookups for unknown keys.

use chrono::Utc;
use gw_shared::keys;
use pingora::proxy::Session;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::lookup::LookupError;
use crate::state::Gateway;

use gw_shared::accounts::{permits, PERM_CHAT, PERM_EMBEDDINGS, PERM_MESSAGES, PERM_MODELS, PERM_RESPONSES};

use crate::ctx::Endpoint;

/// The permission scope an endpoint needs (`proxy:llm` carries every one).
fn scope(endpoint: Option<Endpoint>) -> &'static str {
    match endpoint {
        Some(Endpoint::Models) => PERM_MODELS,
        Some(Endpoint::Embeddings) => PERM_EMBEDDINGS,
        Some(Endpoint::Messages | Endpoint::MessagesCountTokens) => PERM_MESSAGES,
        Some(Endpoint::Responses) => PERM_RESPONSES,
        Some(Endpoint::ChatCompletions) | None => PERM_CHAT,
    }
}

pub async fn run(gw: &Gateway, session: &Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let headers = &session.req_header().headers;
    let token = match (headers.get(http::header::AUTHORIZATION), headers.get("x-api-key")) {
        (Some(header), _) => keys::parse_bearer(header.as_bytes()).ok_or(ProxyError::MalformedAuth)?,
        // Anthropic's SDKs send the key in `x-api-key`.
        (None, Some(key)) => {
            key.to_str().ok().map(str::trim).filter(|k| !k.is_empty()).ok_or(ProxyError::MalformedAuth)?
        }
        (None, None) => return Err(ProxyError::MissingAuth),
    };
    if keys::looks_like_jwt(token) || token.starts_with(keys::SERVICE_TOKEN_PREFIX) {
        return Err(ProxyError::SessionTokenOnProxy);
    }
    let pass = gw.throttle.pass(ctx.client_ip);
    let found = gw.lookups.keys.get(&keys::hash_secret(token), &|| pass.admit()).await;
    let key = match found {
        Ok(Some(key)) => key,
        Ok(None) => {
            pass.failed().await;
            return Err(ProxyError::InvalidKey(redacted(token)));
        }
        Err(LookupError::NotAllowed) => {
            gw.metrics.auth_throttled.inc();
            return Err(ProxyError::AuthThrottled(gw.throttle.retry_after(ctx.client_ip)));
        }
        Err(LookupError::Unavailable) => return Err(ProxyError::StoreUnavailable),
    };
    if key.revoked_at.is_some() {
        pass.failed().await;
        return Err(ProxyError::RevokedKey(redacted(token)));
    }
    if key.expires_at.is_some_and(|t| t <= Utc::now()) {
        return Err(ProxyError::ExpiredKey(redacted(token)));
    }
    let scope = scope(ctx.endpoint);
    if !permits(&key.permissions, scope) {
        return Err(ProxyError::PermissionDenied(scope));
    }
    ctx.key = Some(key);
    Ok(())
}

/// What of a presented key may appear in an error message or a log: its first characters only.
fn redacted(token: &str) -> String {
    let shown: String = token.chars().take(keys::DISPLAY_PREFIX_LEN.min(token.len() / 2)).collect();
    format!("{shown}****")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_never_shows_the_secret() {
        let k = keys::generate_api_key();
        let r = redacted(&k.secret);
        assert!(r.starts_with(&k.prefix));
        assert!(!r.contains(&k.secret[keys::DISPLAY_PREFIX_LEN..]));
        assert_eq!(redacted("abcd"), "ab****");
    }
}
