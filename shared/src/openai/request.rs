//! `POST /v1/chat/completions` request: parsed once at the edge into a JSON map that keeps every
//! field the client sent (so nothing is lost on the way upstream), checked against OpenAI's
//! parameter rules, with the few fields gw itself needs pulled out as typed values.

use std::sync::OnceLock;

use bytes::{BufMut, Bytes, BytesMut};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::validate;
pub use super::validate::RequestProblem;

#[derive(Debug)]
pub struct ChatRequest {
    /// The body as the client sent it (unknown fields included).
    body: Map<String, Value>,
    pub model: String,
    pub stream: bool,
    /// The client asked for the final usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The OpenAI-shaped upstream body without `model`, serialized once however many
    /// OpenAI-compatible deployments the request is tried on.
    openai_tail: OnceLock<Bytes>,
    /// A prompt template the request references (`prompt`, taken out of the body); the
    /// template step renders it and puts its messages first.
    pub prompt: Option<crate::prompt_template::PromptRef>,
    /// gw added to the request (a template's messages, a cap on completion tokens): it is no
    /// longer what the client sent. Guardrails' rewrites are recorded as their decisions.
    edited: bool,
}

impl ChatRequest {
    /// Parses and validates a request body.
    pub fn parse(bytes: &[u8]) -> Result<Self, RequestProblem> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| RequestProblem {
            message: format!("We could not parse the JSON body of your request: {e}"),
            param: None,
        })?;
        let Value::Object(body) = value else {
            return Err(RequestProblem { message: "The request body must be a JSON object.".into(), param: None });
        };
        Self::from_map(body)
    }

    pub fn from_map(mut body: Map<String, Value>) -> Result<Self, RequestProblem> {
        let prompt = match body.remove("prompt") {
            None | Some(Value::Null) => None,
            Some(v) => Some(crate::prompt_template::PromptRef::parse(&v).map_err(|e| RequestProblem {
                message: format!("Invalid '{}': {}.", e.field, e.message),
                param: Some(e.field),
            })?),
        };
        validate::chat_request_with(&body, prompt.is_some())?;
        let model = body.get("model").and_then(Value::as_str).unwrap_or_default().to_string();
        let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        let include_usage = stream
            && body
                .get("stream_options")
                .and_then(|o| o.get("include_usage"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
        Ok(Self { body, model, stream, include_usage, openai_tail: OnceLock::new(), prompt, edited: false })
    }

    /// Puts a rendered template's messages before the request's own.
    pub fn prepend_messages(&mut self, first: Vec<Value>) {
        self.openai_tail = OnceLock::new();
        self.edited = true;
        let own = match self.body.remove("messages") {
            Some(Value::Array(m)) => m,
            _ => Vec::new(),
        };
        let mut all = first;
        all.extend(own);
        self.body.insert("messages".into(), Value::Array(all));
    }

    /// Sends the request to another model (an experiment's variant).
    pub fn set_model(&mut self, model: &str) {
        self.model = model.to_string();
        self.body.insert("model".into(), Value::String(model.to_string()));
    }

    pub fn body(&self) -> &Map<String, Value> {
        &self.body
    }

    /// Whether gw added to the request (see the field).
    pub fn edited(&self) -> bool {
        self.edited
    }

    /// Caps the answer at `max` completion tokens, for a request that set no limit of its own
    /// (a budget reserved for that many). `max_tokens`, which every OpenAI-compatible server
    /// and every adapter reads.
    pub fn cap_completion_tokens(&mut self, max: u64) {
        self.openai_tail = OnceLock::new();
        self.edited = true;
        self.body.insert("max_tokens".into(), Value::from(max));
    }

    /// Every text of the messages the upstream will read, for guardrails to read and rewrite (the
    /// upstream body follows the edits): each message's string content and text and refusal
    /// parts, its `name`, the arguments of the assistant's earlier tool calls (and of the legacy
    /// `function_call`), tool results, and the predicted output. The flag says whether a user
    /// wrote the text: topic and injection checks read only those.
    pub fn texts_mut(&mut self) -> Vec<(bool, &mut String)> {
        self.openai_tail = OnceLock::new();
        let mut out = Vec::new();
        for (key, value) in self.body.iter_mut() {
            match (key.as_str(), value) {
                ("messages", Value::Array(msgs)) => {
                    for m in msgs {
                        message_texts(m, &mut out);
                    }
                }
                ("prediction", Value::Object(p)) => {
                    if let Some(c) = p.get_mut("content") {
                        content_texts(c, false, &mut out);
                    }
                }
                _ => {}
            }
        }
        out
    }

    pub fn messages(&self) -> &[Value] {
        self.body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
    }

    /// The body for an OpenAI-compatible upstream serving `upstream_model`: the client's body
    /// with the deployment's model name and, on streams, usage requested (cost needs it; the
    /// usage chunk is dropped again on the way down when the client did not ask for it).
    pub fn openai_body(&self, upstream_model: &str) -> serde_json::Result<Bytes> {
        let tail = match self.openai_tail.get() {
            Some(t) => t,
            None => {
                let t = Bytes::from(serde_json::to_vec(&UpstreamFields { req: self })?);
                self.openai_tail.get_or_init(|| t)
            }
        };
        let mut out = BytesMut::with_capacity(tail.len() + upstream_model.len() + 16);
        out.put_slice(b"{\"model\":");
        serde_json::to_writer((&mut out).writer(), upstream_model)?;
        // `tail` is a JSON object: `{}` or `{"a":...}`; splice its members after the model.
        if tail.len() > 2 {
            out.put_u8(b',');
            out.put_slice(&tail[1..]);
        } else {
            out.put_u8(b'}');
        }
        Ok(out.freeze())
    }
}

/// Every field but `model`, with `stream_options.include_usage` forced on streams.
struct UpstreamFields<'a> {
    req: &'a ChatRequest,
}

impl Serialize for UpstreamFields<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (k, v) in &self.req.body {
            match k.as_str() {
                "model" => {}
                "stream_options" if self.req.stream => {}
                _ => map.serialize_entry(k, v)?,
            }
        }
        if self.req.stream {
            let mut opts = match self.req.body.get("stream_options") {
                Some(Value::Object(o)) => o.clone(),
                _ => Map::new(),
            };
            opts.insert("include_usage".into(), Value::Bool(true));
            map.serialize_entry("stream_options", &opts)?;
        }
        map.end()
    }
}

/// One message's texts, in reading order: content, tool call arguments, legacy function call
/// arguments, name.
fn message_texts<'a>(message: &'a mut Value, out: &mut Vec<(bool, &'a mut String)>) {
    let Value::Object(m) = message else { return };
    let user = m.get("role").and_then(Value::as_str) == Some("user");
    let (mut content, mut tool_calls, mut function_call, mut name) = (None, None, None, None);
    for (k, v) in m.iter_mut() {
        match k.as_str() {
            "content" => content = Some(v),
            "tool_calls" => tool_calls = Some(v),
            "function_call" => function_call = Some(v),
            "name" => name = Some(v),
            _ => {}
        }
    }
    if let Some(c) = content {
        content_texts(c, user, out);
    }
    if let Some(Value::Array(calls)) = tool_calls {
        for call in calls {
            if let Some(args) = call.get_mut("function").and_then(arguments_mut) {
                out.push((false, args));
            }
        }
    }
    if let Some(args) = function_call.and_then(arguments_mut) {
        out.push((false, args));
    }
    if let Some(Value::String(n)) = name {
        out.push((false, n));
    }
}

fn arguments_mut(function: &mut Value) -> Option<&mut String> {
    match function.get_mut("arguments") {
        Some(Value::String(a)) => Some(a),
        _ => None,
    }
}

/// A content value's texts: the string itself, or each part's `text` and `refusal`.
fn content_texts<'a>(content: &'a mut Value, user: bool, out: &mut Vec<(bool, &'a mut String)>) {
    match content {
        Value::String(s) => out.push((user, s)),
        Value::Array(parts) => {
            for p in parts {
                let Value::Object(p) = p else { continue };
                for (k, v) in p.iter_mut() {
                    if let ("text" | "refusal", Value::String(t)) = (k.as_str(), v) {
                        out.push((user, t));
                    }
                }
            }
        }
        _ => {}
    }
}

/// A message's text: its string content, or the `text` of its text parts.
pub fn message_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(" ")
        }
        _ => String::new(),
    }
}

pub fn message_role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ChatRequest, RequestProblem> {
        ChatRequest::parse(v.to_string().as_bytes())
    }

    #[test]
    fn keeps_unknown_fields_and_rewrites_model() {
        let req = parse(json!({"model":"m","messages":[{"role":"user","content":"hi","name":"bob"}],
            "temperature":0.2,"x_custom":{"a":1}}))
        .unwrap();
        let up: Value = serde_json::from_slice(&req.openai_body("real").unwrap()).unwrap();
        assert_eq!(up["model"], "real");
        assert_eq!(up["temperature"], json!(0.2));
        assert_eq!(up["x_custom"], json!({"a":1}));
        assert_eq!(up["messages"][0]["name"], json!("bob"));
        assert!(up.get("stream_options").is_none());
        // Serialized once: a second deployment reuses the tail.
        let again: Value = serde_json::from_slice(&req.openai_body("other").unwrap()).unwrap();
        assert_eq!(again["model"], "other");
        assert_eq!(again["messages"], up["messages"]);
    }

    #[test]
    fn streams_force_usage_upstream() {
        let req = parse(
            json!({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"foo":1}}),
        )
        .unwrap();
        assert!(req.stream && !req.include_usage);
        let up: Value = serde_json::from_slice(&req.openai_body("m").unwrap()).unwrap();
        assert_eq!(up["stream_options"], json!({"foo":1,"include_usage":true}));
        let req = parse(json!({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,
            "stream_options":{"include_usage":true}}))
        .unwrap();
        assert!(req.include_usage);
    }

    #[test]
    fn body_must_be_an_object() {
        assert!(ChatRequest::parse(b"[1,2]").unwrap_err().message.contains("JSON object"));
        let e = ChatRequest::parse(b"{not json").unwrap_err();
        assert!(e.message.contains("parse the JSON"), "{}", e.message);
        assert_eq!(e.param, None);
    }

    #[test]
    fn texts_the_upstream_reads() {
        let mut req = parse(json!({"model":"m","messages":[
            {"role":"system","content":"sys","name":"ops"},
            {"role":"user","content":[{"type":"text","text":"u1"},{"type":"image_url","image_url":{"url":"x"}},
                {"type":"text","text":"u2"}],"name":"jane"},
            {"role":"assistant","content":[{"type":"text","text":"a1"},{"type":"refusal","refusal":"no"}],
                "tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"to\":\"x\"}"}},
                              {"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},
            {"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{\"old\":1}"}},
            {"role":"tool","tool_call_id":"c1","content":"result"},
            {"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"part result"}]},
            {"role":"function","name":"f","content":"legacy result"},
            {"role":"developer","content":"dev"}],
            "prediction":{"type":"content","content":"predicted"}}))
        .unwrap();
        let got: Vec<(bool, String)> = req.texts_mut().into_iter().map(|(u, t)| (u, t.clone())).collect();
        let want = [
            (false, "sys"),
            (false, "ops"),
            (true, "u1"),
            (true, "u2"),
            (false, "jane"),
            (false, "a1"),
            (false, "no"),
            (false, "{\"to\":\"x\"}"),
            (false, "{}"),
            (false, "{\"old\":1}"),
            (false, "result"),
            (false, "part result"),
            (false, "legacy result"),
            (false, "f"),
            (false, "dev"),
            (false, "predicted"),
        ];
        assert_eq!(got, want.map(|(u, t)| (u, t.to_string())));

        // Edits reach the upstream body, even after it was serialized once.
        req.openai_body("m").unwrap();
        for (_, t) in req.texts_mut() {
            t.make_ascii_uppercase();
        }
        let up: Value = serde_json::from_slice(&req.openai_body("m").unwrap()).unwrap();
        assert_eq!(up["messages"][0]["name"], "OPS");
        assert_eq!(up["messages"][2]["content"][1]["refusal"], "NO");
        assert_eq!(up["messages"][2]["tool_calls"][0]["function"]["arguments"], "{\"TO\":\"X\"}");
        assert_eq!(up["messages"][3]["function_call"]["arguments"], "{\"OLD\":1}");
        assert_eq!(up["messages"][5]["content"][0]["text"], "PART RESULT");
        assert_eq!(up["prediction"]["content"], "PREDICTED");
        assert_eq!(up["messages"][1]["content"][1]["image_url"]["url"], "x");
    }

    #[test]
    fn text_of_parts() {
        let m = json!({"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]});
        assert_eq!(message_text(&m), "a b");
        assert_eq!(message_role(&m), "user");
    }
}
