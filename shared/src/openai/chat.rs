//! `POST /v1/chat/completions` response (non-streaming).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::pricing::TokenUsage;

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            usage: Some(Usage::new(TokenUsage { prompt_tokens: 2, completion_tokens: 3, ..Default::default() })),
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
