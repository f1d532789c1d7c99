//! Cache keys. A key is the SHA-256 of the organization, the endpoint and a canonical form of
//! every request field that can change the answer: object members sorted, numbers written one
//! way (`1`, `1.0` and `1e0` alike), a lone text part written as plain content. The body's field
//! order and whitespace therefore never matter; fields that only change how the answer is
//! delivered or labelled (`stream`, `user`, `metadata`, ...) are left out, so a stream and a
//! plain request share an entry. Unknown fields stay in: a field gw does not know may well
//! change the answer.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Bumped whenever the canonical form changes, so old entries are never read with new meaning.
const VERSION: &[u8] = b"gw-cache-v1\0";

/// Fields that never change the answer, only its delivery or labels.
const DELIVERY: &[&str] = &[
    "stream",
    "stream_options",
    "user",
    "metadata",
    "store",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
];

/// An exact-match key: the organization in the clear (for purges and scoping), the model as a
/// short tag (for per-model purges) and the digest of everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub org_id: Uuid,
    pub model: ModelTag,
    pub digest: [u8; 32],
    /// The purge generations it is kept under (organization, model): see
    /// [`crate::cache::settings::Generations`].
    pub generation: (i64, i64),
}

/// The first 8 bytes of a model name's SHA-256: names are client text and may hold anything.
pub type ModelTag = [u8; 8];

pub fn model_tag(model: &str) -> ModelTag {
    let d = Sha256::digest(model.as_bytes());
    let mut tag = [0u8; 8];
    tag.copy_from_slice(&d[..8]);
    tag
}

impl CacheKey {
    /// The Redis key: organization and model first (so a purge can still find them by pattern to
    /// reclaim their memory), then the purge generations, which make a purged entry unreachable.
    pub fn redis_key(&self) -> String {
        let (all, model) = self.generation;
        format!("{}g{all}.{model}:{}", model_prefix(self.org_id, &self.model), hex::encode(self.digest))
    }
}

/// Redis key prefix of every entry of an organization. The organization is a hash tag (`{...}`):
/// on a Redis Cluster an organization's entries and its L2 ledger (`crate::cache::l2_budget`)
/// share a slot, so one script can touch them together.
pub fn org_prefix(org_id: Uuid) -> String {
    format!("gw:rc:{{{}}}:", org_id.simple())
}

/// The purge generations (organization, model) an L2 entry's Redis key was written under; an
/// entry from before generations counts as (0, 0). None for a key that is not an entry.
pub fn generation_of(redis_key: &str) -> Option<(i64, i64)> {
    let rest = redis_key.strip_prefix("gw:rc:{")?;
    let (_, rest) = rest.split_once("}:")?;
    let mut parts = rest.split(':');
    let _model = parts.next()?;
    let second = parts.next()?;
    match (second.strip_prefix('g'), parts.next()) {
        (Some(gens), Some(_digest)) => {
            let (all, model) = gens.split_once('.')?;
            Some((all.parse().ok()?, model.parse().ok()?))
        }
        (None, None) if second.len() == 64 => Some((0, 0)),
        _ => None,
    }
}

/// Redis key prefix of an organization's entries for one model.
pub fn model_prefix(org_id: Uuid, model: &ModelTag) -> String {
    format!("{}{}:", org_prefix(org_id), hex::encode(model))
}

/// The exact-match key of a request body (`model` included) sent to `endpoint`.
pub fn exact(org_id: Uuid, endpoint: &str, body: &Map<String, Value>) -> CacheKey {
    let model = body.get("model").and_then(Value::as_str).unwrap_or_default();
    let mut canon = Vec::with_capacity(512);
    canonical_object(body, &|k| !DELIVERY.contains(&k), &mut canon);
    let mut h = Sha256::new();
    h.update(VERSION);
    h.update(org_id.as_bytes());
    h.update(endpoint.as_bytes());
    h.update(b"\0");
    h.update(&canon);
    CacheKey { org_id, model: model_tag(model), digest: h.finalize().into(), generation: (0, 0) }
}

/// A Messages request's body as its cache keys read it: the chat translation, with a digest of
/// the Anthropic body as the client sent it (and its `anthropic-beta`) under `x-gw-messages`.
/// An Anthropic deployment gets that body as it is (passthrough), fields the translation does
/// not carry included, so two requests that translate alike may still be answered differently.
/// `turns`: the digest covers `messages` (the exact tier's key); without, it is part of the
/// semantic tier's scope, which reads the turns itself.
pub fn with_messages_body(
    chat: &Map<String, Value>,
    raw: &[u8],
    beta: Option<&str>,
    turns: bool,
) -> Map<String, Value> {
    with_dialect_body(chat, raw, ("x-gw-messages", "messages"), beta.map(|b| ("anthropic-beta", b)), turns)
}

/// A Responses request's body as its cache keys read it: as [`with_messages_body`], for the
/// OpenAI deployments it passes through to (`x-gw-responses`; the turns are its `input`).
pub fn with_responses_body(chat: &Map<String, Value>, raw: &[u8], turns: bool) -> Map<String, Value> {
    with_dialect_body(chat, raw, ("x-gw-responses", "input"), None, turns)
}

/// `chat` with a digest of another dialect's body under `field.0`; `field.1` is where that body
/// holds its turns; `header` a request header its meaning depends on.
fn with_dialect_body(
    chat: &Map<String, Value>,
    raw: &[u8],
    field: (&str, &str),
    header: Option<(&str, &str)>,
    turns: bool,
) -> Map<String, Value> {
    let mut out = chat.clone();
    if let Ok(mut body) = serde_json::from_slice::<Map<String, Value>>(raw) {
        if !turns {
            body.remove(field.1);
        }
        if let Some((name, value)) = header {
            body.insert(name.into(), Value::String(value.to_string()));
        }
        let mut canon = Vec::with_capacity(raw.len());
        canonical_object(&body, &|k| !DELIVERY.contains(&k), &mut canon);
        out.insert(field.0.into(), Value::String(hex::encode(Sha256::digest(&canon))));
    }
    out
}

/// What the semantic tier compares: the last user turn's text, embedded, within a scope that
/// must match exactly (organization, embedder, model, every other parameter, and a digest of
/// the system prompt and earlier turns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemanticKey {
    pub scope: [u8; 32],
    pub prompt: String,
}

/// The semantic key of a chat request, when it ends with a user turn that has text.
pub fn semantic(org_id: Uuid, embedder: &str, body: &Map<String, Value>) -> Option<SemanticKey> {
    let messages = body.get("messages")?.as_array()?;
    let (last, earlier) = messages.split_last()?;
    if last.get("role").and_then(Value::as_str) != Some("user") {
        return None;
    }
    let prompt = crate::openai::request::message_text(last);
    if prompt.trim().is_empty() {
        return None;
    }
    // A user turn with more than text (images, audio) is not what the embedding saw.
    if let Some(Value::Array(parts)) = last.get("content") {
        if parts.iter().any(|p| p.get("type").and_then(Value::as_str) != Some("text")) {
            return None;
        }
    }
    let mut canon = Vec::with_capacity(512);
    canonical_object(body, &|k| k != "messages" && !DELIVERY.contains(&k), &mut canon);
    canon.push(0);
    canonical(&Value::Array(earlier.to_vec()), &mut canon);
    // The last turn's other members (name, ...) are part of the scope too.
    if let Value::Object(m) = last {
        canon.push(0);
        canonical_object(m, &|k| k != "content", &mut canon);
    }
    let mut h = Sha256::new();
    h.update(VERSION);
    h.update(b"semantic\0");
    h.update(org_id.as_bytes());
    h.update(embedder.as_bytes());
    h.update(b"\0");
    h.update(&canon);
    Some(SemanticKey { scope: h.finalize().into(), prompt })
}

fn canonical_object(map: &Map<String, Value>, keep: &dyn Fn(&str) -> bool, out: &mut Vec<u8>) {
    let mut keys: Vec<&String> = map.keys().filter(|k| keep(k)).collect();
    keys.sort_unstable();
    out.push(b'{');
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(k, out);
        out.push(b':');
        match (k.as_str(), &map[k]) {
            // `[{"type":"text","text":"hi"}]` says what `"hi"` says.
            ("content", Value::Array(parts)) if lone_text(parts).is_some() => {
                string(lone_text(parts).unwrap_or_default(), out);
            }
            (_, v) => canonical(v, out),
        }
    }
    out.push(b'}');
}

fn lone_text(parts: &[Value]) -> Option<&str> {
    match parts {
        [Value::Object(p)] if p.len() == 2 && p.get("type").and_then(Value::as_str) == Some("text") => {
            p.get("text").and_then(Value::as_str)
        }
        _ => None,
    }
}

/// Writes `v` in the canonical form.
pub fn canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => number(n, out),
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => canonical_object(map, &|_| true, out),
    }
}

fn string(s: &str, out: &mut Vec<u8>) {
    // Writing a string into memory cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Integers as integers, whichever way they were written; other numbers to 15 significant
/// digits.
fn number(n: &serde_json::Number, out: &mut Vec<u8>) {
    use std::io::Write;
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
            let _ = write!(out, "{}", f as i64);
        } else {
            // 15 significant digits: what a decimal text fixes, whatever the parser's last bit.
            let _ = write!(out, "{f:.14e}");
        }
    }
}

#[cfg(test)]
mod tests;
