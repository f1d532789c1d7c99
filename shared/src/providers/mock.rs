//! The built-in `mock` provider: answers in-process, deterministically from the prompt, so the
//! zero-config run works with no provider key and no network. It answers exactly what an
//! OpenAI-compatible upstream would send, so the proxy handles it like any other answer.

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Map;
use sha2::{Digest, Sha256};

use super::openai::{parse_completion, OpenAiStream};
use super::{
    Adapter, AdapterError, Call, Completion, Exchange, LocalResponse, StreamSetup, StreamTranslator, UpstreamError,
};
use crate::openai::{
    message_role, message_text, AssistantMessage, ChatCompletion, ChatCompletionChunk, ChatRequest, Choice,
    ChunkChoice, Delta, Usage, SSE_DONE,
};
use crate::pricing::TokenUsage;

pub struct MockAdapter;

impl Adapter for MockAdapter {
    fn needs_base_url(&self) -> bool {
        false
    }

    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError> {
        let id = call.completion_id();
        let ser = |e: serde_json::Error| AdapterError(e.to_string());
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
    let chunk = |delta: Delta, finish: Option<&str>| ChatCompletionChunk {
        id: id.to_string(),
        object: "chat.completion.chunk".into(),
        created,
        model: model.to_string(),
        choices: vec![ChunkChoice {
            index: 0,
            delta,
            finish_reason: finish.map(Into::into),
            logprobs: None,
            extra: Map::new(),
        }],
        usage: None,
        system_fingerprint: None,
        extra: Map::new(),
    };
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
    use crate::providers::{Endpoint, Flow, StreamSink};

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
