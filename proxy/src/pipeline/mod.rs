//! The request pipeline, run from `request_filter`: one module per step, in the order of
//! ARCHITECTURE.md, each filling the one `RequestCtx` and either continuing or answering.
//! The cache step arrives with its issue, between `policy` and `route`.

pub mod access;
pub mod audit;
pub mod auth;
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
            route::run(gw, session, ctx).await
        }
        Endpoint::Embeddings => {
            parse::run_embeddings(gw, session, ctx).await?;
            limits::run(gw, ctx).await?;
            policy::run(gw, session, ctx).await?;
            route::run(gw, session, ctx).await
        }
    }
}
