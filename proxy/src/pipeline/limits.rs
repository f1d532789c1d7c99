//! The limits step: the organization's, the team's and the key's budgets and rate limits, checked
//! and counted in one call to the limiter (one Redis round trip). A refusal is a 429 whose
//! `x-ratelimit-*` headers, like every later response's, come from the admission kept in the
//! context; the request settles in the logging step with what the upstreams billed.
//!
//! A budget reserves the most the request can cost: the prompt at a token per byte and the
//! completion at the client's own limit. Without one, at the largest maximum output the catalog
//! gives the model's deployments; when the catalog does not know one, gw sends the upstream the
//! limit it reserved (`estimate::completion_reservation`). So an admitted request never costs
//! more than its reservation, and a hard budget is never passed.

use std::sync::Arc;
use std::time::Duration;

use gw_shared::limits::estimate::{self, Estimate};
use gw_shared::limits::plan::{Ask, Plan, Scope, ScopeNames};
use gw_shared::limits::settings::ScopeLimits;
use gw_shared::openai::ChatRequest;
use serde_json::Value;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::lookup::LookupError;
use crate::state::Gateway;

/// How long a reservation or lease outlives a request that never settles, past its deadline.
const LEASE_SLACK: Duration = Duration::from_secs(60);

pub async fn run(gw: &Gateway, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let Some(key) = ctx.key.clone() else { return Err(ProxyError::MissingAuth) };
    let org = match gw.lookups.orgs.get(&key.org_id, &|| true).await {
        Ok(org) => org,
        // Better to serve without the organization's limits than to fail the request; the team's
        // and key's still apply.
        Err(LookupError::Unavailable | LookupError::NotAllowed) => {
            gw.warn_log.warn(|| format!("request {}: organization limits unavailable", ctx.request_id));
            None
        }
    };
    ctx.log_bodies = org.as_ref().is_some_and(|o| o.log_bodies);
    ctx.region = org.as_ref().and_then(|o| o.region.as_deref()).map(Arc::from);
    let team = ctx.team.clone();
    let mut scopes: Vec<(Scope, &ScopeLimits)> = Vec::with_capacity(3);
    if let Some(org) = org.as_deref().map(|o| &o.limits).filter(|l| !l.is_empty()) {
        scopes.push((Scope::Org, org));
    }
    if let (Some(team_id), Some(team)) = (ctx.team_id, team.as_deref()) {
        if !team.limits.is_empty() {
            scopes.push((Scope::Team(team_id), &team.limits));
        }
    }
    if !key.limits.is_empty() {
        scopes.push((Scope::Key(key.id), &key.limits));
    }
    // The operator's override for the organization, else its plan's.
    let quota = org.as_ref().and_then(|o| {
        o.gateway_quota.as_ref().or_else(|| o.plan.as_deref().and_then(|plan| gw.gateway_quota.get(plan)))
    });
    if let Some(quota) = quota.filter(|q| !q.is_empty()) {
        if on_gateway_credentials(gw, ctx).await? {
            scopes.push((Scope::Gateway, quota));
        }
    }
    if scopes.is_empty() {
        return Ok(());
    }
    let estimate = request_estimate(gw, ctx);
    ctx.estimate = Some(estimate);
    let budgeted = scopes.iter().any(|(_, l)| l.budget.is_some());
    let reserved = Estimate { completion_tokens_max: completion_reservation(gw, ctx, &estimate, budgeted), ..estimate };
    let ceiling = estimate::ceiling(ctx.routes.iter().flat_map(|r| r.deployments.iter().map(|d| &d.price)));
    let ask = Ask {
        model: ctx.routes.first().map_or("", |r| &r.name),
        estimate,
        max_cost_nanos: estimate::max_cost_nanos(&reserved, ceiling),
    };
    let lease = gw.request_timeout + LEASE_SLACK;
    let plan = Plan::build(key.org_id, ctx.request_id, &scopes, &ask, lease, ctx.created_at);
    let admitted = gw.limiter.admit(plan).await;
    ctx.limits = Some(admitted.admission.state(&admitted.plan));
    let names = ScopeNames {
        team: team.as_deref().map(|t| t.name.as_str()).filter(|n| !n.is_empty()),
        key: Some((key.name.as_str(), key.key_prefix.as_str())).filter(|(n, p)| !n.is_empty() && !p.is_empty()),
    };
    if let Some(refusal) = admitted.admission.refusal(&admitted.plan, &names) {
        return Err(ProxyError::LimitExceeded(Box::new(refusal)));
    }
    ctx.admitted = Some(admitted);
    Ok(())
}

/// Whether the request's first choice of deployment is served with the gateway's own provider
/// credentials (the organization has no key of its own for that provider). A fallback to
/// another provider is counted as the first choice is.
async fn on_gateway_credentials(gw: &Gateway, ctx: &RequestCtx) -> Result<bool, ProxyError> {
    let Some(dep) = ctx.routes.first().and_then(|r| r.deployments.first()) else { return Ok(false) };
    let keys = super::route::credentials::for_request(gw, ctx).await?;
    Ok(!super::route::credentials::has_own_key(&keys, &dep.provider))
}

fn request_estimate(gw: &Gateway, ctx: &RequestCtx) -> Estimate {
    if let Some(r) = &ctx.request {
        return estimate::chat(r, gw.default_max_tokens);
    }
    ctx.embeddings.as_ref().map(estimate::embeddings).unwrap_or_default()
}

/// The completion tokens a budget reserves for the request: the client's own limit (times `n`),
/// else what [`estimate::completion_reservation`] says for the deployments that may answer, with
/// the request capped when the catalog cannot bound its answer.
fn completion_reservation(gw: &Gateway, ctx: &mut RequestCtx, e: &Estimate, budgeted: bool) -> u64 {
    let Some(req) = ctx.request.as_mut() else { return e.completion_tokens_max };
    if !budgeted || client_limit(req).is_some() {
        return e.completion_tokens_max;
    }
    let maxima: Vec<Option<u64>> =
        ctx.routes.iter().flat_map(|r| r.deployments.iter().map(|d| d.max_output_tokens)).collect();
    let (per_choice, cap) = estimate::completion_reservation(&maxima, gw.default_max_tokens);
    if let Some(cap) = cap {
        req.cap_completion_tokens(cap);
    }
    let n = req.body().get("n").and_then(Value::as_u64).unwrap_or(1).max(1);
    per_choice.saturating_mul(n)
}

/// The completion limit the client set, if any.
fn client_limit(req: &ChatRequest) -> Option<u64> {
    let body = req.body();
    body.get("max_completion_tokens").and_then(Value::as_u64).or_else(|| body.get("max_tokens").and_then(Value::as_u64))
}
