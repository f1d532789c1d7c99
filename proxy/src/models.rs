//! `GET /v1/models`: the models this gateway routes.

use gw_shared::openai::{ModelList, ModelObject};
use pingora::proxy::Session;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::gateway::Gateway;
use crate::respond;

pub async fn list(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let data = gw.router.models().map(|m| ModelObject::new(&m.name, gw.started_at, &m.owned_by)).collect();
    let body = serde_json::to_vec(&ModelList::new(data)).map_err(|e| ProxyError::Internal(e.to_string()))?;
    ctx.provider = Some("gw".into());
    respond::json(session, ctx, 200, body).await
}
