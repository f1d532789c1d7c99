//! The OpenAI-compatible adapter (OpenAI, and the many APIs that copy it). The request goes up as
//! the client sent it, with the deployment's model name and usage requested on streams. Answers
//! that already hold every field OpenAI's document requires are forwarded byte for byte: gw
//! parses only what it needs (usage, shape, errors). Answers that lack a required field are
//! normalized through the typed structs.

use serde::de::{Deserializer, IgnoredAny};
use serde::Deserialize;
use serde_json::Value;

use super::{
    Adapter, AdapterError, Call, Completion, Endpoint, Exchange, Flow, StreamSetup, StreamSink, StreamTranslator,
    UpstreamError, UpstreamFailure, UpstreamRequest,
};
use crate::openai::{ChatCompletion, ChatCompletionChunk, EmbeddingsRequest};
use crate::pricing::{ServiceTier, TokenUsage};

pub const CHAT_COMPLETIONS_PATH: &str = "/chat/completions";
pub const EMBEDDINGS_PATH: &str = "/embeddings";

pub struct OpenAiAdapter;

/// A credential header, refused if the key holds bytes a header cannot carry.
pub fn credential_header(
    name: http::HeaderName,
    value: String,
) -> Result<(http::HeaderName, http::HeaderValue), AdapterError> {
    let mut value = http::HeaderValue::try_from(value)
        .map_err(|_| AdapterError::Config("the provider key is not a valid header value".into()))?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// The key as OpenAI's APIs take it: `Authorization: Bearer`, marked sensitive.
pub fn bearer(call_key: Option<&str>) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, AdapterError> {
    call_key.map(|k| credential_header(http::header::AUTHORIZATION, format!("Bearer {k}"))).into_iter().collect()
}

impl Adapter for OpenAiAdapter {
    fn supports(&self, _endpoint: Endpoint) -> bool {
        true
    }

    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError> {
        let body = call.request.openai_body(call.upstream_model).map_err(AdapterError::config)?;
        Ok(Exchange::Http(UpstreamRequest {
            path: format!("{}{CHAT_COMPLETIONS_PATH}", call.base_path),
            headers: bearer(call.api_key)?,
            body,
        }))
    }

    fn parse_response(&self, _call: &Call<'_>, body: &[u8]) -> Result<Completion, UpstreamError> {
        parse_completion(body)
    }

    fn stream(&self, setup: StreamSetup) -> Box<dyn StreamTranslator> {
        Box::new(OpenAiStream { include_usage: setup.include_usage })
    }

    fn build_embeddings(&self, call: &Call<'_, EmbeddingsRequest>) -> Result<Exchange, AdapterError> {
        let body = call.request.openai_body(call.upstream_model).map_err(AdapterError::config)?;
        Ok(Exchange::Http(UpstreamRequest {
            path: format!("{}{EMBEDDINGS_PATH}", call.base_path),
            headers: bearer(call.api_key)?,
            body,
        }))
    }

    fn parse_embeddings(&self, _call: &Call<'_, EmbeddingsRequest>, body: &[u8]) -> Result<Completion, UpstreamError> {
        parse_embeddings(body)
    }
}

#[derive(Deserialize)]
struct EmbeddingsPeek {
    data: Vec<EmbeddingPeek>,
    #[serde(default)]
    usage: Option<UsagePeek>,
}

#[derive(Deserialize)]
struct EmbeddingPeek {
    #[allow(dead_code)]
    embedding: IgnoredAny,
}

/// An OpenAI-shaped embeddings answer: checked for shape, forwarded byte for byte.
pub fn parse_embeddings(body: &[u8]) -> Result<Completion, UpstreamError> {
    let peek: EmbeddingsPeek = serde_json::from_slice(body)
        .map_err(|e| UpstreamError::bad_response(format!("not an embeddings response: {e}")))?;
    if peek.data.is_empty() {
        return Err(UpstreamError::bad_response("an embeddings response without data"));
    }
    Ok(Completion { body: bytes::Bytes::copy_from_slice(body), usage: peek.usage.as_ref().map(UsagePeek::tokens) })
}

/// Presence of a field, whatever its value (`null` included): the document requires some
/// fields that may be null, and a missing one must be filled in before the client sees it.
#[derive(Debug, Default, Clone, Copy)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d)?;
        Ok(Present(true))
    }
}

#[derive(Deserialize, Default)]
struct UsagePeek {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize, Default)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u32>,
}

#[derive(Deserialize, Default)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u32>,
}

impl UsagePeek {
    fn tokens(&self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.prompt_tokens.unwrap_or(0),
            completion_tokens: self.completion_tokens.unwrap_or(0),
            cached_tokens: self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0),
            reasoning_tokens: self.completion_tokens_details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0),
            ..Default::default()
        }
    }
}

/// Usage from an OpenAI `usage` object (also used by adapters that reuse OpenAI's shape).
pub fn usage_from_value(v: &Value) -> Option<TokenUsage> {
    UsagePeek::deserialize(v).ok().map(|u| u.tokens())
}

#[derive(Deserialize)]
struct CompletionPeek {
    #[serde(default)]
    id: Present,
    #[serde(default)]
    object: Present,
    #[serde(default)]
    created: Present,
    #[serde(default)]
    model: Present,
    #[serde(default)]
    choices: Option<Vec<ChoicePeek>>,
    #[serde(default)]
    usage: Option<UsagePeek>,
    #[serde(default)]
    service_tier: Option<String>,
}

#[derive(Deserialize)]
struct ChoicePeek {
    #[serde(default)]
    index: Present,
    #[serde(default)]
    message: Option<MessagePeek>,
    #[serde(default)]
    finish_reason: Present,
    #[serde(default)]
    logprobs: Present,
}

#[derive(Deserialize)]
struct MessagePeek {
    #[serde(default)]
    role: Present,
    #[serde(default)]
    content: Present,
    #[serde(default)]
    refusal: Present,
}

impl CompletionPeek {
    fn complete(&self) -> bool {
        self.id.0
            && self.object.0
            && self.created.0
            && self.model.0
            && self.choices.as_ref().is_some_and(|cs| {
                cs.iter().all(|c| {
                    c.index.0
                        && c.finish_reason.0
                        && c.logprobs.0
                        && c.message.as_ref().is_some_and(|m| m.role.0 && m.content.0 && m.refusal.0)
                })
            })
    }
}

/// A non-streaming chat completion from an OpenAI-compatible upstream.
pub fn parse_completion(body: &[u8]) -> Result<Completion, UpstreamError> {
    let peek: CompletionPeek =
        serde_json::from_slice(body).map_err(|e| UpstreamError::bad_response(format!("not a chat completion: {e}")))?;
    let tier = peek.service_tier.as_deref().map(ServiceTier::from_reported).unwrap_or_default();
    let usage = peek.usage.as_ref().map(|u| TokenUsage { tier, ..u.tokens() });
    if peek.complete() {
        return Ok(Completion { body: bytes::Bytes::copy_from_slice(body), usage });
    }
    // Something required is missing: the typed structs fill in what may be null.
    let full: ChatCompletion =
        serde_json::from_slice(body).map_err(|e| UpstreamError::bad_response(format!("not a chat completion: {e}")))?;
    let body = serde_json::to_vec(&full).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
    Ok(Completion { body: body.into(), usage })
}

#[derive(Deserialize)]
struct ChunkPeek {
    #[serde(default)]
    id: Present,
    #[serde(default)]
    object: Present,
    #[serde(default)]
    created: Present,
    #[serde(default)]
    model: Present,
    #[serde(default)]
    choices: Option<Vec<ChunkChoicePeek>>,
    #[serde(default)]
    usage: Option<UsagePeek>,
    #[serde(default)]
    service_tier: Option<String>,
    #[serde(default)]
    error: Option<ErrorPeek>,
}

#[derive(Deserialize)]
struct ChunkChoicePeek {
    #[serde(default)]
    index: Present,
    #[serde(default)]
    delta: Option<DeltaPeek>,
    #[serde(default)]
    finish_reason: Present,
}

#[derive(Deserialize, Default)]
struct DeltaPeek {
    #[serde(default)]
    content: NonEmptyText,
    #[serde(default)]
    tool_calls: NotNull,
    #[serde(default)]
    refusal: NonEmptyText,
}

impl DeltaPeek {
    fn has_content(&self) -> bool {
        self.content.0 || self.refusal.0 || self.tool_calls.0
    }
}

/// Whether a field holds a non-empty string, found without copying it (any other value is
/// skipped): every stream chunk goes through this.
#[derive(Debug, Default, Clone, Copy)]
struct NonEmptyText(bool);

impl<'de> Deserialize<'de> for NonEmptyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor).map(NonEmptyText)
    }
}

struct TextVisitor;

impl<'de> serde::de::Visitor<'de> for TextVisitor {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, v: &str) -> Result<bool, E> {
        Ok(!v.is_empty())
    }
    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_none<E>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(TextVisitor)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<bool, A::Error> {
        while a.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<bool, A::Error> {
        while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

/// Whether a field is present with a value other than `null`.
#[derive(Debug, Default, Clone, Copy)]
struct NotNull(bool);

impl<'de> Deserialize<'de> for NotNull {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<IgnoredAny>::deserialize(d).map(|v| NotNull(v.is_some()))
    }
}

#[derive(Deserialize)]
struct ErrorPeek {
    #[serde(default)]
    message: Option<String>,
}

impl ChunkPeek {
    fn complete(&self) -> bool {
        self.id.0
            && self.object.0
            && self.created.0
            && self.model.0
            && self
                .choices
                .as_ref()
                .is_some_and(|cs| cs.iter().all(|c| c.index.0 && c.delta.is_some() && c.finish_reason.0))
    }
}

/// The OpenAI stream: `data: {chunk}` events, ending with `data: [DONE]`.
pub struct OpenAiStream {
    include_usage: bool,
}

impl OpenAiStream {
    pub fn new(include_usage: bool) -> Self {
        Self { include_usage }
    }
}

impl StreamTranslator for OpenAiStream {
    fn event(&mut self, _event: &str, data: &str, out: &mut StreamSink) -> Result<Flow, UpstreamError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        let peek: ChunkPeek = serde_json::from_str(data)
            .map_err(|e| UpstreamError::bad_response(format!("invalid stream chunk: {e}")))?;
        if let Some(err) = peek.error {
            let detail = err.message.as_deref().map(|m| super::log_snippet(m.as_bytes())).unwrap_or_default();
            return Err(UpstreamError::new(UpstreamFailure::MidStream, detail));
        }
        if let Some(u) = &peek.usage {
            let tier = peek.service_tier.as_deref().map(ServiceTier::from_reported).unwrap_or_default();
            out.usage = Some(TokenUsage { tier, ..u.tokens() });
        }
        let usage_only = peek.choices.as_ref().is_none_or(Vec::is_empty);
        let strip_usage = peek.usage.is_some() && !self.include_usage;
        if strip_usage && usage_only {
            // The usage chunk gw asked for on the client's behalf: not theirs to see.
            return Ok(Flow::Continue);
        }
        if peek.choices.iter().flatten().any(|c| c.delta.as_ref().is_some_and(DeltaPeek::has_content)) {
            out.saw_content();
        }
        if peek.complete() && !strip_usage {
            out.push_raw(data);
            return Ok(Flow::Continue);
        }
        let mut chunk: ChatCompletionChunk = serde_json::from_str(data)
            .map_err(|e| UpstreamError::bad_response(format!("invalid stream chunk: {e}")))?;
        if strip_usage {
            chunk.usage = None;
        }
        out.push_json(&chunk).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::ChatRequest;
    use crate::providers::ProviderOptions;

    static OPTS: ProviderOptions =
        ProviderOptions { api_version: None, region: None, responses_api: false, host: String::new() };

    #[test]
    fn service_tier_reaches_usage_and_streams_cost_like_plain_answers() {
        let body = br#"{"id":"c","object":"chat.completion","created":1,"model":"m","service_tier":"priority","choices":[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":20,"total_tokens":50,"prompt_tokens_details":{"cached_tokens":10},"completion_tokens_details":{"reasoning_tokens":5}}}"#;
        let plain = parse_completion(body).unwrap().usage.unwrap();
        assert_eq!(plain.tier, ServiceTier::Priority);
        let chunk = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","service_tier":"priority","choices":[],"usage":{"prompt_tokens":30,"completion_tokens":20,"total_tokens":50,"prompt_tokens_details":{"cached_tokens":10},"completion_tokens_details":{"reasoning_tokens":5}}}"#;
        let (_, streamed, _) = run(false, &[chunk]);
        assert_eq!(streamed.unwrap(), plain, "the same usage whichever way it came");
    }

    #[test]
    fn embeddings_pass_through() {
        let body = br#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":"AACAPw=="}],"model":"m","usage":{"prompt_tokens":4,"total_tokens":4}}"#;
        let c = parse_embeddings(body).unwrap();
        assert_eq!(&c.body[..], &body[..]);
        assert_eq!(c.usage.unwrap().prompt_tokens, 4);
        assert!(parse_embeddings(br#"{"data":[]}"#).is_err());
        assert!(parse_embeddings(b"nope").is_err());
    }

    fn call<'a>(req: &'a ChatRequest, key: Option<&'a str>) -> Call<'a> {
        Call {
            endpoint: super::super::Endpoint::ChatCompletions,
            request: req,
            upstream_model: "real",
            api_key: key,
            base_path: "/v1",
            options: &OPTS,
            request_id: uuid::Uuid::nil(),
            created: 1,
        }
    }

    #[test]
    fn builds_the_request() {
        let req = ChatRequest::parse(br#"{"model":"public","messages":[{"role":"user","content":"hi"}],"top_p":0.5}"#)
            .unwrap();
        let Exchange::Http(up) = OpenAiAdapter.build(&call(&req, Some("sk-up"))).unwrap() else { panic!() };
        assert_eq!(up.path, "/v1/chat/completions");
        assert_eq!(up.headers[0].1, "Bearer sk-up");
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        assert_eq!(body["model"], "real");
        assert_eq!(body["top_p"], 0.5);
        let Exchange::Http(up) = OpenAiAdapter.build(&call(&req, None)).unwrap() else { panic!() };
        assert!(up.headers.is_empty());
    }

    #[test]
    fn complete_answers_pass_through_byte_for_byte() {
        let body = br#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":1},"completion_tokens_details":{"reasoning_tokens":1}},"service_tier":"default"}"#;
        let c = parse_completion(body).unwrap();
        assert_eq!(&c.body[..], &body[..]);
        let u = c.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.reasoning_tokens), (3, 2, 1, 1));
    }

    #[test]
    fn incomplete_answers_are_normalized() {
        let body = br#"{"id":"c","created":1,"model":"m","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}"#;
        let c = parse_completion(body).unwrap();
        let v: Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        assert!(v["choices"][0]["message"].as_object().unwrap().contains_key("refusal"));
        assert!(v["choices"][0].as_object().unwrap().contains_key("logprobs"));
        assert!(c.usage.is_none());
        assert!(parse_completion(b"{\"this is\": not json").is_err());
        assert!(parse_completion(br#"{"id":"c"}"#).is_err());
    }

    fn run(include_usage: bool, events: &[&str]) -> (String, Option<TokenUsage>, Result<Flow, UpstreamError>) {
        let mut t = OpenAiStream::new(include_usage);
        let mut sink = StreamSink::new();
        let mut last = Ok(Flow::Continue);
        for e in events {
            last = t.event("", e, &mut sink);
            if last.is_err() {
                break;
            }
        }
        let text = sink.take().map(|b| String::from_utf8(b.to_vec()).unwrap()).unwrap_or_default();
        (text, sink.usage, last)
    }

    const CHUNK: &str = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"he"},"finish_reason":null}]}"#;
    const USAGE: &str = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":6,"total_tokens":10}}"#;

    #[test]
    fn stream_forwards_raw_and_drops_unrequested_usage() {
        let (text, usage, last) = run(false, &[CHUNK, USAGE, "[DONE]"]);
        assert_eq!(text, format!("data: {CHUNK}\n\n"));
        assert_eq!(usage.unwrap().total(), 10);
        assert_eq!(last.unwrap(), Flow::Done);
        let (text, _, _) = run(true, &[CHUNK, USAGE, "[DONE]"]);
        assert_eq!(text, format!("data: {CHUNK}\n\ndata: {USAGE}\n\n"));
    }

    #[test]
    fn usage_on_a_content_chunk_is_stripped_when_not_asked() {
        let mixed = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#;
        let (text, usage, _) = run(false, &[mixed]);
        assert!(!text.contains("usage"), "{text}");
        assert!(text.contains("\"finish_reason\":\"stop\""));
        assert_eq!(usage.unwrap().total(), 2);
    }

    #[test]
    fn chunks_missing_required_nullables_are_filled() {
        let sloppy = r#"{"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"}}]}"#;
        let (text, _, _) = run(false, &[sloppy]);
        let v: Value = serde_json::from_str(text.trim().strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(v["object"], "chat.completion.chunk");
        assert!(v["choices"][0].as_object().unwrap().contains_key("finish_reason"));
    }

    #[test]
    fn stream_errors() {
        let (_, _, last) = run(false, &["{not json"]);
        assert_eq!(last.unwrap_err().failure, UpstreamFailure::BadResponse);
        let (_, _, last) = run(false, &[r#"{"error":{"message":"boom\nsecret","type":"server_error"}}"#]);
        let e = last.unwrap_err();
        assert_eq!(e.failure, UpstreamFailure::MidStream);
        assert!(!e.detail.contains('\n'));
    }
}
