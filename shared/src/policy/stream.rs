//! Output guardrails on a stream. Each choice's text is held back by a small look-behind window
//! before it reaches the client, so a value split over several chunks is seen whole and redacted
//! before any of it leaves: the window covers every value with spaces in it (phone numbers,
//! grouped card numbers, IBANs), the text is never cut inside a run without whitespace (e-mail
//! addresses, keys, tokens, placeholders), and an open private key block is held until it
//! closes. The held text goes out with the choice's finishing chunk, or before the usage chunk.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::engine::{OutputBlocked, OutputGuard};
use super::PolicyDecision;
use crate::providers::ChunkFilter;

/// Bytes held back behind the newest text (about 24 tokens).
pub const WINDOW: usize = 96;
/// A run without whitespace, or an open private key block, longer than this is no longer held
/// whole: it is let through in redacted form (a value that long is a blob, not a secret to find).
pub const MAX_HOLD: usize = 64 * 1024;
const KEY_BEGIN: &str = "-----BEGIN";
const KEY_END: &str = "-----END";

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Where the text may be cut: everything before is final.
fn safe_cut(buf: &str, spans: &[super::engine::OutSpan], hold: usize) -> usize {
    let mut cut = floor_boundary(buf, buf.len().saturating_sub(hold));
    // Not inside a run without whitespace.
    if cut > 0 && cut < buf.len() {
        let run_start =
            buf[..cut].rfind(char::is_whitespace).map_or(0, |i| i + buf[i..].chars().next().map_or(1, char::len_utf8));
        let next_is_space = buf[cut..].chars().next().is_some_and(char::is_whitespace);
        if !next_is_space && buf.len() - run_start <= MAX_HOLD {
            cut = run_start;
        }
    }
    // Not after the start of an open private key block.
    if let Some(p) = buf.rfind(KEY_BEGIN) {
        if !buf[p..].contains(KEY_END) && buf.len() - p <= MAX_HOLD {
            cut = cut.min(p);
        }
    }
    // Not inside a value.
    for s in spans.iter().rev() {
        if s.start < cut && s.end > cut {
            cut = s.start;
        }
    }
    cut
}

/// One choice's held text.
#[derive(Debug, Default, Clone)]
struct Held {
    text: String,
}

/// Streams a text through the guard in pieces.
pub fn push(guard: &mut OutputGuard, held: &mut String, piece: &str) -> Result<String, OutputBlocked> {
    held.push_str(piece);
    let buf = std::mem::take(held);
    let spans = guard.scan(&buf);
    // A value that blocks stops the stream as soon as it is seen whole, held or not.
    if let Some(b) = spans.iter().find(|s| s.blocks()) {
        guard.apply(&buf, std::slice::from_ref(b))?;
    }
    let hold = WINDOW.max(guard.placeholder_len());
    let cut = safe_cut(&buf, &spans, hold);
    let done: Vec<_> = spans.into_iter().filter(|s| s.end <= cut).collect();
    let out = guard.apply(&buf[..cut], &done)?;
    *held = buf[cut..].to_string();
    Ok(out)
}

/// The rest of a text, at its end.
pub fn finish(guard: &mut OutputGuard, held: &mut String) -> Result<String, OutputBlocked> {
    let buf = std::mem::take(held);
    guard.text(&buf)
}

/// The stream filter: chunks in, chunks out, per choice.
pub struct GuardedStream {
    guard: OutputGuard,
    held: BTreeMap<u64, Held>,
    /// The last chunk's fields but its choices, for chunks the filter makes itself.
    template: Option<Map<String, Value>>,
}

impl GuardedStream {
    pub fn new(guard: OutputGuard) -> Self {
        Self { guard, held: BTreeMap::new(), template: None }
    }

    fn flush_all(&mut self, out: &mut Vec<Value>) -> Result<(), OutputBlocked> {
        let held = std::mem::take(&mut self.held);
        for (index, mut h) in held {
            let text = finish(&mut self.guard, &mut h.text)?;
            if text.is_empty() {
                continue;
            }
            let mut chunk = self.template.clone().unwrap_or_default();
            chunk.insert(
                "choices".into(),
                serde_json::json!([{"index": index, "delta": {"content": text}, "logprobs": null, "finish_reason": null}]),
            );
            out.push(Value::Object(chunk));
        }
        Ok(())
    }
}

impl ChunkFilter for GuardedStream {
    fn chunk(&mut self, mut chunk: Value, out: &mut Vec<Value>) -> Result<(), OutputBlocked> {
        let Some(obj) = chunk.as_object_mut() else {
            out.push(chunk);
            return Ok(());
        };
        let has_choices = obj.get("choices").and_then(Value::as_array).is_some_and(|c| !c.is_empty());
        if !has_choices {
            // The usage chunk (or another without choices): what is held goes out first.
            self.flush_all(out)?;
            out.push(chunk);
            return Ok(());
        }
        // The chunk's id, model and the like do not change within a stream: kept once, for the
        // chunks the filter makes itself.
        if self.template.is_none() {
            let template = obj
                .iter()
                .filter(|(k, _)| *k != "choices" && *k != "usage")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            self.template = Some(template);
        }
        if let Some(choices) = obj.get_mut("choices").and_then(Value::as_array_mut) {
            for c in choices {
                let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
                let finishing = c.get("finish_reason").is_some_and(|f| !f.is_null());
                let Some(delta) = c.get_mut("delta").and_then(Value::as_object_mut) else { continue };
                let piece = match delta.get("content") {
                    Some(Value::String(s)) => Some(s.clone()),
                    _ => None,
                };
                let held = self.held.entry(index).or_default();
                let mut text = match &piece {
                    Some(p) => push(&mut self.guard, &mut held.text, p)?,
                    None => String::new(),
                };
                if finishing {
                    text.push_str(&finish(&mut self.guard, &mut held.text)?);
                    self.held.remove(&index);
                }
                if piece.is_some() || !text.is_empty() {
                    delta.insert("content".into(), Value::String(text));
                }
            }
        }
        out.push(chunk);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Value>) -> Result<(), OutputBlocked> {
        self.flush_all(out)
    }

    fn decisions(&self) -> Vec<PolicyDecision> {
        self.guard.decisions()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::policy::engine::{PolicySet, Segment};
    use crate::policy::spec::OrgPolicy;
    use crate::policy::vault::Vault;

    fn guard(doc: serde_json::Value, header: &str) -> OutputGuard {
        let d: OrgPolicy = serde_json::from_value(doc).unwrap();
        let s = PolicySet::compile(1, &d);
        let ps: Vec<Arc<_>> = s.resolve(&[], Some(header)).unwrap();
        OutputGuard::new(&ps, Vault::new()).unwrap()
    }

    fn pii() -> OutputGuard {
        guard(serde_json::json!({}), "pii_redact")
    }

    /// Streams `text` cut at `cuts`, returning what the client would see.
    fn stream(g: &mut OutputGuard, text: &str, cuts: &[usize]) -> (String, Vec<String>) {
        let mut held = String::new();
        let mut seen = String::new();
        let mut emitted = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain(std::iter::once(&text.len())) {
            let c = floor_boundary(text, c.min(text.len()));
            if c < at {
                continue;
            }
            let piece = push(g, &mut held, &text[at..c]).unwrap();
            seen.push_str(&piece);
            emitted.push(piece);
            at = c;
        }
        let rest = finish(g, &mut held).unwrap();
        seen.push_str(&rest);
        emitted.push(rest);
        (seen, emitted)
    }

    #[test]
    fn a_value_split_over_chunks_is_redacted() {
        let text = "Write to john.doe@example.com or call +1 415 555 2671 today, card 4111 1111 1111 1111.";
        for step in 1..8 {
            let cuts: Vec<usize> = (1..text.len()).step_by(step).collect();
            let (seen, pieces) = stream(&mut pii(), text, &cuts);
            assert_eq!(seen, "Write to [EMAIL_1] or call [PHONE_1] today, card [CREDIT_CARD_1].", "step {step}");
            for p in pieces {
                assert!(!p.contains("john") && !p.contains("4111") && !p.contains("2671"), "{p:?}");
            }
        }
    }

    #[test]
    fn long_tokens_and_key_blocks_are_held_whole() {
        let jwt = format!("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.{}", "a".repeat(300));
        let key = format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----", "QUJD\n".repeat(100));
        let text = format!("token {jwt} and {key} done");
        let cuts: Vec<usize> = (1..text.len()).step_by(7).collect();
        let (seen, pieces) = stream(&mut pii(), &text, &cuts);
        assert_eq!(seen, "token [SECRET_1] and [SECRET_2] done");
        assert!(pieces.iter().all(|p| !p.contains("eyJ") && !p.contains("QUJD")));
    }

    #[test]
    fn text_without_values_passes_unchanged_and_soon() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(10);
        let cuts: Vec<usize> = (1..text.len()).step_by(4).collect();
        let (seen, pieces) = stream(&mut pii(), &text, &cuts);
        assert_eq!(seen, text);
        // Text leaves once it is a window behind the newest.
        let before_end: usize = pieces[..pieces.len() - 1].iter().map(String::len).sum();
        assert!(before_end >= text.len() - WINDOW - 8, "{before_end}");
    }

    #[test]
    fn chunk_filter_flushes_at_finish_and_before_usage() {
        let mut f = GuardedStream::new(pii());
        let mut out = Vec::new();
        let c = |content: &str| {
            serde_json::json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]})
        };
        f.chunk(c("mail me at a@exa"), &mut out).unwrap();
        f.chunk(c("mple.com please"), &mut out).unwrap();
        f.chunk(
            serde_json::json!({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            &mut out,
        )
        .unwrap();
        f.chunk(serde_json::json!({"id": "x", "choices": [], "usage": {"total_tokens": 3}}), &mut out).unwrap();
        let text: String = out
            .iter()
            .filter_map(|v| v["choices"].get(0).and_then(|c| c["delta"]["content"].as_str()).map(str::to_string))
            .collect();
        assert_eq!(text, "mail me at [EMAIL_1] please");
        assert_eq!(out.last().unwrap()["usage"]["total_tokens"], 3);
        assert_eq!(f.decisions()[0].entities, vec![("EMAIL".to_string(), 1)]);

        // A stream that ends without a finishing chunk: the held text comes out at finish.
        let mut f = GuardedStream::new(pii());
        let mut out = Vec::new();
        f.chunk(c("bye b@example.com"), &mut out).unwrap();
        f.finish(&mut out).unwrap();
        let text: String =
            out.iter().filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_string)).collect();
        assert_eq!(text, "bye [EMAIL_1]");
        assert_eq!(out.last().unwrap()["id"], "x");
    }

    #[test]
    fn a_block_mid_stream_stops_the_stream() {
        let g = guard(
            serde_json::json!({"policies": [{"name": "nokeys", "guardrails": [{"type": "pii_redact", "entities": ["secret"], "action": "block"}]}]}),
            "nokeys",
        );
        let mut f = GuardedStream::new(g);
        let mut out = Vec::new();
        let c = |content: &str| serde_json::json!({"choices": [{"index": 0, "delta": {"content": content}}]});
        f.chunk(c("your key is AKIAIOSF"), &mut out).unwrap();
        let err = f.chunk(c("ODNN7EXAMPLE ok"), &mut out).unwrap_err();
        assert_eq!(err.policy, "nokeys");
        let seen: String = out.iter().filter_map(|v| v["choices"][0]["delta"]["content"].as_str()).collect();
        assert!(!seen.contains("AKIA"), "{seen:?}");
    }

    #[test]
    fn restored_placeholders_split_over_chunks() {
        let doc =
            serde_json::json!({"policies": [{"name": "r", "guardrails": [{"type": "pii_redact", "restore": true}]}]});
        let d: OrgPolicy = serde_json::from_value(doc).unwrap();
        let s = PolicySet::compile(1, &d);
        let ps = s.resolve(&[], Some("r")).unwrap();
        let mut vault = Vault::new();
        let mut t = "I am a@example.com".to_string();
        let facts = crate::policy::engine::RequestFacts { model: "m", prompt_tokens: 1 };
        crate::policy::engine::run_input(&ps, &mut [Segment { user: true, text: &mut t }], &facts, &mut vault);
        let mut g = OutputGuard::new(&ps, vault).unwrap();
        let (seen, _) = stream(&mut g, "Hi [EMAIL_1]!", &[3, 6, 9]);
        assert_eq!(seen, "Hi a@example.com!");
    }

    fn card(prefix: &str, len: usize, seed: &[u8]) -> String {
        let mut d: Vec<u8> = prefix.bytes().map(|b| b - b'0').collect();
        let mut i = 0;
        while d.len() < len - 1 {
            d.push(seed[i % seed.len()] % 10);
            i += 1;
        }
        let sum: u32 = d
            .iter()
            .rev()
            .enumerate()
            .map(|(i, &x)| {
                let x = x as u32;
                if i % 2 == 0 {
                    let y = x * 2;
                    if y > 9 {
                        y - 9
                    } else {
                        y
                    }
                } else {
                    x
                }
            })
            .sum();
        d.push(((10 - sum % 10) % 10) as u8);
        d.iter().map(|x| (x + b'0') as char).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// However a stream is cut, no digit of a card number or character of an e-mail's local
        /// part reaches the client, and the text reads as the whole would.
        #[test]
        fn pii_split_anywhere_never_leaks(
            words in proptest::collection::vec("[a-z]{1,8}", 1..20),
            seed in proptest::collection::vec(any::<u8>(), 8..16),
            local in "[a-z]{6,12}",
            cuts in proptest::collection::vec(1usize..400, 0..30),
        ) {
            let number = card("4", 16, &seed);
            let email = format!("{local}@example.org");
            let mid = words.len() / 2;
            let mut parts: Vec<String> = words.clone();
            parts.insert(mid, number.clone());
            parts.push(email.clone());
            let text = parts.join(" ");
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut g = pii();
            let whole = g.clone().text(&text).unwrap();
            let (seen, pieces) = stream(&mut g, &text, &cuts);
            prop_assert_eq!(&seen, &whole);
            let placeholders = regex::Regex::new(r"\[[A-Z_]+_\d+\]").unwrap();
            let stripped = placeholders.replace_all(&seen, "");
            prop_assert!(!stripped.bytes().any(|b| b.is_ascii_digit()), "a card digit leaked: {}", seen);
            prop_assert!(!seen.contains(&local));
            for p in pieces {
                prop_assert!(!p.contains(&local));
            }
        }
    }
}
