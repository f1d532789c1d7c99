//! `GET /v1/models`: the models this gateway routes that the caller's key and team may use.

use bytes::Bytes;
use gw_shared::openai::{ModelList, ModelObject};
use pingora::proxy::Session;

use super::answer;
use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::state::Gateway;

pub async fn run(gw: &Gateway, session: &mut Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let key_models = ctx.key.as_ref().and_then(|k| k.allowed_models.as_deref());
    let team_models = ctx.team_models();
    let table = gw.router.table();
    let org_id = ctx.key.as_ref().map(|k| k.org_id).unwrap_or_default();
    let own = gw.lookups.org_routes.table(org_id).await.map_err(|_| ProxyError::StoreUnavailable)?;
    // The organization's own models first; a gateway model of the same name is hidden by it.
    let own_models = own.iter().flat_map(|t| t.models());
    let shadowed = |name: &str| own.as_ref().is_some_and(|t| t.resolve(name).is_some());
    let data = own_models
        .chain(table.models().filter(|m| !shadowed(&m.name)))
        .filter(|m| m.admitted(key_models, team_models))
        .map(|m| ModelObject::new(&m.name, gw.started_at, &m.owned_by))
        .collect();
    let body = serde_json::to_vec(&ModelList::new(data)).map_err(|e| ProxyError::internal("model list", e))?;
    ctx.answered_by_gw = true;
    answer::json(session, ctx, 200, Bytes::from(body), Vec::new()).await
}
