//! The built-in `mock` provider: answers in-process, deterministically from the prompt, so the
//! zero-config run works with no provider key and no network. It answers exactly what an
//! OpenAI-compatible upstream would send, so the proxy handles it like any other answer.

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Map;
use sha2::{Digest, Sha256};

use super::openai::{parse_completion, parse_embeddings, OpenAiStream};
use super::{
    Adapter, AdapterError, Call, Completion, Endpoint, Exchange, LocalResponse, StreamSetup, StreamTranslator,
    UpstreamError,
};
use crate::openai::{
    embeddings_response, message_role, message_text, AssistantMessage, ChatCompletion, ChatCompletionChunk,
    ChatRequest, Choice, Delta, EmbeddingInput, EmbeddingsRequest, Usage, SSE_DONE,
};
use crate::pricing::TokenUsage;

pub struct MockAdapter;

impl Adapter for MockAdapter {
    fn needs_base_url(&self) -> bool {
        false
    }

    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError> {
        let id = call.completion_id();
        let ser = AdapterError::config;
        let (content_type, body) = if call.request.stream {
            let mut out = BytesMut::with_capacity(2048);
            for chunk in stream_chunks(call.request, &id, call.upstream_model, call.created) {
                out.put_slice(b"data: ");
                serde_json::to_writer((&mut out).writer(), &chunk).map_err(ser)?;
                out.put_slice(b"\n\n");
            }
            out.put_slice(SSE_DONE);
            ("text/event-stream", out.freeze())
        } else {
            let resp = complete(call.request, &id, call.upstream_model, call.created);
            ("application/json", Bytes::from(serde_json::to_vec(&resp).map_err(ser)?))
        };
        Ok(Exchange::Local(LocalResponse { status: 200, content_type, body }))
    }

    fn parse_response(&self, _call: &Call<'_>, body: &[u8]) -> Result<Completion, UpstreamError> {
        parse_completion(body)
    }

    fn stream(&self, setup: StreamSetup) -> Box<dyn StreamTranslator> {
        Box::new(OpenAiStream::new(setup.include_usage))
    }

    fn supports(&self, _endpoint: Endpoint) -> bool {
        true
    }

    fn build_embeddings(&self, call: &Call<'_, EmbeddingsRequest>) -> Result<Exchange, AdapterError> {
        let texts: Vec<String> = match &call.request.input {
            EmbeddingInput::Texts(t) => t.clone(),
            EmbeddingInput::Tokens(t) => {
                t.iter().map(|ids| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")).collect()
            }
        };
        let dims = call.request.dimensions.map_or(EMBEDDING_DIMS, |d| d as usize);
        let vectors: Vec<Vec<f32>> = texts.iter().map(|t| embed(t, dims)).collect();
        let tokens = texts.iter().map(|t| count_tokens(t).max(1)).sum();
        let body = embeddings_response(&vectors, call.upstream_model, call.request.encoding, tokens)
            .map_err(AdapterError::config)?;
        Ok(Exchange::Local(LocalResponse { status: 200, content_type: "application/json", body }))
    }

    fn parse_embeddings(&self, _call: &Call<'_, EmbeddingsRequest>, body: &[u8]) -> Result<Completion, UpstreamError> {
        parse_embeddings(body)
    }
}

/// Dimensions of the mock's embeddings unless the request asks for fewer.
pub const EMBEDDING_DIMS: usize = 256;

/// A deterministic unit vector for a text: equal texts embed equally, different ones do not.
pub fn embed(text: &str, dims: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(dims);
    let mut block = 0u32;
    while out.len() < dims {
        let digest = Sha256::new().chain_update(block.to_le_bytes()).chain_update(text.as_bytes()).finalize();
        for pair in digest.chunks_exact(2) {
            if out.len() == dims {
                break;
            }
            let v = u16::from_le_bytes([pair[0], pair[1]]);
            out.push(f32::from(v) / 32767.5 - 1.0);
        }
        block += 1;
    }
    let norm = out.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        out.iter_mut().for_each(|x| *x /= norm);
    }
    out
}

/// A rough token count: whitespace-separated words.
pub fn count_tokens(text: &str) -> u32 {
    u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX)
}

/// The reply text for a request: a fixed sentence naming a digest of the conversation, so the same
/// prompt always gets the same answer and different prompts get different ones.
pub fn reply_text(req: &ChatRequest) -> String {
    let mut h = Sha256::new();
    for m in req.messages() {
        h.update(message_role(m).as_bytes());
        h.update([0]);
        h.update(message_text(m).as_bytes());
        h.update([0]);
    }
    let digest = hex::encode(&h.finalize()[..4]);
    let last = req.messages().iter().rev().find(|m| message_role(m) == "user").map(message_text).unwrap_or_default();
    let echo: Vec<&str> = last.split_whitespace().take(8).collect();
    format!("This is the gw mock provider (reply {digest}). You said: {}", echo.join(" "))
}

pub fn usage_for(req: &ChatRequest, reply: &str) -> TokenUsage {
    let prompt: u32 = req.messages().iter().map(|m| count_tokens(&message_text(m)).saturating_add(3)).sum();
    TokenUsage { prompt_tokens: prompt, completion_tokens: count_tokens(reply), ..Default::default() }
}

pub fn complete(req: &ChatRequest, id: &str, model: &str, created: i64) -> ChatCompletion {
    let reply = reply_text(req);
    let usage = usage_for(req, &reply);
    ChatCompletion {
        id: id.to_string(),
        object: "chat.completion".into(),
        created,
        model: model.to_string(),
        choices: vec![Choice {
            index: 0,
            message: AssistantMessage {
                role: "assistant".into(),
                content: Some(reply),
                refusal: None,
                extra: Map::new(),
            },
            logprobs: None,
            finish_reason: Some("stop".into()),
            extra: Map::new(),
        }],
        usage: Some(Usage::new(usage)),
        system_fingerprint: None,
        extra: Map::new(),
    }
}

/// The chunks a stream of this request carries: role, one per word, finish, then usage (always:
/// like an upstream asked for it, the proxy drops it when the client did not ask).
pub fn stream_chunks(req: &ChatRequest, id: &str, model: &str, created: i64) -> Vec<ChatCompletionChunk> {
    let reply = reply_text(req);
    let usage = usage_for(req, &reply);
    let chunk =
        |delta: Delta, finish: Option<&str>| ChatCompletionChunk::of_choice(id, created, model, 0, delta, finish);
    let mut out =
        vec![chunk(Delta { role: Some("assistant".into()), content: Some(String::new()), extra: Map::new() }, None)];
    for (i, word) in reply.split(' ').enumerate() {
        let content = if i == 0 { word.to_string() } else { format!(" {word}") };
        out.push(chunk(Delta { role: None, content: Some(content), extra: Map::new() }, None));
    }
    out.push(chunk(Delta::default(), Some("stop")));
    let mut last = chunk(Delta::default(), None);
    last.choices.clear();
    last.usage = Some(Usage::new(usage));
    out.push(last);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{Flow, ProviderOptions, StreamSink};

    static OPTS: ProviderOptions =
        ProviderOptions { api_version: None, region: None, responses_api: false, host: String::new() };

    #[test]
    fn embeddings_are_deterministic_unit_vectors() {
        let a = embed("hello", 64);
        assert_eq!(a.len(), 64);
        assert_eq!(a, embed("hello", 64));
        assert_ne!(a, embed("hellO", 64));
        let norm: f32 = a.iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-4);
        let req = EmbeddingsRequest::parse(br#"{"model":"e","input":["a b","c"],"dimensions":8}"#).unwrap();
        let call = Call {
            endpoint: Endpoint::Embeddings,
            request: &req,
            upstream_model: "e",
            api_key: None,
            base_path: "",
            options: &OPTS,
            request_id: uuid::Uuid::nil(),
            created: 1,
        };
        let Exchange::Local(resp) = MockAdapter.build_embeddings(&call).unwrap() else { panic!() };
        let c = MockAdapter.parse_embeddings(&call, &resp.body).unwrap();
        assert_eq!(c.usage.unwrap().prompt_tokens, 3);
        let v: serde_json::Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        assert_eq!(v["data"][1]["embedding"].as_array().unwrap().len(), 8);
    }

    fn req(text: &str, stream: bool) -> ChatRequest {
        let body = serde_json::json!({"model":"m","messages":[{"role":"user","content":text}],"stream":stream});
        ChatRequest::parse(body.to_string().as_bytes()).unwrap()
    }

    fn call(req: &ChatRequest) -> Call<'_> {
        Call {
            endpoint: Endpoint::ChatCompletions,
            request: req,
            upstream_model: "m",
            api_key: None,
            base_path: "",
            options: &OPTS,
            request_id: uuid::Uuid::nil(),
            created: 1,
        }
    }

    #[test]
    fn deterministic_and_prompt_dependent() {
        assert_eq!(reply_text(&req("hello there", false)), reply_text(&req("hello there", false)));
        assert_ne!(reply_text(&req("hello there", false)), reply_text(&req("hello world", false)));
    }

    #[test]
    fn local_stream_concatenates_to_the_completion() {
        let plain = req("stream me please", false);
        let Exchange::Local(resp) = MockAdapter.build(&call(&plain)).unwrap() else { panic!() };
        let full = MockAdapter.parse_response(&call(&plain), &resp.body).unwrap();
        let full: ChatCompletion = serde_json::from_slice(&full.body).unwrap();

        let streamed = req("stream me please", true);
        let Exchange::Local(resp) = MockAdapter.build(&call(&streamed)).unwrap() else { panic!() };
        assert_eq!(resp.content_type, "text/event-stream");
        let mut t = MockAdapter.stream(StreamSetup {
            include_usage: false,
            completion_id: String::new(),
            model: "m".into(),
            created: 1,
        });
        let mut sink = StreamSink::new();
        let text = String::from_utf8(resp.body.to_vec()).unwrap();
        let mut done = false;
        for ev in text.split("\n\n").filter(|e| !e.is_empty()) {
            let data = ev.strip_prefix("data: ").unwrap();
            done = t.event("", data, &mut sink).unwrap() == Flow::Done;
        }
        assert!(done);
        assert_eq!(sink.usage.map(|u| u.total()), full.usage.as_ref().map(|u| u.total_tokens));
        let out = String::from_utf8(sink.take().unwrap().to_vec()).unwrap();
        let content: String = out
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(|d| serde_json::from_str::<ChatCompletionChunk>(d).unwrap())
            .flat_map(|c| c.choices)
            .filter_map(|c| c.delta.content)
            .collect();
        assert_eq!(Some(content), full.choices[0].message.content);
    }
}
