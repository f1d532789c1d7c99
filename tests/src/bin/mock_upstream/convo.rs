//! What every dialect shares: the deterministic reply, requests reduced to a conversation of
//! plain text, tool calls, stream pieces and embedding vectors.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn words(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.split_whitespace().count() as u64,
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text")).map(words).sum(),
        _ => 0,
    }
}

/// The reply to OpenAI-shaped `messages`.
pub struct Reply {
    pub text: String,
    pub prompt_tokens: u64,
    /// 8 hex digits of the messages' digest.
    pub digest: String,
}

/// The reply: a digest of the messages plus an echo of the last user message.
pub fn reply_for(msgs: &[Value]) -> Reply {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(msgs).unwrap_or_default());
    let digest = hex::encode(&h.finalize()[..4]);
    let last = msgs
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let echo: Vec<&str> = last.split_whitespace().take(8).collect();
    let prompt_tokens = msgs.iter().map(|m| m.get("content").map(words).unwrap_or(0) + 3).sum();
    Reply { text: format!("Mock upstream reply {digest}: {}", echo.join(" ")), prompt_tokens, digest }
}

/// The text of a content value: a string, or the `text` fields of an array's parts, one per line.
pub fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// The strings of a JSON array (anything else in it skipped).
pub fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

/// Which tool the request lets or makes the model call.
#[derive(Default)]
pub enum ToolChoice {
    /// A tool when the last user message mentions the weather.
    #[default]
    Auto,
    /// Never a tool.
    Off,
    /// Always the first tool.
    Any,
    /// Always this tool.
    Named(String),
}

/// A dialect's request reduced to what the answer depends on. Its messages are OpenAI-shaped
/// (`{"role", "content": text}`, system text first), so one conversation gets the same reply in
/// every dialect, and the same as `/v1/chat/completions` when its contents are plain strings.
#[derive(Default)]
pub struct Conversation {
    messages: Vec<Value>,
    /// The names of the declared tools, in order.
    pub tools: Vec<String>,
    pub choice: ToolChoice,
    /// Stop sequences: the text ends before the first one it contains.
    pub stop: Vec<String>,
    /// The text of the last message when it is the user's.
    last_user: Option<String>,
    /// The content of a tool result the last message carries.
    tool_result: Option<String>,
}

/// What the mock answers.
pub enum Answer {
    /// Text, and the stop sequence that cut it.
    Text { text: String, stop: Option<String> },
    /// A call of the tool `name`.
    Tool { name: String, input: Value },
}

pub struct Outcome {
    pub answer: Answer,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// 8 hex digits of the conversation's digest, for ids.
    pub digest: String,
}

impl Conversation {
    /// Appends a message: `role` is `system`, `user` or `assistant`; `tool_result` is the content
    /// of a tool result it carries (its text should include it).
    pub fn push(&mut self, role: &str, text: String, tool_result: Option<String>) {
        self.last_user = (role == "user").then(|| text.clone());
        self.tool_result = tool_result;
        self.messages.push(json!({"role": role, "content": text}));
    }

    fn tool_to_call(&self) -> Option<String> {
        let first = self.tools.first()?;
        match &self.choice {
            ToolChoice::Off => None,
            ToolChoice::Named(name) => Some(name.clone()),
            ToolChoice::Any => Some(first.clone()),
            ToolChoice::Auto => {
                self.last_user.as_ref().filter(|t| t.to_lowercase().contains("weather")).map(|_| first.clone())
            }
        }
    }

    /// The answer: `The tool said: <result>` after a tool result, a call of a tool when the
    /// request asks for one (see [`ToolChoice`]), else the reply of [`reply_for`].
    pub fn answer(&self) -> Outcome {
        let reply = reply_for(&self.messages);
        let answer = if let Some(result) = &self.tool_result {
            cut(format!("The tool said: {result}"), &self.stop)
        } else if let Some(name) = self.tool_to_call() {
            Answer::Tool { name, input: json!({"city": "Paris"}) }
        } else {
            cut(reply.text, &self.stop)
        };
        let completion_tokens = match &answer {
            Answer::Text { text, .. } => text.split_whitespace().count() as u64,
            Answer::Tool { input, .. } => 1 + (input.to_string().len() as u64).div_ceil(4),
        };
        Outcome { answer, prompt_tokens: reply.prompt_tokens, completion_tokens, digest: reply.digest }
    }
}

/// `text` ending before the first of `stops` it contains.
fn cut(mut text: String, stops: &[String]) -> Answer {
    let hit = stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()).map(|at| (at, s)))
        .min_by_key(|(at, _)| *at);
    let stop = hit.map(|(at, s)| {
        text.truncate(at);
        s.clone()
    });
    Answer::Text { text, stop }
}

/// `text` in pieces of `n` words (later pieces with their leading space): they concatenate
/// back to `text`.
pub fn pieces(text: &str, n: usize) -> Vec<String> {
    let words: Vec<&str> = text.split(' ').collect();
    words
        .chunks(n.max(1))
        .enumerate()
        .map(|(i, c)| if i == 0 { c.join(" ") } else { format!(" {}", c.join(" ")) })
        .collect()
}

/// `text` in pieces of `n` characters.
pub fn char_pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

/// The length of embedding vectors: `v` (a requested dimension count) or 8, within 1..=4096.
pub fn dimensions(v: Option<&Value>) -> usize {
    v.and_then(Value::as_u64).unwrap_or(8).clamp(1, 4096) as usize
}

/// The deterministic embedding of `text`.
pub fn embedding(text: &str, dims: usize) -> Vec<f32> {
    let digest = Sha256::digest(text.as_bytes());
    (0..dims).map(|d| (digest[d % 32] as f32 / 127.5) - 1.0).collect()
}
