//! Streaming chunks (`chat.completion.chunk`) and the SSE framing we write downstream.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::chat::Usage;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatCompletionChunk {
    pub id: String,
    #[serde(default = "object_chunk")]
    pub object: String,
    pub created: i64,
    pub model: String,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn object_chunk() -> String {
    "chat.completion.chunk".into()
}

impl ChatCompletionChunk {
    /// A chunk of one choice (`index`) with this delta, as gw's stream translators write them.
    pub fn of_choice(id: &str, created: i64, model: &str, index: u32, delta: Delta, finish: Option<&str>) -> Self {
        ChatCompletionChunk {
            id: id.to_string(),
            object: object_chunk(),
            created,
            model: model.to_string(),
            choices: vec![ChunkChoice {
                index,
                delta,
                finish_reason: finish.map(Into::into),
                logprobs: None,
                extra: Map::new(),
            }],
            usage: None,
            system_fingerprint: None,
            extra: Map::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChunkChoice {
    pub index: u32,
    #[serde(default)]
    pub delta: Delta,
    /// Required by the schema, nullable: always serialized.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Optional in the chunk schema; omitted when absent rather than sent as `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One SSE event carrying a JSON payload.
pub fn sse_event<T: Serialize>(payload: &T) -> Result<Bytes, serde_json::Error> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut out, payload)?;
    out.extend_from_slice(b"\n\n");
    Ok(Bytes::from(out))
}

pub const SSE_DONE: &[u8] = b"data: [DONE]\n\n";

/// The chunk objects of a piece of a chat SSE body made of whole `data:` lines; comments, `[DONE]`
/// and anything not a JSON object are skipped. For re-framing gw's own stream in another dialect.
pub fn chunk_objects(bytes: &[u8]) -> impl Iterator<Item = Map<String, Value>> + '_ {
    bytes.split(|b| *b == b'\n').filter_map(|line| {
        let data = line.strip_prefix(b"data: ").or_else(|| line.strip_prefix(b"data:"))?;
        match serde_json::from_slice::<Value>(data) {
            Ok(Value::Object(chunk)) => Some(chunk),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_round_trip_keeps_unknowns() {
        let raw = r#"{"id":"c1","object":"chat.completion.chunk","created":5,"model":"m","choices":[{"index":0,"delta":{"content":"he","tool_calls":[]},"finish_reason":null}],"service_tier":"default"}"#;
        let c: ChatCompletionChunk = serde_json::from_str(raw).unwrap();
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["service_tier"], "default");
        assert_eq!(v["choices"][0]["delta"]["tool_calls"], serde_json::json!([]));
        assert!(v["choices"][0].as_object().unwrap().contains_key("finish_reason"));
        assert!(!v["choices"][0].as_object().unwrap().contains_key("logprobs"));
        assert!(!v.as_object().unwrap().contains_key("usage"));
    }

    #[test]
    fn sse_framing() {
        let b = sse_event(&serde_json::json!({"a":1})).unwrap();
        assert_eq!(&b[..], b"data: {\"a\":1}\n\n");
    }
}
