//! The proxy's error type and its single mapping to HTTP: status plus the OpenAI error object,
//! so official SDKs raise the matching exception (`AuthenticationError` for 401, ...).

use gw_shared::openai::ErrorBody;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ProxyError {
    #[error("Unknown request URL: {method} {path}. Supported: GET /v1/models, POST /v1/chat/completions.")]
    NotFound { method: String, path: String },
    #[error("Method {method} is not allowed on {path}; use {allow}.")]
    MethodNotAllowed { method: String, path: String, allow: &'static str },
    #[error("You didn't provide an API key. Send it as 'Authorization: Bearer <API_KEY>'.")]
    MissingAuth,
    #[error("Malformed Authorization header: expected 'Bearer <API_KEY>'.")]
    MalformedAuth,
    #[error("Session tokens are not accepted on /v1: use an API key (sk_live_...).")]
    SessionTokenOnProxy,
    #[error("Incorrect API key provided: {0}.")]
    InvalidKey(String),
    #[error("This API key ({0}) has been revoked.")]
    RevokedKey(String),
    #[error("This API key ({0}) has expired.")]
    ExpiredKey(String),
    #[error("This API key lacks the '{0}' permission.")]
    PermissionDenied(&'static str),
    #[error("{0}")]
    InvalidTeam(String),
    #[error("Request body is larger than the {0}-byte limit.")]
    BodyTooLarge(usize),
    #[error("{message}")]
    BadRequest { message: String, param: Option<String> },
    #[error("The model '{0}' does not exist or you do not have access to it.")]
    UnknownModel(String),
    #[error("{0}")]
    UpstreamUnavailable(String),
    #[error("{0}")]
    UpstreamBadResponse(String),
    #[error("{0}")]
    UpstreamTimeout(String),
    /// The upstream refused the request with a client error; its status and message pass through.
    #[error("{}", body.error.message)]
    UpstreamRejected { status: u16, body: ErrorBody },
    #[error("{0}")]
    UpstreamRateLimited(String),
    #[error("The authentication backend is unavailable; retry shortly.")]
    AuthBackend,
    #[error("Internal error: {0}")]
    Internal(String),
    /// Writing to the client failed: there is nobody left to tell.
    #[error("client disconnected: {0}")]
    ClientGone(String),
}

impl ProxyError {
    pub fn status(&self) -> u16 {
        use ProxyError::*;
        match self {
            NotFound { .. } | UnknownModel(_) => 404,
            MethodNotAllowed { .. } => 405,
            MissingAuth | MalformedAuth | SessionTokenOnProxy | InvalidKey(_) | RevokedKey(_) | ExpiredKey(_) => 401,
            PermissionDenied(_) => 403,
            InvalidTeam(_) | BadRequest { .. } => 400,
            BodyTooLarge(_) => 413,
            UpstreamUnavailable(_) | UpstreamBadResponse(_) => 502,
            UpstreamTimeout(_) => 504,
            UpstreamRejected { status, .. } => *status,
            UpstreamRateLimited(_) => 429,
            AuthBackend => 503,
            Internal(_) => 500,
            ClientGone(_) => 499,
        }
    }

    /// Low-cardinality label for metrics and the audit row's `error_type`.
    pub fn label(&self) -> &'static str {
        use ProxyError::*;
        match self {
            NotFound { .. } => "not_found",
            MethodNotAllowed { .. } => "method_not_allowed",
            MissingAuth | MalformedAuth | SessionTokenOnProxy | InvalidKey(_) => "invalid_api_key",
            RevokedKey(_) => "revoked_api_key",
            ExpiredKey(_) => "expired_api_key",
            PermissionDenied(_) => "permission_denied",
            InvalidTeam(_) => "invalid_team",
            BodyTooLarge(_) => "request_too_large",
            BadRequest { .. } => "invalid_request",
            UnknownModel(_) => "model_not_found",
            UpstreamUnavailable(_) => "upstream_unavailable",
            UpstreamBadResponse(_) => "upstream_bad_response",
            UpstreamTimeout(_) => "upstream_timeout",
            UpstreamRejected { .. } => "upstream_rejected",
            UpstreamRateLimited(_) => "upstream_rate_limited",
            AuthBackend => "auth_backend_unavailable",
            Internal(_) => "internal_error",
            ClientGone(_) => "client_disconnected",
        }
    }

    pub fn body(&self) -> ErrorBody {
        use ProxyError::*;
        if let UpstreamRejected { body, .. } = self {
            return body.clone();
        }
        let (kind, code, param): (&str, Option<&str>, Option<&str>) = match self {
            NotFound { .. } => ("invalid_request_error", Some("unknown_url"), None),
            MethodNotAllowed { .. } => ("invalid_request_error", Some("method_not_allowed"), None),
            MissingAuth | MalformedAuth | SessionTokenOnProxy | InvalidKey(_) => {
                ("invalid_request_error", Some("invalid_api_key"), None)
            }
            RevokedKey(_) => ("invalid_request_error", Some("revoked_api_key"), None),
            ExpiredKey(_) => ("invalid_request_error", Some("expired_api_key"), None),
            PermissionDenied(_) => ("permission_error", Some("insufficient_permissions"), None),
            InvalidTeam(_) => ("invalid_request_error", Some("invalid_team"), Some("x-gw-team")),
            BodyTooLarge(_) => ("invalid_request_error", Some("request_too_large"), None),
            BadRequest { param, .. } => ("invalid_request_error", None, param.as_deref()),
            UnknownModel(_) => ("invalid_request_error", Some("model_not_found"), Some("model")),
            UpstreamUnavailable(_) => ("api_error", Some("upstream_unavailable"), None),
            UpstreamBadResponse(_) => ("api_error", Some("upstream_bad_response"), None),
            UpstreamTimeout(_) => ("api_error", Some("upstream_timeout"), None),
            UpstreamRateLimited(_) => ("rate_limit_error", Some("upstream_rate_limited"), None),
            AuthBackend => ("api_error", Some("service_unavailable"), None),
            Internal(_) | ClientGone(_) => ("api_error", Some("internal_error"), None),
            UpstreamRejected { .. } => unreachable_kind(),
        };
        ErrorBody::new(self.to_string(), kind, code, param)
    }
}

// Handled by the early return above; kept total without a panic.
fn unreachable_kind() -> (&'static str, Option<&'static str>, Option<&'static str>) {
    ("api_error", None, None)
}

impl From<Box<pingora::Error>> for ProxyError {
    /// Errors from writing the downstream response: the client is gone.
    fn from(e: Box<pingora::Error>) -> Self {
        ProxyError::ClientGone(e.etype().as_str().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_shapes() {
        assert_eq!(ProxyError::MissingAuth.status(), 401);
        assert_eq!(ProxyError::BodyTooLarge(10).status(), 413);
        assert_eq!(ProxyError::UnknownModel("x".into()).status(), 404);
        assert_eq!(ProxyError::UpstreamBadResponse("x".into()).status(), 502);
        let b = ProxyError::UnknownModel("gpt-x".into()).body();
        assert_eq!(b.error.param.as_deref(), Some("model"));
        assert!(b.error.message.contains("gpt-x"));
        let v = serde_json::to_value(ProxyError::MissingAuth.body()).unwrap_or_default();
        for f in ["message", "type", "param", "code"] {
            assert!(v["error"].as_object().is_some_and(|o| o.contains_key(f)), "{f}");
        }
    }
}
