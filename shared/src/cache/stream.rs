//! Streams and the cache: a completed stream is gathered into the full response it amounts to
//! (what the cache stores), and a stored response is replayed as a real stream of chunks.

use serde::Serialize;
use serde_json::{json, Map, Value};

/// Gathers `chat.completion.chunk`s into one `chat.completion`.
#[derive(Debug, Default)]
pub struct Assembler {
    id: Option<Value>,
    created: Option<Value>,
    model: Option<Value>,
    system_fingerprint: Option<Value>,
    choices: Vec<ChoiceParts>,
    usage: Option<Value>,
    /// Something arrived that the assembler cannot represent faithfully: store nothing.
    spoiled: bool,
}

#[derive(Debug, Default)]
struct ChoiceParts {
    index: u64,
    role: Option<String>,
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: Vec<Map<String, Value>>,
    finish_reason: Option<Value>,
}

impl Assembler {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn chunk(&mut self, chunk: &Value) {
        let Some(c) = chunk.as_object() else {
            self.spoiled = true;
            return;
        };
        for (field, slot) in [
            ("id", &mut self.id),
            ("created", &mut self.created),
            ("model", &mut self.model),
            ("system_fingerprint", &mut self.system_fingerprint),
        ] {
            if slot.is_none() {
                if let Some(v) = c.get(field).filter(|v| !v.is_null()) {
                    *slot = Some(v.clone());
                }
            }
        }
        if let Some(u) = c.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        for choice in c.get("choices").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            self.choice(choice);
        }
    }

    fn choice(&mut self, choice: &Value) {
        let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
        // Log probabilities are not kept: a replay could not give them back.
        if choice.get("logprobs").is_some_and(|l| !l.is_null()) {
            self.spoiled = true;
        }
        let pos = match self.choices.iter().position(|c| c.index == index) {
            Some(p) => p,
            None => {
                self.choices.push(ChoiceParts { index, ..ChoiceParts::default() });
                self.choices.len() - 1
            }
        };
        let parts = &mut self.choices[pos];
        if let Some(f) = choice.get("finish_reason").filter(|f| !f.is_null()) {
            parts.finish_reason = Some(f.clone());
        }
        let Some(delta) = choice.get("delta").and_then(Value::as_object) else { return };
        for (k, v) in delta {
            match (k.as_str(), v) {
                (_, Value::Null) => {}
                ("role", Value::String(r)) => parts.role = Some(r.clone()),
                ("content", Value::String(s)) => parts.content.get_or_insert_with(String::new).push_str(s),
                ("refusal", Value::String(s)) => parts.refusal.get_or_insert_with(String::new).push_str(s),
                ("tool_calls", Value::Array(calls)) => {
                    for call in calls {
                        merge_tool_call(&mut parts.tool_calls, call);
                    }
                }
                // Audio, function_call (deprecated) and the like: not gathered, not stored.
                _ => self.spoiled = true,
            }
        }
    }

    /// The full response, when the stream amounts to one: every choice finished.
    pub fn finish(self) -> Option<Value> {
        if self.spoiled || self.choices.is_empty() || self.choices.iter().any(|c| c.finish_reason.is_none()) {
            return None;
        }
        let mut choices = self.choices;
        choices.sort_by_key(|c| c.index);
        let choices: Vec<Value> = choices
            .into_iter()
            .map(|c| {
                let mut message = Map::new();
                message.insert("role".into(), json!(c.role.unwrap_or_else(|| "assistant".into())));
                message.insert("content".into(), c.content.map_or(Value::Null, Value::String));
                message.insert("refusal".into(), c.refusal.map_or(Value::Null, Value::String));
                if !c.tool_calls.is_empty() {
                    message.insert(
                        "tool_calls".into(),
                        Value::Array(c.tool_calls.into_iter().map(Value::Object).collect()),
                    );
                }
                json!({"index": c.index, "message": message, "logprobs": null, "finish_reason": c.finish_reason})
            })
            .collect();
        let mut out = Map::new();
        out.insert("id".into(), self.id.unwrap_or_else(|| json!("chatcmpl-cached")));
        out.insert("object".into(), json!("chat.completion"));
        out.insert("created".into(), self.created.unwrap_or_else(|| json!(0)));
        out.insert("model".into(), self.model.unwrap_or_else(|| json!("")));
        out.insert("choices".into(), Value::Array(choices));
        if let Some(u) = self.usage {
            out.insert("usage".into(), u);
        }
        if let Some(f) = self.system_fingerprint {
            out.insert("system_fingerprint".into(), f);
        }
        Some(Value::Object(out))
    }
}

/// Tool-call deltas carry an `index`; the first names the call, later ones add arguments.
fn merge_tool_call(calls: &mut Vec<Map<String, Value>>, delta: &Value) {
    let Some(d) = delta.as_object() else { return };
    let index = d.get("index").and_then(Value::as_u64).unwrap_or(calls.len() as u64) as usize;
    while calls.len() <= index {
        calls.push(Map::new());
    }
    let call = &mut calls[index];
    for (k, v) in d {
        match (k.as_str(), v) {
            ("index", _) | (_, Value::Null) => {}
            ("function", Value::Object(f)) => {
                let fun = call.entry("function").or_insert_with(|| json!({})).as_object_mut();
                let Some(fun) = fun else { continue };
                for (fk, fv) in f {
                    match (fun.get_mut(fk), fv) {
                        (Some(Value::String(have)), Value::String(more)) => have.push_str(more),
                        (_, fv) => {
                            fun.insert(fk.clone(), fv.clone());
                        }
                    }
                }
            }
            _ => {
                call.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Text pieces of a replayed stream: about this many bytes each, cut at word ends.
const PIECE: usize = 24;

/// One chunk of a replay, borrowing from the stored answer.
pub struct ReplayChunk<'a> {
    id: &'a str,
    created: i64,
    model: &'a Value,
    /// One choice, or none (the usage chunk).
    choices: Option<ChunkChoice<'a>>,
    system_fingerprint: Option<&'a Value>,
    usage: Option<&'a Value>,
}

struct ChunkChoice<'a> {
    index: u64,
    delta: Delta<'a>,
    finish_reason: Option<&'a Value>,
}

#[derive(Default, Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCall<'a>; 1]>,
}

#[derive(Serialize)]
struct ToolCall<'a> {
    index: usize,
    #[serde(flatten)]
    call: &'a Map<String, Value>,
}

impl Serialize for ChunkChoice<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("index", &self.index)?;
        m.serialize_entry("delta", &self.delta)?;
        m.serialize_entry("finish_reason", &self.finish_reason)?;
        m.end()
    }
}

impl Serialize for ReplayChunkChoices<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(usize::from(self.0.is_some())))?;
        if let Some(c) = self.0 {
            seq.serialize_element(c)?;
        }
        seq.end()
    }
}

struct ReplayChunkChoices<'a, 'b>(&'b Option<ChunkChoice<'a>>);

impl Serialize for ReplayChunk<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", self.id)?;
        m.serialize_entry("object", "chat.completion.chunk")?;
        m.serialize_entry("created", &self.created)?;
        m.serialize_entry("model", self.model)?;
        m.serialize_entry("choices", &ReplayChunkChoices(&self.choices))?;
        if let Some(f) = self.system_fingerprint {
            m.serialize_entry("system_fingerprint", f)?;
        }
        if let Some(u) = self.usage {
            m.serialize_entry("usage", u)?;
        }
        m.end()
    }
}

/// A stored `chat.completion` as the chunks of a stream, handed to `emit` one by one: per
/// choice a role chunk, the content in pieces, the refusal, each tool call, then the finish; the
/// usage chunk (empty `choices`) last, only when asked for.
pub fn replay_each<'a>(
    completion: &'a Value,
    id: &'a str,
    created: i64,
    include_usage: bool,
    emit: &mut dyn FnMut(&ReplayChunk<'a>),
) {
    static EMPTY: Value = Value::String(String::new());
    static STOP: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| Value::String("stop".into()));
    let model = completion.get("model").unwrap_or(&EMPTY);
    let system_fingerprint = completion.get("system_fingerprint");
    let chunk =
        |choices: Option<ChunkChoice<'a>>| ReplayChunk { id, created, model, choices, system_fingerprint, usage: None };
    for choice in completion.get("choices").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
        let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
        let message = choice.get("message");
        let field = |name: &str| message.and_then(|m| m.get(name));
        let delta = |delta: Delta<'a>| Some(ChunkChoice { index, delta, finish_reason: None });
        // As OpenAI does: an empty content in the role chunk only when the answer has text.
        let text = field("content").and_then(Value::as_str);
        emit(&chunk(delta(Delta { role: Some("assistant"), content: text.map(|_| ""), ..Delta::default() })));
        for piece in text.map(|t| pieces(t, PIECE)).unwrap_or_default() {
            emit(&chunk(delta(Delta { content: Some(piece), ..Delta::default() })));
        }
        if let Some(refusal) = field("refusal").and_then(Value::as_str) {
            emit(&chunk(delta(Delta { refusal: Some(refusal), ..Delta::default() })));
        }
        let calls = field("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for (i, call) in calls.iter().enumerate() {
            if let Some(call) = call.as_object() {
                let tool_calls = Some([ToolCall { index: i, call }]);
                emit(&chunk(delta(Delta { tool_calls, ..Delta::default() })));
            }
        }
        let finish_reason = Some(choice.get("finish_reason").filter(|f| !f.is_null()).unwrap_or(&STOP));
        emit(&chunk(Some(ChunkChoice { index, delta: Delta::default(), finish_reason })));
    }
    if include_usage {
        let mut last = chunk(None);
        last.usage = completion.get("usage");
        emit(&last);
    }
}

/// [`replay_each`]'s chunks as JSON values (for the output guardrails, which read values).
pub fn replay(completion: &Value, id: &str, created: i64, include_usage: bool) -> Vec<Value> {
    let mut out = Vec::new();
    replay_each(completion, id, created, include_usage, &mut |c| {
        // Serializing borrowed JSON into a value cannot fail.
        out.push(serde_json::to_value(c).unwrap_or(Value::Null));
    });
    out
}

/// [`replay_each`]'s chunks written as SSE events, straight from the stored answer; how many.
pub fn replay_sse(completion: &Value, id: &str, created: i64, include_usage: bool, out: &mut Vec<u8>) -> usize {
    let mut n = 0;
    replay_each(completion, id, created, include_usage, &mut |c| {
        out.extend_from_slice(b"data: ");
        // Writing into memory cannot fail.
        let _ = serde_json::to_writer(&mut *out, c);
        out.extend_from_slice(b"\n\n");
        n += 1;
    });
    n
}

/// `text` in pieces of about `size` bytes, each ending after whitespace where it can; the
/// pieces joined are `text`.
pub fn pieces(text: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        if rest.len() <= size {
            out.push(rest);
            break;
        }
        let mut cut = size;
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        // Extend to the end of the word so pieces read naturally.
        let word_end = rest[cut..].find(char::is_whitespace).map_or(rest.len(), |i| cut + i);
        // A word longer than a few pieces (a URL, base64) is cut anyway.
        let word_end = if word_end - cut > 4 * size { cut } else { word_end };
        let end = rest[word_end..].find(|c: char| !c.is_whitespace()).map_or(rest.len(), |i| word_end + i);
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

#[cfg(test)]
mod tests;
