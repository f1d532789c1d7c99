//! `GET /v1/models`: the models this gateway routes.

use bytes::Bytes;
use gw_shared::openai::{ModelList, ModelObject};
use pingora::proxy::Session;

use super::respond;
use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::gateway::Gateway;

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let data = gw.router.models().map(|m| ModelObject::new(&m.name, gw.started_at, &m.owned_by)).collect();
    let body = serde_json::to_vec(&ModelList::new(data)).map_err(|e| ProxyError::internal("model list", e))?;
    ctx.answered_by_gw = true;
    respond::json(session, ctx, 200, Bytes::from(body), None).await
}
