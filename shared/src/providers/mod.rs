//! Provider adapters: how a request reaches an upstream and how its answer comes back, one file
//! per provider behind the [`Adapter`] trait, found by the provider's `kind` in a [`Registry`].
//!
//! An adapter knows a provider's protocol and nothing of transport: it builds the upstream
//! request (or answers in-process, like the built-in mock), parses a response, translates one
//! stream event at a time into OpenAI chunks, and maps the upstream's errors to ours. The proxy
//! owns the connection, timeouts, the deadline and the fallback loop, so adding a provider is a
//! new file plus a registry entry.

pub mod anthropic;
pub mod azure;
pub mod bedrock;
pub mod gemini;
pub mod mock;
pub mod openai;
pub mod responses;
mod sink;
mod translate;
mod url;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use uuid::Uuid;

use crate::openai::{ChatRequest, EmbeddingsRequest, ErrorBody};
use crate::pricing::TokenUsage;

pub use sink::{text_bytes, ChunkFilter, Frames, StreamSink};
pub use url::UpstreamUrl;

/// The `/v1` endpoints a request can be adapted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions,
    Embeddings,
}

impl Endpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat.completions",
            Endpoint::Embeddings => "embeddings",
        }
    }
}

/// Provider settings beyond a base URL and a key, from the provider's `conf/` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderOptions {
    /// Azure OpenAI's `api-version` query parameter; Anthropic's `anthropic-version` header.
    pub api_version: Option<String>,
    /// AWS region (Bedrock).
    pub region: Option<String>,
    /// The upstream serves OpenAI's Responses API (`{base_url}/responses`): `/v1/responses`
    /// requests pass through to it (`openai` providers).
    pub responses_api: bool,
    /// The host the request goes to, as signed (Bedrock SigV4 signs it).
    pub host: String,
}

/// What an adapter is told about one attempt: the request and the deployment serving it.
/// `R` is the endpoint's request: [`ChatRequest`] or [`EmbeddingsRequest`].
pub struct Call<'a, R = ChatRequest> {
    pub endpoint: Endpoint,
    pub request: &'a R,
    pub upstream_model: &'a str,
    /// The provider credential for this attempt (the organization's own provider key, else the
    /// deployment's configured one), if there is one. For Bedrock: `ACCESS_KEY_ID:SECRET`.
    pub api_key: Option<&'a str>,
    /// Path prefix of the provider's base URL (`/v1`), empty for in-process providers.
    pub base_path: &'a str,
    pub options: &'a ProviderOptions,
    /// gw's id for the request: in-process providers use it for the completion id.
    pub request_id: Uuid,
    /// Unix time the request arrived: the `created` of synthesized completions.
    pub created: i64,
}

impl<R> Call<'_, R> {
    /// The id of a completion gw synthesizes itself.
    pub fn completion_id(&self) -> String {
        format!("chatcmpl-{}", self.request_id.simple())
    }
}

/// An HTTP request for the upstream. The proxy adds `Host`, `Content-Length`, `Content-Type`
/// (JSON), `Accept` and `User-Agent`; the adapter adds what its protocol needs (credentials,
/// versions).
#[derive(Debug, Clone)]
pub struct UpstreamRequest {
    pub path: String,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub body: Bytes,
}

/// What an in-process provider answers: exactly what an upstream would have sent.
#[derive(Debug, Clone)]
pub struct LocalResponse {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
}

/// How an attempt reaches its provider.
#[derive(Debug)]
pub enum Exchange {
    Http(UpstreamRequest),
    Local(LocalResponse),
}

/// A complete (non-streaming) answer, in the OpenAI shape.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The body to send downstream.
    pub body: Bytes,
    /// Usage as the upstream reported it; `None` when it reported none.
    pub usage: Option<TokenUsage>,
}

/// What the proxy should do after a stream event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// The upstream said the stream is complete.
    Done,
}

/// Translates one stream's events into OpenAI chunks, in order. Stateful: formats that spread a
/// message over several event types (Anthropic, Gemini) keep what they need between events.
pub trait StreamTranslator: Send {
    /// One server-sent event (`event` is its type, empty when it had none). Chunks for the client
    /// and usage go to `out`.
    fn event(&mut self, event: &str, data: &str, out: &mut StreamSink) -> Result<Flow, UpstreamError>;

    /// The `sequence_number` of the last event, for protocols that number them (Responses): an
    /// event gw adds to a passed-through stream continues the numbering.
    fn last_sequence(&self) -> Option<u64> {
        None
    }
}

/// Per-stream facts a translator may need.
#[derive(Debug, Clone)]
pub struct StreamSetup {
    /// The client asked for the final usage chunk.
    pub include_usage: bool,
    pub completion_id: String,
    pub model: String,
    pub created: i64,
}

pub trait Adapter: Send + Sync {
    /// Whether providers of this kind need a `base_url` (in-process ones do not).
    fn needs_base_url(&self) -> bool {
        true
    }

    /// Whether this provider serves `endpoint` at all (checked when `conf/` is loaded).
    fn supports(&self, endpoint: Endpoint) -> bool {
        endpoint == Endpoint::ChatCompletions
    }

    /// The upstream request for one attempt, or the in-process answer.
    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError>;

    /// Parses a complete successful response body into the OpenAI shape.
    fn parse_response(&self, call: &Call<'_>, body: &[u8]) -> Result<Completion, UpstreamError>;

    /// A translator for one streamed response.
    fn stream(&self, setup: StreamSetup) -> Box<dyn StreamTranslator>;

    /// Whether this protocol's streams end with the body rather than an end event (Gemini's
    /// `alt=sse` has no `[DONE]`): a clean end of the body then completes the stream.
    fn stream_ends_at_eof(&self) -> bool {
        false
    }

    /// Maps a non-success upstream status and body to our error.
    fn map_error(&self, status: u16, body: &[u8]) -> UpstreamError {
        default_error(status, body)
    }

    /// The upstream request for an embeddings attempt.
    fn build_embeddings(&self, _call: &Call<'_, EmbeddingsRequest>) -> Result<Exchange, AdapterError> {
        Err(AdapterError::Unsupported("this provider does not serve embeddings".into()))
    }

    /// Parses a successful embeddings answer into OpenAI's `CreateEmbeddingResponse`, encoded as
    /// the client asked (`float` or `base64`).
    fn parse_embeddings(&self, _call: &Call<'_, EmbeddingsRequest>, body: &[u8]) -> Result<Completion, UpstreamError> {
        Err(UpstreamError::bad_response(format!("unexpected embeddings answer: {}", log_snippet(body))))
    }
}

/// Why an adapter could not build an upstream request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdapterError {
    /// A bug or a configuration problem, never the client's.
    Config(String),
    /// The request uses something this provider cannot express (token-array input to Gemini
    /// embeddings, `n > 1` to Anthropic, ...): the next deployment may serve it; if none does,
    /// the client gets 400 with this message.
    Unsupported(String),
}

impl AdapterError {
    pub fn config(e: impl fmt::Display) -> Self {
        AdapterError::Config(e.to_string())
    }
}

impl fmt::Display for AdapterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdapterError::Config(m) | AdapterError::Unsupported(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for AdapterError {}

/// How an upstream failed, as far as the client and the fallback loop care.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamFailure {
    /// The upstream refused the client's own request (a 4xx about it): status and the OpenAI
    /// error body pass through. Another deployment would refuse it too.
    Rejected { status: u16, body: Box<ErrorBody> },
    /// 429: another deployment may have room.
    RateLimited,
    /// 5xx, or the upstream refusing gw's credentials: try another deployment.
    Unavailable { status: Option<u16> },
    /// A body or event that is not what the protocol promises.
    BadResponse,
    /// The upstream reported an error after the stream started.
    MidStream,
}

/// An upstream failure. `detail` is for the log only: the upstream's own words can name gw's
/// provider account, so they reach the client only through `Rejected`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamError {
    pub failure: UpstreamFailure,
    pub detail: String,
}

impl UpstreamError {
    pub fn new(failure: UpstreamFailure, detail: impl Into<String>) -> Self {
        Self { failure, detail: detail.into() }
    }

    pub fn bad_response(detail: impl Into<String>) -> Self {
        Self::new(UpstreamFailure::BadResponse, detail)
    }
}

/// Longest upstream text kept for a log line.
const LOG_SNIPPET: usize = 512;

/// Upstream text as a log line may hold it: bounded, and escaped so it cannot forge lines.
pub fn log_snippet(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(LOG_SNIPPET)];
    let text = String::from_utf8_lossy(cut);
    let mut out: String = text.chars().flat_map(char::escape_debug).collect();
    if bytes.len() > LOG_SNIPPET {
        out.push('…');
    }
    out
}

/// Status mapping shared by OpenAI-style upstreams: statuses about the client's own request
/// pass through with the upstream's message; 429 and 5xx may be retried elsewhere; 401/403 are
/// gw's credential problem and 404 its configuration's; hop-level statuses (407, 411, 426, ...)
/// are gw's business.
pub fn default_error(status: u16, body: &[u8]) -> UpstreamError {
    let detail = format!("HTTP {status}: {}", log_snippet(body));
    let failure = match status {
        429 => UpstreamFailure::RateLimited,
        s if s >= 500 => UpstreamFailure::Unavailable { status: Some(s) },
        // 404 names gw's configuration (the deployment's model or path), not the client's
        // request: the next deployment may have it.
        401 | 403 | 404 => UpstreamFailure::Unavailable { status: Some(status) },
        s @ (400 | 409 | 413 | 415 | 422) => {
            let body = serde_json::from_slice::<ErrorBody>(body).unwrap_or_else(|_| {
                ErrorBody::new(
                    format!("The upstream rejected the request with HTTP {s}."),
                    "invalid_request_error",
                    None,
                    None,
                )
            });
            UpstreamFailure::Rejected { status: s, body: Box::new(body) }
        }
        _ => UpstreamFailure::BadResponse,
    };
    UpstreamError::new(failure, detail)
}

/// Adapters by provider `kind`.
#[derive(Clone, Default)]
pub struct Registry {
    adapters: HashMap<String, Arc<dyn Adapter>>,
}

impl Registry {
    /// The adapters gw ships: `mock` (in-process), `openai` (any OpenAI-compatible API: OpenAI,
    /// vLLM, Ollama, Groq, Together, Mistral, DeepSeek, OpenRouter, ...), `azure`, `anthropic`,
    /// `gemini` and `bedrock`.
    pub fn builtin() -> Self {
        let mut r = Self::default();
        r.register("mock", Arc::new(mock::MockAdapter));
        r.register("openai", Arc::new(openai::OpenAiAdapter));
        r.register("azure", Arc::new(azure::AzureAdapter));
        r.register("anthropic", Arc::new(anthropic::AnthropicAdapter));
        r.register("gemini", Arc::new(gemini::GeminiAdapter));
        r.register("bedrock", Arc::new(bedrock::BedrockAdapter));
        r
    }

    pub fn register(&mut self, kind: &str, adapter: Arc<dyn Adapter>) {
        self.adapters.insert(kind.to_string(), adapter);
    }

    pub fn get(&self, kind: &str) -> Option<Arc<dyn Adapter>> {
        self.adapters.get(kind).cloned()
    }

    pub fn kinds(&self) -> Vec<&str> {
        let mut k: Vec<&str> = self.adapters.keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").field("kinds", &self.kinds()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_bounded_and_single_line() {
        let s = log_snippet(b"line one\nline two\r\n\"quoted\"");
        assert!(!s.contains('\n') && !s.contains('\r'), "{s}");
        assert!(s.contains("\\n"));
        let long = vec![b'a'; 10_000];
        assert!(log_snippet(&long).chars().count() <= LOG_SNIPPET + 1);
    }

    #[test]
    fn statuses_map() {
        assert_eq!(default_error(429, b"").failure, UpstreamFailure::RateLimited);
        assert_eq!(default_error(503, b"").failure, UpstreamFailure::Unavailable { status: Some(503) });
        assert_eq!(default_error(401, b"").failure, UpstreamFailure::Unavailable { status: Some(401) });
        assert_eq!(default_error(404, b"").failure, UpstreamFailure::Unavailable { status: Some(404) });
        assert_eq!(default_error(407, b"").failure, UpstreamFailure::BadResponse);
        let body = br#"{"error":{"message":"bad temperature","type":"invalid_request_error","param":"temperature","code":null}}"#;
        match default_error(400, body).failure {
            UpstreamFailure::Rejected { status, body } => {
                assert_eq!(status, 400);
                assert_eq!(body.error.message, "bad temperature");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(default_error(422, b"garbage").failure, UpstreamFailure::Rejected { status: 422, .. }));
    }

    #[test]
    fn builtin_kinds() {
        let r = Registry::builtin();
        assert_eq!(r.kinds(), ["anthropic", "azure", "bedrock", "gemini", "mock", "openai"]);
        assert!(r.get("mock").is_some_and(|a| !a.needs_base_url()));
        assert!(r.get("openai").is_some_and(|a| a.needs_base_url()));
    }
}
