//! A complete (non-streamed) chat answer through the output guardrails: every field the model
//! wrote, per choice: `message.reasoning_content` and `message.reasoning` (the chain of thought
//! OpenAI-compatible servers return), `message.content`, `message.refusal`, each tool call's
//! `function.arguments` or (a custom tool call's) `custom.input`, the legacy
//! `function_call.arguments` and `audio.transcript`. Token log probabilities would spell the same
//! values out again token by token, so an answer the guard scans goes out without them.

use std::borrow::Cow;

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use super::engine::{OutputBlocked, OutputGuard};

/// Why an answer cannot go out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerGuardError {
    /// A guardrail blocks a value the answer holds.
    #[error("policy '{}' blocked the answer: {}", .0.policy, .0.reason)]
    Blocked(OutputBlocked),
    /// The answer could not be read, so it could not be checked.
    #[error("the answer could not be read for the output guardrails: {0}")]
    Unreadable(String),
}

/// Just the fields the guard reads, borrowed where they need no unescaping: most answers come
/// out of the guard unchanged and then go out as they came, without a full parse.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow, default)]
    choices: Vec<AnswerChoice<'a>>,
}

#[derive(Deserialize)]
struct AnswerChoice<'a> {
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    #[serde(default)]
    logprobs: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Message<'a> {
    /// The chain of thought as DeepSeek, vLLM and many OpenAI-compatible servers name it.
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    /// The same as OpenRouter (and newer vLLM) name it.
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
    #[serde(borrow, default)]
    function_call: Option<Function<'a>>,
    #[serde(borrow, default)]
    audio: Option<Audio<'a>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow, default)]
    function: Option<Function<'a>>,
    /// A custom tool call's (`"type": "custom"`) free-form input.
    #[serde(borrow, default)]
    custom: Option<Custom<'a>>,
}

#[derive(Deserialize)]
struct Custom<'a> {
    #[serde(borrow, default)]
    input: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Audio<'a> {
    #[serde(borrow, default)]
    transcript: Option<Cow<'a, str>>,
}

/// One choice's guarded texts that differ from what the model wrote.
#[derive(Default)]
struct Rewrites {
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    content: Option<String>,
    refusal: Option<String>,
    /// By position in `tool_calls`.
    tool_arguments: Vec<(usize, String)>,
    /// Custom tool calls' `input`, by position in `tool_calls`.
    tool_inputs: Vec<(usize, String)>,
    function_arguments: Option<String>,
    transcript: Option<String>,
}

impl Rewrites {
    fn is_empty(&self) -> bool {
        self.reasoning_content.is_none()
            && self.reasoning.is_none()
            && self.content.is_none()
            && self.refusal.is_none()
            && self.tool_arguments.is_empty()
            && self.tool_inputs.is_empty()
            && self.function_arguments.is_none()
            && self.transcript.is_none()
    }
}

/// `text` through the guard: `Some` with what replaces it when it changed.
fn guarded(guard: &mut OutputGuard, text: Option<&Cow<'_, str>>) -> Result<Option<String>, AnswerGuardError> {
    let Some(text) = text else { return Ok(None) };
    let out = guard.text(text).map_err(AnswerGuardError::Blocked)?;
    Ok((out != **text).then_some(out))
}

fn rewrites(guard: &mut OutputGuard, m: &Message<'_>) -> Result<Rewrites, AnswerGuardError> {
    // In the order a stream would carry them (the chain of thought first), so placeholders are
    // numbered alike either way.
    let mut r = Rewrites {
        reasoning_content: guarded(guard, m.reasoning_content.as_ref())?,
        reasoning: guarded(guard, m.reasoning.as_ref())?,
        content: guarded(guard, m.content.as_ref())?,
        refusal: guarded(guard, m.refusal.as_ref())?,
        ..Rewrites::default()
    };
    for (i, call) in m.tool_calls.iter().flatten().enumerate() {
        if let Some(args) = guarded(guard, call.function.as_ref().and_then(|f| f.arguments.as_ref()))? {
            r.tool_arguments.push((i, args));
        }
        if let Some(input) = guarded(guard, call.custom.as_ref().and_then(|c| c.input.as_ref()))? {
            r.tool_inputs.push((i, input));
        }
    }
    r.function_arguments = guarded(guard, m.function_call.as_ref().and_then(|f| f.arguments.as_ref()))?;
    r.transcript = guarded(guard, m.audio.as_ref().and_then(|a| a.transcript.as_ref()))?;
    Ok(r)
}

/// A complete chat answer (`body`, as the upstream or the cache gave it) through `guard`.
/// `Ok(None)`: send `body` as it is; `Ok(Some(..))`: send this instead. The guard keeps the
/// decisions, a block's included.
pub fn guard_completion(guard: &mut OutputGuard, body: &[u8]) -> Result<Option<Bytes>, AnswerGuardError> {
    let unreadable = |e: serde_json::Error| AnswerGuardError::Unreadable(e.to_string());
    let answer: Answer = serde_json::from_slice(body).map_err(unreadable)?;
    let scans = guard.scans();
    let mut changed = false;
    let mut all: Vec<Rewrites> = Vec::with_capacity(answer.choices.len());
    for choice in &answer.choices {
        let r = match &choice.message {
            Some(m) => rewrites(guard, m)?,
            None => Rewrites::default(),
        };
        changed |= !r.is_empty() || (scans && choice.logprobs.is_some());
        all.push(r);
    }
    if !changed {
        return Ok(None);
    }
    let mut full: Value = serde_json::from_slice(body).map_err(unreadable)?;
    let choices = full.get_mut("choices").and_then(Value::as_array_mut).into_iter().flatten();
    for (choice, r) in choices.zip(all) {
        let Value::Object(choice) = choice else { continue };
        if scans {
            choice.insert("logprobs".into(), Value::Null);
        }
        let Some(Value::Object(m)) = choice.get_mut("message") else { continue };
        if let Some(t) = r.reasoning_content {
            m.insert("reasoning_content".into(), Value::String(t));
        }
        if let Some(t) = r.reasoning {
            m.insert("reasoning".into(), Value::String(t));
        }
        if let Some(t) = r.content {
            m.insert("content".into(), Value::String(t));
        }
        if let Some(t) = r.refusal {
            m.insert("refusal".into(), Value::String(t));
        }
        if let Some(Value::Array(calls)) = m.get_mut("tool_calls") {
            let texts = r.tool_arguments.into_iter().map(|(i, t)| (i, "function", "arguments", t));
            for (i, outer, key, t) in texts.chain(r.tool_inputs.into_iter().map(|(i, t)| (i, "custom", "input", t))) {
                if let Some(o) = calls.get_mut(i).and_then(|c| c.get_mut(outer)).and_then(Value::as_object_mut) {
                    o.insert(key.into(), Value::String(t));
                }
            }
        }
        if let (Some(t), Some(Value::Object(f))) = (r.function_arguments, m.get_mut("function_call")) {
            f.insert("arguments".into(), Value::String(t));
        }
        if let (Some(t), Some(Value::Object(a))) = (r.transcript, m.get_mut("audio")) {
            a.insert("transcript".into(), Value::String(t));
        }
    }
    serde_json::to_vec(&full).map(|v| Some(Bytes::from(v))).map_err(unreadable)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::policy::engine::{run_input, CompiledPolicy, PolicySet, RequestFacts, Segment, TeamPolicies};
    use crate::policy::spec::OrgPolicy;
    use crate::policy::vault::Vault;

    fn policies(doc: Value, header: &str) -> Vec<Arc<CompiledPolicy>> {
        let d: OrgPolicy = serde_json::from_value(doc).unwrap();
        PolicySet::compile(1, &d).resolve(TeamPolicies::NONE, Some(header)).unwrap()
    }

    fn pii() -> OutputGuard {
        OutputGuard::new(&policies(json!({}), "pii_redact"), Vault::new()).unwrap()
    }

    fn answer(message: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}, "x_extra": [1]}))
        .unwrap()
    }

    fn guarded(guard: &mut OutputGuard, body: &[u8]) -> Value {
        let out = guard_completion(guard, body).unwrap().expect("changed");
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn unchanged_answers_go_out_as_they_came() {
        let body = answer(json!({"role": "assistant", "content": "Hello \"there\"\n", "refusal": null}));
        let mut g = pii();
        assert_eq!(guard_completion(&mut g, &body).unwrap(), None);
        assert!(g.decisions().is_empty());
        // No choices, or a choice without a message, is nothing to guard.
        assert_eq!(guard_completion(&mut g, br#"{"choices":[{"index":0}]}"#).unwrap(), None);
        assert_eq!(guard_completion(&mut g, br#"{"id":"x"}"#).unwrap(), None);
    }

    #[test]
    fn content_and_refusal() {
        let mut g = pii();
        let v = guarded(
            &mut g,
            &answer(json!({"role": "assistant", "content": "mail a@example.com", "refusal": "not b@example.com"})),
        );
        assert_eq!(v["choices"][0]["message"]["content"], "mail [EMAIL_1]");
        assert_eq!(v["choices"][0]["message"]["refusal"], "not [EMAIL_2]");
        // Everything else as it came.
        assert_eq!(v["x_extra"], json!([1]));
        assert_eq!(v["usage"]["total_tokens"], 3);
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(g.decisions()[0].entities, vec![("EMAIL".to_string(), 2)]);
    }

    #[test]
    fn tool_call_and_function_call_arguments() {
        let mut g = pii();
        let v = guarded(
            &mut g,
            &answer(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"q\":\"weather\"}"}},
                {"id": "2", "type": "function", "function": {"name": "mail", "arguments": "{\"to\":\"c@example.com\"}"}}],
                "function_call": {"name": "call", "arguments": "{\"phone\":\"+1 415 555 2671\"}"}})),
        );
        let m = &v["choices"][0]["message"];
        assert_eq!(m["tool_calls"][0]["function"]["arguments"], "{\"q\":\"weather\"}");
        assert_eq!(m["tool_calls"][1]["function"]["arguments"], "{\"to\":\"[EMAIL_1]\"}");
        assert_eq!(m["tool_calls"][1]["id"], "2");
        assert_eq!(m["function_call"]["arguments"], "{\"phone\":\"[PHONE_1]\"}");
        assert_eq!(m["content"], Value::Null);
    }

    #[test]
    fn reasoning_content_and_reasoning() {
        let mut g = pii();
        let v = guarded(
            &mut g,
            &answer(json!({"role": "assistant", "reasoning_content": "The user is a@example.com, so",
                "reasoning": "call +1 415 555 2671 first", "content": "Done, a@example.com."})),
        );
        let m = &v["choices"][0]["message"];
        assert_eq!(m["reasoning_content"], "The user is [EMAIL_1], so");
        assert_eq!(m["reasoning"], "call [PHONE_1] first");
        // The same value in the answer gets the same placeholder, numbered from the reasoning on.
        assert_eq!(m["content"], "Done, [EMAIL_1].");
        assert_eq!(v["usage"]["total_tokens"], 3);

        // Reasoning alone, clean content: still rewritten; null reasoning is nothing to guard.
        let mut g = pii();
        let v = guarded(
            &mut g,
            &answer(json!({"role": "assistant", "reasoning_content": "card 4111 1111 1111 1111",
            "reasoning": null, "content": "ok"})),
        );
        assert_eq!(v["choices"][0]["message"]["reasoning_content"], "card [CREDIT_CARD_1]");
        assert_eq!(v["choices"][0]["message"]["reasoning"], Value::Null);
        assert_eq!(v["choices"][0]["message"]["content"], "ok");
        let clean =
            answer(json!({"role": "assistant", "reasoning_content": "think", "reasoning": "more", "content": "ok"}));
        assert_eq!(guard_completion(&mut pii(), &clean).unwrap(), None);
    }

    #[test]
    fn custom_tool_call_input() {
        let mut g = pii();
        let v = guarded(
            &mut g,
            &answer(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "1", "type": "custom", "custom": {"name": "shell", "input": "echo hi"}},
                {"id": "2", "type": "function", "function": {"name": "f", "arguments": "{\"to\":\"c@example.com\"}"}},
                {"id": "3", "type": "custom", "custom": {"name": "mail", "input": "send to d@example.com now"}}]})),
        );
        let calls = &v["choices"][0]["message"]["tool_calls"];
        assert_eq!(calls[0]["custom"], json!({"name": "shell", "input": "echo hi"}));
        assert_eq!(calls[1]["function"]["arguments"], "{\"to\":\"[EMAIL_1]\"}");
        assert_eq!(calls[2]["custom"], json!({"name": "mail", "input": "send to [EMAIL_2] now"}));
        assert_eq!(calls[2]["type"], "custom");
        assert_eq!(calls[2]["id"], "3");
        assert_eq!(g.decisions()[0].entities, vec![("EMAIL".to_string(), 2)]);
    }

    #[test]
    fn audio_transcript() {
        let mut g = pii();
        let v = guarded(
            &mut g,
            &answer(
                json!({"role": "assistant", "audio": {"id": "a", "data": "UklGRg==", "transcript": "call +1 415 555 2671"}}),
            ),
        );
        assert_eq!(v["choices"][0]["message"]["audio"]["transcript"], "call [PHONE_1]");
        assert_eq!(v["choices"][0]["message"]["audio"]["data"], "UklGRg==");
    }

    #[test]
    fn logprobs_go_when_the_guard_scans() {
        let mut body: Value = serde_json::from_slice(&answer(json!({"role": "assistant", "content": "hi"}))).unwrap();
        body["choices"][0]["logprobs"] = json!({"content": [{"token": "hi", "logprob": -0.1, "bytes": [104, 105],
            "top_logprobs": []}], "refusal": null});
        let body = serde_json::to_vec(&body).unwrap();
        let v = guarded(&mut pii(), &body);
        assert_eq!(v["choices"][0]["logprobs"], Value::Null);
        assert_eq!(v["choices"][0]["message"]["content"], "hi");

        // A guard that only puts the caller's values back leaves them.
        let ps = policies(
            json!({"policies": [{"name": "r", "guardrails": [{"type": "pii_redact", "restore": true,
            "output": false}]}]}),
            "r",
        );
        let mut vault = Vault::new();
        let mut t = "I am a@example.com".to_string();
        run_input(
            &ps,
            &mut [Segment { user: true, text: &mut t }],
            &RequestFacts { model: "m", prompt_tokens: 1 },
            &mut vault,
        );
        let mut g = OutputGuard::new(&ps, vault).unwrap();
        assert!(!g.scans());
        assert_eq!(guard_completion(&mut g, &body).unwrap(), None);
        let v = guarded(&mut g, &answer(json!({"role": "assistant", "content": "Hi [EMAIL_1]"})));
        assert_eq!(v["choices"][0]["message"]["content"], "Hi a@example.com");
    }

    #[test]
    fn a_block_in_any_field_stops_the_answer() {
        let ps = policies(
            json!({"policies": [{"name": "nokeys", "guardrails": [{"type": "pii_redact", "entities": ["secret"],
                "action": "block"}]}]}),
            "nokeys",
        );
        for message in [
            json!({"role": "assistant", "content": "key AKIAIOSFODNN7EXAMPLE"}),
            json!({"role": "assistant", "tool_calls": [{"id": "1", "type": "function",
                "function": {"name": "f", "arguments": "{\"k\":\"AKIAIOSFODNN7EXAMPLE\"}"}}]}),
            json!({"role": "assistant", "audio": {"id": "a", "transcript": "AKIAIOSFODNN7EXAMPLE"}}),
            json!({"role": "assistant", "reasoning_content": "the key is AKIAIOSFODNN7EXAMPLE", "content": "no"}),
            json!({"role": "assistant", "reasoning": "the key is AKIAIOSFODNN7EXAMPLE", "content": "no"}),
            json!({"role": "assistant", "tool_calls": [{"id": "1", "type": "custom",
                "custom": {"name": "f", "input": "key=AKIAIOSFODNN7EXAMPLE"}}]}),
        ] {
            let mut g = OutputGuard::new(&ps, Vault::new()).unwrap();
            match guard_completion(&mut g, &answer(message)) {
                Err(AnswerGuardError::Blocked(b)) => assert_eq!(b.policy, "nokeys"),
                other => panic!("{other:?}"),
            }
            assert_eq!(g.decisions()[0].action, crate::policy::PolicyAction::Blocked);
        }
    }

    #[test]
    fn unreadable_answers_do_not_go_out() {
        for body in [
            &b"{not json"[..],
            br#"{"choices":[{"message":{"content":[1]}}]}"#,
            br#"{"choices":3}"#,
            // A chain of thought or a custom tool input that is not text cannot be checked either.
            br#"{"choices":[{"message":{"reasoning":{"text":"a@example.com"}}}]}"#,
            br#"{"choices":[{"message":{"tool_calls":[{"type":"custom","custom":{"input":["x"]}}]}}]}"#,
        ] {
            assert!(matches!(guard_completion(&mut pii(), body), Err(AnswerGuardError::Unreadable(_))), "{body:?}");
        }
    }
}
