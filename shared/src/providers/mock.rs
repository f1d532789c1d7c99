//! The built-in `mock` provider: answers in-process, deterministically from the prompt, so the
//! zero-config run works with no provider key and no network.

use serde_json::Map;
use sha2::{Digest, Sha256};

use crate::openai::{
    AssistantMessage, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, Choice, ChunkChoice, Delta, Usage,
};
use crate::pricing::TokenUsage;

/// A rough token count: whitespace-separated words (at least one per non-empty text).
pub fn count_tokens(text: &str) -> u32 {
    u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX)
}

/// The reply text for a request: a fixed sentence naming a digest of the conversation, so the same
/// prompt always gets the same answer and different prompts get different ones.
pub fn reply_text(req: &ChatCompletionRequest) -> String {
    let mut h = Sha256::new();
    for m in &req.messages {
        h.update(m.role.as_bytes());
        h.update([0]);
        h.update(m.text().as_bytes());
        h.update([0]);
    }
    let digest = hex::encode(&h.finalize()[..4]);
    let last = req.messages.iter().rev().find(|m| m.role == "user").map(|m| m.text()).unwrap_or_default();
    let echo: Vec<&str> = last.split_whitespace().take(8).collect();
    format!("This is the gw mock provider (reply {digest}). You said: {}", echo.join(" "))
}

pub fn usage_for(req: &ChatCompletionRequest, reply: &str) -> TokenUsage {
    let prompt: u32 = req.messages.iter().map(|m| count_tokens(&m.text()).saturating_add(3)).sum();
    TokenUsage { prompt_tokens: prompt, completion_tokens: count_tokens(reply) }
}

pub fn complete(req: &ChatCompletionRequest, id: &str, model: &str, created: i64) -> ChatCompletion {
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
/// the proxy drops it when the client did not ask).
pub fn stream_chunks(req: &ChatCompletionRequest, id: &str, model: &str, created: i64) -> Vec<ChatCompletionChunk> {
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

    fn req(text: &str) -> ChatCompletionRequest {
        let body = serde_json::json!({"model":"m","messages":[{"role":"user","content":text}]});
        ChatCompletionRequest::from_json(body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn deterministic_and_prompt_dependent() {
        assert_eq!(reply_text(&req("hello there")), reply_text(&req("hello there")));
        assert_ne!(reply_text(&req("hello there")), reply_text(&req("hello world")));
    }

    #[test]
    fn stream_concatenates_to_completion() {
        let r = req("stream me please");
        let full = complete(&r, "id", "m", 1);
        let chunks = stream_chunks(&r, "id", "m", 1);
        let text: String =
            chunks.iter().flat_map(|c| c.choices.iter()).filter_map(|c| c.delta.content.clone()).collect();
        assert_eq!(Some(text), full.choices[0].message.content);
        let last = chunks.last().unwrap();
        assert!(last.choices.is_empty());
        assert_eq!(last.usage, full.usage);
    }
}
