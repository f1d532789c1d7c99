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

use super::engine::{OutputBlocked, OutputGuard};
use super::PolicyDecision;
use crate::providers::{ChunkFilter, Frames};

mod held;
mod json;

pub use held::{finish, push, Held, MAX_HOLD, WINDOW};
use json::{Json, Obj};

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
    /// The first chunk's members but its choices and usage (id, model and the like do not change
    /// within a stream), for the chunks the filter makes itself.
    template: Option<Vec<(String, Box<serde_json::value::RawValue>)>>,
}

impl GuardedStream {
    pub fn new(guard: OutputGuard) -> Self {
        Self { guard, held: BTreeMap::new(), template: None }
    }

    /// A field's new piece (in `slot`, when it is a string) through its held text: the slot gets
    /// what may leave now.
    fn pass(&mut self, choice: u64, field: Field, slot: Option<&mut Json<'_>>) -> Result<(), OutputBlocked> {
        let Some(slot) = slot else { return Ok(()) };
        let Some(piece) = slot.string() else { return Ok(()) };
        let held = self.held.entry((choice, field)).or_default();
        let out = push(&mut self.guard, held, &piece)?;
        *slot = Json::Text(out);
        Ok(())
    }

    fn pass_delta(&mut self, choice: u64, delta: &mut Obj<'_>) -> Result<(), OutputBlocked> {
        for (key, field) in [
            ("reasoning_content", Field::ReasoningContent),
            ("reasoning", Field::Reasoning),
            ("content", Field::Content),
            ("refusal", Field::Refusal),
        ] {
            self.pass(choice, field, delta.get_mut(key))?;
        }
        if let Some(calls) = delta.get_mut("tool_calls").and_then(Json::array) {
            for call in calls {
                let Some(call) = call.object() else { continue };
                let k = call_index(call);
                for part in [ToolText::Arguments, ToolText::Input] {
                    let (outer, key) = part.path();
                    let slot = call.get_mut(outer).and_then(Json::object).and_then(|o| o.get_mut(key));
                    self.pass(choice, Field::ToolCall(k, part), slot)?;
                }
            }
        }
        let slot = delta.get_mut("function_call").and_then(Json::object).and_then(|f| f.get_mut("arguments"));
        self.pass(choice, Field::FunctionArguments, slot)?;
        let slot = delta.get_mut("audio").and_then(Json::object).and_then(|a| a.get_mut("transcript"));
        self.pass(choice, Field::Transcript, slot)?;
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

    /// Every held text out, a chunk per choice made from the template.
    fn flush_all(&mut self, out: &mut Frames<'_>) -> Result<(), OutputBlocked> {
        let choices: BTreeSet<u64> = self.held.keys().map(|(c, _)| *c).collect();
        let mut rests = Vec::new();
        for index in choices {
            let r = self.finish_choice(index)?;
            if !r.is_empty() {
                rests.push((index, r));
            }
        }
        for (index, r) in rests {
            let mut chunk = Obj::default();
            for (k, v) in self.template.iter().flatten() {
                chunk.push(k.as_str().into(), Json::Raw(v));
            }
            let mut c = Obj::default();
            c.insert("index", Json::U64(index));
            let mut delta = Json::Object(Obj::default());
            if let Some(d) = delta.object() {
                for (field, rest) in r {
                    put(d, field, rest);
                }
            }
            c.insert("delta", delta);
            c.insert("logprobs", Json::Null);
            c.insert("finish_reason", Json::Null);
            chunk.insert("choices", Json::Array(vec![Json::Object(c)]));
            write(out, &chunk)?;
        }
        Ok(())
    }
}

fn call_index(call: &Obj<'_>) -> u64 {
    call.get("index").and_then(Json::as_u64).unwrap_or(0)
}

fn append<'a>(m: &mut Obj<'a>, key: &'static str, rest: String) {
    let slot = m.entry(key);
    match slot {
        Json::Text(s) => s.push_str(&rest),
        _ => match slot.string() {
            Some(s) => *slot = Json::Text(s.into_owned() + &rest),
            None => *slot = Json::Text(rest),
        },
    }
}

/// A field's held rest into a delta: after the chunk's own piece of that field, or as a new one.
fn put(delta: &mut Obj<'_>, field: Field, rest: String) {
    match field {
        Field::ReasoningContent => append(delta, "reasoning_content", rest),
        Field::Reasoning => append(delta, "reasoning", rest),
        Field::Content => append(delta, "content", rest),
        Field::Refusal => append(delta, "refusal", rest),
        Field::FunctionArguments => {
            if let Some(f) = delta.object_at("function_call") {
                append(f, "arguments", rest);
            }
        }
        Field::Transcript => {
            if let Some(a) = delta.object_at("audio") {
                append(a, "transcript", rest);
            }
        }
        Field::ToolCall(k, part) => {
            let Some(calls) = delta.entry("tool_calls").make_array() else { return };
            // The chunk's own entry for the call, or one of its own: `{"index": k}`.
            let at = calls.iter_mut().position(|c| c.object().is_some_and(|c| call_index(c) == k));
            let call = match at {
                Some(at) => &mut calls[at],
                None => {
                    let mut call = Obj::default();
                    call.insert("index", Json::U64(k));
                    calls.push(Json::Object(call));
                    let last = calls.len() - 1;
                    &mut calls[last]
                }
            };
            let (outer, key) = part.path();
            if let Some(o) = call.object().and_then(|c| c.object_at(outer)) {
                append(o, key, rest);
            }
        }
    }
}

/// A chunk the filter wrote itself, or edited, to the client.
fn write<T: serde::Serialize>(out: &mut Frames<'_>, chunk: &T) -> Result<(), OutputBlocked> {
    out.json(chunk).map_err(|e| OutputBlocked {
        policy: String::new(),
        guardrail: "output",
        reason: format!("a guarded chunk could not be written: {e}"),
    })
}

/// What cannot be read cannot be checked: it does not go out.
fn unreadable() -> OutputBlocked {
    OutputBlocked {
        policy: String::new(),
        guardrail: "output",
        reason: "the upstream sent a chunk the output guardrails could not read".into(),
    }
}

impl ChunkFilter for GuardedStream {
    fn filter(&mut self, json: &str, out: &mut Frames<'_>) -> Result<(), OutputBlocked> {
        let Some(mut obj) = Obj::parse(json) else {
            // Valid JSON that is not an object holds no choices: it goes out as it came.
            return match serde_json::from_str::<&serde_json::value::RawValue>(json) {
                Ok(_) => {
                    out.raw(json);
                    Ok(())
                }
                Err(_) => Err(unreadable()),
            };
        };
        if !obj.get_mut("choices").is_some_and(Json::is_nonempty_array) {
            // The usage chunk (or another without choices): what is held goes out first.
            self.flush_all(out)?;
            out.raw(json);
            return Ok(());
        }
        if self.template.is_none() {
            let template = obj
                .members_but(&["choices", "usage"])
                .filter_map(|(k, v)| serde_json::value::to_raw_value(v).ok().map(|v| (k.to_owned(), v)))
                .collect();
            self.template = Some(template);
        }
        let scans = self.guard.scans();
        if let Some(choices) = obj.get_mut("choices").and_then(Json::array) {
            for c in choices {
                let Some(c) = c.object() else { continue };
                let index = c.get("index").and_then(Json::as_u64).unwrap_or(0);
                let finishing = c.get("finish_reason").is_some_and(|f| !f.is_null());
                if scans {
                    c.insert("logprobs", Json::Null);
                }
                if let Some(delta) = c.get_mut("delta").and_then(Json::object) {
                    self.pass_delta(index, delta)?;
                }
                if finishing {
                    let rests = self.finish_choice(index)?;
                    if !rests.is_empty() {
                        if let Some(delta) = c.object_at("delta") {
                            for (field, rest) in rests {
                                put(delta, field, rest);
                            }
                        }
                    }
                }
            }
        }
        write(out, &obj)
    }

    fn flush(&mut self, out: &mut Frames<'_>) -> Result<(), OutputBlocked> {
        self.flush_all(out)
    }

    fn decisions(&self) -> Vec<PolicyDecision> {
        self.guard.decisions()
    }
}

#[cfg(test)]
mod tests;
