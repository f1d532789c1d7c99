//! The logging step, after the response: metrics, the admission settled with what the upstreams
//! billed, the governance events the request's decisions call for, and the audit row. Nothing here
//! waits: settlements, events and audit rows are queued for their background writers.

use gw_shared::limits::estimate;
use gw_shared::limits::events::NewEvent;
use gw_shared::policy::PolicyAction;
use serde_json::json;

use crate::ctx::RequestCtx;
use crate::state::Gateway;
use crate::traffic_metrics::status_class;

pub const POLICY_BLOCKED: &str = "policy.blocked";

pub fn run(gw: &Gateway, ctx: &mut RequestCtx) {
    let endpoint = ctx.endpoint.map(|e| e.path()).unwrap_or("unknown");
    let status = ctx.status.to_string();
    gw.metrics.requests.with_label_values(&[endpoint, &status]).inc();
    gw.metrics.request_duration.with_label_values(&[endpoint]).observe(ctx.started.elapsed().as_secs_f64());
    count_traffic(gw, ctx, endpoint);
    if let Some(admitted) = ctx.admitted.take() {
        // A cached answer used no upstream tokens (its usage says what the answer holds).
        let tokens = if ctx.cache.is_hit() { 0 } else { u64::from(ctx.usage.total()) };
        gw.limiter.settle(admitted, tokens, estimate::nanos(ctx.cost));
    }
    if let Some(ev) = policy_blocked(ctx) {
        gw.outbox.emit(ev);
    }
    let entry = match ctx.answered_row.take() {
        Some(mut row) if super::audit::unchanged_since(&row, ctx) => {
            super::audit::refresh_timings(&mut row, ctx);
            Some(row)
        }
        _ => super::audit::record(ctx, gw.audit_max_body),
    };
    if let Some(entry) = entry {
        gw.audit.record(entry, ctx.journaled.take());
    }
    if let Some(tracer) = &gw.tracer {
        if let Some(spans) = crate::traces::spans::of_request(ctx, std::time::Instant::now()) {
            tracer.record(spans);
        }
    }
}

/// `policy.blocked` for the outbox, once per request, from its recorded decisions: who, which
/// policy and why (never the request's text).
fn policy_blocked(ctx: &RequestCtx) -> Option<NewEvent> {
    let block = ctx.policy.iter().find(|d| d.action == PolicyAction::Blocked)?;
    let key = ctx.key.as_ref()?;
    let entities: serde_json::Map<String, serde_json::Value> = ctx
        .policy
        .iter()
        .filter(|d| d.action == PolicyAction::Blocked)
        .flat_map(|d| d.entities.iter().map(|(k, n)| (k.clone(), json!(n))))
        .collect();
    Some(NewEvent {
        id: gw_shared::ids::new_id(),
        org_id: key.org_id,
        event_type: POLICY_BLOCKED,
        dedupe_key: format!("{POLICY_BLOCKED}:{}", ctx.request_id),
        payload: json!({
            "type": POLICY_BLOCKED,
            "organization_id": key.org_id,
            "request_id": ctx.request_id,
            "team_id": ctx.team_id,
            "api_key_id": key.id,
            "model": ctx.model,
            "policy": block.policy,
            "guardrail": block.guardrail,
            "stage": block.stage.label(),
            "reason": block.reason,
            "entities": entities,
        }),
        created_at: chrono::Utc::now(),
    })
}

/// The per-model, per-team series of one finished request.
fn count_traffic(gw: &Gateway, ctx: &RequestCtx, endpoint: &str) {
    let t = &gw.traffic;
    let status = status_class(ctx.status);
    let model = t.model(ctx.model.as_deref());
    let provider = match &ctx.cached_from {
        Some((p, _)) => Some(&**p),
        None => ctx.last_attempt().filter(|_| !ctx.answered_by_gw).map(|a| &*a.provider),
    };
    t.by_model.with_label_values(&[model, t.provider(provider), status]).inc();
    let team = t.team(ctx.team_id);
    t.by_team.with_label_values(&[&*team, status]).inc();
    let u = &ctx.usage;
    for (kind, n) in [
        ("prompt", u.prompt_tokens),
        ("completion", u.completion_tokens),
        ("cached", u.cached_tokens),
        ("reasoning", u.reasoning_tokens),
    ] {
        if n > 0 {
            t.tokens.with_label_values(&[model, kind]).inc_by(u64::from(n));
        }
    }
    if let Ok(cost) = f64::try_from(ctx.cost) {
        if cost > 0.0 {
            t.cost.with_label_values(&[model]).inc_by(cost);
            t.team_cost.with_label_values(&[&*team]).inc_by(cost);
        }
    }
    if let Some(overhead) = ctx.overhead() {
        t.overhead.observe(overhead.as_secs_f64());
    }
    if let Some(ttft) = ctx.ttft {
        t.ttft.with_label_values(&[endpoint]).observe(ttft.as_secs_f64());
    }
}
