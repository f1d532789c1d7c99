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
    /// One chunk's JSON; what may go out now is written to `out`.
    fn filter(&mut self, json: &str, out: &mut Frames<'_>) -> Result<(), OutputBlocked>;
    /// The stream ended: whatever is still held.
    fn flush(&mut self, out: &mut Frames<'_>) -> Result<(), OutputBlocked>;
    fn decisions(&self) -> Vec<PolicyDecision>;

    /// [`ChunkFilter::filter`] over parsed chunks, for callers that hold values.
    fn chunk(&mut self, chunk: serde_json::Value, out: &mut Vec<serde_json::Value>) -> Result<(), OutputBlocked> {
        let mut buf = BytesMut::new();
        let mut count = 0;
        let result = self.filter(&chunk.to_string(), &mut Frames { buf: &mut buf, count: &mut count });
        out.extend(Frames::parse(&buf));
        result
    }

    /// [`ChunkFilter::flush`] into parsed chunks.
    fn finish(&mut self, out: &mut Vec<serde_json::Value>) -> Result<(), OutputBlocked> {
        let mut buf = BytesMut::new();
        let mut count = 0;
        let result = self.flush(&mut Frames { buf: &mut buf, count: &mut count });
        out.extend(Frames::parse(&buf));
        result
    }
}

/// Where SSE events are written: `data: <json>\n\n` each, counted.
pub struct Frames<'s> {
    buf: &'s mut BytesMut,
    count: &'s mut u64,
}

impl Frames<'_> {
    /// An event whose JSON goes out as it came. A line break in it (a pretty-printed upstream
    /// chunk, joined from several `data:` lines) would end the event early, so such JSON is
    /// written again on one line.
    pub fn raw(&mut self, json: &str) {
        if memchr::memchr2(b'\n', b'\r', json.as_bytes()).is_some() {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(json) {
                let _ = self.json(&v);
                return;
            }
        }
        self.buf.reserve(json.len() + 8);
        self.buf.put_slice(b"data: ");
        self.buf.put_slice(json.as_bytes());
        self.buf.put_slice(b"\n\n");
        *self.count += 1;
    }

    /// An event gw serializes. Verbatim parts of an upstream chunk in it may hold line breaks as
    /// whitespace; then it is written again on one line.
    pub fn json<T: Serialize + ?Sized>(&mut self, payload: &T) -> serde_json::Result<()> {
        let start = self.buf.len();
        self.buf.put_slice(b"data: ");
        let body = self.buf.len();
        if let Err(e) = serde_json::to_writer((&mut *self.buf).writer(), payload) {
            self.buf.truncate(start);
            return Err(e);
        }
        let written = self.buf.get(body..).unwrap_or_default();
        if memchr::memchr2(b'\n', b'\r', written).is_some() {
            let compact = serde_json::from_slice::<serde_json::Value>(written).map(|v| v.to_string());
            self.buf.truncate(body);
            match compact {
                Ok(c) => self.buf.put_slice(c.as_bytes()),
                Err(e) => {
                    self.buf.truncate(start);
                    return Err(e);
                }
            }
        }
        self.buf.put_slice(b"\n\n");
        *self.count += 1;
        Ok(())
    }

    pub fn new<'s>(buf: &'s mut BytesMut, count: &'s mut u64) -> Frames<'s> {
        Frames { buf, count }
    }

    /// The chunks of events written by this type.
    fn parse(buf: &[u8]) -> Vec<serde_json::Value> {
        buf.split(|&b| b == b'\n')
            .filter_map(|line| line.strip_prefix(b"data: "))
            .filter_map(|json| serde_json::from_slice(json).ok())
            .collect()
    }
}

#[derive(Default)]
pub struct StreamSink {
    buf: BytesMut,
    /// The upstream's usage, from whichever event carried it.
    pub usage: Option<TokenUsage>,
    /// Chunks written for the client so far.
    pub chunks: u64,
    /// Bytes of text the upstream produced in this stream's chunks (every string value of a
    /// `content`, `reasoning_content`, `reasoning`, `refusal`, `arguments`, `input` or `transcript`
    /// key, unescaped), counted as pushed, before any filter: what completion tokens are estimated
    /// from when the upstream reports no usage.
    pub completion_bytes: u64,
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

    fn frames(&mut self) -> Frames<'_> {
        Frames { buf: &mut self.buf, count: &mut self.chunks }
    }

    fn filter_chunk(&mut self, json: &str) {
        let Some(filter) = self.filter.as_mut() else { return };
        if self.blocked.is_some() {
            return;
        }
        let result = filter.filter(json, &mut Frames { buf: &mut self.buf, count: &mut self.chunks });
        if let Err(b) = result {
            self.blocked = Some(b);
        }
    }

    /// The stream ended well: the filter lets out what it held.
    pub fn finish_filter(&mut self) {
        let Some(filter) = self.filter.as_mut() else { return };
        if self.blocked.is_some() {
            return;
        }
        let result = filter.flush(&mut Frames { buf: &mut self.buf, count: &mut self.chunks });
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
        self.completion_bytes += text_bytes(json.as_bytes());
        if let Some(r) = self.recording.as_mut() {
            // An unreadable chunk spoils the recording (a non-object is never stored).
            let parsed: Result<serde_json::Value, _> = serde_json::from_str(json);
            r.chunk(parsed.as_ref().unwrap_or(&serde_json::Value::Null));
        }
        if self.filter.is_some() {
            self.filter_chunk(json);
        } else {
            self.frames().raw(json);
        }
    }

    /// An event gw serialized itself.
    pub fn push_json<T: Serialize>(&mut self, payload: &T) -> serde_json::Result<()> {
        if self.filter.is_some() || self.recording.is_some() {
            let json = serde_json::to_string(payload)?;
            self.push_raw(&json);
            return Ok(());
        }
        let start = self.buf.len();
        self.frames().json(payload)?;
        self.completion_bytes += self.buf.get(start..).map_or(0, text_bytes);
        Ok(())
    }

    /// Nobody receives the rest of the stream (the client left, or the guardrails stopped it):
    /// from now on chunks are only counted (usage, text bytes), neither filtered nor recorded.
    pub fn forward_nothing(&mut self) {
        self.filter = None;
        self.recording = None;
        self.buf.clear();
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

/// Keys whose string values are text the model wrote, wherever they sit in a chunk (or in a
/// complete answer): the answer, the chain of thought (`reasoning_content`, `reasoning`), a
/// refusal, a tool call's `function.arguments` or a custom tool call's `custom.input`, an audio
/// transcript. Only what the upstream answers is measured, never a request, so `input` is a custom
/// tool call's (a request's `input`, its prompt, never comes through here); a quoted key matches
/// the key alone, never `"input_tokens"` or `"reasoning_tokens"` in the usage.
const TEXT_KEYS: [&str; 7] =
    ["content", "reasoning_content", "reasoning", "refusal", "arguments", "input", "transcript"];

/// Bytes of model-written text in a chunk's JSON: the unescaped length of each string value of a
/// text key (an estimate's input: JSON that does not parse is measured as far as it goes).
///
/// Every stream chunk goes through this, so it looks only at colons (a chunk has one per member,
/// found with `memchr`) and reads the key just before each: a text key is a quoted key whose
/// closing quote is followed by the colon. Inside a string value every quote is escaped, so no
/// key can match there.
pub fn text_bytes(json: &[u8]) -> u64 {
    let mut total = 0;
    let mut from = 0;
    while let Some(colon) = json.get(from..).and_then(|rest| memchr::memchr(b':', rest)).map(|i| from + i) {
        from = colon + 1;
        if !text_key_before(json, colon) {
            continue;
        }
        let value = skip_space(json, colon + 1);
        if json.get(value) != Some(&b'"') {
            continue;
        }
        let (len, end) = string_len(json, value + 1);
        total += len;
        from = end;
    }
    total
}

/// Whether the member whose colon is at `colon` has a text key: `"key"`, then optional whitespace.
fn text_key_before(json: &[u8], colon: usize) -> bool {
    let mut end = colon;
    while end > 0 && matches!(json[end - 1], b' ' | b'\t' | b'\n' | b'\r') {
        end -= 1;
    }
    let Some(quote) = end.checked_sub(1).filter(|&q| json[q] == b'"') else { return false };
    TEXT_KEYS.iter().any(|k| {
        quote.checked_sub(k.len() + 1).is_some_and(|open| json[open] == b'"' && &json[open + 1..quote] == k.as_bytes())
    })
}

fn skip_space(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The unescaped UTF-8 length of the JSON string whose body starts at `i`, and where it ends.
fn string_len(json: &[u8], mut i: usize) -> (u64, usize) {
    let mut n = 0u64;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => return (n, i + 1),
            b'\\' if json.get(i + 1) == Some(&b'u') => {
                let unit = hex4(json, i + 2);
                let low = (json.get(i + 6..i + 8) == Some(b"\\u")).then(|| hex4(json, i + 8)).flatten();
                match (unit, low) {
                    (Some(0xD800..=0xDBFF), Some(0xDC00..=0xDFFF)) => {
                        n += 4;
                        i += 12;
                    }
                    (Some(u), _) => {
                        n += if u < 0x80 {
                            1
                        } else if u < 0x800 {
                            2
                        } else {
                            3
                        };
                        i += 6;
                    }
                    (None, _) => i += 2,
                }
            }
            b'\\' => {
                n += 1;
                i += 2;
            }
            _ => {
                n += 1;
                i += 1;
            }
        }
    }
    (n, json.len())
}

fn hex4(json: &[u8], i: usize) -> Option<u32> {
    let digits = std::str::from_utf8(json.get(i..i + 4)?).ok()?;
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::engine::TeamPolicies;

    /// [`text_bytes`] as first written: every quoted text key found by an Aho-Corasick automaton,
    /// then its colon and string value. The colon-driven scan must count exactly what it counts.
    fn text_bytes_by_automaton(json: &[u8]) -> u64 {
        let finder = aho_corasick::AhoCorasick::new(TEXT_KEYS.map(|k| format!("\"{k}\""))).unwrap();
        let mut total = 0;
        let mut from = 0;
        while let Some(m) = json.get(from..).and_then(|rest| finder.find(rest)) {
            let key_end = from + m.end();
            from = key_end;
            let colon = skip_space(json, key_end);
            if json.get(colon) != Some(&b':') {
                continue;
            }
            let value = skip_space(json, colon + 1);
            if json.get(value) != Some(&b'"') {
                continue;
            }
            let (len, end) = string_len(json, value + 1);
            total += len;
            from = end;
        }
        total
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let key = prop_oneof![
            proptest::sample::select(TEXT_KEYS.to_vec()).prop_map(String::from),
            proptest::sample::select(vec!["role", "id", "input_tokens", "xcontent", "content_", "a:b", "\"q"])
                .prop_map(String::from),
            "\\PC{0,6}",
        ];
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<i64>().prop_map(serde_json::Value::from),
            "(\\PC|[:\"\\\\ \n])*".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                proptest::collection::vec((key.clone(), inner), 0..5)
                    .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn the_colon_scan_counts_what_the_automaton_counts(v in json_value()) {
            for text in [serde_json::to_string(&v).unwrap(), serde_json::to_string_pretty(&v).unwrap()] {
                proptest::prop_assert_eq!(text_bytes(text.as_bytes()), text_bytes_by_automaton(text.as_bytes()));
                // Cut anywhere, as a broken chunk would be.
                let cut = text.len() / 2;
                let head = &text.as_bytes()[..cut];
                proptest::prop_assert_eq!(text_bytes(head), text_bytes_by_automaton(head));
            }
        }
    }

    #[test]
    fn a_space_before_the_colon_still_marks_a_text_key() {
        let json = br#"{"content" : "abc", "reasoning_content"	:"de", "input_tokens": "no", "xcontent": "no"}"#;
        assert_eq!(text_bytes(json), 5);
        assert_eq!(text_bytes_by_automaton(json), 5);
    }

    #[test]
    fn frames_events() {
        let mut s = StreamSink::new();
        assert!(s.take().is_none());
        s.push_raw(r#"{"a":1}"#);
        s.push_json(&serde_json::json!({"b": 2})).unwrap();
        assert_eq!(s.chunks, 2);
        assert_eq!(&s.take().unwrap()[..], b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\n");
        assert_eq!(s.pending(), 0);
        assert_eq!(s.completion_bytes, 0);
    }

    #[test]
    fn a_chunk_with_line_breaks_goes_out_as_one_event() {
        // A pretty-printed upstream chunk (its `data:` lines joined with line breaks).
        let pretty = "{\n  \"choices\": [\r\n {\"index\": 0, \"delta\": {\"content\": \"a\\nb\"}}]\n}";
        let want = "data: {\"choices\":[{\"delta\":{\"content\":\"a\\nb\"},\"index\":0}]}\n\n";
        let mut s = StreamSink::new();
        s.push_raw(pretty);
        assert_eq!(std::str::from_utf8(&s.take().unwrap()).unwrap(), want);

        use crate::policy::engine::{OutputGuard, PolicySet};
        use crate::policy::stream::GuardedStream;
        use crate::policy::vault::Vault;
        let ps = PolicySet::empty().resolve(TeamPolicies::NONE, Some("pii_redact")).unwrap();
        let mut s = StreamSink::filtered(Box::new(GuardedStream::new(OutputGuard::new(&ps, Vault::new()).unwrap())));
        s.push_raw(pretty);
        s.finish_filter();
        let out = String::from_utf8(s.take().unwrap().to_vec()).unwrap();
        // The chunk (its text held back) and the held text at the end: each on one line.
        assert_eq!(s.chunks, 2);
        assert_eq!(out.matches('\n').count(), 4, "{out}");
        assert!(out.contains(r#""content":"a\nb""#), "{out}");
        assert!(out.starts_with("data: {") && out.ends_with("}\n\n"), "{out}");
    }

    #[test]
    fn counts_the_text_the_upstream_produced() {
        let chunks = [
            // 5 + 6 ("\"" is one byte, "\u00e9" two): role and logprobs tokens are not text.
            r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"logprobs":{"content":[{"token":"Hello","bytes":[72]}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"\"caf\u00e9"}}]}"#,
            // 4 (a surrogate pair is one four-byte character) + 1, spaces around the colon allowed.
            r#"{"choices":[{"index":0,"delta":{"content" : "\ud83d\ude00", "refusal":"\\"}}]}"#,
            // 9 + 0 + 3: tool call arguments by pieces; names are not counted.
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"content","arguments":"{\"a\":\"b\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"audio":{"id":"x","data":"AAAA","transcript":"hi!"}}}]}"#,
            // A value that merely says "content" is not a key; null content is no text.
            r#"{"choices":[{"index":0,"delta":{"content":null,"type":"content"}}],"usage":{"completion_tokens":9}}"#,
            // 7 + 5: the chain of thought under either name (null is none).
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think\u00e9","reasoning":null}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":"hmm\n."}}]}"#,
            // 8 + 5: a custom tool call's input by pieces; its name and type are not counted.
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","type":"custom","custom":{"name":"input","input":"echo \"xy"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"custom":{"input":"\"; ok"}}]}}]}"#,
            // No misfire: usage keys that start like text keys, an `input` that is not a string, and
            // text keys quoted inside a string that is not counted.
            r#"{"choices":[],"usage":{"input_tokens":3,"completion_tokens_details":{"reasoning_tokens":2}},"x":{"input":{"a":1},"note":"{\"input\":\"no\",\"reasoning\":\"no\"}"}}"#,
        ];
        let want = 5 + 6 + 4 + 1 + 9 + 3 + 7 + 5 + 8 + 5;
        let mut raw = StreamSink::new();
        for c in chunks {
            raw.push_raw(c);
        }
        assert_eq!(raw.completion_bytes, want);

        // The same through push_json, with and without a filter or a recording.
        let values: Vec<serde_json::Value> = chunks.iter().map(|c| serde_json::from_str(c).unwrap()).collect();
        let mut plain = StreamSink::new();
        let mut recorded = StreamSink::new();
        recorded.record();
        for v in &values {
            plain.push_json(v).unwrap();
            recorded.push_json(v).unwrap();
        }
        assert_eq!(plain.completion_bytes, want);
        assert_eq!(recorded.completion_bytes, want);
    }

    #[test]
    fn counts_before_the_filter() {
        use crate::policy::engine::{OutputGuard, PolicySet};
        use crate::policy::stream::GuardedStream;
        use crate::policy::vault::Vault;

        let ps = PolicySet::empty().resolve(TeamPolicies::NONE, Some("pii_redact")).unwrap();
        let guard = OutputGuard::new(&ps, Vault::new()).unwrap();
        let mut s = StreamSink::filtered(Box::new(GuardedStream::new(guard)));
        s.push_raw(r#"{"choices":[{"index":0,"delta":{"content":"mail a@example.com"}}]}"#);
        s.push_json(&serde_json::json!({"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}))
            .unwrap();
        assert_eq!(s.completion_bytes, 18 + 2);
        // Broken JSON is measured as far as it goes.
        s.push_raw(r#"{"choices":[{"delta":{"content":"abc"#);
        assert_eq!(s.completion_bytes, 23);
    }
}
