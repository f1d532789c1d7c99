//! Gemini: a generateContent answer as an OpenAI chat completion, with its usage.

use super::*;

/// Gemini's `usageMetadata`; counts it has nothing for are left out of the JSON.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UsageMetadata {
    #[serde(default)]
    pub(super) prompt_token_count: Option<u32>,
    #[serde(default)]
    pub(super) candidates_token_count: Option<u32>,
    #[serde(default)]
    pub(super) cached_content_token_count: Option<u32>,
    #[serde(default)]
    pub(super) thoughts_token_count: Option<u32>,
}

impl UsageMetadata {
    /// `promptTokenCount` already includes the cached tokens, as OpenAI's `prompt_tokens` does;
    /// `candidatesTokenCount` leaves thoughts out, which OpenAI's `completion_tokens` include (and
    /// Google bills as output).
    pub(super) fn tokens(&self) -> TokenUsage {
        let thoughts = self.thoughts_token_count.unwrap_or(0);
        TokenUsage {
            prompt_tokens: self.prompt_token_count.unwrap_or(0),
            completion_tokens: self.candidates_token_count.unwrap_or(0).saturating_add(thoughts),
            cached_tokens: self.cached_content_token_count.unwrap_or(0),
            reasoning_tokens: thoughts,
            ..TokenUsage::default()
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Part {
    #[serde(default)]
    pub(super) text: Option<String>,
    /// A thought summary (sent only with `includeThoughts`): not part of the answer.
    #[serde(default)]
    pub(super) thought: bool,
    #[serde(default)]
    pub(super) function_call: Option<FunctionCall>,
}

#[derive(Debug, Deserialize)]
pub(super) struct FunctionCall {
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) args: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Content {
    #[serde(default)]
    pub(super) parts: Vec<Part>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Candidate {
    #[serde(default)]
    pub(super) content: Option<Content>,
    #[serde(default)]
    pub(super) finish_reason: Option<String>,
    #[serde(default)]
    pub(super) index: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PromptFeedback {
    #[serde(default)]
    pub(super) block_reason: Option<String>,
}

/// A `GenerateContentResponse`, whole or (streamed) one fragment of it; an error payload in a
/// stream has the same envelope as an error answer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GenerateContentResponse {
    #[serde(default)]
    pub(super) candidates: Vec<Candidate>,
    #[serde(default)]
    pub(super) prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    pub(super) usage_metadata: Option<UsageMetadata>,
    #[serde(default)]
    pub(super) model_version: Option<String>,
    #[serde(default)]
    pub(super) response_id: Option<String>,
    #[serde(default)]
    pub(super) error: Option<GeminiError>,
}

impl GenerateContentResponse {
    /// Gemini refused the prompt itself: no candidate at all, only the reason.
    pub(super) fn prompt_blocked(&self) -> bool {
        self.candidates.is_empty() && self.prompt_feedback.as_ref().is_some_and(|f| f.block_reason.is_some())
    }
}

/// Gemini's `finishReason` as an OpenAI `finish_reason`.
pub(super) fn finish_reason(reason: Option<&str>, has_calls: bool) -> &'static str {
    match reason {
        Some("MAX_TOKENS") => "length",
        Some(
            "SAFETY"
            | "RECITATION"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION",
        ) => "content_filter",
        // Gemini says STOP when it ends its turn with function calls.
        _ if has_calls => "tool_calls",
        // STOP, LANGUAGE, OTHER, MALFORMED_FUNCTION_CALL and anything newer.
        _ => "stop",
    }
}

/// A candidate's answer text (thoughts left out; `None` when it has no text part) and its function
/// calls as name and arguments (OpenAI carries them as JSON text).
/// A candidate's text (if any) and its function calls as (name, JSON arguments).
pub(super) type CandidateOutput<'a> = (Option<String>, Vec<(&'a str, String)>);

pub(super) fn candidate_output(c: &Candidate) -> Result<CandidateOutput<'_>, UpstreamError> {
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    for part in c.content.iter().flat_map(|content| content.parts.iter()) {
        if let Some(f) = &part.function_call {
            let arguments = match f.args.as_ref().filter(|a| !a.is_null()) {
                Some(args) => serde_json::to_string(args).map_err(|e| UpstreamError::bad_response(e.to_string()))?,
                None => "{}".to_string(),
            };
            calls.push((f.name.as_str(), arguments));
        } else if let Some(t) = part.text.as_deref().filter(|_| !part.thought) {
            text.get_or_insert_with(String::new).push_str(t);
        }
    }
    Ok((text, calls))
}

/// Tool call ids: Gemini gives its calls none, so gw makes them up, unique per response (from
/// the completion's id) so a conversation's calls never share one.
pub(super) fn call_prefix(completion_id: &str) -> String {
    format!("call_{}", completion_id.strip_prefix("chatcmpl-").unwrap_or(completion_id))
}

pub(super) fn tool_call(id: String, name: &str, arguments: String) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

pub(super) fn choice_index(candidate: &Candidate, position: usize) -> u32 {
    candidate.index.unwrap_or_else(|| u32::try_from(position).unwrap_or(u32::MAX))
}

/// A `generateContent` answer as an OpenAI chat completion: one choice per candidate. The id is
/// Gemini's `responseId` (else `id_fallback`), the model its `modelVersion` (else
/// `model_fallback`). A prompt Gemini blocked becomes one empty `content_filter` choice.
pub fn from_gemini(
    body: &[u8],
    created: i64,
    id_fallback: &str,
    model_fallback: &str,
) -> Result<Completion, UpstreamError> {
    let resp: GenerateContentResponse = serde_json::from_slice(body)
        .map_err(|e| UpstreamError::bad_response(format!("not a Gemini response: {e}: {}", log_snippet(body))))?;
    if resp.candidates.is_empty() && !resp.prompt_blocked() {
        return Err(UpstreamError::bad_response(format!(
            "a Gemini response without candidates: {}",
            log_snippet(body)
        )));
    }
    let id = match resp.response_id.as_deref().filter(|r| !r.is_empty()) {
        Some(r) => format!("chatcmpl-{r}"),
        None => id_fallback.to_string(),
    };
    let prefix = call_prefix(&id);
    let mut next_call = 0u32;
    let mut choices = Vec::with_capacity(resp.candidates.len().max(1));
    for (position, candidate) in resp.candidates.iter().enumerate() {
        let (text, calls) = candidate_output(candidate)?;
        let has_calls = !calls.is_empty();
        let mut message_extra = Map::new();
        if has_calls {
            let mut tool_calls = Vec::with_capacity(calls.len());
            for (name, arguments) in calls {
                tool_calls.push(tool_call(format!("{prefix}_{next_call}"), name, arguments));
                next_call = next_call.saturating_add(1);
            }
            message_extra.insert("tool_calls".into(), Value::Array(tool_calls));
        }
        choices.push(Choice {
            index: choice_index(candidate, position),
            message: AssistantMessage { role: "assistant".into(), content: text, refusal: None, extra: message_extra },
            logprobs: None,
            finish_reason: Some(finish_reason(candidate.finish_reason.as_deref(), has_calls).into()),
            extra: Map::new(),
        });
    }
    if choices.is_empty() {
        choices.push(Choice {
            index: 0,
            message: AssistantMessage { role: "assistant".into(), content: None, refusal: None, extra: Map::new() },
            logprobs: None,
            finish_reason: Some("content_filter".into()),
            extra: Map::new(),
        });
    }
    let usage = resp.usage_metadata.as_ref().map(UsageMetadata::tokens);
    let completion = ChatCompletion {
        id,
        object: "chat.completion".into(),
        created,
        model: resp.model_version.filter(|m| !m.is_empty()).unwrap_or_else(|| model_fallback.to_string()),
        choices,
        usage: usage.as_ref().map(openai_usage),
        system_fingerprint: None,
        extra: Map::new(),
    };
    let body = serde_json::to_vec(&completion).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
    Ok(Completion { body: body.into(), usage })
}
