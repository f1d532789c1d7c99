//! The Google Gemini adapter (Generative Language API): chat goes to
//! `models/{model}:generateContent`, or `models/{model}:streamGenerateContent?alt=sse` when
//! streamed, embeddings to `models/{model}:batchEmbedContents`; the key travels in
//! `x-goog-api-key`.
//!
//! The translation is pure (no network, no clock): [`to_gemini`], [`from_gemini`],
//! [`GeminiStream`] and [`error_from_gemini`] are public and testable on their own.
//!
//! What OpenAI can say and Gemini cannot (log probabilities, audio output, legacy `functions`,
//! web search options, content parts other than text and images, custom tools, `allowed_tools`
//! tool choices) is refused with [`AdapterError::Unsupported`] naming the parameter, so the
//! fallback loop may try a deployment that can serve it. Parameters that only tune OpenAI's own
//! service or have no Gemini counterpart that changes what a correct answer is (`user`,
//! `safety_identifier`, `logit_bias`, `store`, `metadata`, `service_tier`, `prediction`, prompt
//! cache keys, `verbosity`, `parallel_tool_calls`: Gemini has no switch for it) are dropped.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::openai::credential_header;
use super::{
    default_error, log_snippet, Adapter, AdapterError, Call, Completion, Endpoint, Exchange, Flow, StreamSetup,
    StreamSink, StreamTranslator, UpstreamError, UpstreamFailure, UpstreamRequest,
};
use crate::openai::{
    embeddings_response, AssistantMessage, ChatCompletion, ChatCompletionChunk, ChatRequest, Choice, Delta,
    EmbeddingsRequest, ErrorBody,
};
use crate::pricing::TokenUsage;

/// Gemini's `alt=sse` streams have no end event (no `[DONE]`, no `message_stop`): the body simply
/// ends after the fragment carrying the last `finishReason` and the final `usageMetadata`. A
/// translator cannot tell the last fragment from the others, so [`GeminiStream`] always answers
/// [`Flow::Continue`], and the proxy treats a clean end of the body (after a finish) as the
/// stream's completion for adapters that say so through [`Adapter::stream_ends_at_eof`].
pub const STREAM_ENDS_AT_EOF: bool = true;

const API_KEY_HEADER: &str = "x-goog-api-key";

pub struct GeminiAdapter;

impl Adapter for GeminiAdapter {
    fn supports(&self, endpoint: Endpoint) -> bool {
        matches!(endpoint, Endpoint::ChatCompletions | Endpoint::Embeddings)
    }

    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError> {
        let body = serde_json::to_vec(&to_gemini(call.request)?).map_err(AdapterError::config)?;
        // Without `alt=sse` Gemini streams one JSON array spread over the body, not events.
        let method = if call.request.stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
        Ok(Exchange::Http(UpstreamRequest {
            path: format!("{}/models/{}:{method}", call.base_path, model_id(call.upstream_model)?),
            headers: key_header(call.api_key)?,
            body: body.into(),
        }))
    }

    fn parse_response(&self, call: &Call<'_>, body: &[u8]) -> Result<Completion, UpstreamError> {
        from_gemini(body, call.created, &call.completion_id(), call.upstream_model)
    }

    fn stream(&self, setup: StreamSetup) -> Box<dyn StreamTranslator> {
        Box::new(GeminiStream::new(setup))
    }

    fn stream_ends_at_eof(&self) -> bool {
        STREAM_ENDS_AT_EOF
    }

    fn map_error(&self, status: u16, body: &[u8]) -> UpstreamError {
        error_from_gemini(status, body)
    }

    fn build_embeddings(&self, call: &Call<'_, EmbeddingsRequest>) -> Result<Exchange, AdapterError> {
        let texts = call.request.texts().ok_or_else(|| {
            unsupported("This model embeds text only: 'input' must be a string or an array of strings, not token ids.")
        })?;
        let model = model_id(call.upstream_model)?;
        let body = to_gemini_embeddings(texts, model, call.request.dimensions);
        let body = serde_json::to_vec(&body).map_err(AdapterError::config)?;
        Ok(Exchange::Http(UpstreamRequest {
            path: format!("{}/models/{model}:batchEmbedContents", call.base_path),
            headers: key_header(call.api_key)?,
            body: body.into(),
        }))
    }

    fn parse_embeddings(&self, call: &Call<'_, EmbeddingsRequest>, body: &[u8]) -> Result<Completion, UpstreamError> {
        from_gemini_embeddings(call.request, call.upstream_model, body)
    }
}

/// The model id as a path segment. It is followed by `:method` and may end up before a query, so
/// only the characters Gemini's model ids use get through; a `models/` prefix (Gemini's resource
/// name) is accepted too.
fn model_id(upstream_model: &str) -> Result<&str, AdapterError> {
    let model = upstream_model.strip_prefix("models/").unwrap_or(upstream_model);
    if model.is_empty() || !model.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')) {
        return Err(AdapterError::Config(format!("'{upstream_model}' is not a Gemini model id")));
    }
    Ok(model)
}

fn key_header(key: Option<&str>) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, AdapterError> {
    key.map(|k| credential_header(http::HeaderName::from_static(API_KEY_HEADER), k.to_string())).into_iter().collect()
}

use super::translate::*;

mod embeddings;
mod errors;
mod request;
mod response;
mod stream;
#[cfg(test)]
mod tests;

use embeddings::*;
pub use errors::*;
pub use request::*;
pub use response::*;
pub use stream::*;
