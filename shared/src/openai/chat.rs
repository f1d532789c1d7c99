//! `POST /v1/chat/completions` request and (non-streaming) response.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::pricing::TokenUsage;

pub const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool", "function"];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StreamOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    /// A string, an array of content parts, or null (assistant tool calls).
    #[serde(default)]
    pub content: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatMessage {
    /// The message's text: the string content, or the `text` of its text parts.
    pub fn text(&self) -> String {
        match &self.content {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(" ")
            }
            _ => String::new(),
        }
    }
}

/// Why a parsed request is not acceptable, with the offending parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestProblem {
    pub message: String,
    pub param: Option<String>,
}

impl ChatCompletionRequest {
    pub fn is_stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    pub fn wants_usage_chunk(&self) -> bool {
        self.is_stream() && self.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false)
    }

    /// Checks what serde cannot: non-empty model and messages, known roles.
    pub fn validate(&self) -> Result<(), RequestProblem> {
        if self.model.trim().is_empty() {
            return Err(problem("`model` must be a non-empty string", "model"));
        }
        if self.messages.is_empty() {
            return Err(problem("`messages` must contain at least one message", "messages"));
        }
        for (i, m) in self.messages.iter().enumerate() {
            if !ROLES.contains(&m.role.as_str()) {
                return Err(RequestProblem {
                    message: format!(
                        "Invalid value for 'messages[{i}].role': {:?}. Supported values are: {}.",
                        m.role,
                        ROLES.join(", ")
                    ),
                    param: Some(format!("messages[{i}].role")),
                });
            }
            match &m.content {
                None | Some(Value::String(_)) | Some(Value::Array(_)) => {}
                Some(Value::Null) => {}
                Some(_) => {
                    return Err(RequestProblem {
                        message: format!("'messages[{i}].content' must be a string or an array of content parts"),
                        param: Some(format!("messages[{i}].content")),
                    })
                }
            }
        }
        if self.stream_options.is_some() && !self.is_stream() {
            return Err(problem(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                "stream_options",
            ));
        }
        Ok(())
    }

    /// Parses a request body, turning serde's complaints into an OpenAI-style problem.
    pub fn from_json(body: &[u8]) -> Result<Self, RequestProblem> {
        let req: Self = serde_json::from_slice(body).map_err(|e| {
            let param = missing_field(&e.to_string());
            let message = if e.is_syntax() || e.is_eof() {
                format!("We could not parse the JSON body of your request: {e}")
            } else if let Some(p) = &param {
                format!("Missing required parameter: '{p}'.")
            } else {
                format!("Invalid request body: {e}")
            };
            RequestProblem { message, param }
        })?;
        req.validate()?;
        Ok(req)
    }
}

fn problem(message: &str, param: &str) -> RequestProblem {
    RequestProblem { message: message.into(), param: Some(param.into()) }
}

fn missing_field(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_string())
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatCompletion {
    pub id: String,
    #[serde(default = "object_chat_completion")]
    pub object: String,
    pub created: i64,
    pub model: String,
    pub choices: Vec<Choice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn object_chat_completion() -> String {
    "chat.completion".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Choice {
    pub index: u32,
    pub message: AssistantMessage,
    /// Required by the schema, nullable: always serialized.
    #[serde(default)]
    pub logprobs: Option<Value>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AssistantMessage {
    #[serde(default = "role_assistant")]
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn role_assistant() -> String {
    "assistant".into()
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u32,
    #[serde(default)]
    pub completion_tokens: u32,
    #[serde(default)]
    pub total_tokens: u32,
    /// Token details (`prompt_tokens_details`, ...) as the upstream sent them.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Usage {
    pub fn new(tokens: TokenUsage) -> Self {
        Self {
            prompt_tokens: tokens.prompt_tokens,
            completion_tokens: tokens.completion_tokens,
            total_tokens: tokens.total(),
            extra: Map::new(),
        }
    }

    pub fn tokens(&self) -> TokenUsage {
        TokenUsage { prompt_tokens: self.prompt_tokens, completion_tokens: self.completion_tokens }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_unknown_fields() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi","name":"bob"}],"temperature":0.2,"x_custom":{"a":1}}"#;
        let req = ChatCompletionRequest::from_json(body).unwrap();
        let back = serde_json::to_value(&req).unwrap();
        assert_eq!(back["temperature"], json!(0.2));
        assert_eq!(back["x_custom"], json!({"a":1}));
        assert_eq!(back["messages"][0]["name"], json!("bob"));
    }

    #[test]
    fn problems_name_the_param() {
        let e = ChatCompletionRequest::from_json(br#"{"messages":[]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("model"));
        let e = ChatCompletionRequest::from_json(br#"{"model":"m"}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        let e = ChatCompletionRequest::from_json(br#"{"model":"m","messages":[]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        let e = ChatCompletionRequest::from_json(br#"{"model":"m","messages":[{"role":"robot","content":"x"}]}"#)
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = ChatCompletionRequest::from_json(b"{not json").unwrap_err();
        assert!(e.message.contains("parse the JSON"), "{}", e.message);
        assert_eq!(e.param, None);
        let e = ChatCompletionRequest::from_json(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}"#,
        )
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("stream_options"));
    }

    #[test]
    fn response_serializes_required_nullables() {
        let c = ChatCompletion {
            id: "x".into(),
            object: "chat.completion".into(),
            created: 1,
            model: "m".into(),
            choices: vec![Choice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant".into(),
                    content: Some("hi".into()),
                    refusal: None,
                    extra: Map::new(),
                },
                logprobs: None,
                finish_reason: Some("stop".into()),
                extra: Map::new(),
            }],
            usage: Some(Usage::new(TokenUsage { prompt_tokens: 2, completion_tokens: 3 })),
            system_fingerprint: None,
            extra: Map::new(),
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["choices"][0]["logprobs"], Value::Null);
        assert!(v["choices"][0].as_object().unwrap().contains_key("logprobs"));
        assert!(v["choices"][0]["message"].as_object().unwrap().contains_key("refusal"));
        assert_eq!(v["usage"]["total_tokens"], json!(5));
    }
}
