//! The request pipeline, run from `request_filter`: one module per step, in the order of
//! ARCHITECTURE.md, each filling the one `RequestCtx` and either continuing or answering.

pub mod access;
pub mod audit;
pub mod auth;
pub mod cache;
pub mod edge;
pub mod limits;
pub mod models;
pub mod parse;
pub mod policy;
pub mod provider_keys;
pub mod relay;
pub mod respond;
pub mod route;
pub mod team;

use pingora::proxy::Session;

use crate::ctx::{Endpoint, RequestCtx};
use crate::error::ProxyError;
use crate::gateway::Gateway;

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    edge::check_headers(gw, session)?;
    let endpoint = edge::endpoint(session)?;
    ctx.endpoint = Some(endpoint);
    auth::run(gw, session, ctx).await?;
    team::run(gw, session, ctx).await?;
    match endpoint {
        Endpoint::Models => models::run(gw, session, ctx).await,
        Endpoint::ChatCompletions => {
            parse::run(gw, session, ctx).await?;
            limits::run(gw, ctx).await?;
            policy::run(gw, session, ctx).await?;
            cache_then_route(gw, session, ctx).await
        }
        Endpoint::Embeddings => {
            parse::run_embeddings(gw, session, ctx).await?;
            limits::run(gw, ctx).await?;
            policy::run(gw, session, ctx).await?;
            cache_then_route(gw, session, ctx).await
        }
    }
}

/// A cache hit has answered; a miss goes upstream.
async fn cache_then_route(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    cache::run(gw, session, ctx).await?;
    if ctx.cache.is_hit() {
        return Ok(());
    }
    route::run(gw, session, ctx).await
}
