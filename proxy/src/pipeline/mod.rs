//! The request pipeline, run from `request_filter`: one module per step, in the order of
//! ARCHITECTURE.md, each filling the one `RequestCtx` and either continuing or handing the request
//! to the answer step, which finishes every answer. `logging` runs from Pingora's logging phase.
//! A step reads what earlier steps put in the context; it never calls into another step, except
//! to hand over to `answer`.

pub mod answer;
pub mod audit;
pub mod auth;
pub mod cache;
pub mod edge;
pub mod experiment;
pub mod limits;
pub mod logging;
pub mod models;
pub mod openapi;
pub mod parse;
pub mod policy;
pub mod resolve;
pub mod route;
pub mod team;
pub mod template;

use pingora::proxy::Session;

use crate::ctx::{Endpoint, RequestCtx};
use crate::error::ProxyError;
use crate::state::Gateway;

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    ctx.endpoint = edge::addressed(session);
    edge::check_headers(gw, session)?;
    if openapi::asked(session)? {
        return openapi::run(session, ctx).await;
    }
    let endpoint = edge::endpoint(session)?;
    ctx.endpoint = Some(endpoint);
    auth::run(gw, session, ctx).await?;
    team::run(gw, session, ctx).await?;
    match endpoint {
        Endpoint::Models => return models::run(gw, session, ctx).await,
        Endpoint::ChatCompletions => parse::run(gw, session, ctx).await?,
        Endpoint::Embeddings => parse::run_embeddings(gw, session, ctx).await?,
        Endpoint::Messages => parse::run_messages(gw, session, ctx).await?,
        Endpoint::Responses => parse::run_responses(gw, session, ctx).await?,
        Endpoint::MessagesCountTokens => {
            parse::run_messages(gw, session, ctx).await?;
            resolve::run(gw, session, ctx).await?;
            let counted = route::anthropic_count(gw, ctx).await;
            return answer::count_tokens(session, ctx, counted).await;
        }
    }
    experiment::run(gw, session, ctx).await?;
    resolve::run(gw, session, ctx).await?;
    template::run(gw, ctx).await?;
    limits::run(gw, ctx).await?;
    policy::run(gw, ctx).await?;
    cache::run(gw, session, ctx).await?;
    if ctx.cache.is_hit() {
        return Ok(());
    }
    route::run(gw, session, ctx).await
}
