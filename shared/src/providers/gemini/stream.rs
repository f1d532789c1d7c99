//! Gemini: `alt=sse` stream fragments as OpenAI chunks.

use super::*;

/// What has gone out for one choice (one candidate) so far.
#[derive(Debug, Default)]
pub(super) struct ChoiceState {
    pub(super) index: u32,
    pub(super) started: bool,
    /// Function calls streamed: the next one's OpenAI `index`, and whether the finish is
    /// `tool_calls`.
    pub(super) calls: u32,
    pub(super) finished: bool,
}

/// Translates Gemini's `alt=sse` stream into OpenAI chunks. Every event is a whole
/// `GenerateContentResponse` fragment: its text parts are the next piece of the answer, its
/// function calls arrive complete, the last one carries `finishReason` and the final
/// `usageMetadata`. There is no end event: see [`STREAM_ENDS_AT_EOF`].
pub struct GeminiStream {
    pub(super) setup: StreamSetup,
    pub(super) call_prefix: String,
    /// Function calls streamed over all choices: makes each call's id.
    pub(super) next_call: u32,
    pub(super) choices: Vec<ChoiceState>,
    pub(super) usage_sent: bool,
}

impl GeminiStream {
    pub fn new(setup: StreamSetup) -> Self {
        let call_prefix = call_prefix(&setup.completion_id);
        Self { setup, call_prefix, next_call: 0, choices: Vec::new(), usage_sent: false }
    }

    /// The position of the choice with this index, created on first sight.
    pub(super) fn slot(&mut self, index: u32) -> usize {
        if let Some(at) = self.choices.iter().position(|c| c.index == index) {
            return at;
        }
        self.choices.push(ChoiceState { index, ..ChoiceState::default() });
        self.choices.len() - 1
    }

    pub(super) fn chunk(&self, index: u32, delta: Delta, finish: Option<&str>) -> ChatCompletionChunk {
        let s = &self.setup;
        ChatCompletionChunk::of_choice(&s.completion_id, s.created, &s.model, index, delta, finish)
    }

    pub(super) fn candidate(
        &mut self,
        index: u32,
        candidate: &Candidate,
        out: &mut StreamSink,
    ) -> Result<(), UpstreamError> {
        let (text, calls) = candidate_output(candidate)?;
        let text = text.filter(|t| !t.is_empty());
        let at = self.slot(index);
        let Some(state) = self.choices.get_mut(at) else { return Ok(()) };
        if state.finished {
            // Nothing follows a finish in OpenAI's stream.
            return Ok(());
        }
        let mut tool_calls = Vec::with_capacity(calls.len());
        for (name, arguments) in calls {
            let mut call = tool_call(format!("{}_{}", self.call_prefix, self.next_call), name, arguments);
            if let Some(obj) = call.as_object_mut() {
                obj.insert("index".into(), state.calls.into());
            }
            tool_calls.push(call);
            self.next_call = self.next_call.saturating_add(1);
            state.calls = state.calls.saturating_add(1);
        }
        let finish = candidate.finish_reason.as_deref().map(|r| finish_reason(Some(r), state.calls > 0));
        let content = text.is_some() || !tool_calls.is_empty();
        if !content && finish.is_none() {
            // Thoughts only, or an empty fragment: the role waits for the first real chunk.
            return Ok(());
        }
        let mut extra = Map::new();
        if !tool_calls.is_empty() {
            extra.insert("tool_calls".into(), Value::Array(tool_calls));
        }
        let delta = Delta { role: (!state.started).then(|| "assistant".to_string()), content: text, extra };
        state.started = true;
        state.finished = finish.is_some();
        let chunk = self.chunk(index, delta, finish);
        out.push_json(&chunk).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        if content {
            out.saw_content();
        }
        Ok(())
    }

    /// The prompt was blocked: the stream's only choice ends, empty, as filtered.
    pub(super) fn blocked(&mut self, out: &mut StreamSink) -> Result<(), UpstreamError> {
        let at = self.slot(0);
        let Some(state) = self.choices.get_mut(at) else { return Ok(()) };
        if state.finished {
            return Ok(());
        }
        let delta = Delta { role: (!state.started).then(|| "assistant".to_string()), content: None, extra: Map::new() };
        state.started = true;
        state.finished = true;
        let chunk = self.chunk(0, delta, Some("content_filter"));
        out.push_json(&chunk).map_err(|e| UpstreamError::bad_response(e.to_string()))
    }
}

impl StreamTranslator for GeminiStream {
    fn event(&mut self, _event: &str, data: &str, out: &mut StreamSink) -> Result<Flow, UpstreamError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let fragment: GenerateContentResponse = serde_json::from_str(data).map_err(|e| {
            UpstreamError::bad_response(format!("invalid Gemini stream event: {e}: {}", log_snippet(data.as_bytes())))
        })?;
        if let Some(error) = &fragment.error {
            return Err(UpstreamError::new(UpstreamFailure::MidStream, error.describe()));
        }
        // Every fragment may carry usage, each one up to date: the last is the final count.
        let usage = fragment.usage_metadata.as_ref().map(UsageMetadata::tokens);
        if let Some(tokens) = usage {
            out.usage = Some(tokens);
        }
        for (position, candidate) in fragment.candidates.iter().enumerate() {
            self.candidate(choice_index(candidate, position), candidate, out)?;
        }
        if fragment.prompt_blocked() {
            self.blocked(out)?;
        }
        // The usage chunk goes last: with the fragment that finishes the stream, which Gemini
        // sends with the final usage (or with usage that comes after the finish).
        let finished = !self.choices.is_empty() && self.choices.iter().all(|c| c.finished);
        if let Some(tokens) = usage.filter(|_| finished && self.setup.include_usage && !self.usage_sent) {
            self.usage_sent = true;
            let mut last = self.chunk(0, Delta::default(), None);
            last.choices.clear();
            last.usage = Some(openai_usage(&tokens));
            out.push_json(&last).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        }
        // Gemini sends no end event: the end of the body is the end (see STREAM_ENDS_AT_EOF).
        Ok(Flow::Continue)
    }
}
