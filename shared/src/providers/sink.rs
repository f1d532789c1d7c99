//! Where a stream translator puts what the client gets: SSE-framed OpenAI chunks, gathered so the
//! proxy writes every event that arrived in one upstream read with one downstream write.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use crate::pricing::TokenUsage;

#[derive(Debug, Default)]
pub struct StreamSink {
    buf: BytesMut,
    /// The upstream's usage, from whichever event carried it.
    pub usage: Option<TokenUsage>,
    /// Chunks written for the client so far.
    pub chunks: u64,
    /// A chunk carrying content (text, a tool call, a refusal) has been written: the moment
    /// time-to-first-token measures. Translators say so with [`StreamSink::saw_content`].
    pub content_seen: bool,
}

impl StreamSink {
    pub fn new() -> Self {
        Self::default()
    }

    /// An event whose JSON payload goes to the client as it came.
    pub fn push_raw(&mut self, json: &str) {
        self.buf.reserve(json.len() + 8);
        self.buf.put_slice(b"data: ");
        self.buf.put_slice(json.as_bytes());
        self.buf.put_slice(b"\n\n");
        self.chunks += 1;
    }

    /// An event gw serialized itself.
    pub fn push_json<T: Serialize>(&mut self, payload: &T) -> serde_json::Result<()> {
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
