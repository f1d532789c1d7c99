//! What the upstreams bill for a request, the one place usage becomes cost. Every attempt that
//! reached an upstream and that the provider bills is charged: from the upstream's own usage
//! report when it came, else from an estimate (the prompt as the limits step sized it, the
//! completion at four bytes a token of the text the upstream produced), and the request is then
//! marked as settled by estimate. A request that reached an upstream never settles at zero.

use gw_shared::limits::estimate;
use gw_shared::pricing::{cost_usd, TokenUsage};
use gw_shared::routing::Deployment;
use rust_decimal::Decimal;

use super::{Prompt, Upstream};
use crate::ctx::{RequestCtx, SettledBy};
use crate::state::Gateway;

/// Adds one attempt's tokens and their cost to the request's; returns that cost.
pub fn charge(gw: &Gateway, ctx: &mut RequestCtx, dep: &Deployment, usage: TokenUsage, by: SettledBy) -> Decimal {
    let cost = cost_usd(&dep.price, usage);
    ctx.usage.add(usage);
    ctx.cost += cost;
    gw.router.add_tokens(dep, u64::from(usage.total()));
    gw.limiter.deployment_tokens(dep, u64::from(usage.total()));
    ctx.settled_by = ctx.settled_by.max(Some(by));
    cost
}

/// Charges an attempt whose upstream did not (or not finally) report its usage: `seen` is what
/// it reported so far (a prompt count from a stream's start, say), `completion_bytes` the text it
/// produced.
pub fn charge_estimate(
    gw: &Gateway,
    ctx: &mut RequestCtx,
    up: &Upstream<'_>,
    seen: Option<TokenUsage>,
    completion_bytes: u64,
) -> Decimal {
    let provider = &up.dep.provider.name;
    gw.warn_log.warn(|| {
        format!("request {}: provider {provider} reported no final usage; tokens and cost estimated", ctx.request_id)
    });
    let usage = estimated(ctx, &up.prompt, seen, completion_bytes);
    charge(gw, ctx, up.dep, usage, SettledBy::Estimate)
}

/// The tokens an attempt is taken to have used: what the upstream reported, raised to the
/// estimate where the report falls short of it.
fn estimated(ctx: &RequestCtx, prompt: &Prompt<'_>, seen: Option<TokenUsage>, completion_bytes: u64) -> TokenUsage {
    let mut u = seen.unwrap_or_default();
    if u.prompt_tokens == 0 {
        let tokens = match (ctx.estimate, prompt) {
            (Some(e), _) => e.prompt_tokens,
            (None, Prompt::Chat(r)) => estimate::chat(r, 0).prompt_tokens,
            (None, Prompt::Embeddings(r)) => estimate::embeddings(r).prompt_tokens,
        };
        u.prompt_tokens = u32::try_from(tokens).unwrap_or(u32::MAX).max(1);
    }
    let completion = u32::try_from(completion_bytes.div_ceil(4)).unwrap_or(u32::MAX);
    u.completion_tokens = u.completion_tokens.max(completion);
    u
}
