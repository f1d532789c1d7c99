//! Anthropic: Messages stream events as OpenAI chunks.

use super::*;

#[derive(Debug, Deserialize)]
pub(super) struct StartMessage {
    #[serde(default)]
    pub(super) usage: Option<AnthropicUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    /// thinking_delta, signature_delta, citations_delta, ...: nothing OpenAI's chunk carries.
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct MessageDeltaBody {
    #[serde(default)]
    pub(super) stop_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ErrorDetail {
    #[serde(default, rename = "type")]
    pub(super) kind: Option<String>,
    #[serde(default)]
    pub(super) message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u32,
        content_block: Block,
    },
    ContentBlockDelta {
        index: u32,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<AnthropicUsage>,
    },
    MessageStop,
    Error {
        #[serde(default)]
        error: ErrorDetail,
    },
    /// `ping` and event types added after this was written.
    #[serde(other)]
    Ignored,
}

/// A `tool_use` content block being streamed; its position among them is its OpenAI index.
#[derive(Debug)]
pub(super) struct ToolBlock {
    pub(super) block: u32,
    /// Some argument text went out: a tool without input still needs `{}` to be valid JSON.
    pub(super) arguments_sent: bool,
}

/// Translates Anthropic's typed stream events into OpenAI chunks.
pub struct AnthropicStream {
    pub(super) setup: StreamSetup,
    pub(super) started: bool,
    pub(super) finished: bool,
    pub(super) tools: Vec<ToolBlock>,
    pub(super) counts: Counts,
}

impl AnthropicStream {
    pub fn new(setup: StreamSetup) -> Self {
        Self { setup, started: false, finished: false, tools: Vec::new(), counts: Counts::default() }
    }

    pub(super) fn chunk(&self, delta: Delta, finish: Option<&str>) -> ChatCompletionChunk {
        let s = &self.setup;
        ChatCompletionChunk::of_choice(&s.completion_id, s.created, &s.model, 0, delta, finish)
    }

    pub(super) fn push(
        &mut self,
        out: &mut StreamSink,
        delta: Delta,
        finish: Option<&str>,
    ) -> Result<(), UpstreamError> {
        self.ensure_started(out)?;
        let content = delta.content.as_deref().is_some_and(|c| !c.is_empty()) || delta.extra.contains_key("tool_calls");
        let chunk = self.chunk(delta, finish);
        out.push_json(&chunk).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
        if content {
            out.saw_content();
        }
        Ok(())
    }

    /// OpenAI streams open with the assistant role; Anthropic's `message_start` is where it goes,
    /// or the first content if that event never came.
    pub(super) fn ensure_started(&mut self, out: &mut StreamSink) -> Result<(), UpstreamError> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let delta = Delta { role: Some("assistant".into()), content: Some(String::new()), extra: Map::new() };
        out.push_json(&self.chunk(delta, None)).map_err(|e| UpstreamError::bad_response(e.to_string()))
    }

    pub(super) fn push_tool_delta(&mut self, out: &mut StreamSink, call: Value) -> Result<(), UpstreamError> {
        let mut extra = Map::new();
        extra.insert("tool_calls".into(), Value::Array(vec![call]));
        self.push(out, Delta { role: None, content: None, extra }, None)
    }

    pub(super) fn finish(&mut self, out: &mut StreamSink, stop_reason: Option<&str>) -> Result<(), UpstreamError> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        self.push(out, Delta::default(), Some(finish_reason(stop_reason)))
    }
}

impl StreamTranslator for AnthropicStream {
    fn event(&mut self, _event: &str, data: &str, out: &mut StreamSink) -> Result<Flow, UpstreamError> {
        // Every event names its type in the data too, which also covers streams relayed without
        // `event:` lines.
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let event: Event = serde_json::from_str(data).map_err(|e| {
            UpstreamError::bad_response(format!(
                "invalid Anthropic stream event: {e}: {}",
                log_snippet(data.as_bytes())
            ))
        })?;
        match event {
            Event::MessageStart { message } => {
                if let Some(u) = &message.usage {
                    self.counts.absorb(u);
                    out.usage = Some(self.counts.tokens());
                }
                self.ensure_started(out)?;
            }
            Event::ContentBlockStart { index, content_block } => match content_block.kind.as_str() {
                "text" => {
                    if let Some(text) = content_block.text.filter(|t| !t.is_empty()) {
                        self.push(out, Delta { role: None, content: Some(text), extra: Map::new() }, None)?;
                    }
                }
                "tool_use" => {
                    let input = content_block.input.filter(|i| i.as_object().is_some_and(|o| !o.is_empty()));
                    let arguments = match &input {
                        Some(i) => serde_json::to_string(i).map_err(|e| UpstreamError::bad_response(e.to_string()))?,
                        None => String::new(),
                    };
                    let at = self.tools.len();
                    self.tools.push(ToolBlock { block: index, arguments_sent: input.is_some() });
                    let mut call = tool_call(
                        content_block.id.as_deref().unwrap_or_default(),
                        content_block.name.as_deref().unwrap_or_default(),
                        arguments,
                    );
                    if let Some(obj) = call.as_object_mut() {
                        obj.insert("index".into(), at.into());
                    }
                    self.push_tool_delta(out, call)?;
                }
                _ => {}
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } if !text.is_empty() => {
                    self.push(out, Delta { role: None, content: Some(text), extra: Map::new() }, None)?;
                }
                BlockDelta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                    // Input deltas of blocks that are not client tools (server tools) are not the
                    // client's to see.
                    let tool = self.tools.iter_mut().enumerate().find(|(_, t)| t.block == index);
                    if let Some((at, t)) = tool {
                        t.arguments_sent = true;
                        self.push_tool_delta(out, json!({"index": at, "function": {"arguments": partial_json}}))?;
                    }
                }
                _ => {}
            },
            Event::ContentBlockStop { index } => {
                let silent = self.tools.iter_mut().enumerate().find(|(_, t)| t.block == index && !t.arguments_sent);
                if let Some((at, t)) = silent {
                    t.arguments_sent = true;
                    self.push_tool_delta(out, json!({"index": at, "function": {"arguments": "{}"}}))?;
                }
            }
            Event::MessageDelta { delta, usage } => {
                if let Some(u) = &usage {
                    self.counts.absorb(u);
                    out.usage = Some(self.counts.tokens());
                }
                if let Some(reason) = delta.stop_reason.as_deref() {
                    self.finish(out, Some(reason))?;
                }
            }
            Event::MessageStop => {
                self.finish(out, None)?;
                let tokens = self.counts.tokens();
                out.usage = Some(tokens);
                if self.setup.include_usage {
                    let mut last = self.chunk(Delta::default(), None);
                    last.choices.clear();
                    last.usage = Some(openai_usage(&tokens));
                    out.push_json(&last).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
                }
                return Ok(Flow::Done);
            }
            Event::Error { error } => {
                let detail = format!(
                    "{}: {}",
                    error.kind.as_deref().unwrap_or("error"),
                    log_snippet(error.message.unwrap_or_default().as_bytes())
                );
                return Err(UpstreamError::new(UpstreamFailure::MidStream, detail));
            }
            Event::Ignored => {}
        }
        Ok(Flow::Continue)
    }
}
