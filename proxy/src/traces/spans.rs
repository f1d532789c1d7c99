//! A finished request as OTLP spans, derived from its context like its headers and audit row:
//! one server span for the request and one client span per upstream attempt, with the
//! OpenTelemetry GenAI semantic conventions' attributes and gw's own (docs/telemetry.md).
//! Prompt and answer text only when the organization keeps bodies in its audit log.

use std::time::Instant;

use gw_shared::pricing::format_cost;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span, status, Span, Status};

use super::context::TraceCtx;
use crate::ctx::{Attempt, AttemptOutcome, Endpoint, RequestCtx};

/// Text attributes (bodies) are cut to this many bytes.
const MAX_TEXT: usize = 64 * 1024;

/// The GenAI conventions' `gen_ai.provider.name` (and the older `gen_ai.system`) of a provider
/// kind.
pub fn system_of(kind: &str) -> &'static str {
    match kind {
        "openai" => "openai",
        "anthropic" => "anthropic",
        "azure" => "azure.ai.openai",
        "gemini" => "gcp.gemini",
        "bedrock" => "aws.bedrock",
        "mock" => "gw.mock",
        _ => "openai_compatible",
    }
}

/// The request's spans, `None` when it is not exported.
pub fn of_request(ctx: &RequestCtx, now: Instant) -> Option<Vec<Span>> {
    let trace = ctx.trace.as_deref().filter(|t| t.exported)?;
    let mut spans = Vec::with_capacity(1 + ctx.attempts.len());
    spans.push(request_span(ctx, trace, now));
    for a in &ctx.attempts {
        spans.push(attempt_span(ctx, trace, a, now));
    }
    Some(spans)
}

fn operation(endpoint: Option<Endpoint>) -> Option<&'static str> {
    match endpoint? {
        Endpoint::ChatCompletions | Endpoint::Messages | Endpoint::Responses => Some("chat"),
        Endpoint::Embeddings => Some("embeddings"),
        Endpoint::MessagesCountTokens => Some("count_tokens"),
        Endpoint::Models => None,
    }
}

/// Unix nanoseconds of an instant of this request.
fn unix_nanos(ctx: &RequestCtx, at: Instant) -> u64 {
    let start = ctx.created_at.timestamp_nanos_opt().and_then(|n| u64::try_from(n).ok()).unwrap_or_default();
    let since = u64::try_from(at.saturating_duration_since(ctx.started).as_nanos()).unwrap_or(u64::MAX);
    start.saturating_add(since)
}

fn request_span(ctx: &RequestCtx, trace: &TraceCtx, now: Instant) -> Span {
    let path = ctx.endpoint.map_or("/v1", Endpoint::path);
    let op = operation(ctx.endpoint);
    let name = match (op, ctx.model.as_deref()) {
        (Some(op), Some(model)) => format!("{op} {model}"),
        _ => format!("POST {path}"),
    };
    let mut a = Attrs::default();
    if let Some(op) = op {
        a.str("gen_ai.operation.name", op);
    }
    let answered = ctx.attempts.iter().rev().find(|x| x.outcome == AttemptOutcome::Answered);
    if let Some(x) = answered {
        a.str("gen_ai.provider.name", x.system);
        a.str("gen_ai.system", x.system);
        a.str("gen_ai.response.model", &x.upstream_model);
    } else if let Some((_, model)) = &ctx.cached_from {
        a.str("gen_ai.response.model", model);
    }
    if let Some(model) = &ctx.model {
        a.str("gen_ai.request.model", model);
    }
    if let Some(req) = &ctx.request {
        let body = req.body();
        if let Some(n) = body.get("max_completion_tokens").or_else(|| body.get("max_tokens")).and_then(|v| v.as_i64()) {
            a.int("gen_ai.request.max_tokens", n);
        }
    }
    let u = &ctx.usage;
    if ctx.settled_by.is_some() || u.total() > 0 {
        a.int("gen_ai.usage.input_tokens", i64::from(u.prompt_tokens));
        a.int("gen_ai.usage.output_tokens", i64::from(u.completion_tokens));
        a.int("gw.usage.cached_tokens", i64::from(u.cached_tokens));
        a.int("gw.usage.reasoning_tokens", i64::from(u.reasoning_tokens));
    }
    if !trace.finish_reasons.is_empty() {
        a.strs("gen_ai.response.finish_reasons", &trace.finish_reasons);
    }
    a.str("http.request.method", if ctx.endpoint == Some(Endpoint::Models) { "GET" } else { "POST" });
    a.str("url.path", path);
    if ctx.status > 0 {
        a.int("http.response.status_code", i64::from(ctx.status));
    }
    if let Some(e) = ctx.error {
        a.str("error.type", e);
    }
    a.str("gw.request_id", &ctx.request_id.to_string());
    if let Some(key) = &ctx.key {
        a.str("gw.org_id", &key.org_id.to_string());
        a.str("gw.api_key_id", &key.id.to_string());
    }
    if let Some(team) = ctx.team_id {
        a.str("gw.team_id", &team.to_string());
    }
    a.str("gw.cache.status", ctx.cache.label());
    a.str("gw.policy.action", ctx.policy_verdict().map_or("none", |d| d.action.label()));
    if let Ok(cost) = f64::try_from(ctx.cost) {
        a.double("gw.cost_usd", cost);
    }
    a.str("gw.cost_usd_exact", &format_cost(ctx.cost));
    if let Some(s) = ctx.settled_by {
        a.str("gw.settled_by", s.label());
    }
    a.int("gw.attempts", i64::try_from(ctx.attempts.len()).unwrap_or(i64::MAX));
    if ctx.log_bodies {
        if let Some(body) = &ctx.logged_request {
            a.str("gw.request.body", cut(body));
        }
        if let Some(body) = &ctx.response_body {
            a.str("gw.response.body", cut(body));
        }
    }
    Span {
        trace_id: trace.trace_id.to_bytes().to_vec(),
        span_id: trace.span_id.to_bytes().to_vec(),
        parent_span_id: trace.parent.map(|p| p.to_bytes().to_vec()).unwrap_or_default(),
        trace_state: trace.state.as_ref().and_then(|s| s.to_str().ok()).unwrap_or_default().to_string(),
        flags: u32::from(trace.flags.to_u8()),
        name,
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: unix_nanos(ctx, ctx.started),
        end_time_unix_nano: unix_nanos(ctx, now),
        attributes: a.0,
        status: Some(if ctx.status >= 500 {
            Status { code: status::StatusCode::Error as i32, message: ctx.error.unwrap_or("error").to_string() }
        } else {
            Status::default()
        }),
        ..Default::default()
    }
}

fn attempt_span(ctx: &RequestCtx, trace: &TraceCtx, x: &Attempt, now: Instant) -> Span {
    let op = operation(ctx.endpoint).unwrap_or("chat");
    let mut a = Attrs::default();
    a.str("gen_ai.operation.name", op);
    a.str("gen_ai.provider.name", x.system);
    a.str("gen_ai.system", x.system);
    a.str("gen_ai.request.model", &x.upstream_model);
    a.str("gw.provider", &x.provider);
    a.str("gw.attempt.outcome", x.outcome.label());
    a.str("gw.credential", if x.org_key { "organization" } else { "gateway" });
    if let Some(region) = &x.region {
        a.str("gw.region", region);
    }
    if let Some(s) = x.status {
        a.int("http.response.status_code", i64::from(s));
    }
    let failed = match x.outcome {
        AttemptOutcome::Answered => {
            a.str("gen_ai.response.model", &x.upstream_model);
            None
        }
        AttemptOutcome::Retryable(kind) | AttemptOutcome::Failed(kind) => {
            a.str("error.type", kind);
            Some(kind)
        }
    };
    Span {
        trace_id: trace.trace_id.to_bytes().to_vec(),
        span_id: x.span_id.to_bytes().to_vec(),
        parent_span_id: trace.span_id.to_bytes().to_vec(),
        flags: u32::from(trace.flags.to_u8()),
        name: format!("{op} {}", x.upstream_model),
        kind: span::SpanKind::Client as i32,
        start_time_unix_nano: unix_nanos(ctx, x.began),
        end_time_unix_nano: unix_nanos(ctx, x.ended.unwrap_or(now)),
        attributes: a.0,
        status: Some(match failed {
            Some(kind) => Status { code: status::StatusCode::Error as i32, message: kind.to_string() },
            None => Status::default(),
        }),
        ..Default::default()
    }
}

fn cut(text: &str) -> &str {
    if text.len() <= MAX_TEXT {
        return text;
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[derive(Default)]
struct Attrs(Vec<KeyValue>);

impl Attrs {
    fn put(&mut self, key: &str, value: any_value::Value) {
        self.0.push(KeyValue {
            key: key.to_string(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        });
    }

    fn str(&mut self, key: &str, v: &str) {
        self.put(key, any_value::Value::StringValue(v.to_string()));
    }

    fn int(&mut self, key: &str, v: i64) {
        self.put(key, any_value::Value::IntValue(v));
    }

    fn double(&mut self, key: &str, v: f64) {
        self.put(key, any_value::Value::DoubleValue(v));
    }

    fn strs(&mut self, key: &str, v: &[String]) {
        let values = v.iter().map(|s| AnyValue { value: Some(any_value::Value::StringValue(s.clone())) }).collect();
        self.put(key, any_value::Value::ArrayValue(ArrayValue { values }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;
    use std::time::Duration;

    fn value<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
        span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()?.value.as_ref())
    }

    fn text(span: &Span, key: &str) -> Option<String> {
        match value(span, key)? {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        }
    }

    fn attempt(outcome: AttemptOutcome, began: Instant) -> Attempt {
        Attempt {
            provider: Arc::from("primary"),
            upstream_model: Arc::from("gpt-4o-mini"),
            system: "openai",
            outcome,
            status: Some(200),
            latency: Some(Duration::from_millis(3)),
            spent: None,
            region: None,
            org_key: false,
            span_id: super::super::context::new_span_id(),
            began,
            ended: Some(began + Duration::from_millis(5)),
        }
    }

    #[test]
    fn a_request_with_a_fallback_is_one_server_span_and_two_client_spans() {
        let mut ctx = RequestCtx::new(Duration::from_secs(5));
        ctx.trace = TraceCtx::start(&http::HeaderMap::new(), true);
        ctx.endpoint = Some(Endpoint::Messages);
        ctx.model = Some("claude".into());
        ctx.status = 200;
        ctx.usage.prompt_tokens = 12;
        ctx.usage.completion_tokens = 3;
        ctx.settled_by = Some(crate::ctx::SettledBy::Usage);
        ctx.response_body = Some("the answer".into());
        let began = ctx.started + Duration::from_millis(1);
        ctx.attempts.push(attempt(AttemptOutcome::Retryable("upstream_unavailable"), began));
        ctx.attempts.push(attempt(AttemptOutcome::Answered, began + Duration::from_millis(6)));
        let spans = of_request(&ctx, ctx.started + Duration::from_millis(20)).expect("exported");
        assert_eq!(spans.len(), 3);
        let (req, first, second) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!(req.name, "chat claude");
        assert_eq!(req.kind, span::SpanKind::Server as i32);
        assert!(req.parent_span_id.is_empty());
        assert_eq!(req.end_time_unix_nano - req.start_time_unix_nano, 20_000_000);
        assert_eq!(text(req, "gen_ai.response.model").as_deref(), Some("gpt-4o-mini"));
        assert!(matches!(value(req, "gen_ai.usage.input_tokens"), Some(any_value::Value::IntValue(12))));
        assert_eq!(text(req, "url.path").as_deref(), Some("/v1/messages"));
        // Bodies are the organization's to allow.
        assert!(text(req, "gw.response.body").is_none());
        for x in [first, second] {
            assert_eq!(x.parent_span_id, req.span_id);
            assert_eq!(x.trace_id, req.trace_id);
            assert_eq!(x.kind, span::SpanKind::Client as i32);
        }
        assert_eq!(text(first, "error.type").as_deref(), Some("upstream_unavailable"));
        assert_eq!(first.status.as_ref().map(|s| s.code), Some(status::StatusCode::Error as i32));
        assert_eq!(second.start_time_unix_nano - req.start_time_unix_nano, 7_000_000);

        ctx.log_bodies = true;
        let spans = of_request(&ctx, Instant::now()).expect("exported");
        assert_eq!(text(&spans[0], "gw.response.body").as_deref(), Some("the answer"));
    }

    #[test]
    fn nothing_is_built_for_a_request_that_is_not_exported() {
        let ctx = RequestCtx::new(Duration::from_secs(5));
        assert!(of_request(&ctx, Instant::now()).is_none());
        assert_eq!(cut(&"é".repeat(MAX_TEXT)).len(), MAX_TEXT);
    }
}
