//! Output guardrails on a stream. Each text a choice's deltas carry (the chain of thought in
//! `reasoning_content` or `reasoning`, `content`, `refusal`, each tool call's `function.arguments`
//! or, for a custom tool call, `custom.input`, by the call's `index`, the legacy
//! `function_call.arguments`, `audio.transcript`) is held back by a small look-behind window
//! before it reaches the client, so a value split over several chunks is seen whole and redacted
//! before any of it leaves: the window covers every value with spaces in it (phone numbers,
//! grouped card numbers, IBANs), the text is never cut inside a run without whitespace (e-mail
//! addresses, keys, tokens, placeholders), and an open private key block is held until it closes.
//! What is held goes out with the choice's finishing chunk, or before the usage chunk. Token log
//! probabilities would spell the values out again, so a guard that scans answers sends every chunk
//! without them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::engine::{OutputBlocked, OutputGuard};
use super::PolicyDecision;
use crate::providers::ChunkFilter;

mod held;

pub use held::{finish, push, Held, MAX_HOLD, WINDOW};

/// A text field of a choice's deltas, held on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Field {
    /// The chain of thought as DeepSeek, vLLM and many OpenAI-compatible servers name it. Declared
    /// first: [`Field::FIRST`].
    ReasoningContent,
    /// The same as OpenRouter (and newer vLLM) name it.
    Reasoning,
    Content,
    Refusal,
    /// A tool call's text, by the tool call's `index`.
    ToolCall(u64, ToolText),
    /// The legacy `function_call.arguments`.
    FunctionArguments,
    /// `audio.transcript`.
    Transcript,
}

impl Field {
    /// The least field: a choice's fields are the keys from `(choice, FIRST)` on.
    const FIRST: Field = Field::ReasoningContent;
}

/// Which text of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ToolText {
    /// `function.arguments`.
    Arguments,
    /// A custom tool call's `custom.input`.
    Input,
}

impl ToolText {
    /// The object in the tool call that holds the text, and the text's key in it.
    fn path(self) -> (&'static str, &'static str) {
        match self {
            ToolText::Arguments => ("function", "arguments"),
            ToolText::Input => ("custom", "input"),
        }
    }
}

/// The stream filter: chunks in, chunks out, per choice and field.
pub struct GuardedStream {
    guard: OutputGuard,
    held: BTreeMap<(u64, Field), Held>,
    /// The last chunk's fields but its choices, for chunks the filter makes itself.
    template: Option<Map<String, Value>>,
}

impl GuardedStream {
    pub fn new(guard: OutputGuard) -> Self {
        Self { guard, held: BTreeMap::new(), template: None }
    }

    /// A field's new piece (in `slot`) through its held text: the slot gets what may leave now.
    fn pass(&mut self, choice: u64, field: Field, slot: &mut String) -> Result<(), OutputBlocked> {
        let held = self.held.entry((choice, field)).or_default();
        let piece = std::mem::take(slot);
        *slot = push(&mut self.guard, held, &piece)?;
        Ok(())
    }

    fn pass_delta(&mut self, choice: u64, delta: &mut Map<String, Value>) -> Result<(), OutputBlocked> {
        for (key, field) in [
            ("reasoning_content", Field::ReasoningContent),
            ("reasoning", Field::Reasoning),
            ("content", Field::Content),
            ("refusal", Field::Refusal),
        ] {
            if let Some(Value::String(s)) = delta.get_mut(key) {
                self.pass(choice, field, s)?;
            }
        }
        if let Some(Value::Array(calls)) = delta.get_mut("tool_calls") {
            for call in calls {
                let k = call_index(call);
                for part in [ToolText::Arguments, ToolText::Input] {
                    let (outer, key) = part.path();
                    if let Some(Value::String(s)) = call.get_mut(outer).and_then(|o| o.get_mut(key)) {
                        self.pass(choice, Field::ToolCall(k, part), s)?;
                    }
                }
            }
        }
        if let Some(Value::String(s)) = delta.get_mut("function_call").and_then(|f| f.get_mut("arguments")) {
            self.pass(choice, Field::FunctionArguments, s)?;
        }
        if let Some(Value::String(s)) = delta.get_mut("audio").and_then(|a| a.get_mut("transcript")) {
            self.pass(choice, Field::Transcript, s)?;
        }
        Ok(())
    }

    /// The rest of every text `choice` holds, in field order, empty ones left out.
    fn finish_choice(&mut self, choice: u64) -> Result<Vec<(Field, String)>, OutputBlocked> {
        let keys: Vec<(u64, Field)> =
            self.held.range((choice, Field::FIRST)..).map(|(k, _)| *k).take_while(|k| k.0 == choice).collect();
        let mut out = Vec::new();
        for key in keys {
            let Some(mut h) = self.held.remove(&key) else { continue };
            let rest = finish(&mut self.guard, &mut h)?;
            if !rest.is_empty() {
                out.push((key.1, rest));
            }
        }
        Ok(out)
    }

    fn flush_all(&mut self, out: &mut Vec<Value>) -> Result<(), OutputBlocked> {
        let choices: BTreeSet<u64> = self.held.keys().map(|(c, _)| *c).collect();
        for index in choices {
            let rests = self.finish_choice(index)?;
            if rests.is_empty() {
                continue;
            }
            let mut delta = Map::new();
            for (field, rest) in rests {
                put(&mut delta, field, rest);
            }
            let mut chunk = self.template.clone().unwrap_or_default();
            chunk.insert(
                "choices".into(),
                serde_json::json!([{"index": index, "delta": delta, "logprobs": null, "finish_reason": null}]),
            );
            out.push(Value::Object(chunk));
        }
        Ok(())
    }
}

fn call_index(call: &Value) -> u64 {
    call.get("index").and_then(Value::as_u64).unwrap_or(0)
}

/// `m[key]` as an object, made one if it is not.
fn object_at<'a>(m: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    let v = m.entry(key).or_insert(Value::Null);
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    v.as_object_mut()
}

fn append(m: &mut Map<String, Value>, key: &str, rest: String) {
    match m.get_mut(key) {
        Some(Value::String(s)) => s.push_str(&rest),
        _ => {
            m.insert(key.into(), Value::String(rest));
        }
    }
}

/// A field's held rest into a delta: after the chunk's own piece of that field, or as a new one.
fn put(delta: &mut Map<String, Value>, field: Field, rest: String) {
    match field {
        Field::ReasoningContent => append(delta, "reasoning_content", rest),
        Field::Reasoning => append(delta, "reasoning", rest),
        Field::Content => append(delta, "content", rest),
        Field::Refusal => append(delta, "refusal", rest),
        Field::FunctionArguments => {
            if let Some(f) = object_at(delta, "function_call") {
                append(f, "arguments", rest);
            }
        }
        Field::Transcript => {
            if let Some(a) = object_at(delta, "audio") {
                append(a, "transcript", rest);
            }
        }
        Field::ToolCall(k, part) => {
            let calls = match delta.entry("tool_calls").or_insert(Value::Null) {
                Value::Array(calls) => calls,
                other => {
                    *other = Value::Array(Vec::new());
                    match other {
                        Value::Array(calls) => calls,
                        _ => return,
                    }
                }
            };
            // The chunk's own entry for the call, or one of its own: `{"index": k, ...}`.
            let at = match calls.iter().position(|c| c.is_object() && call_index(c) == k) {
                Some(at) => at,
                None => {
                    calls.push(serde_json::json!({"index": k}));
                    calls.len() - 1
                }
            };
            let (outer, key) = part.path();
            if let Some(o) = calls.get_mut(at).and_then(Value::as_object_mut).and_then(|c| object_at(c, outer)) {
                append(o, key, rest);
            }
        }
    }
}

impl ChunkFilter for GuardedStream {
    fn chunk(&mut self, mut chunk: Value, out: &mut Vec<Value>) -> Result<(), OutputBlocked> {
        let Some(obj) = chunk.as_object_mut() else {
            out.push(chunk);
            return Ok(());
        };
        let has_choices = obj.get("choices").and_then(Value::as_array).is_some_and(|c| !c.is_empty());
        if !has_choices {
            // The usage chunk (or another without choices): what is held goes out first.
            self.flush_all(out)?;
            out.push(chunk);
            return Ok(());
        }
        // The chunk's id, model and the like do not change within a stream: kept once, for the
        // chunks the filter makes itself.
        if self.template.is_none() {
            let template = obj
                .iter()
                .filter(|(k, _)| *k != "choices" && *k != "usage")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            self.template = Some(template);
        }
        let scans = self.guard.scans();
        if let Some(choices) = obj.get_mut("choices").and_then(Value::as_array_mut) {
            for c in choices {
                let Some(c) = c.as_object_mut() else { continue };
                let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
                let finishing = c.get("finish_reason").is_some_and(|f| !f.is_null());
                if scans {
                    c.insert("logprobs".into(), Value::Null);
                }
                if let Some(Value::Object(delta)) = c.get_mut("delta") {
                    self.pass_delta(index, delta)?;
                }
                if finishing {
                    let rests = self.finish_choice(index)?;
                    if let Some(delta) = object_at(c, "delta").filter(|_| !rests.is_empty()) {
                        for (field, rest) in rests {
                            put(delta, field, rest);
                        }
                    }
                }
            }
        }
        out.push(chunk);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Value>) -> Result<(), OutputBlocked> {
        self.flush_all(out)
    }

    fn decisions(&self) -> Vec<PolicyDecision> {
        self.guard.decisions()
    }
}

#[cfg(test)]
mod tests;
