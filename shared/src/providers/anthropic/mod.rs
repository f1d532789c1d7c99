//! The Anthropic Messages API adapter (`POST /v1/messages`). OpenAI chat requests are translated
//! into Messages requests, answers and stream events back into OpenAI completions and chunks.
//!
//! The translation is pure (no network, no clock): [`to_anthropic`], [`from_anthropic`],
//! [`AnthropicStream`] and [`error_from_anthropic`] are public so other Anthropic-speaking
//! providers (Bedrock's Anthropic models use the same body) can reuse them.
//!
//! What OpenAI can say and the Messages API cannot (several choices, log probabilities, JSON
//! response formats, audio, files, legacy `functions`) is refused with
//! [`AdapterError::Unsupported`] naming the parameter, so the fallback loop may try a deployment
//! that can serve it. Parameters that only tune OpenAI's own service (penalties, seed, logit
//! bias, store, metadata, service tier, prediction, prompt cache keys) are dropped silently: they
//! do not change what a correct answer is.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    default_error, log_snippet, Adapter, AdapterError, Call, Completion, Exchange, Flow, StreamSetup, StreamSink,
    StreamTranslator, UpstreamError, UpstreamFailure, UpstreamRequest,
};
use crate::openai::{AssistantMessage, ChatCompletion, ChatCompletionChunk, ChatRequest, Choice, Delta, ErrorBody};
use crate::pricing::{ServiceTier, TokenUsage};

/// The `anthropic-version` header sent when the provider's options name none.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// `max_tokens` when the client set no limit: the Messages API requires one, and every Claude
/// model can produce at least this many.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

pub const MESSAGES_PATH: &str = "/messages";

/// The smallest `thinking.budget_tokens` the Messages API accepts.
const MIN_THINKING_BUDGET: u64 = 1024;

pub struct AnthropicAdapter;

/// The headers every Anthropic API call carries: the key (if any) as `x-api-key`, marked
/// sensitive, and the `anthropic-version` (default [`DEFAULT_VERSION`]).
pub fn credentials(
    key: Option<&str>,
    version: Option<&str>,
) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, AdapterError> {
    let mut headers = Vec::with_capacity(2);
    if let Some(key) = key {
        headers.push(super::openai::credential_header(http::HeaderName::from_static("x-api-key"), key.to_string())?);
    }
    let version = http::HeaderValue::try_from(version.unwrap_or(DEFAULT_VERSION))
        .map_err(|_| AdapterError::config("the provider's api_version is not a valid header value"))?;
    headers.push((http::HeaderName::from_static("anthropic-version"), version));
    Ok(headers)
}

impl Adapter for AnthropicAdapter {
    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError> {
        let body = to_anthropic(call.request, call.upstream_model)?;
        let body = serde_json::to_vec(&body).map_err(AdapterError::config)?;
        let headers = credentials(call.api_key, call.options.api_version.as_deref())?;
        Ok(Exchange::Http(UpstreamRequest {
            path: format!("{}{MESSAGES_PATH}", call.base_path),
            headers,
            body: body.into(),
        }))
    }

    fn parse_response(&self, call: &Call<'_>, body: &[u8]) -> Result<Completion, UpstreamError> {
        from_anthropic(body, call.created, &call.completion_id(), call.upstream_model)
    }

    fn stream(&self, setup: StreamSetup) -> Box<dyn StreamTranslator> {
        Box::new(AnthropicStream::new(setup))
    }

    fn map_error(&self, status: u16, body: &[u8]) -> UpstreamError {
        error_from_anthropic(status, body)
    }
}

use super::translate::*;

mod errors;
mod request;
mod response;
mod stream;
#[cfg(test)]
mod tests;

pub use errors::*;
pub use request::*;
pub use response::*;
pub use stream::*;
