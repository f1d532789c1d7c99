//! OpenAI's Responses API as an upstream protocol. An `openai` provider with `responses_api` set
//! gets `/v1/responses` requests passed through (`POST {base_url}/responses`, see
//! docs/responses.md); the client receives the deployment's own answer, and gw reads it here as
//! the chat completion (or the chat chunks) it amounts to: that is what is billed, cached and
//! traced, as for every other answer.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::translate::openai_usage;
use super::{log_snippet, Completion, Flow, StreamSetup, StreamSink, StreamTranslator, UpstreamError, UpstreamFailure};
use crate::openai::{ChatCompletionChunk, Delta};
use crate::pricing::{ServiceTier, TokenUsage};

pub const RESPONSES_PATH: &str = "/responses";

/// The body a Responses deployment gets: the client's, with the deployment's model, `store:
/// false` when the client did not send it (gw stores nothing, and OpenAI's default is to store;
/// `store: true` never gets this far), and without hosted tools (`hosted_tools`: it offers
/// some), which are left out as the translation leaves them out: OpenAI bills their calls at
/// rates gw's prices do not know. The client's bytes as they came when none of this changes
/// anything and no object in them repeats a key (`crate::json_keys`); else the body as gw read
/// it.
pub fn passthrough_body(
    raw: &bytes::Bytes,
    store_sent: bool,
    hosted_tools: bool,
    client_model: &str,
    upstream_model: &str,
) -> serde_json::Result<bytes::Bytes> {
    if client_model == upstream_model && store_sent && !hosted_tools && crate::json_keys::keys_unique(raw) {
        return Ok(raw.clone());
    }
    let mut body: Map<String, Value> = serde_json::from_slice(raw)?;
    body.insert("model".into(), Value::String(upstream_model.to_string()));
    body.insert("store".into(), Value::Bool(false));
    if let Some(Value::Array(tools)) = body.get_mut("tools") {
        tools.retain(|t| !crate::responses::is_hosted_tool(t));
    }
    serde_json::to_vec(&body).map(bytes::Bytes::from)
}

/// A token count of the `usage` object (`/input_tokens`, ...); what is not a count reads as 0.
fn count(usage: &Value, pointer: &str) -> u32 {
    usage.pointer(pointer).and_then(Value::as_u64).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

#[derive(Debug, Default, Deserialize)]
struct Reason {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorPeek {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// What gw reads of a `response` object. Fields it only repeats are read loosely: a type it did
/// not expect there must not turn a finished answer into an error.
#[derive(Debug, Default, Deserialize)]
struct ResponsePeek {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    created_at: Option<Value>,
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    output: Option<Vec<Value>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    incomplete_details: Option<Reason>,
    #[serde(default)]
    error: Option<ErrorPeek>,
    #[serde(default)]
    service_tier: Option<String>,
}

impl ResponsePeek {
    fn usage(&self) -> Option<TokenUsage> {
        let u = self.usage.as_ref().filter(|u| u.is_object())?;
        Some(TokenUsage {
            prompt_tokens: count(u, "/input_tokens"),
            completion_tokens: count(u, "/output_tokens"),
            cached_tokens: count(u, "/input_tokens_details/cached_tokens"),
            reasoning_tokens: count(u, "/output_tokens_details/reasoning_tokens"),
            cache_creation_tokens: 0,
            tier: self.service_tier.as_deref().map(ServiceTier::from_reported).unwrap_or_default(),
        })
    }

    /// Chat's finish reason for this response's end (`calls`: it made function calls).
    fn finish_reason(&self, calls: bool) -> &'static str {
        let reason = self.incomplete_details.as_ref().and_then(|d| d.reason.as_deref());
        match (self.status.as_deref(), reason) {
            (Some("incomplete"), Some("content_filter")) => "content_filter",
            (Some("incomplete"), _) => "length",
            _ if calls => "tool_calls",
            _ => "stop",
        }
    }

    fn failure(&self) -> String {
        let e = self.error.as_ref();
        format!(
            "{}: {}",
            e.and_then(|e| e.code.as_deref()).unwrap_or("failed"),
            log_snippet(e.and_then(|e| e.message.as_deref()).unwrap_or_default().as_bytes())
        )
    }
}

/// What a response's output items say, as chat says it.
struct Said {
    text: String,
    refusal: String,
    /// Chat's `tool_calls`, one per `function_call` item.
    calls: Vec<Value>,
}

fn said(output: &[Value]) -> Said {
    let mut said = Said { text: String::new(), refusal: String::new(), calls: Vec::new() };
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                    match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => said.text.push_str(part["text"].as_str().unwrap_or_default()),
                        Some("refusal") => said.refusal.push_str(part["refusal"].as_str().unwrap_or_default()),
                        _ => {}
                    }
                }
            }
            Some("function_call") => said.calls.push(json!({
                "id": item["call_id"].as_str().unwrap_or_default(),
                "type": "function",
                "function": {"name": item["name"].as_str().unwrap_or_default(),
                             "arguments": item["arguments"].as_str().unwrap_or_default()},
            })),
            _ => {}
        }
    }
    said
}

/// A complete Responses answer as the chat completion it amounts to: the text of its message
/// items (or their refusal), a tool call per `function_call` item, the finish reason its status
/// says, and its usage (cached and reasoning tokens, the tier that served it).
pub fn parse_response(body: &[u8]) -> Result<Completion, UpstreamError> {
    let r: ResponsePeek =
        serde_json::from_slice(body).map_err(|e| UpstreamError::bad_response(format!("not a response: {e}")))?;
    let Some(output) = r.output.as_deref() else {
        return Err(UpstreamError::bad_response(format!("not a response: {}", log_snippet(body))));
    };
    if r.status.as_deref() == Some("failed") {
        return Err(UpstreamError::new(UpstreamFailure::Unavailable { status: None }, r.failure()));
    }
    let Said { text, refusal, calls } = said(output);
    let finish = r.finish_reason(!calls.is_empty());
    let none_if_empty = |s: String| if s.is_empty() { Value::Null } else { Value::String(s) };
    let mut message = json!({"role": "assistant", "content": none_if_empty(text), "refusal": none_if_empty(refusal)});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let usage = r.usage();
    let mut chat = json!({
        "id": format!("chatcmpl-{}", r.id.as_ref().and_then(Value::as_str).unwrap_or_default()),
        "object": "chat.completion",
        "created": r.created_at.as_ref().and_then(Value::as_i64).unwrap_or_default(),
        "model": r.model.as_ref().and_then(Value::as_str).unwrap_or_default(),
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
    });
    if let Some(u) = &usage {
        chat["usage"] =
            serde_json::to_value(openai_usage(u)).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
    }
    let body = serde_json::to_vec(&chat).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
    Ok(Completion { body: body.into(), usage })
}

/// The usage a Responses answer reports, whatever its status: a `failed` response (an error to
/// gw) is billed for what it says it spent all the same.
pub fn reported_usage(body: &[u8]) -> Option<TokenUsage> {
    serde_json::from_slice::<ResponsePeek>(body).ok()?.usage()
}

/// What gw reads of a stream event; deltas borrowed where they hold no escapes.
#[derive(Debug, Deserialize)]
struct EventPeek<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    sequence_number: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<Text<'a>>,
    #[serde(default, borrow)]
    item_id: Option<Cow<'a, str>>,
    #[serde(default)]
    item: Option<ItemPeek>,
    #[serde(default)]
    response: Option<ResponsePeek>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// A text field of an event; any other value (an event type gw does not read may put one there)
/// reads as no text rather than as a broken stream.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Text<'a> {
    Str(#[serde(borrow)] Cow<'a, str>),
    Other(serde::de::IgnoredAny),
}

impl<'a> Text<'a> {
    fn text(self) -> Option<Cow<'a, str>> {
        match self {
            Text::Str(s) if !s.is_empty() => Some(s),
            _ => None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct ItemPeek {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// Translates a Responses event stream into chat chunks.
pub struct ResponsesStream {
    setup: StreamSetup,
    started: bool,
    /// The output item ids of the function calls, in order: a call's position is its chat index.
    calls: Vec<String>,
    last_sequence: Option<u64>,
    /// Text, a refusal or a call came as deltas (else the finished response's output is read).
    produced: bool,
}

impl ResponsesStream {
    pub fn new(setup: StreamSetup) -> Self {
        Self { setup, started: false, calls: Vec::new(), last_sequence: None, produced: false }
    }

    fn chunk(&self, delta: Delta, finish: Option<&str>) -> ChatCompletionChunk {
        let s = &self.setup;
        ChatCompletionChunk::of_choice(&s.completion_id, s.created, &s.model, 0, delta, finish)
    }

    fn push(
        &mut self,
        out: &mut StreamSink,
        delta: Delta,
        finish: Option<&str>,
        content: bool,
    ) -> Result<(), UpstreamError> {
        self.start(out)?;
        out.push_json(&self.chunk(delta, finish)).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        if content {
            self.produced = true;
            out.saw_content();
        }
        Ok(())
    }

    /// Chat streams open with the assistant role.
    fn start(&mut self, out: &mut StreamSink) -> Result<(), UpstreamError> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let delta = Delta { role: Some("assistant".into()), content: Some(String::new()), extra: Map::new() };
        out.push_json(&self.chunk(delta, None)).map_err(|e| UpstreamError::bad_response(e.to_string()))
    }

    fn push_extra(&mut self, out: &mut StreamSink, key: &str, value: Value) -> Result<(), UpstreamError> {
        let mut extra = Map::new();
        extra.insert(key.into(), value);
        self.push(out, Delta { role: None, content: None, extra }, None, true)
    }

    fn translate(&mut self, ev: EventPeek<'_>, out: &mut StreamSink) -> Result<Flow, UpstreamError> {
        match ev.kind.as_ref() {
            "response.created" | "response.in_progress" | "response.queued" => self.start(out)?,
            "response.output_text.delta" => {
                if let Some(text) = ev.delta.and_then(Text::text) {
                    self.push(
                        out,
                        Delta { role: None, content: Some(text.into_owned()), extra: Map::new() },
                        None,
                        true,
                    )?;
                }
            }
            "response.refusal.delta" => {
                if let Some(text) = ev.delta.and_then(Text::text) {
                    self.push_extra(out, "refusal", Value::String(text.into_owned()))?;
                }
            }
            "response.output_item.added" => {
                if let Some(item) = ev.item.filter(|i| i.kind.as_deref() == Some("function_call")) {
                    let index = self.calls.len();
                    self.calls.push(item.id.unwrap_or_default());
                    let call = json!([{"index": index, "id": item.call_id.unwrap_or_default(), "type": "function",
                                       "function": {"name": item.name.unwrap_or_default(),
                                                    "arguments": item.arguments.unwrap_or_default()}}]);
                    self.push_extra(out, "tool_calls", call)?;
                }
            }
            "response.function_call_arguments.delta" => {
                let at = ev.item_id.as_deref().and_then(|id| self.calls.iter().position(|c| c == id));
                if let (Some(index), Some(piece)) = (at, ev.delta.and_then(Text::text)) {
                    self.push_extra(out, "tool_calls", json!([{"index": index, "function": {"arguments": piece}}]))?;
                }
            }
            "response.completed" | "response.incomplete" => {
                return self.end(out, &ev.response.unwrap_or_default());
            }
            // Any other delta (reasoning, audio, ...) is the model's output going out too.
            kind if kind.ends_with(".delta") => out.saw_content(),
            "response.failed" => {
                let response = ev.response.unwrap_or_default();
                // What a failed response reports it spent is billed all the same.
                if let Some(u) = response.usage() {
                    out.usage = Some(u);
                }
                return Err(UpstreamError::new(UpstreamFailure::MidStream, response.failure()));
            }
            "error" => {
                let detail = format!(
                    "{}: {}",
                    ev.code.as_deref().unwrap_or("error"),
                    log_snippet(ev.message.unwrap_or_default().as_bytes())
                );
                return Err(UpstreamError::new(UpstreamFailure::MidStream, detail));
            }
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn end(&mut self, out: &mut StreamSink, response: &ResponsePeek) -> Result<Flow, UpstreamError> {
        let usage = response.usage();
        if usage.is_some() {
            out.usage = usage;
        }
        let mut calls = !self.calls.is_empty();
        if !self.produced {
            // A server that streams no deltas: the finished response says it all (for the
            // cache, and the estimate when no usage came).
            let Said { text, refusal, calls: made } = said(response.output.as_deref().unwrap_or_default());
            if !text.is_empty() {
                self.push(out, Delta { role: None, content: Some(text), extra: Map::new() }, None, true)?;
            }
            if !refusal.is_empty() {
                self.push_extra(out, "refusal", Value::String(refusal))?;
            }
            calls |= !made.is_empty();
            for (index, mut call) in made.into_iter().enumerate() {
                call["index"] = json!(index);
                self.push_extra(out, "tool_calls", json!([call]))?;
            }
        }
        self.push(out, Delta::default(), Some(response.finish_reason(calls)), false)?;
        if let (true, Some(u)) = (self.setup.include_usage, usage) {
            let mut last = self.chunk(Delta::default(), None);
            last.choices.clear();
            last.usage = Some(openai_usage(&u));
            out.push_json(&last).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        }
        Ok(Flow::Done)
    }
}

impl StreamTranslator for ResponsesStream {
    fn event(&mut self, _event: &str, data: &str, out: &mut StreamSink) -> Result<Flow, UpstreamError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        if data == "[DONE]" {
            return Err(UpstreamError::bad_response("the stream ended before its response.completed"));
        }
        let ev: EventPeek<'_> = serde_json::from_str(data).map_err(|e| {
            UpstreamError::bad_response(format!(
                "invalid Responses stream event: {e}: {}",
                log_snippet(data.as_bytes())
            ))
        })?;
        let sequence = ev.sequence_number;
        let flow = self.translate(ev, out);
        // An event that failed (an error event) never goes out to the client, so it does not count.
        if flow.is_ok() && sequence.is_some() {
            self.last_sequence = sequence;
        }
        flow
    }

    fn last_sequence(&self) -> Option<u64> {
        self.last_sequence
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(include_usage: bool) -> StreamSetup {
        StreamSetup { include_usage, completion_id: "chatcmpl-x".into(), model: "m".into(), created: 1 }
    }

    fn chunks(sink: &mut StreamSink) -> Vec<Value> {
        let bytes = sink.take().unwrap_or_default();
        crate::openai::chunk_objects(&bytes).map(Value::Object).collect()
    }

    const USAGE: &str = r#"{"input_tokens":30,"input_tokens_details":{"cached_tokens":10},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":5},"total_tokens":50}"#;

    #[test]
    fn a_response_reads_as_its_chat_completion_with_its_usage() {
        let body = format!(
            r#"{{"id":"resp_1","object":"response","created_at":7,"model":"gpt-x","status":"completed","service_tier":"flex",
            "output":[{{"type":"reasoning","id":"rs_1","summary":[]}},
                      {{"type":"message","id":"m","status":"completed","role":"assistant","content":[{{"type":"output_text","text":"Hi ","annotations":[]}},{{"type":"output_text","text":"there","annotations":[]}}]}},
                      {{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{{\"a\":1}}","status":"completed"}}],
            "usage":{USAGE}}}"#
        );
        let c = parse_response(body.as_bytes()).unwrap();
        let u = c.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.cached_tokens, u.completion_tokens, u.reasoning_tokens), (30, 10, 20, 5));
        assert_eq!(u.tier, ServiceTier::Flex);
        let chat: Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(chat["choices"][0]["message"]["content"], "Hi there");
        assert_eq!(chat["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], r#"{"a":1}"#);
        assert_eq!(chat["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chat["usage"]["prompt_tokens_details"]["cached_tokens"], 10);
        assert_eq!(chat["model"], "gpt-x");
    }

    #[test]
    fn an_incomplete_response_is_cut_short_and_a_failed_one_an_error() {
        let body = br#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}]}"#;
        let chat: Value = serde_json::from_slice(&parse_response(body).unwrap().body).unwrap();
        assert_eq!(chat["choices"][0]["finish_reason"], "length");
        let failed = format!(
            r#"{{"status":"failed","output":[],"error":{{"code":"server_error","message":"x"}},"usage":{USAGE}}}"#
        );
        assert!(parse_response(failed.as_bytes()).is_err());
        assert_eq!(reported_usage(failed.as_bytes()).unwrap().completion_tokens, 20, "what it spent is billed");
        assert!(parse_response(br#"{"choices":[]}"#).is_err(), "a chat completion is no response");
    }

    #[test]
    fn a_stream_reads_as_chat_chunks_and_its_usage_and_position() {
        let mut t = ResponsesStream::new(setup(true));
        let mut sink = StreamSink::new();
        let events = [
            r#"{"type":"response.created","sequence_number":0,"response":{"status":"in_progress","output":[]}}"#,
            r#"{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"m","role":"assistant","content":[],"status":"in_progress"}}"#,
            r#"{"type":"response.output_text.delta","sequence_number":2,"item_id":"m","output_index":0,"content_index":0,"delta":"Hel\"lo","logprobs":[]}"#,
            r#"{"type":"response.output_item.added","sequence_number":3,"output_index":1,"item":{"type":"function_call","id":"fc","call_id":"call_9","name":"f","arguments":"","status":"in_progress"}}"#,
            r#"{"type":"response.function_call_arguments.delta","sequence_number":4,"item_id":"fc","output_index":1,"delta":"{\"a\""}"#,
            r#"{"type":"response.function_call_arguments.delta","sequence_number":5,"item_id":"fc","output_index":1,"delta":":1}"}"#,
        ];
        for e in events {
            assert_eq!(t.event("", e, &mut sink).unwrap(), Flow::Continue);
        }
        assert!(sink.content_seen);
        let done = format!(
            r#"{{"type":"response.completed","sequence_number":6,"response":{{"status":"completed","output":[],"usage":{USAGE}}}}}"#
        );
        assert_eq!(t.event("response.completed", &done, &mut sink).unwrap(), Flow::Done);
        assert_eq!(t.last_sequence(), Some(6));
        assert_eq!(sink.usage.unwrap().reasoning_tokens, 5);
        let chunks = chunks(&mut sink);
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(chunks[1]["choices"][0]["delta"]["content"], "Hel\"lo");
        assert_eq!(chunks[2]["choices"][0]["delta"]["tool_calls"][0]["id"], "call_9");
        let args: String = chunks[3..5]
            .iter()
            .map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(args, r#"{"a":1}"#);
        assert_eq!(chunks[5]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chunks[6]["usage"]["total_tokens"], 50);
    }

    #[test]
    fn a_stream_without_deltas_is_read_from_its_finished_response() {
        let mut t = ResponsesStream::new(setup(false));
        let mut sink = StreamSink::new();
        sink.record();
        let reasoning = r#"{"type":"response.reasoning_summary_text.delta","sequence_number":0,"delta":"hmm"}"#;
        assert_eq!(t.event("", reasoning, &mut sink).unwrap(), Flow::Continue);
        assert!(sink.content_seen, "a reasoning delta is output going out");
        let done = r#"{"type":"response.completed","sequence_number":1,"response":{"status":"completed","output":[
            {"type":"message","content":[{"type":"output_text","text":"Hi there"}]},
            {"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"}]}}"#;
        assert_eq!(t.event("", done, &mut sink).unwrap(), Flow::Done);
        let chat = sink.recorded().expect("a complete answer");
        assert_eq!(chat["choices"][0]["message"]["content"], "Hi there");
        assert_eq!(chat["choices"][0]["message"]["tool_calls"][0]["id"], "call_1");
        assert_eq!(chat["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn what_gw_does_not_read_is_read_loosely() {
        let mut t = ResponsesStream::new(setup(false));
        let mut sink = StreamSink::new();
        let odd = r#"{"type":"response.future_thing.delta","delta":{"x":1},"sequence_number":0}"#;
        assert_eq!(t.event("", odd, &mut sink).unwrap(), Flow::Continue);
        let item = r#"{"type":"response.output_item.added","sequence_number":1,"item":{"type":"function_call","id":"fc","call_id":null,"name":"f","arguments":null}}"#;
        assert_eq!(t.event("", item, &mut sink).unwrap(), Flow::Continue);
        let done = r#"{"type":"response.completed","sequence_number":2,"response":{"id":7,"created_at":1.5,"model":null,"status":"completed","output":[],"usage":{"input_tokens":4,"output_tokens":null,"input_tokens_details":null}}}"#;
        assert_eq!(t.event("", done, &mut sink).unwrap(), Flow::Done);
        let u = sink.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.cached_tokens), (4, 0, 0));
    }

    #[test]
    fn a_failed_stream_is_a_mid_stream_error_its_usage_kept() {
        let mut t = ResponsesStream::new(setup(false));
        let mut sink = StreamSink::new();
        let failed = format!(
            r#"{{"type":"response.failed","sequence_number":3,"response":{{"status":"failed","output":[],"error":{{"code":"server_error","message":"boom"}},"usage":{USAGE}}}}}"#
        );
        let e = t.event("", &failed, &mut sink).unwrap_err();
        assert_eq!(e.failure, UpstreamFailure::MidStream);
        assert_eq!(sink.usage.unwrap().prompt_tokens, 30);
        assert_eq!(t.last_sequence(), None, "a failed event never reaches the client");
        let e = t.event(
            "",
            r#"{"type":"error","code":"rate_limit_exceeded","message":"slow down","sequence_number":4}"#,
            &mut sink,
        );
        assert_eq!(e.unwrap_err().failure, UpstreamFailure::MidStream);
        assert!(t.event("", "[DONE]", &mut sink).is_err(), "a stream ends with its response, not [DONE]");
        assert!(t.event("", "{not json", &mut sink).is_err());
    }

    #[test]
    fn the_passed_through_body_names_the_deployments_model_and_stores_nothing() {
        let raw = bytes::Bytes::from_static(br#"{ "model":"a", "store":false, "input":"hi" }"#);
        assert_eq!(passthrough_body(&raw, true, false, "a", "a").unwrap(), raw, "byte for byte");
        let v: Value = serde_json::from_slice(&passthrough_body(&raw, true, false, "a", "b").unwrap()).unwrap();
        assert_eq!(v, json!({"model": "b", "store": false, "input": "hi"}));
        let raw = bytes::Bytes::from_static(br#"{"model":"a","input":"hi"}"#);
        let v: Value = serde_json::from_slice(&passthrough_body(&raw, false, false, "a", "a").unwrap()).unwrap();
        assert_eq!(v["store"], false);
        let raw = bytes::Bytes::from_static(
            br#"{"model":"a","store":false,"input":"hi","tools":[{"type":"web_search"},{"type":"function","name":"f"}]}"#,
        );
        let v: Value = serde_json::from_slice(&passthrough_body(&raw, true, true, "a", "a").unwrap()).unwrap();
        assert_eq!(v["tools"], json!([{"type": "function", "name": "f"}]), "hosted tools are left out");
        // A key named twice: what goes up is what gw read (the last one), never the raw text.
        let raw = bytes::Bytes::from_static(
            br#"{"model":"a","store":false,"tools":[{"type":"web_search"}],"tools":[],"input":"hi"}"#,
        );
        let v: Value = serde_json::from_slice(&passthrough_body(&raw, true, false, "a", "a").unwrap()).unwrap();
        assert_eq!(v, json!({"model": "a", "store": false, "tools": [], "input": "hi"}));
    }
}
