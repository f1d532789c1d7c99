//! The cache step, between policy and route: the request's key is made from its body after the
//! input policies ran, looked up in the tiers its organization and team turned on, and a hit is
//! handed to the answer step as a replay. A miss goes on to the upstream; the answer step decides
//! what of its answer the cache keeps.

use gw_shared::cache::settings::directives;
use gw_shared::cache::{embed, key, CacheStatus};
use gw_shared::headers;
use pingora::proxy::Session;

use super::answer;
use crate::ctx::{Endpoint, RequestCtx};
use crate::error::ProxyError;
use crate::lookup::LookupError;
use crate::response_cache::Plan;
use crate::state::Gateway;

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let Some(mut plan) = plan(gw, session, ctx).await? else {
        gw.metrics.cache_lookups.with_label_values(&[CacheStatus::Bypass.label()]).inc();
        return Ok(());
    };
    if !plan.directives.lookup {
        gw.metrics.cache_lookups.with_label_values(&[CacheStatus::Bypass.label()]).inc();
        ctx.cache_plan = Some(plan);
        return Ok(());
    }
    let hit = gw.cache.lookup(&mut plan).await;
    ctx.cache_plan = Some(plan);
    match hit {
        None => {
            ctx.cache = CacheStatus::Miss;
            gw.metrics.cache_lookups.with_label_values(&[CacheStatus::Miss.label()]).inc();
            Ok(())
        }
        Some(hit) => {
            gw.metrics.cache_lookups.with_label_values(&[hit.tier.label()]).inc();
            answer::replay(gw, session, ctx, hit).await
        }
    }
}

/// What the cache does for this request, or `None` when it stays out of the way.
async fn plan(gw: &Gateway, session: &Session, ctx: &RequestCtx) -> Result<Option<Plan>, ProxyError> {
    let Some(auth) = ctx.key.as_ref() else { return Ok(None) };
    let org_id = auth.org_id;
    let org_settings = match gw.lookups.cache_settings.get(&org_id, &|| true).await {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(None),
        Err(LookupError::Unavailable | LookupError::NotAllowed) => {
            gw.warn_log.warn(|| format!("request {}: cache settings unavailable; not cached", ctx.request_id));
            return Ok(None);
        }
    };
    let mut settings = org_settings.effective(ctx.team_id);
    if !settings.any() {
        return Ok(None);
    }
    let h = &session.req_header().headers;
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    let directives = directives(text(http::header::CACHE_CONTROL.as_str()), text(headers::CACHE_TTL))
        .map_err(|message| ProxyError::BadRequest { message, param: Some(headers::CACHE_TTL.into()) })?;
    let (endpoint, body) = match (ctx.endpoint, &ctx.request, &ctx.embeddings) {
        (Some(Endpoint::ChatCompletions | Endpoint::Messages | Endpoint::Responses), Some(r), _) => {
            (Endpoint::ChatCompletions, r.body())
        }
        (Some(Endpoint::Embeddings), _, Some(r)) => (Endpoint::Embeddings, r.body()),
        _ => return Ok(None),
    };
    // A Messages or Responses request is keyed by its own body too (what a deployment it
    // passes through to receives).
    let (whole, scope);
    let (exact_body, scope_body) = match (ctx.messages_raw.as_deref(), ctx.responses_raw.as_deref()) {
        (Some(raw), _) if endpoint == Endpoint::ChatCompletions => {
            let beta = raw.beta.as_ref().and_then(|b| b.to_str().ok());
            whole = key::with_messages_body(body, &raw.body, beta, true);
            scope = key::with_messages_body(body, &raw.body, beta, false);
            (&whole, &scope)
        }
        (None, Some(raw)) if endpoint == Endpoint::ChatCompletions => {
            whole = key::with_responses_body(body, &raw.body, true);
            scope = key::with_responses_body(body, &raw.body, false);
            (&whole, &scope)
        }
        _ => (body, body),
    };
    let semantic = match endpoint {
        Endpoint::ChatCompletions if settings.l3 && gw.cache.semantic_ready() => {
            key::semantic(org_id, embed::LOCAL_MODEL, scope_body)
        }
        _ => None,
    };
    // Embeddings answers have no prompt to compare: exact tiers only.
    settings.l3 &= semantic.is_some();
    let mut exact = key::exact(org_id, endpoint.path(), exact_body);
    exact.generation = org_settings.generations.of(&exact.model);
    Ok(Some(Plan {
        key: exact,
        model: ctx.model.clone().unwrap_or_default(),
        settings,
        directives,
        semantic,
        embedding: None,
    }))
}
