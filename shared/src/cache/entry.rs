//! A cached answer: the OpenAI-shaped response body as the upstream gave it (before output
//! policies, which run again on every replay), what it cost, and who produced it. Stored in
//! Redis and PostgreSQL compressed with zstd.

use bytes::Bytes;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::pricing::TokenUsage;

/// Largest answer the cache keeps; larger ones are served and forgotten.
pub const MAX_BODY: usize = 1024 * 1024;
/// zstd level: fast; answers are text and compress well even so.
const LEVEL: i32 = 3;

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub body: Bytes,
    pub meta: Meta,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub usage: StoredUsage,
    /// What the answer cost when the upstream produced it: what each hit saves.
    pub cost: Decimal,
    pub provider: String,
    pub upstream_model: String,
    /// Unix time the answer was produced.
    pub created_at: i64,
}

/// The token counts the answer came with (what a replay reports as its usage).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredUsage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    #[serde(default)]
    pub cached_tokens: u32,
    #[serde(default)]
    pub reasoning_tokens: u32,
}

impl From<TokenUsage> for StoredUsage {
    fn from(u: TokenUsage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
            reasoning_tokens: u.reasoning_tokens,
        }
    }
}

impl From<StoredUsage> for TokenUsage {
    fn from(u: StoredUsage) -> Self {
        TokenUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
            reasoning_tokens: u.reasoning_tokens,
            ..TokenUsage::default()
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EntryError {
    #[error("cache entry is corrupt: {0}")]
    Corrupt(&'static str),
    #[error("cache entry could not be compressed: {0}")]
    Compress(String),
}

impl Entry {
    /// Bytes the entry holds in memory (what the in-process tier weighs it by).
    pub fn weight(&self) -> usize {
        self.body.len() + self.meta.provider.len() + self.meta.upstream_model.len() + 128
    }

    /// `[meta length: u32 LE][meta JSON][body]`, compressed.
    pub fn encode(&self) -> Result<Vec<u8>, EntryError> {
        let meta = serde_json::to_vec(&self.meta).map_err(|e| EntryError::Compress(e.to_string()))?;
        let len = u32::try_from(meta.len()).map_err(|_| EntryError::Compress("metadata too large".into()))?;
        let mut raw = Vec::with_capacity(4 + meta.len() + self.body.len());
        raw.extend_from_slice(&len.to_le_bytes());
        raw.extend_from_slice(&meta);
        raw.extend_from_slice(&self.body);
        zstd::bulk::compress(&raw, LEVEL).map_err(|e| EntryError::Compress(e.to_string()))
    }

    pub fn decode(data: &[u8]) -> Result<Self, EntryError> {
        let raw = zstd::bulk::decompress(data, MAX_BODY + 64 * 1024).map_err(|_| EntryError::Corrupt("zstd"))?;
        let len_bytes: [u8; 4] = raw.get(..4).and_then(|b| b.try_into().ok()).ok_or(EntryError::Corrupt("short"))?;
        let len = u32::from_le_bytes(len_bytes) as usize;
        let meta_end = 4usize.checked_add(len).filter(|e| *e <= raw.len()).ok_or(EntryError::Corrupt("length"))?;
        let meta: Meta = serde_json::from_slice(&raw[4..meta_end]).map_err(|_| EntryError::Corrupt("metadata"))?;
        let body = Bytes::copy_from_slice(&raw[meta_end..]);
        Ok(Self { body, meta })
    }
}

/// Length of the ids gw gives completions: `chatcmpl-` and a UUID's 32 hex digits.
pub const ID_LEN: usize = 41;
const ID_PLACEHOLDER: &str = "chatcmpl-00000000000000000000000000000000";
/// A ten-digit time (until the year 2286), so a stamp overwrites it in place.
const CREATED_PLACEHOLDER: &str = "1000000000";
const HEAD: &[u8] = b"{\"id\":\"";
const MIDDLE: &[u8] = b"\",\"created\":";

/// A chat completion as the cache keeps it: `{"id":"<41 chars>","created":<10 digits>,...}`,
/// the rest of its members as they were, so that a replay stamps its own id and time by
/// overwriting bytes in place ([`stamp`]) instead of parsing and writing the answer again.
/// `None` when the body is not a JSON object.
pub fn template(body: &[u8]) -> Option<Bytes> {
    let Ok(Value::Object(mut m)) = serde_json::from_slice::<Value>(body) else { return None };
    m.remove("id");
    m.remove("created");
    let rest = serde_json::to_vec(&m).ok()?;
    let mut out = Vec::with_capacity(rest.len() + 72);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(ID_PLACEHOLDER.as_bytes());
    out.extend_from_slice(MIDDLE);
    out.extend_from_slice(CREATED_PLACEHOLDER.as_bytes());
    match rest.get(1..) {
        Some(b"}") | None => out.push(b'}'),
        Some(members) => {
            out.push(b',');
            out.extend_from_slice(members);
        }
    }
    Some(Bytes::from(out))
}

/// A templated answer ([`template`]) with `id` and `created` written in; any other body (or an
/// id or time of another length) goes through [`restamp`].
pub fn stamp(body: &Bytes, id: &str, created: i64) -> Result<Bytes, EntryError> {
    let created_text = created.to_string();
    let id_at = HEAD.len();
    let created_at = id_at + ID_LEN + MIDDLE.len();
    let templated = body.starts_with(HEAD)
        && body.get(id_at + ID_LEN..created_at) == Some(MIDDLE)
        && body.len() > created_at + CREATED_PLACEHOLDER.len();
    if !templated || id.len() != ID_LEN || created_text.len() != CREATED_PLACEHOLDER.len() {
        return restamp(body, id, created);
    }
    let mut out = body.to_vec();
    out[id_at..id_at + ID_LEN].copy_from_slice(id.as_bytes());
    out[created_at..created_at + CREATED_PLACEHOLDER.len()].copy_from_slice(created_text.as_bytes());
    Ok(Bytes::from(out))
}

/// A replayed chat completion gets the id and time of the request it answers: two requests
/// never share an id.
pub fn restamp(body: &[u8], id: &str, created: i64) -> Result<Bytes, EntryError> {
    let mut v: Value = serde_json::from_slice(body).map_err(|_| EntryError::Corrupt("body"))?;
    let Value::Object(m) = &mut v else { return Err(EntryError::Corrupt("body")) };
    if m.contains_key("id") {
        m.insert("id".into(), Value::String(id.into()));
    }
    if m.contains_key("created") {
        m.insert("created".into(), Value::from(created));
    }
    serde_json::to_vec(&v).map(Bytes::from).map_err(|_| EntryError::Corrupt("body"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            body: Bytes::from_static(br#"{"id":"chatcmpl-1","object":"chat.completion","created":5,"choices":[]}"#),
            meta: Meta {
                usage: StoredUsage { prompt_tokens: 3, completion_tokens: 4, ..Default::default() },
                cost: Decimal::new(12, 6),
                provider: "mock".into(),
                upstream_model: "mock-1".into(),
                created_at: 1_700_000_000,
            },
        }
    }

    #[test]
    fn round_trips() {
        let e = entry();
        let data = e.encode().unwrap();
        assert_eq!(Entry::decode(&data).unwrap(), e);
    }

    #[test]
    fn corrupt_data_is_an_error_not_a_panic() {
        assert!(Entry::decode(b"").is_err());
        assert!(Entry::decode(b"not zstd at all").is_err());
        let bad = zstd::bulk::compress(&[255, 255, 255, 255, b'{'], 1).unwrap();
        assert_eq!(Entry::decode(&bad), Err(EntryError::Corrupt("length")));
        let bad = zstd::bulk::compress(&[1, 0, 0, 0, b'{'], 1).unwrap();
        assert_eq!(Entry::decode(&bad), Err(EntryError::Corrupt("metadata")));
    }

    #[test]
    fn templated_answers_are_stamped_in_place() {
        let body = br#"{"choices":[{"index":0,"message":{"content":"chatcmpl-00000000000000000000000000000000"}}],"created":5,"id":"chatcmpl-upstream","model":"m","object":"chat.completion"}"#;
        let t = template(body).unwrap();
        let id = format!("chatcmpl-{}", uuid::Uuid::now_v7().simple());
        let out = stamp(&t, &id, 1_790_000_000).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], id.as_str());
        assert_eq!(v["created"], 1_790_000_000);
        assert_eq!(v["model"], "m");
        // Content that looks like the placeholder is left alone.
        assert_eq!(v["choices"][0]["message"]["content"], "chatcmpl-00000000000000000000000000000000");
        let original: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(v["choices"], original["choices"]);
        // An id of another length, or a body that is no template, is stamped the slow way.
        let v: Value = serde_json::from_slice(&stamp(&t, "short", 7).unwrap()).unwrap();
        assert_eq!((v["id"].as_str(), v["created"].as_i64()), (Some("short"), Some(7)));
        let plain = Bytes::from_static(br#"{"id":"x","created":1}"#);
        let v: Value = serde_json::from_slice(&stamp(&plain, &id, 9).unwrap()).unwrap();
        assert_eq!(v["id"], id.as_str());
        assert_eq!(template(b"{}").map(|b| b.len()), Some(7 + ID_LEN + 12 + 10 + 1));
        assert!(template(b"[1]").is_none());
        let empty: Value = serde_json::from_slice(&template(b"{}").unwrap()).unwrap();
        assert_eq!(empty["created"], 1_000_000_000);
    }

    #[test]
    fn restamped_answers_carry_the_new_id() {
        let out = restamp(&entry().body, "chatcmpl-new", 9).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], "chatcmpl-new");
        assert_eq!(v["created"], 9);
        assert_eq!(v["object"], "chat.completion");
        // Embeddings have neither; nothing is added.
        let emb = restamp(br#"{"object":"list","data":[]}"#, "x", 1).unwrap();
        assert_eq!(&emb[..], br#"{"data":[],"object":"list"}"#);
    }
}
