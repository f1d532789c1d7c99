//! Where a stream translator puts what the client gets: SSE-framed OpenAI chunks, gathered so the
//! proxy writes every event that arrived in one upstream read with one downstream write.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use crate::policy::engine::OutputBlocked;
use crate::policy::PolicyDecision;
use crate::pricing::TokenUsage;

/// Rewrites a stream's chunks on their way to the client (the output guardrails): each chunk in
/// gives zero or more chunks out; text may be held back and leave with a later chunk.
pub trait ChunkFilter: Send {
    fn chunk(&mut self, chunk: serde_json::Value, out: &mut Vec<serde_json::Value>) -> Result<(), OutputBlocked>;
    /// The stream ended: whatever is still held.
    fn finish(&mut self, out: &mut Vec<serde_json::Value>) -> Result<(), OutputBlocked>;
    fn decisions(&self) -> Vec<PolicyDecision>;
}

#[derive(Default)]
pub struct StreamSink {
    buf: BytesMut,
    /// The upstream's usage, from whichever event carried it.
    pub usage: Option<TokenUsage>,
    /// Chunks written for the client so far.
    pub chunks: u64,
    /// A chunk carrying content (text, a tool call, a refusal) has been written: the moment
    /// time-to-first-token measures. Translators say so with [`StreamSink::saw_content`].
    pub content_seen: bool,
    filter: Option<Box<dyn ChunkFilter>>,
    /// The filter refused the stream: nothing more goes out.
    pub blocked: Option<OutputBlocked>,
    /// Gathers the chunks (as they came, before the filter) into one response for the cache.
    recording: Option<crate::cache::stream::Assembler>,
}

impl std::fmt::Debug for StreamSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSink")
            .field("pending", &self.buf.len())
            .field("chunks", &self.chunks)
            .finish_non_exhaustive()
    }
}

impl StreamSink {
    pub fn new() -> Self {
        Self::default()
    }

    /// A sink whose chunks pass through `filter` first.
    pub fn filtered(filter: Box<dyn ChunkFilter>) -> Self {
        Self { filter: Some(filter), ..Self::default() }
    }

    /// Gathers every chunk from now on into the response they amount to (see [`Self::recorded`]).
    pub fn record(&mut self) {
        self.recording = Some(crate::cache::stream::Assembler::new());
    }

    /// The gathered response, if the stream amounted to a complete one.
    pub fn recorded(&mut self) -> Option<serde_json::Value> {
        self.recording.take().and_then(|a| a.finish())
    }

    fn filter_chunk(&mut self, chunk: serde_json::Value) {
        let Some(filter) = self.filter.as_mut() else { return };
        if self.blocked.is_some() {
            return;
        }
        let mut out = Vec::new();
        let result = filter.chunk(chunk, &mut out);
        for v in &out {
            self.write_json(v);
        }
        if let Err(b) = result {
            self.blocked = Some(b);
        }
    }

    fn write_json(&mut self, v: &serde_json::Value) {
        self.buf.put_slice(b"data: ");
        // Serializing a `Value` into memory cannot fail.
        let _ = serde_json::to_writer((&mut self.buf).writer(), v);
        self.buf.put_slice(b"\n\n");
        self.chunks += 1;
    }

    /// The stream ended well: the filter lets out what it held.
    pub fn finish_filter(&mut self) {
        let Some(filter) = self.filter.as_mut() else { return };
        if self.blocked.is_some() {
            return;
        }
        let mut out = Vec::new();
        let result = filter.finish(&mut out);
        for v in &out {
            self.write_json(v);
        }
        if let Err(b) = result {
            self.blocked = Some(b);
        }
    }

    /// The filter's decisions so far.
    pub fn decisions(&self) -> Vec<PolicyDecision> {
        self.filter.as_ref().map(|f| f.decisions()).unwrap_or_default()
    }

    /// An event whose JSON payload goes to the client as it came.
    pub fn push_raw(&mut self, json: &str) {
        if self.filter.is_some() || self.recording.is_some() {
            let parsed: Result<serde_json::Value, _> = serde_json::from_str(json);
            if let Some(r) = self.recording.as_mut() {
                // An unreadable chunk spoils the recording (a non-object is never stored).
                r.chunk(parsed.as_ref().unwrap_or(&serde_json::Value::Null));
            }
            if self.filter.is_none() {
                self.buf.reserve(json.len() + 8);
                self.buf.put_slice(b"data: ");
                self.buf.put_slice(json.as_bytes());
                self.buf.put_slice(b"\n\n");
                self.chunks += 1;
                return;
            }
            match parsed {
                Ok(v) => self.filter_chunk(v),
                // What cannot be read cannot be checked: it does not go out.
                Err(_) => {
                    self.blocked = Some(OutputBlocked {
                        policy: String::new(),
                        guardrail: "output",
                        reason: "the upstream sent a chunk the output guardrails could not read".into(),
                    })
                }
            }
            return;
        }
        self.buf.reserve(json.len() + 8);
        self.buf.put_slice(b"data: ");
        self.buf.put_slice(json.as_bytes());
        self.buf.put_slice(b"\n\n");
        self.chunks += 1;
    }

    /// An event gw serialized itself.
    pub fn push_json<T: Serialize>(&mut self, payload: &T) -> serde_json::Result<()> {
        if self.filter.is_some() || self.recording.is_some() {
            let v = serde_json::to_value(payload)?;
            if let Some(r) = self.recording.as_mut() {
                r.chunk(&v);
            }
            if self.filter.is_some() {
                self.filter_chunk(v);
            } else {
                self.write_json(&v);
            }
            return Ok(());
        }
        self.buf.put_slice(b"data: ");
        serde_json::to_writer((&mut self.buf).writer(), payload)?;
        self.buf.put_slice(b"\n\n");
        self.chunks += 1;
        Ok(())
    }

    /// The chunk just pushed carried content for the client.
    pub fn saw_content(&mut self) {
        self.content_seen = true;
    }

    /// Bytes gathered since the last take.
    pub fn take(&mut self) -> Option<Bytes> {
        if self.buf.is_empty() {
            None
        } else {
            Some(self.buf.split().freeze())
        }
    }

    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_events() {
        let mut s = StreamSink::new();
        assert!(s.take().is_none());
        s.push_raw(r#"{"a":1}"#);
        s.push_json(&serde_json::json!({"b": 2})).unwrap();
        assert_eq!(s.chunks, 2);
        assert_eq!(&s.take().unwrap()[..], b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\n");
        assert_eq!(s.pending(), 0);
    }
}
