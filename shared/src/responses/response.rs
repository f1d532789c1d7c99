//! The pipeline's answer (a chat completion, or its chunks) as a Responses API `response`
//! object and its streaming event sequence, with every field OpenAI's OpenAPI document requires.

use serde_json::{json, Map, Value};

use crate::pricing::TokenUsage;

/// What a `response` object repeats of its request.
#[derive(Debug, Clone)]
pub struct Echo {
    pub id: String,
    pub model: String,
    pub created_at: i64,
    fields: Map<String, Value>,
    /// The namespace of each namespaced function (a call of it names its namespace).
    namespaces: Vec<(String, String)>,
}

impl Echo {
    /// The echo of a (valid) Responses request body. `id`: the response's id.
    pub fn new(body: &Map<String, Value>, id: String, created_at: i64) -> Self {
        let model = body.get("model").and_then(Value::as_str).unwrap_or_default().to_string();
        let get = |k: &str| body.get(k).filter(|v| !v.is_null()).cloned();
        let mut fields = Map::new();
        fields.insert("instructions".into(), get("instructions").unwrap_or(Value::Null));
        fields.insert("tools".into(), get("tools").unwrap_or_else(|| json!([])));
        fields.insert("tool_choice".into(), get("tool_choice").unwrap_or_else(|| json!("auto")));
        fields.insert("parallel_tool_calls".into(), get("parallel_tool_calls").unwrap_or(Value::Bool(true)));
        fields.insert("temperature".into(), get("temperature").unwrap_or_else(|| json!(1.0)));
        fields.insert("top_p".into(), get("top_p").unwrap_or_else(|| json!(1.0)));
        fields.insert("metadata".into(), get("metadata").unwrap_or_else(|| json!({})));
        fields.insert("max_output_tokens".into(), get("max_output_tokens").unwrap_or(Value::Null));
        fields.insert("text".into(), get("text").unwrap_or_else(|| json!({"format": {"type": "text"}})));
        fields.insert("reasoning".into(), get("reasoning").unwrap_or(Value::Null));
        fields.insert("store".into(), Value::Bool(false));
        let mut namespaces = Vec::new();
        for ns in body.get("tools").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            if ns.get("type").and_then(Value::as_str) != Some("namespace") {
                continue;
            }
            let Some(space) = ns.get("name").and_then(Value::as_str) else { continue };
            for f in ns.get("tools").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                if let Some(name) = f.get("name").and_then(Value::as_str) {
                    namespaces.push((name.to_string(), space.to_string()));
                }
            }
        }
        fields.insert("truncation".into(), json!("disabled"));
        if let Some(user) = get("user") {
            fields.insert("user".into(), user);
        }
        Self { id, model, created_at, fields, namespaces }
    }

    /// The `response` object with this `status`, `output` and `usage`.
    fn response(&self, status: &str, output: Vec<Value>, usage: Option<Value>, incomplete: Option<&str>) -> Value {
        let mut r = Map::new();
        r.insert("id".into(), Value::String(self.id.clone()));
        r.insert("object".into(), json!("response"));
        r.insert("created_at".into(), json!(self.created_at));
        r.insert("status".into(), json!(status));
        r.insert(
            "completed_at".into(),
            if status == "completed" { json!(crate::clock::now().timestamp()) } else { Value::Null },
        );
        r.insert("error".into(), Value::Null);
        r.insert("incomplete_details".into(), incomplete.map_or(Value::Null, |reason| json!({"reason": reason})));
        r.insert("model".into(), Value::String(self.model.clone()));
        r.insert("output".into(), Value::Array(output));
        for (k, v) in &self.fields {
            r.insert(k.clone(), v.clone());
        }
        // Known once the answer is whole (the document allows it absent, not null).
        if let Some(usage) = usage {
            r.insert("usage".into(), usage);
        }
        Value::Object(r)
    }
}

/// The Responses `usage` object.
pub fn usage(u: &TokenUsage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.total(),
    })
}

/// `status` and `incomplete_details.reason` for a chat finish reason.
fn ending(finish: Option<&str>) -> (&'static str, Option<&'static str>) {
    match finish {
        Some("length") => ("incomplete", Some("max_output_tokens")),
        Some("content_filter") => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn message_item(id: &str, status: &str, content: Vec<Value>) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

fn call_item(echo: &Echo, id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    let mut item = json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments, "status": status});
    if let Some((_, space)) = echo.namespaces.iter().find(|(n, _)| n == name) {
        item["namespace"] = Value::String(space.clone());
    }
    item
}

/// The `response` object for a chat completion body.
pub fn response(echo: &Echo, chat: &Value, u: &TokenUsage) -> Value {
    let choice = &chat["choices"][0];
    let msg = &choice["message"];
    let mut output = Vec::new();
    let (status, incomplete) = ending(choice["finish_reason"].as_str());
    if let Some(t) = msg.get("content").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        output.push(message_item(
            &format!("msg_{}", echo.id.trim_start_matches("resp_")),
            "completed",
            vec![text_part(t)],
        ));
    } else if let Some(r) = msg.get("refusal").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        let part = json!({"type": "refusal", "refusal": r});
        output.push(message_item(&format!("msg_{}", echo.id.trim_start_matches("resp_")), "completed", vec![part]));
    }
    for (n, call) in
        msg.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default().iter().enumerate()
    {
        output.push(call_item(
            echo,
            &format!("fc_{}_{n}", echo.id.trim_start_matches("resp_")),
            call["id"].as_str().unwrap_or_default(),
            call["function"]["name"].as_str().unwrap_or_default(),
            call["function"]["arguments"].as_str().unwrap_or_default(),
            "completed",
        ));
    }
    echo.response(status, output, Some(usage(u)), incomplete)
}

/// One output item being streamed.
enum Item {
    Message { id: String, text: String },
    Call { id: String, call_id: String, name: String, arguments: String, index: u64 },
}

/// Re-frames a stream of chat chunks as the Responses event sequence: `response.created`,
/// `response.in_progress`, per output item `response.output_item.added`, its parts and deltas
/// (`response.output_text.delta`, `response.function_call_arguments.delta`) and their `done`
/// events, `response.output_item.done`, then `response.completed` (or `response.incomplete`)
/// holding the whole response and its usage. Every event carries its `sequence_number`.
pub struct EventEncoder {
    echo: Echo,
    seq: u64,
    started: bool,
    open: Option<Item>,
    done: Vec<Value>,
    finish: Option<String>,
}

impl EventEncoder {
    pub fn new(echo: Echo) -> Self {
        Self { echo, seq: 0, started: false, open: None, done: Vec::new(), finish: None }
    }

    /// The model the response names, when it is known only after the request was parsed (an
    /// experiment's variant).
    pub fn set_model(&mut self, model: &str) {
        self.echo.model = model.to_string();
    }

    /// The deployment's own events went out instead (passthrough) up to `last`, its
    /// `sequence_number`: an event added now continues them.
    pub fn resume_after(&mut self, last: Option<u64>) {
        self.started = true;
        self.seq = last.map_or(0, |n| n.saturating_add(1));
    }

    fn event(&mut self, out: &mut Vec<u8>, mut data: Value) {
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(data["type"].as_str().unwrap_or_default().as_bytes());
        out.extend_from_slice(b"\ndata: ");
        let _ = serde_json::to_writer(&mut *out, &data);
        out.extend_from_slice(b"\n\n");
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = self.echo.response("in_progress", Vec::new(), None, None);
        self.event(out, json!({"type": "response.created", "response": r}));
        let r = self.echo.response("in_progress", Vec::new(), None, None);
        self.event(out, json!({"type": "response.in_progress", "response": r}));
    }

    fn output_index(&self) -> usize {
        self.done.len()
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        let Some(item) = self.open.take() else { return };
        let index = self.output_index();
        let done = match item {
            Item::Message { id, text } => {
                self.event(
                    out,
                    json!({"type": "response.output_text.done", "item_id": id, "output_index": index,
                                       "content_index": 0, "text": text, "logprobs": []}),
                );
                self.event(
                    out,
                    json!({"type": "response.content_part.done", "item_id": id, "output_index": index,
                                       "content_index": 0, "part": text_part(&text)}),
                );
                message_item(&id, "completed", vec![text_part(&text)])
            }
            Item::Call { id, call_id, name, arguments, .. } => {
                self.event(
                    out,
                    json!({"type": "response.function_call_arguments.done", "item_id": id,
                                       "output_index": index, "name": name, "arguments": arguments}),
                );
                call_item(&self.echo, &id, &call_id, &name, &arguments, "completed")
            }
        };
        self.event(out, json!({"type": "response.output_item.done", "output_index": index, "item": done}));
        self.done.push(done);
    }

    /// The events for a piece of the chat SSE body (whole `data:` frames; comments and `[DONE]`
    /// skipped: [`Self::finish`] ends the response).
    pub fn frames(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.start(&mut out);
        for chunk in crate::openai::chunk_objects(bytes) {
            self.chunk(&chunk, &mut out);
        }
        out
    }

    fn chunk(&mut self, chunk: &Map<String, Value>, out: &mut Vec<u8>) {
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else { return };
        let delta = &choice["delta"];
        // A refusal is said as text (a refusal part would need its own event types).
        let text = delta.get("content").and_then(Value::as_str).filter(|s| !s.is_empty());
        if let Some(t) = text.or_else(|| delta.get("refusal").and_then(Value::as_str).filter(|s| !s.is_empty())) {
            if !matches!(self.open, Some(Item::Message { .. })) {
                self.close(out);
                let id = format!("msg_{}", self.echo.id.trim_start_matches("resp_"));
                let index = self.output_index();
                self.event(
                    out,
                    json!({"type": "response.output_item.added", "output_index": index,
                                       "item": message_item(&id, "in_progress", Vec::new())}),
                );
                self.event(
                    out,
                    json!({"type": "response.content_part.added", "item_id": id, "output_index": index,
                                       "content_index": 0, "part": text_part("")}),
                );
                self.open = Some(Item::Message { id, text: String::new() });
            }
            let index = self.output_index();
            if let Some(Item::Message { id, text }) = self.open.as_mut() {
                text.push_str(t);
                let id = id.clone();
                self.event(
                    out,
                    json!({"type": "response.output_text.delta", "item_id": id, "output_index": index,
                                       "content_index": 0, "delta": t, "logprobs": []}),
                );
            }
        }
        for call in delta.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            let n = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            if !matches!(self.open, Some(Item::Call { index, .. }) if index == n) {
                self.close(out);
                let id = format!("fc_{}_{n}", self.echo.id.trim_start_matches("resp_"));
                let call_id = call["id"].as_str().unwrap_or_default().to_string();
                let name = call["function"]["name"].as_str().unwrap_or_default().to_string();
                let index = self.output_index();
                self.event(
                    out,
                    json!({"type": "response.output_item.added", "output_index": index,
                                       "item": call_item(&self.echo, &id, &call_id, &name, "", "in_progress")}),
                );
                self.open = Some(Item::Call { id, call_id, name, arguments: String::new(), index: n });
            }
            let index = self.output_index();
            if let (Some(piece), Some(Item::Call { id, arguments, .. })) =
                (call["function"]["arguments"].as_str().filter(|s| !s.is_empty()), self.open.as_mut())
            {
                arguments.push_str(piece);
                let id = id.clone();
                self.event(
                    out,
                    json!({"type": "response.function_call_arguments.delta", "item_id": id,
                                       "output_index": index, "delta": piece}),
                );
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(f.to_string());
        }
    }

    /// The end: the open item closed, then the whole response with its usage.
    pub fn finish(&mut self, u: &TokenUsage) -> Vec<u8> {
        let mut out = Vec::new();
        self.start(&mut out);
        self.close(&mut out);
        let (status, incomplete) = ending(self.finish.as_deref());
        let kind = if status == "completed" { "response.completed" } else { "response.incomplete" };
        let r = self.echo.response(status, std::mem::take(&mut self.done), Some(usage(u)), incomplete);
        self.event(&mut out, json!({"type": kind, "response": r}));
        out
    }

    /// The error event ending a stream that fails after it started.
    pub fn error(&mut self, code: &str, message: &str, param: Option<&str>) -> Vec<u8> {
        let mut out = Vec::new();
        self.start(&mut out);
        self.event(&mut out, json!({"type": "error", "code": code, "message": message, "param": param}));
        out
    }
}
