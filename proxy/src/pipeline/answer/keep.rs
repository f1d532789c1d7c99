//! What the response cache keeps of an answer: a successful, complete answer from an upstream,
//! as the upstream's adapter gave it (before the output guardrails, which run again on every
//! replay), when the cache step planned to store it and no output guardrail changed or stopped
//! it.

use bytes::Bytes;
use gw_shared::cache::entry::{template, Entry, Meta};
use gw_shared::openai::Usage;
use gw_shared::policy::{PolicyAction, Stage};
use gw_shared::pricing::{cost_usd, TokenUsage};
use gw_shared::providers::StreamSink;
use gw_shared::routing::Deployment;
use rust_decimal::Decimal;

use crate::ctx::{Endpoint, RequestCtx};
use crate::state::Gateway;

/// Whether the answer may be kept: an output policy that changed or stopped it leaves it out.
fn keepable(ctx: &RequestCtx) -> bool {
    ctx.cache_plan.as_ref().is_some_and(|p| p.directives.store)
        && !ctx.cache.is_hit()
        && !ctx.policy.iter().any(|d| d.stage == Stage::Output && d.action != PolicyAction::Flagged)
}

/// Whether a stream should be gathered for the cache.
pub fn records(ctx: &RequestCtx) -> bool {
    keepable(ctx)
}

/// Keeps a successful plain answer; `usage` is this answer's own.
pub async fn plain(gw: &Gateway, ctx: &RequestCtx, dep: &Deployment, body: Bytes, usage: TokenUsage) {
    if !keepable(ctx) {
        return;
    }
    let cost = cost_usd(&dep.price, usage);
    let Some(plan) = ctx.cache_plan.as_ref() else { return };
    // Chat answers are kept as templates a replay stamps in place; embeddings as they came.
    let body = match ctx.endpoint {
        Some(Endpoint::ChatCompletions | Endpoint::Messages | Endpoint::Responses) => match template(&body) {
            Some(t) => t,
            None => return,
        },
        _ => body,
    };
    gw.cache.store(plan, entry(ctx, dep, body, usage, cost)).await;
}

/// Keeps a stream that completed: the response its chunks amount to, with the usage it reported.
pub async fn stream(gw: &Gateway, ctx: &RequestCtx, dep: &Deployment, sink: &mut StreamSink, cost: Decimal) {
    let Some(mut completion) = sink.recorded() else { return };
    let Some(usage) = sink.usage else { return };
    if !keepable(ctx) {
        return;
    }
    let Some(plan) = ctx.cache_plan.as_ref() else { return };
    if let (Some(m), Ok(v)) = (completion.as_object_mut(), serde_json::to_value(Usage::new(usage))) {
        m.insert("usage".into(), v);
    }
    let Ok(body) = serde_json::to_vec(&completion) else { return };
    let Some(body) = template(&body) else { return };
    gw.cache.store(plan, entry(ctx, dep, body, usage, cost)).await;
}

fn entry(ctx: &RequestCtx, dep: &Deployment, body: Bytes, usage: TokenUsage, cost: Decimal) -> Entry {
    Entry {
        body,
        meta: Meta {
            usage: usage.into(),
            cost,
            provider: dep.provider.name.to_string(),
            upstream_model: dep.upstream_model.to_string(),
            created_at: ctx.created_at.timestamp(),
        },
    }
}
