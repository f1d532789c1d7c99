//! A request's place in a trace (W3C Trace Context): the client's `traceparent` and
//! `tracestate` when it sent them, read with the OpenTelemetry SDK's propagator; gw's own span
//! for the request and one per upstream attempt; what each attempt passes on upstream.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceFlags, TraceId};
use opentelemetry_sdk::propagation::TraceContextPropagator;

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// Most finish reasons a span lists (one per choice).
const MAX_FINISH_REASONS: usize = 16;

#[derive(Debug, Clone)]
pub struct TraceCtx {
    pub trace_id: TraceId,
    /// gw's span for the whole request.
    pub span_id: SpanId,
    /// The client's span, when it sent a `traceparent`.
    pub parent: Option<SpanId>,
    pub flags: TraceFlags,
    /// The client's `tracestate`, passed on unchanged.
    pub state: Option<HeaderValue>,
    /// gw's spans go to the exporter: export is on and the client did not decide against
    /// sampling the trace.
    pub exported: bool,
    /// The answer's finish reasons, in order (when exported).
    pub finish_reasons: Vec<String>,
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

impl TraceCtx {
    /// The request's trace: the client's (a malformed `traceparent` is ignored, as the W3C
    /// specification says), else a new one when gw exports spans. `None`: neither, nothing to
    /// record or pass on.
    pub fn start(headers: &HeaderMap, exporting: bool) -> Option<Box<Self>> {
        let client = headers.get(TRACEPARENT).filter(|v| well_formed(v.as_bytes())).map(|_| {
            let cx = TraceContextPropagator::new().extract(&Headers(headers));
            cx.span().span_context().clone()
        });
        match client.filter(|c| c.is_valid()) {
            Some(c) => Some(Box::new(Self {
                trace_id: c.trace_id(),
                span_id: new_span_id(),
                parent: Some(c.span_id()),
                flags: c.trace_flags(),
                state: headers.get(TRACESTATE).filter(|_| !c.trace_state().header().is_empty()).cloned(),
                // Parent-based sampling: a caller that did not sample its trace gets no spans.
                exported: exporting && c.is_sampled(),
                finish_reasons: Vec::new(),
            })),
            None if exporting => Some(Box::new(Self {
                trace_id: TraceId::from_bytes(rand::random::<u128>().max(1).to_be_bytes()),
                span_id: new_span_id(),
                parent: None,
                flags: TraceFlags::SAMPLED,
                state: None,
                exported: true,
                finish_reasons: Vec::new(),
            })),
            None => None,
        }
    }

    /// The headers an upstream attempt carries: gw's attempt span as the parent when gw exports
    /// its spans, else the client's own `traceparent` (gw is not part of the trace).
    pub fn upstream_headers(&self, attempt_span: SpanId) -> Vec<(HeaderName, HeaderValue)> {
        let parent = match (self.exported, self.parent) {
            (true, _) => attempt_span,
            (false, Some(client)) => client,
            (false, None) => return Vec::new(),
        };
        let value = format!("00-{}-{}-{:02x}", self.trace_id, parent, self.flags.to_u8());
        let mut out = Vec::with_capacity(2);
        if let Ok(v) = HeaderValue::from_str(&value) {
            out.push((TRACEPARENT, v));
        }
        if let Some(state) = &self.state {
            out.push((TRACESTATE, state.clone()));
        }
        out
    }

    /// Notes the finish reasons a chat completion or chunk (JSON, or SSE `data:` lines) names.
    /// A byte search, not a parse: inside a JSON string the quotes would be escaped, so only the
    /// field itself matches.
    pub fn note_finish_reasons(&mut self, bytes: &[u8]) {
        if !self.exported {
            return;
        }
        const FIELD: &[u8] = b"\"finish_reason\":";
        for at in memchr::memmem::find_iter(bytes, FIELD) {
            if self.finish_reasons.len() >= MAX_FINISH_REASONS {
                return;
            }
            let rest = &bytes[at + FIELD.len()..];
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            let Some(value) = rest.strip_prefix(b"\"") else { continue }; // null
            let Some(end) = memchr::memchr(b'"', value) else { continue };
            if let Ok(reason) = std::str::from_utf8(&value[..end]) {
                if !reason.is_empty() && reason.len() <= 64 {
                    self.finish_reasons.push(reason.to_string());
                }
            }
        }
    }
}

/// The W3C shape the SDK's propagator does not check itself: fields of 2, 32, 16 and 2 lowercase
/// hex digits (a later version may add fields after them).
fn well_formed(value: &[u8]) -> bool {
    let mut fields = value.split(|b| *b == b'-');
    let shape = [2, 32, 16, 2].iter().all(|len| {
        fields.next().is_some_and(|f| f.len() == *len && f.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    });
    shape && (fields.next().is_none() || !value.starts_with(b"00-"))
}

/// A random, non-zero span id.
pub fn new_span_id() -> SpanId {
    SpanId::from_bytes(rand::random::<u64>().max(1).to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v))).collect()
    }

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_client_trace_is_continued_and_passed_on_through_the_attempt_span() {
        let t = TraceCtx::start(&headers(&[("traceparent", PARENT), ("tracestate", "vendor=opaque")]), true)
            .expect("a trace");
        assert_eq!(t.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent.map(|p| p.to_string()).as_deref(), Some("00f067aa0ba902b7"));
        assert!(t.exported);
        let attempt = new_span_id();
        let up = t.upstream_headers(attempt);
        assert_eq!(up[0].1.to_str().ok(), Some(&*format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{attempt}-01")));
        assert_eq!(up[1], (TRACESTATE, HeaderValue::from_static("vendor=opaque")));
    }

    #[test]
    fn without_export_the_client_header_goes_upstream_unchanged() {
        let t = TraceCtx::start(&headers(&[("traceparent", PARENT)]), false).expect("a trace");
        assert!(!t.exported);
        let up = t.upstream_headers(new_span_id());
        assert_eq!(up, vec![(TRACEPARENT, HeaderValue::from_static(PARENT))]);
        assert!(TraceCtx::start(&HeaderMap::new(), false).is_none());
    }

    #[test]
    fn a_malformed_parent_starts_a_new_trace_and_an_unsampled_one_is_not_exported() {
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "garbage",
            "00-4bf9-00f0-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            let h = HeaderMap::from_iter([(TRACEPARENT, HeaderValue::from_static(bad))]);
            let t = TraceCtx::start(&h, true).expect("a new trace");
            assert!(t.parent.is_none() && t.exported, "{bad}");
            assert_ne!(t.trace_id, TraceId::INVALID);
            assert!(TraceCtx::start(&h, false).is_none());
        }
        let unsampled = headers(&[("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")]);
        let t = TraceCtx::start(&unsampled, true).expect("a trace");
        assert!(!t.exported);
        assert!(t.upstream_headers(new_span_id())[0].1.to_str().is_ok_and(|v| v.ends_with("00f067aa0ba902b7-00")));
    }

    #[test]
    fn finish_reasons_are_read_from_the_field_only() {
        let mut t = TraceCtx::start(&HeaderMap::new(), true).expect("a trace");
        t.note_finish_reasons(br#"{"choices":[{"message":{"content":"say \"finish_reason\":\"x\""},"finish_reason":"stop"},{"finish_reason": "length"}]}"#);
        t.note_finish_reasons(b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":null}]}\n\n");
        assert_eq!(t.finish_reasons, ["stop", "length"]);
    }
}
