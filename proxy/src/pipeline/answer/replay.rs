//! A cached answer: it costs nothing now and reports the usage it came with; it goes through the
//! request's output guardrails like any answer, as a real stream when the client asked for one.

use std::sync::Arc;

use bytes::Bytes;
use gw_shared::cache::entry::{stamp, EntryError};
use rust_decimal::Decimal;

use super::{guard, write};
use crate::ctx::{Endpoint, RequestCtx};
use crate::error::ProxyError;
use crate::response_cache::Hit;
use crate::state::Gateway;
use pingora::proxy::Session;

pub async fn replay(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx, hit: Hit) -> Result<(), ProxyError> {
    let Hit { tier, entry, similarity } = hit;
    ctx.cache = tier;
    ctx.cache_similarity = similarity;
    ctx.cache_saved = entry.meta.cost;
    ctx.cost = Decimal::ZERO;
    ctx.usage = entry.meta.usage.into();
    ctx.cached_from = Some((Arc::from(entry.meta.provider.as_str()), Arc::from(entry.meta.upstream_model.as_str())));
    let id = format!("chatcmpl-{}", ctx.request_id.simple());
    let created = ctx.created_at.timestamp();
    let corrupt = |e: EntryError| ProxyError::internal("cached answer", e);
    if ctx.endpoint == Some(Endpoint::Embeddings) {
        return write::json(session, ctx, 200, entry.body.clone(), Vec::new()).await;
    }
    let include_usage = ctx.request.as_ref().is_some_and(|r| r.include_usage);
    if !ctx.stream {
        let body = stamp(&entry.body, &id, created).map_err(corrupt)?;
        let body = guard::completion(gw, ctx, body)?;
        return write::json(session, ctx, 200, body, Vec::new()).await;
    }
    let completion: serde_json::Value =
        serde_json::from_slice(&entry.body).map_err(|e| ProxyError::internal("cached answer", e))?;
    if ctx.output_guard.is_none() {
        // Nothing reads the chunks: they are written straight from the stored answer.
        let mut events = Vec::with_capacity(entry.body.len() * 3);
        gw_shared::cache::stream::replay_sse(&completion, &id, created, include_usage, &mut events);
        ctx.ttft = Some(ctx.started.elapsed());
        write::start_stream(session, ctx).await?;
        write::stream_bytes(session, ctx, Bytes::from(events)).await?;
        return write::finish_stream(session, ctx).await;
    }
    let mut sink = guard::sink(ctx);
    for chunk in gw_shared::cache::stream::replay(&completion, &id, created, include_usage) {
        sink.push_json(&chunk).map_err(|e| ProxyError::internal("cached chunk", e))?;
        if sink.blocked.is_some() {
            break;
        }
    }
    sink.finish_filter();
    guard::stream_decisions(gw, ctx, &sink);
    // Nothing has gone out yet: a blocked replay is a plain refusal.
    if sink.blocked.is_some() {
        return Err(guard::blocked(&mut sink));
    }
    ctx.ttft = Some(ctx.started.elapsed());
    write::start_stream(session, ctx).await?;
    if let Some(bytes) = sink.take() {
        write::stream_bytes(session, ctx, bytes).await?;
    }
    write::finish_stream(session, ctx).await
}
