//! The cache step, between policy and route: the request's key is made from its body after the
//! input policies ran, looked up in the tiers its organization and team turned on, and a hit is
//! answered at once (as a real stream when the client asked for one), through the output
//! policies like any answer. A miss goes on to the upstream, and its answer is kept when it is
//! successful and complete (`keep`, from the route and stream steps).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use gw_shared::cache::entry::{stamp, template, Entry, Meta};
use gw_shared::cache::settings::{directives, OrgCacheSettings};
use gw_shared::cache::{embed, key, CacheStatus};
use gw_shared::db::{cache as db_cache, DbPool};
use gw_shared::headers;
use gw_shared::openai::Usage;
use gw_shared::policy::{PolicyAction, Stage};
use gw_shared::providers::StreamSink;
use gw_shared::routing::Deployment;
use pingora::proxy::Session;
use rust_decimal::Decimal;
use uuid::Uuid;

use super::respond;
use crate::ctx::{Endpoint, RequestCtx};
use crate::error::ProxyError;
use crate::gateway::Gateway;
use crate::lookup::{LookupError, Source};
use crate::response_cache::{Hit, Plan};

/// An organization's cache settings, cached like its other settings.
pub struct CacheSettingsSource {
    pub db: DbPool,
}

#[async_trait]
impl Source for CacheSettingsSource {
    type Key = Uuid;
    type Value = OrgCacheSettings;

    fn name(&self) -> &'static str {
        "cache_settings"
    }

    fn redis_key(&self, org_id: &Uuid) -> String {
        gw_shared::redis::cache_settings_key(*org_id)
    }

    async fn load(&self, org_id: &Uuid) -> Result<Option<OrgCacheSettings>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        db_cache::load(&mut conn, *org_id).await.map(Some).map_err(|e| e.to_string())
    }
}

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
            serve(gw, session, ctx, hit).await
        }
    }
}

/// What the cache does for this request, or `None` when it stays out of the way.
async fn plan(gw: &Gateway, session: &Session, ctx: &RequestCtx) -> Result<Option<Plan>, ProxyError> {
    let Some(auth) = ctx.key.as_ref() else { return Ok(None) };
    let org_id = auth.org_id;
    let settings = match gw.cache_settings.get(&org_id, &|| true).await {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(None),
        Err(LookupError::Unavailable | LookupError::NotAllowed) => {
            gw.warn_log.warn(|| format!("request {}: cache settings unavailable; not cached", ctx.request_id));
            return Ok(None);
        }
    };
    let mut settings = settings.effective(ctx.team_id);
    if !settings.any() {
        return Ok(None);
    }
    let h = &session.req_header().headers;
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    let directives = directives(text(http::header::CACHE_CONTROL.as_str()), text(headers::CACHE_TTL))
        .map_err(|message| ProxyError::BadRequest { message, param: Some(headers::CACHE_TTL.into()) })?;
    let (endpoint, body) = match (ctx.endpoint, &ctx.request, &ctx.embeddings) {
        (Some(Endpoint::ChatCompletions), Some(r), _) => (Endpoint::ChatCompletions, r.body()),
        (Some(Endpoint::Embeddings), _, Some(r)) => (Endpoint::Embeddings, r.body()),
        _ => return Ok(None),
    };
    let semantic = match endpoint {
        Endpoint::ChatCompletions if settings.l3 && gw.cache.semantic_ready() => {
            key::semantic(org_id, embed::LOCAL_MODEL, body)
        }
        _ => None,
    };
    // Embeddings answers have no prompt to compare: exact tiers only.
    settings.l3 &= semantic.is_some();
    Ok(Some(Plan {
        key: key::exact(org_id, endpoint.path(), body),
        model: ctx.model.clone().unwrap_or_default(),
        settings,
        directives,
        semantic,
        embedding: None,
    }))
}

/// Answers from the cache: the stored answer costs nothing now, reports the usage it came
/// with, and goes through the request's output policies.
async fn serve(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx, hit: Hit) -> Result<(), ProxyError> {
    let Hit { tier, entry, similarity } = hit;
    ctx.cache = tier;
    ctx.cache_similarity = similarity;
    ctx.cache_saved = entry.meta.cost;
    ctx.cost = Decimal::ZERO;
    ctx.usage = entry.meta.usage.into();
    ctx.cached_from = Some((Arc::from(entry.meta.provider.as_str()), Arc::from(entry.meta.upstream_model.as_str())));
    let id = format!("chatcmpl-{}", ctx.request_id.simple());
    let created = ctx.created_at.timestamp();
    let corrupt = |e: gw_shared::cache::entry::EntryError| ProxyError::internal("cached answer", e);
    if ctx.endpoint == Some(Endpoint::Embeddings) {
        return respond::json(session, ctx, 200, entry.body.clone(), Vec::new()).await;
    }
    let include_usage = ctx.request.as_ref().is_some_and(|r| r.include_usage);
    if !ctx.stream {
        let body = stamp(&entry.body, &id, created).map_err(corrupt)?;
        let body = match ctx.output_guard.clone() {
            Some(guard) => super::policy::guard_completion(gw, ctx, guard, &body)?,
            None => body,
        };
        return respond::json(session, ctx, 200, body, Vec::new()).await;
    }
    let completion: serde_json::Value =
        serde_json::from_slice(&entry.body).map_err(|e| ProxyError::internal("cached answer", e))?;
    let Some(guard) = ctx.output_guard.clone() else {
        // Nothing reads the chunks: they are written straight from the stored answer.
        let mut events = Vec::with_capacity(entry.body.len() * 3);
        gw_shared::cache::stream::replay_sse(&completion, &id, created, include_usage, &mut events);
        ctx.ttft = Some(ctx.started.elapsed());
        respond::start_stream(session, ctx).await?;
        respond::stream_bytes(session, ctx, Bytes::from(events)).await?;
        return respond::finish_stream(session, ctx).await;
    };
    let mut sink = StreamSink::filtered(Box::new(gw_shared::policy::stream::GuardedStream::new(guard)));
    for chunk in gw_shared::cache::stream::replay(&completion, &id, created, include_usage) {
        sink.push_json(&chunk).map_err(|e| ProxyError::internal("cached chunk", e))?;
        if sink.blocked.is_some() {
            break;
        }
    }
    sink.finish_filter();
    for d in sink.decisions() {
        gw.metrics.policy_decisions.with_label_values(&[d.guardrail, d.action.label(), d.stage.label()]).inc();
        ctx.policy.push(d);
    }
    // Nothing has gone out yet: a blocked replay is a plain refusal.
    if let Some(b) = sink.blocked.take() {
        super::policy::blocked_event(gw, ctx, &b.policy, b.guardrail, &b.reason);
        return Err(ProxyError::PolicyBlocked { policy: b.policy, reason: b.reason });
    }
    ctx.ttft = Some(ctx.started.elapsed());
    respond::start_stream(session, ctx).await?;
    if let Some(bytes) = sink.take() {
        respond::stream_bytes(session, ctx, bytes).await?;
    }
    respond::finish_stream(session, ctx).await
}

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

/// Keeps a successful plain answer (`body` as the upstream's adapter gave it, before the output
/// policies, which run again on every replay).
pub async fn keep(gw: &Gateway, ctx: &RequestCtx, dep: &Deployment, body: Bytes) {
    if !keepable(ctx) {
        return;
    }
    let Some(plan) = ctx.cache_plan.as_ref() else { return };
    // Chat answers are kept as templates a replay stamps in place; embeddings as they came.
    let body = match ctx.endpoint {
        Some(Endpoint::ChatCompletions) => match template(&body) {
            Some(t) => t,
            None => return,
        },
        _ => body,
    };
    gw.cache.store(plan, entry(ctx, dep, body)).await;
}

/// Keeps a stream that completed: the response its chunks amount to, with the usage it reported.
pub async fn keep_stream(gw: &Gateway, ctx: &RequestCtx, dep: &Deployment, sink: &mut StreamSink) {
    let Some(mut completion) = sink.recorded() else { return };
    if !keepable(ctx) {
        return;
    }
    let Some(plan) = ctx.cache_plan.as_ref() else { return };
    if let (Some(m), Some(u)) = (completion.as_object_mut(), sink.usage) {
        if let Ok(v) = serde_json::to_value(Usage::new(u)) {
            m.insert("usage".into(), v);
        }
    }
    let Ok(body) = serde_json::to_vec(&completion) else { return };
    let Some(body) = template(&body) else { return };
    gw.cache.store(plan, entry(ctx, dep, body)).await;
}

fn entry(ctx: &RequestCtx, dep: &Deployment, body: Bytes) -> Entry {
    Entry {
        body,
        meta: Meta {
            usage: ctx.usage.into(),
            cost: ctx.cost,
            provider: dep.provider.name.to_string(),
            upstream_model: dep.upstream_model.to_string(),
            created_at: ctx.created_at.timestamp(),
        },
    }
}
