//! Output guardrails on a stream. Each text a choice's deltas carry (`content`, `refusal`, each
//! tool call's `function.arguments` by the call's `index`, the legacy `function_call.arguments`,
//! `audio.transcript`) is held back by a small look-behind window before it reaches the client,
//! so a value split over several chunks is seen whole and redacted before any of it leaves: the
//! window covers every value with spaces in it (phone numbers, grouped card numbers, IBANs), the
//! text is never cut inside a run without whitespace (e-mail addresses, keys, tokens,
//! placeholders), and an open private key block is held until it closes. What is held goes out
//! with the choice's finishing chunk, or before the usage chunk. Token log probabilities would
//! spell the values out again, so a guard that scans answers sends every chunk without them.

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
    Content,
    Refusal,
    /// A tool call's `function.arguments`, by the tool call's `index`.
    ToolArguments(u64),
    /// The legacy `function_call.arguments`.
    FunctionArguments,
    /// `audio.transcript`.
    Transcript,
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
        if let Some(Value::String(s)) = delta.get_mut("content") {
            self.pass(choice, Field::Content, s)?;
        }
        if let Some(Value::String(s)) = delta.get_mut("refusal") {
            self.pass(choice, Field::Refusal, s)?;
        }
        if let Some(Value::Array(calls)) = delta.get_mut("tool_calls") {
            for call in calls {
                let k = call_index(call);
                if let Some(Value::String(s)) = call.get_mut("function").and_then(|f| f.get_mut("arguments")) {
                    self.pass(choice, Field::ToolArguments(k), s)?;
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
            self.held.range((choice, Field::Content)..=(choice, Field::Transcript)).map(|(k, _)| *k).collect();
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
        Field::ToolArguments(k) => {
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
            let call = calls.iter_mut().find(|c| call_index(c) == k).and_then(Value::as_object_mut);
            match call.and_then(|c| object_at(c, "function")) {
                Some(f) => append(f, "arguments", rest),
                None => calls.push(serde_json::json!({"index": k, "function": {"arguments": rest}})),
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
