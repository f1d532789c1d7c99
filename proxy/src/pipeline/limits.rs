//! The limits step: the organization's, the team's and the key's budgets and rate limits, checked
//! and counted in one call to the limiter (one Redis round trip). A refusal is a 429 whose
//! `x-ratelimit-*` headers, like every later response's, come from the admission kept in the
//! context; the request settles in `logging` with its real tokens and cost.

use std::time::Duration;

use async_trait::async_trait;
use gw_shared::db::orgs::OrgSettings;
use gw_shared::db::{orgs, DbPool};
use gw_shared::limits::estimate::{self, Estimate};
use gw_shared::limits::plan::{Ask, Plan, Scope};
use gw_shared::limits::settings::ScopeLimits;
use uuid::Uuid;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::gateway::Gateway;
use crate::lookup::{LookupError, Source};

/// An organization's own limits and audit settings, cached like keys and teams.
pub struct OrgSource {
    pub db: DbPool,
}

#[async_trait]
impl Source for OrgSource {
    type Key = Uuid;
    type Value = OrgSettings;

    fn name(&self) -> &'static str {
        "org"
    }

    fn redis_key(&self, org_id: &Uuid) -> String {
        gw_shared::redis::org_cache_key(*org_id)
    }

    async fn load(&self, org_id: &Uuid) -> Result<Option<OrgSettings>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        orgs::settings(&mut conn, *org_id).await.map_err(|e| e.to_string())
    }
}

/// How long a reservation or lease outlives a request that never settles, past its deadline.
const LEASE_SLACK: Duration = Duration::from_secs(60);

pub async fn run(gw: &Gateway, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let Some(key) = ctx.key.clone() else { return Err(ProxyError::MissingAuth) };
    let org = match gw.orgs.get(&key.org_id, &|| true).await {
        Ok(org) => org,
        // Better to serve without the organization's limits than to fail the request; the team's
        // and key's still apply.
        Err(LookupError::Unavailable | LookupError::NotAllowed) => {
            gw.warn_log.warn(|| format!("request {}: organization limits unavailable", ctx.request_id));
            None
        }
    };
    ctx.log_bodies = org.as_ref().is_some_and(|o| o.log_bodies);
    let mut scopes: Vec<(Scope, &ScopeLimits)> = Vec::with_capacity(3);
    if let Some(org) = org.as_deref().map(|o| &o.limits).filter(|l| !l.is_empty()) {
        scopes.push((Scope::Org, org));
    }
    if let (Some(team_id), Some(team)) = (ctx.team_id, ctx.team.as_deref()) {
        if !team.limits.is_empty() {
            scopes.push((Scope::Team(team_id), &team.limits));
        }
    }
    if !key.limits.is_empty() {
        scopes.push((Scope::Key(key.id), &key.limits));
    }
    if scopes.is_empty() {
        return Ok(());
    }
    let routes = super::route::chain(gw, ctx)?;
    let estimate = request_estimate(gw, ctx);
    ctx.estimate = Some(estimate);
    let ceiling = estimate::ceiling(routes.iter().flat_map(|r| r.deployments.iter().map(|d| &d.price)));
    let ask = Ask {
        model: routes.first().map_or("", |r| &r.name),
        estimate,
        max_cost_nanos: estimate::max_cost_nanos(&estimate, ceiling),
    };
    let lease = gw.request_timeout + LEASE_SLACK;
    let plan = Plan::build(key.org_id, ctx.request_id, &scopes, &ask, lease, ctx.created_at);
    ctx.routes = Some(routes);
    let admitted = gw.limiter.admit(plan).await;
    ctx.limits = Some(admitted.admission.state(&admitted.plan));
    if let Some(refusal) = admitted.admission.refusal(&admitted.plan) {
        return Err(ProxyError::LimitExceeded(Box::new(refusal)));
    }
    ctx.admitted = Some(admitted);
    Ok(())
}

fn request_estimate(gw: &Gateway, ctx: &RequestCtx) -> Estimate {
    if let Some(r) = &ctx.request {
        return estimate::chat(r, gw.default_max_tokens);
    }
    ctx.embeddings.as_ref().map(estimate::embeddings).unwrap_or_default()
}

/// Settles the request's admission with what it really used (from `logging`, after the response).
pub fn settle(gw: &Gateway, ctx: &mut RequestCtx) {
    if let Some(admitted) = ctx.admitted.take() {
        // A cached answer used no upstream tokens (its usage says what the answer holds).
        let tokens = if ctx.cache.is_hit() { 0 } else { u64::from(ctx.usage.total()) };
        gw.limiter.settle(admitted, tokens, estimate::nanos(ctx.cost));
    }
}
