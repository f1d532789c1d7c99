//! The proxy's error type and its single mapping to HTTP: status, the OpenAI error object (so
//! official SDKs raise the matching exception), the mid-stream error event, and whether another
//! deployment may be tried. Nothing else in the proxy builds a `/v1` error body.

use std::sync::Arc;

use bytes::Bytes;
use gw_shared::openai::validate::echo;
use gw_shared::openai::{sse_event, ErrorBody};
use gw_shared::providers::{UpstreamError, UpstreamFailure};
use http::{HeaderName, HeaderValue};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ProxyError {
    #[error("Unknown request URL: {method} {path}. Supported: GET /v1/models, POST /v1/chat/completions, POST /v1/embeddings.")]
    NotFound { method: String, path: String },
    #[error("Method {method} is not allowed on {path}; use {allow}.")]
    MethodNotAllowed { method: String, path: &'static str, allow: &'static str },
    #[error("{0}")]
    HeaderTooLarge(String),
    #[error("You didn't provide an API key. Send it as 'Authorization: Bearer <API_KEY>'.")]
    MissingAuth,
    #[error("Malformed Authorization header: expected 'Bearer <API_KEY>'.")]
    MalformedAuth,
    #[error("Management credentials (session and service-account tokens) are not accepted on /v1: use an API key (sk_live_...).")]
    SessionTokenOnProxy,
    #[error("Incorrect API key provided: {0}.")]
    InvalidKey(String),
    #[error("This API key ({0}) has been revoked.")]
    RevokedKey(String),
    #[error("This API key ({0}) has expired.")]
    ExpiredKey(String),
    #[error("This API key lacks the '{0}' permission.")]
    PermissionDenied(&'static str),
    #[error("Too many failed authentication attempts from this address; retry in {0} s.")]
    AuthThrottled(u64),
    #[error("{0}")]
    InvalidTeam(String),
    /// A rate limit or budget refused the request.
    #[error("{}", .0.message)]
    LimitExceeded(Box<gw_shared::limits::plan::Refusal>),
    #[error("Request body is larger than the {0}-byte limit.")]
    BodyTooLarge(usize),
    #[error("{message}")]
    BadRequest { message: String, param: Option<String> },
    #[error("The model '{}' does not exist or you do not have access to it.", echo(.0))]
    UnknownModel(String),
    /// The referenced prompt template (or its version or label) does not exist for the caller.
    #[error("{0}")]
    PromptNotFound(String),
    /// The model serves another endpoint (a chat model on `/v1/embeddings`, ...).
    #[error("The model '{}' is not served on {path}; it serves {serves}.", echo(model))]
    WrongEndpoint { model: String, path: &'static str, serves: &'static str },
    /// No deployment could express the request (e.g. a feature the provider lacks).
    #[error("{0}")]
    Unsupported(String),
    /// Every deployment of the model runs in another region than the organization's.
    #[error("The model '{}' has no deployment in this organization's data-residency region ({region}).", echo(model))]
    NotInRegion { model: String, region: String },
    /// Every deployment of the model is cooling down after failures or at its capacity.
    #[error("No deployment of model '{}' is available right now (all are cooling down or at capacity); retry shortly.", echo(.0))]
    NoDeployment(String),
    /// The upstream answered, and not with what the client asked for.
    #[error("{}", upstream_message(provider, error))]
    Upstream { provider: Arc<str>, error: UpstreamError },
    #[error("gw could not connect to upstream provider '{provider}' ({why}).")]
    UpstreamConnect { provider: Arc<str>, why: &'static str },
    #[error("Upstream provider '{provider}' did not answer in time.")]
    UpstreamTimeout { provider: Arc<str> },
    /// A stream that had started broke off.
    #[error("The stream from upstream provider '{provider}' {why}.")]
    StreamBroken { provider: Arc<str>, why: &'static str },
    /// The request's deadline (in milliseconds) passed.
    #[error("The request did not complete within its deadline of {0} ms.")]
    DeadlineExceeded(u64),
    #[error("The authentication backend is unavailable; retry shortly.")]
    StoreUnavailable,
    /// A guardrail blocked the request (or, mid-stream, the answer). The reason names the policy
    /// and the cause, never the matched values.
    #[error("Blocked by policy '{policy}': {reason}.")]
    PolicyBlocked { policy: String, reason: String },
    /// The `x-gw-policy` header names something that cannot apply.
    #[error("{0}")]
    PolicyHeader(String),
    /// A guardrail failed internally and its policy fails closed.
    #[error("A guardrail of policy '{policy}' failed and the policy fails closed; the request was not sent.")]
    GuardrailFailed { policy: String },
    /// The input's text times its guardrails' passes is past the per-request scan budget.
    #[error("This request's text ({bytes} bytes) is too large for the guardrails that apply to it: scanning it would take {work} byte-passes, past the limit of {budget}. Send less text per request.")]
    PolicyScanTooLarge { bytes: u64, work: u64, budget: u64 },
    /// Heavy guardrail scans are queued past the queue's bound.
    #[error("The gateway is busy scanning other large requests; retry shortly.")]
    PolicyScanBusy,
    /// The organization's policy could not be read: which guardrails are mandatory is unknown.
    #[error("The organization's policy is unavailable; retry shortly.")]
    PolicyUnavailable,
    /// A bug or misconfiguration: the detail goes to the log, the client gets the gist.
    #[error("Internal error.")]
    Internal(String),
    /// Reading from or writing to the client failed: there is nobody left to tell.
    #[error("client disconnected ({0})")]
    ClientGone(&'static str),
}

fn upstream_message(provider: &str, e: &UpstreamError) -> String {
    match &e.failure {
        UpstreamFailure::Rejected { body, .. } => body.error.message.clone(),
        UpstreamFailure::RateLimited => {
            format!("Upstream provider '{provider}' is rate limiting requests; retry later.")
        }
        UpstreamFailure::Unavailable { status: Some(s @ (401 | 403)) } => {
            format!("Upstream provider '{provider}' refused gw's credentials (HTTP {s}).")
        }
        UpstreamFailure::Unavailable { status: Some(404) } => {
            format!("Upstream provider '{provider}' does not serve the model this deployment names (HTTP 404).")
        }
        UpstreamFailure::Unavailable { status: Some(s) } => {
            format!("Upstream provider '{provider}' returned HTTP {s}.")
        }
        UpstreamFailure::Unavailable { status: None } => format!("Upstream provider '{provider}' is unavailable."),
        UpstreamFailure::BadResponse => format!("Upstream provider '{provider}' returned an invalid response."),
        UpstreamFailure::MidStream => format!("Upstream provider '{provider}' failed mid-stream."),
    }
}

impl ProxyError {
    /// Wraps a failed write to (or read from) the client.
    pub fn client_gone(e: &pingora::Error) -> Self {
        ProxyError::ClientGone(e.etype().as_str())
    }

    /// Wraps a failure building a response (a bug, not the client's doing).
    pub fn internal(what: &str, e: impl std::fmt::Display) -> Self {
        ProxyError::Internal(format!("{what}: {e}"))
    }

    pub fn upstream(provider: &Arc<str>, error: UpstreamError) -> Self {
        ProxyError::Upstream { provider: provider.clone(), error }
    }

    /// Whether the next deployment may be tried (provided nothing reached the client yet).
    pub fn retryable(&self) -> bool {
        match self {
            ProxyError::Upstream { error, .. } => match &error.failure {
                UpstreamFailure::RateLimited | UpstreamFailure::Unavailable { .. } | UpstreamFailure::BadResponse => {
                    true
                }
                // A prompt too long for one model may fit the next (a fallback with a larger window).
                UpstreamFailure::Rejected { body, .. } => body.error.code.as_deref() == Some("context_length_exceeded"),
                UpstreamFailure::MidStream => false,
            },
            ProxyError::UpstreamConnect { .. } | ProxyError::UpstreamTimeout { .. } | ProxyError::Unsupported(_) => {
                true
            }
            _ => false,
        }
    }

    pub fn status(&self) -> u16 {
        use ProxyError::*;
        match self {
            NotFound { .. } | UnknownModel(_) | PromptNotFound(_) => 404,
            MethodNotAllowed { .. } => 405,
            HeaderTooLarge(_) => 431,
            MissingAuth | MalformedAuth | SessionTokenOnProxy | InvalidKey(_) | RevokedKey(_) | ExpiredKey(_) => 401,
            PermissionDenied(_) => 403,
            AuthThrottled(_) | LimitExceeded(_) => 429,
            InvalidTeam(_) | BadRequest { .. } | WrongEndpoint { .. } | Unsupported(_) | NotInRegion { .. } => 400,
            PolicyBlocked { .. } | PolicyHeader(_) => 400,
            GuardrailFailed { .. } | PolicyUnavailable | PolicyScanBusy => 503,
            PolicyScanTooLarge { .. } => 413,
            NoDeployment(_) => 503,
            BodyTooLarge(_) => 413,
            Upstream { error, .. } => match &error.failure {
                UpstreamFailure::Rejected { status, .. } => *status,
                UpstreamFailure::RateLimited => 429,
                _ => 502,
            },
            UpstreamConnect { .. } | StreamBroken { .. } => 502,
            UpstreamTimeout { .. } | DeadlineExceeded(_) => 504,
            StoreUnavailable => 503,
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
            HeaderTooLarge(_) => "header_too_large",
            MissingAuth | MalformedAuth | SessionTokenOnProxy | InvalidKey(_) => "invalid_api_key",
            RevokedKey(_) => "revoked_api_key",
            ExpiredKey(_) => "expired_api_key",
            PermissionDenied(_) => "permission_denied",
            AuthThrottled(_) => "auth_throttled",
            LimitExceeded(r) if r.budget => "budget_exceeded",
            LimitExceeded(_) => "rate_limit_exceeded",
            InvalidTeam(_) => "invalid_team",
            BodyTooLarge(_) => "request_too_large",
            BadRequest { .. } => "invalid_request",
            UnknownModel(_) => "model_not_found",
            PromptNotFound(_) => "prompt_not_found",
            WrongEndpoint { .. } => "wrong_endpoint",
            Unsupported(_) => "unsupported_parameter",
            NotInRegion { .. } => "model_not_in_region",
            NoDeployment(_) => "no_available_deployment",
            Upstream { error, .. } => match &error.failure {
                UpstreamFailure::Rejected { .. } => "upstream_rejected",
                UpstreamFailure::RateLimited => "upstream_rate_limited",
                UpstreamFailure::Unavailable { .. } => "upstream_unavailable",
                UpstreamFailure::BadResponse => "upstream_bad_response",
                UpstreamFailure::MidStream => "upstream_stream_broken",
            },
            UpstreamConnect { .. } => "upstream_unavailable",
            UpstreamTimeout { .. } => "upstream_timeout",
            StreamBroken { .. } => "upstream_stream_broken",
            DeadlineExceeded(_) => "deadline_exceeded",
            StoreUnavailable => "service_unavailable",
            PolicyBlocked { .. } => "content_policy_violation",
            PolicyHeader(_) => "invalid_policy",
            GuardrailFailed { .. } => "guardrail_failed",
            PolicyUnavailable => "policy_unavailable",
            PolicyScanTooLarge { .. } => "policy_scan_too_large",
            PolicyScanBusy => "policy_scan_busy",
            Internal(_) => "internal_error",
            ClientGone(_) => "client_disconnected",
        }
    }

    /// The OpenAI error object.
    pub fn body(&self) -> ErrorBody {
        use ProxyError::*;
        if let Upstream { error: UpstreamError { failure: UpstreamFailure::Rejected { body, .. }, .. }, .. } = self {
            return (**body).clone();
        }
        let (kind, code, param): (&str, &str, Option<&str>) = match self {
            NotFound { .. } => ("invalid_request_error", "unknown_url", None),
            MethodNotAllowed { .. } => ("invalid_request_error", "method_not_allowed", None),
            HeaderTooLarge(_) => ("invalid_request_error", "request_header_too_large", None),
            MissingAuth | MalformedAuth | SessionTokenOnProxy | InvalidKey(_) => {
                ("invalid_request_error", "invalid_api_key", None)
            }
            RevokedKey(_) => ("invalid_request_error", "revoked_api_key", None),
            ExpiredKey(_) => ("invalid_request_error", "expired_api_key", None),
            PermissionDenied(_) => ("permission_error", "insufficient_permissions", None),
            AuthThrottled(_) => ("rate_limit_error", "auth_throttled", None),
            LimitExceeded(r) => (r.error_type, self.label(), None),
            InvalidTeam(_) => ("invalid_request_error", "invalid_team", Some("x-gw-team")),
            BodyTooLarge(_) => ("invalid_request_error", "request_too_large", None),
            BadRequest { param, .. } => ("invalid_request_error", "invalid_request", param.as_deref()),
            UnknownModel(_) => ("invalid_request_error", "model_not_found", Some("model")),
            PromptNotFound(_) => ("invalid_request_error", "prompt_not_found", Some("prompt")),
            WrongEndpoint { .. } => ("invalid_request_error", "wrong_endpoint", Some("model")),
            Unsupported(_) => ("invalid_request_error", "unsupported_parameter", None),
            NotInRegion { .. } => ("invalid_request_error", "model_not_in_region", Some("model")),
            NoDeployment(_) => ("api_error", "no_available_deployment", None),
            Upstream { error, .. } if error.failure == UpstreamFailure::RateLimited => {
                ("rate_limit_error", self.label(), None)
            }
            Upstream { .. } | UpstreamConnect { .. } | UpstreamTimeout { .. } | StreamBroken { .. } => {
                ("api_error", self.label(), None)
            }
            DeadlineExceeded(_) => ("api_error", "upstream_timeout", None),
            StoreUnavailable => ("api_error", "service_unavailable", None),
            PolicyBlocked { .. } => ("invalid_request_error", "content_policy_violation", None),
            PolicyHeader(_) => ("invalid_request_error", "invalid_policy", Some("x-gw-policy")),
            GuardrailFailed { .. } => ("api_error", "guardrail_failed", None),
            PolicyUnavailable => ("api_error", "policy_unavailable", None),
            PolicyScanTooLarge { .. } => ("invalid_request_error", "policy_scan_too_large", None),
            PolicyScanBusy => ("api_error", "policy_scan_busy", None),
            Internal(_) | ClientGone(_) => ("api_error", "internal_error", None),
        };
        ErrorBody::new(self.to_string(), kind, Some(code), param)
    }

    /// The error as the last event of a stream whose status line is long gone: how OpenAI's
    /// SDKs learn of a failure mid-stream.
    pub fn sse_event(&self) -> Bytes {
        sse_event(&self.body()).unwrap_or_else(|_| Bytes::from_static(b"data: {\"error\":{\"message\":\"Internal error.\",\"type\":\"api_error\",\"param\":null,\"code\":\"internal_error\"}}\n\n"))
    }

    /// Headers the response must carry besides the usual ones. A refusal by a limit says when to
    /// retry in whole seconds and in milliseconds (OpenAI's SDKs read `retry-after-ms` first), and
    /// a budget refusal tells them not to retry at all (`x-should-retry`): waiting seconds will
    /// not refill a budget.
    pub fn extra_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        match self {
            ProxyError::MethodNotAllowed { allow, .. } => {
                vec![(http::header::ALLOW, HeaderValue::from_static(allow))]
            }
            ProxyError::AuthThrottled(secs) => vec![(http::header::RETRY_AFTER, HeaderValue::from(*secs))],
            ProxyError::PolicyScanBusy => vec![(http::header::RETRY_AFTER, HeaderValue::from_static("1"))],
            ProxyError::LimitExceeded(r) => {
                let ms = r.retry_after.as_millis().max(1) as u64;
                vec![
                    (http::header::RETRY_AFTER, HeaderValue::from(ms.div_ceil(1000))),
                    (HeaderName::from_static("retry-after-ms"), HeaderValue::from(ms)),
                    (
                        HeaderName::from_static("x-should-retry"),
                        HeaderValue::from_static(if r.budget { "false" } else { "true" }),
                    ),
                ]
            }
            _ => Vec::new(),
        }
    }

    /// The message a Messages API client reads (its SDKs send the key in `x-api-key`).
    fn messages_message(&self) -> String {
        match self {
            ProxyError::MissingAuth => {
                "You didn't provide an API key. Send it as 'x-api-key: <API_KEY>' or 'Authorization: Bearer <API_KEY>'."
                    .into()
            }
            _ => self.body().error.message,
        }
    }

    /// The error in Anthropic's Messages API shape (`/v1/messages`): same status, Anthropic's
    /// error type for it.
    pub fn messages_body(&self, request_id: uuid::Uuid) -> Vec<u8> {
        gw_shared::messages::error_body(self.status(), &self.messages_message(), &request_id.to_string())
            .to_string()
            .into_bytes()
    }

    /// [`Self::messages_body`] as the `error` event ending a stream.
    pub fn messages_event(&self, request_id: uuid::Uuid) -> Vec<u8> {
        gw_shared::messages::error_event(self.status(), &self.messages_message(), &request_id.to_string())
    }

    /// Whether the connection must close after the answer (the rest of the request was not read).
    pub fn closes_connection(&self) -> bool {
        matches!(self, ProxyError::BodyTooLarge(_) | ProxyError::HeaderTooLarge(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> Arc<str> {
        Arc::from("up")
    }

    #[test]
    fn statuses_and_shapes() {
        assert_eq!(ProxyError::MissingAuth.status(), 401);
        assert_eq!(ProxyError::BodyTooLarge(10).status(), 413);
        assert_eq!(ProxyError::HeaderTooLarge("x".into()).status(), 431);
        assert_eq!(ProxyError::UnknownModel("x".into()).status(), 404);
        let b = ProxyError::UnknownModel("gpt-x".into()).body();
        assert_eq!(b.error.param.as_deref(), Some("model"));
        assert!(b.error.message.contains("gpt-x"));
        let v = serde_json::to_value(ProxyError::MissingAuth.body()).unwrap_or_default();
        for f in ["message", "type", "param", "code"] {
            assert!(v["error"].as_object().is_some_and(|o| o.contains_key(f)), "{f}");
        }
    }

    #[test]
    fn echoed_client_text_is_bounded() {
        let huge = "m".repeat(3 << 20);
        let msg = ProxyError::UnknownModel(huge).body().error.message;
        assert!(msg.len() < 200, "{}", msg.len());
    }

    #[test]
    fn upstream_words_reach_the_client_only_when_about_its_request() {
        let secret = "org-acct-12345 quota exhausted";
        for failure in [
            UpstreamFailure::RateLimited,
            UpstreamFailure::Unavailable { status: Some(503) },
            UpstreamFailure::BadResponse,
            UpstreamFailure::MidStream,
        ] {
            let e = ProxyError::upstream(&provider(), UpstreamError::new(failure, secret));
            assert!(!e.body().error.message.contains("org-acct"), "{e}");
            assert!(!String::from_utf8_lossy(&e.sse_event()).contains("org-acct"));
        }
        let rejected = UpstreamFailure::Rejected {
            status: 400,
            body: Box::new(ErrorBody::new(
                "temperature is too hot",
                "invalid_request_error",
                None,
                Some("temperature"),
            )),
        };
        let e = ProxyError::upstream(&provider(), UpstreamError::new(rejected, secret));
        assert_eq!(e.status(), 400);
        assert_eq!(e.body().error.message, "temperature is too hot");
    }

    #[test]
    fn retryable_errors() {
        let up = |f| ProxyError::upstream(&provider(), UpstreamError::new(f, ""));
        assert!(up(UpstreamFailure::RateLimited).retryable());
        assert!(up(UpstreamFailure::Unavailable { status: Some(500) }).retryable());
        assert!(up(UpstreamFailure::BadResponse).retryable());
        assert!(!up(UpstreamFailure::MidStream).retryable());
        assert!(ProxyError::UpstreamConnect { provider: provider(), why: "refused" }.retryable());
        assert!(ProxyError::UpstreamTimeout { provider: provider() }.retryable());
        assert!(!ProxyError::DeadlineExceeded(1).retryable());
        assert!(!ProxyError::UnknownModel("m".into()).retryable());
        assert!(!ProxyError::StreamBroken { provider: provider(), why: "ended early" }.retryable());
        assert!(ProxyError::Unsupported("no streams here".into()).retryable());
        assert_eq!(ProxyError::Unsupported("x".into()).status(), 400);
        assert_eq!(ProxyError::NoDeployment("m".into()).status(), 503);
        // A prompt too long for one model may fit a fallback; other refusals of the client's
        // request would be refused anywhere.
        let rejected = |code: Option<&str>| {
            let body = Box::new(ErrorBody::new("too long", "invalid_request_error", code, None));
            ProxyError::upstream(&provider(), UpstreamError::new(UpstreamFailure::Rejected { status: 400, body }, ""))
        };
        assert!(rejected(Some("context_length_exceeded")).retryable());
        assert!(!rejected(None).retryable());
        assert!(!rejected(Some("invalid_value")).retryable());
    }

    #[test]
    fn extra_headers() {
        let e = ProxyError::MethodNotAllowed { method: "GET".into(), path: "/v1/chat/completions", allow: "POST" };
        assert_eq!(
            e.extra_headers().first().map(|(n, v)| (n.clone(), v.to_str().unwrap_or_default().to_string())),
            Some((http::header::ALLOW, "POST".into()))
        );
        let e = ProxyError::AuthThrottled(42);
        assert_eq!(e.status(), 429);
        assert_eq!(e.extra_headers().first().map(|(_, v)| v.clone()), Some(HeaderValue::from(42u64)));
    }
}
