//! Anthropic: a Messages API answer as an OpenAI chat completion, with its usage.

use super::*;

/// Anthropic's `usage`; every field may be missing or `null` depending on the event.
#[derive(Debug, Default, Deserialize)]
pub(super) struct AnthropicUsage {
    #[serde(default)]
    pub(super) input_tokens: Option<u32>,
    #[serde(default)]
    pub(super) output_tokens: Option<u32>,
    #[serde(default)]
    pub(super) cache_creation_input_tokens: Option<u32>,
    #[serde(default)]
    pub(super) cache_read_input_tokens: Option<u32>,
    #[serde(default)]
    pub(super) service_tier: Option<String>,
}

/// Usage gathered so far; stream events report cumulative counts, so later values replace.
#[derive(Debug, Default, Clone)]
pub(super) struct Counts {
    pub(super) input: u32,
    pub(super) output: u32,
    pub(super) cache_creation: u32,
    pub(super) cache_read: u32,
    pub(super) tier: ServiceTier,
}

impl Counts {
    pub(super) fn absorb(&mut self, u: &AnthropicUsage) {
        if let Some(n) = u.input_tokens {
            self.input = n;
        }
        if let Some(n) = u.output_tokens {
            self.output = n;
        }
        if let Some(n) = u.cache_creation_input_tokens {
            self.cache_creation = n;
        }
        if let Some(n) = u.cache_read_input_tokens {
            self.cache_read = n;
        }
        if let Some(t) = &u.service_tier {
            self.tier = ServiceTier::from_reported(t);
        }
    }

    /// Anthropic's `input_tokens` excludes cache reads and writes; gw's prompt tokens are all of
    /// them, as OpenAI counts.
    pub(super) fn tokens(&self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.input.saturating_add(self.cache_read).saturating_add(self.cache_creation),
            completion_tokens: self.output,
            cached_tokens: self.cache_read,
            reasoning_tokens: 0,
            cache_creation_tokens: self.cache_creation,
            tier: self.tier,
        }
    }
}

/// Anthropic's `stop_reason` as an OpenAI `finish_reason`.
pub(super) fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        // end_turn, stop_sequence, pause_turn (a server tool paused the turn; what came so far
        // is a complete answer to show) and anything newer.
        _ => "stop",
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct Block {
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) text: Option<String>,
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) input: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Message {
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) model: Option<String>,
    pub(super) content: Vec<Block>,
    #[serde(default)]
    pub(super) stop_reason: Option<String>,
    #[serde(default)]
    pub(super) usage: Option<AnthropicUsage>,
}

/// An OpenAI tool call for a `tool_use` block: OpenAI carries the input as JSON text.
pub(super) fn tool_call(id: &str, name: &str, arguments: String) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// A Messages API answer as an OpenAI chat completion. `id` and `model` fall back to gw's when
/// the answer lacks them.
pub fn from_anthropic(
    body: &[u8],
    created: i64,
    id_fallback: &str,
    model_fallback: &str,
) -> Result<Completion, UpstreamError> {
    let msg: Message = serde_json::from_slice(body)
        .map_err(|e| UpstreamError::bad_response(format!("not an Anthropic message: {e}: {}", log_snippet(body))))?;
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    for block in msg.content {
        match block.kind.as_str() {
            "text" => text.get_or_insert_with(String::new).push_str(block.text.as_deref().unwrap_or_default()),
            "tool_use" => {
                let input = block.input.unwrap_or_else(|| Value::Object(Map::new()));
                let arguments =
                    serde_json::to_string(&input).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
                calls.push(tool_call(
                    block.id.as_deref().unwrap_or_default(),
                    block.name.as_deref().unwrap_or_default(),
                    arguments,
                ));
            }
            // Thinking (its text is not part of OpenAI's message) and server-tool blocks.
            _ => {}
        }
    }
    let mut message_extra = Map::new();
    if !calls.is_empty() {
        message_extra.insert("tool_calls".into(), Value::Array(calls));
    }
    let usage = msg.usage.as_ref().map(|u| {
        let mut c = Counts::default();
        c.absorb(u);
        c.tokens()
    });
    let completion = ChatCompletion {
        id: msg.id.unwrap_or_else(|| id_fallback.to_string()),
        object: "chat.completion".into(),
        created,
        model: msg.model.unwrap_or_else(|| model_fallback.to_string()),
        choices: vec![Choice {
            index: 0,
            message: AssistantMessage { role: "assistant".into(), content: text, refusal: None, extra: message_extra },
            logprobs: None,
            finish_reason: Some(finish_reason(msg.stop_reason.as_deref()).into()),
            extra: Map::new(),
        }],
        usage: usage.as_ref().map(openai_usage),
        system_fingerprint: None,
        extra: Map::new(),
    };
    let body = serde_json::to_vec(&completion).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
    Ok(Completion { body: body.into(), usage })
}
