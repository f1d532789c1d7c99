//! Anthropic: error bodies as gw upstream failures.

use super::*;

#[derive(Debug, Deserialize)]
pub(super) struct ErrorEnvelope {
    pub(super) error: ErrorDetail,
}

/// Whether Anthropic's message says the prompt (with `max_tokens`) does not fit the context.
pub(super) fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["prompt is too long", "context window", "context limit", "too many tokens"].iter().any(|s| m.contains(s))
}

/// A non-success Messages API answer as gw's error.
pub fn error_from_anthropic(status: u16, body: &[u8]) -> UpstreamError {
    let detail = format!("HTTP {status}: {}", log_snippet(body));
    let failure = match status {
        429 => UpstreamFailure::RateLimited,
        // 529 is Anthropic's "overloaded".
        s if s >= 500 => UpstreamFailure::Unavailable { status: Some(s) },
        // Credentials, billing (402), permissions and model names are gw's account and
        // configuration: another deployment may serve the request.
        401..=404 => UpstreamFailure::Unavailable { status: Some(status) },
        400 | 409 | 413 | 415 | 422 => {
            let Some(message) = serde_json::from_slice::<ErrorEnvelope>(body).ok().and_then(|e| e.error.message) else {
                return default_error(status, body);
            };
            let code = is_context_overflow(&message).then_some("context_length_exceeded");
            let body = ErrorBody::new(message, "invalid_request_error", code, None);
            UpstreamFailure::Rejected { status, body: Box::new(body) }
        }
        _ => return default_error(status, body),
    };
    UpstreamError::new(failure, detail)
}
