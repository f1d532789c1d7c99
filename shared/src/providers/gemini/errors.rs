//! Gemini: error bodies as gw upstream failures.

use super::*;

/// Google's error object, `{"error":{"code","message","status","details"}}`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct GeminiError {
    #[serde(default)]
    pub(super) message: Option<String>,
    #[serde(default)]
    pub(super) status: Option<String>,
    #[serde(default)]
    pub(super) details: Vec<ErrorInfo>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ErrorInfo {
    #[serde(default)]
    pub(super) reason: Option<String>,
}

impl GeminiError {
    pub(super) fn describe(&self) -> String {
        format!(
            "{}: {}",
            self.status.as_deref().unwrap_or("error"),
            log_snippet(self.message.as_deref().unwrap_or_default().as_bytes())
        )
    }

    /// A 400 about gw's account rather than the request: a bad or expired key (Gemini answers
    /// those with 400 INVALID_ARGUMENT, reason `API_KEY_INVALID`), or FAILED_PRECONDITION (the
    /// API not available for the project's region or billing). Another deployment may work.
    pub(super) fn is_account_problem(&self) -> bool {
        self.status.as_deref() == Some("FAILED_PRECONDITION")
            || self.details.iter().any(|d| d.reason.as_deref().is_some_and(|r| r.starts_with("API_KEY_")))
            || self.message.as_deref().is_some_and(|m| m.starts_with("API key "))
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct ErrorEnvelope {
    pub(super) error: GeminiError,
}

/// Error answers are an object, or for streamed methods without `alt=sse` an array of them.
/// `Many` comes first: serde would also read a one-element array as the struct, wrongly.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum ErrorAnswer {
    Many(Vec<ErrorEnvelope>),
    One(ErrorEnvelope),
}

pub(super) fn parse_error(body: &[u8]) -> Option<GeminiError> {
    match serde_json::from_slice::<ErrorAnswer>(body).ok()? {
        ErrorAnswer::Many(all) => all.into_iter().next().map(|e| e.error),
        ErrorAnswer::One(e) => Some(e.error),
    }
}

/// Whether Gemini's message says the prompt does not fit the model's context window
/// ("The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).").
pub(super) fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("exceeds the maximum number of tokens") || (m.contains("token count") && m.contains("exceed"))
}

/// A non-success Gemini answer as gw's error.
pub fn error_from_gemini(status: u16, body: &[u8]) -> UpstreamError {
    let detail = format!("HTTP {status}: {}", log_snippet(body));
    let error = parse_error(body);
    let failure = match status {
        // RESOURCE_EXHAUSTED: quota or rate.
        429 => UpstreamFailure::RateLimited,
        s if s >= 500 => UpstreamFailure::Unavailable { status: Some(s) },
        // UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND (the model): gw's key and configuration.
        401 | 403 | 404 => UpstreamFailure::Unavailable { status: Some(status) },
        400 if error.as_ref().is_some_and(GeminiError::is_account_problem) => {
            UpstreamFailure::Unavailable { status: Some(status) }
        }
        400 | 409 | 413 | 415 | 422 => {
            let Some(message) = error.and_then(|e| e.message) else { return default_error(status, body) };
            let code = is_context_overflow(&message).then_some("context_length_exceeded");
            let body = ErrorBody::new(message, "invalid_request_error", code, None);
            UpstreamFailure::Rejected { status, body: Box::new(body) }
        }
        _ => return default_error(status, body),
    };
    UpstreamError::new(failure, detail)
}
