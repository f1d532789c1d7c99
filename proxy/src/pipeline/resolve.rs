//! The resolve step, right after `parse` and before anything can answer: the model (or alias)
//! to its route and fallbacks, and access. The key's and the team's allow-lists must admit the
//! model, else it does not exist for this caller (404 `model_not_found`, before any lookup, a
//! cache tier included). The policies that apply to the request are chosen here too (the
//! organization's and the team's mandatory and default ones, `x-gw-policy`), so that fallbacks
//! are kept only when the allow-lists and every `model_allow_list` policy admit them. Later
//! steps read `ctx.routes` and `ctx.applied`.

use std::sync::Arc;

use gw_shared::headers;
use gw_shared::policy::engine::TeamPolicies;
use gw_shared::routing::ModelRoute;
use pingora::proxy::Session;

use crate::ctx::{Endpoint, RequestCtx};
use crate::error::ProxyError;
use crate::state::Gateway;

/// Most models tried for one request (the model and its fallbacks).
const MAX_MODELS: usize = 8;

pub async fn run(gw: &Gateway, session: &Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let Some(key) = ctx.key.clone() else { return Err(ProxyError::MissingAuth) };
    let model = ctx.model.as_deref().unwrap_or_default();
    let key_models = key.allowed_models.as_deref();
    let team_models = ctx.team_models();
    let admitted = |r: &ModelRoute| r.admitted(key_models, team_models);
    // One snapshot of the catalogs for the model and its fallbacks: the organization's own
    // routes first, then the gateway's.
    let table = gw.router.table();
    let own = gw.lookups.org_routes.table(key.org_id).await.map_err(|_| ProxyError::StoreUnavailable)?;
    let find = |name: &str| own.as_ref().and_then(|t| t.resolve(name)).or_else(|| table.resolve(name));
    let route = find(model).filter(|r| admitted(r)).ok_or_else(|| ProxyError::UnknownModel(model.to_string()))?;
    let endpoint = ctx.endpoint.unwrap_or(Endpoint::ChatCompletions);
    if route.endpoint() != endpoint.provider_endpoint() {
        return Err(ProxyError::WrongEndpoint {
            model: model.to_string(),
            path: endpoint.path(),
            serves: Endpoint::serving(route.endpoint()).path(),
        });
    }

    let set = gw.lookups.policy_set(key.org_id).await.map_err(|_| ProxyError::PolicyUnavailable)?;
    let header = match session.req_header().headers.get(headers::POLICY) {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| ProxyError::PolicyHeader("the value is not visible ASCII".into()))?),
    };
    let team = match ctx.team.as_ref() {
        Some(t) => TeamPolicies { defaults: &t.default_policies, mandatory: &t.mandatory_policies },
        None => TeamPolicies::NONE,
    };
    let applied = set.resolve(team, header).map_err(|e| ProxyError::PolicyHeader(e.to_string()))?;

    // The requested model itself stays: a policy that refuses it blocks the request in the
    // policy step, with its decision recorded. Fallbacks it refuses are simply not tried.
    let mut routes: Vec<Arc<ModelRoute>> = vec![route];
    let mut i = 0;
    while i < routes.len() && routes.len() < MAX_MODELS {
        let fallbacks = routes[i].fallbacks.clone();
        for f in fallbacks {
            if routes.len() >= MAX_MODELS {
                break;
            }
            let Some(r) = find(&f) else { continue };
            let allowed = admitted(&r) && applied.iter().all(|p| p.admits_model(&r.name));
            if allowed && !routes.iter().any(|o| o.name == r.name) {
                routes.push(r);
            }
        }
        i += 1;
    }
    ctx.routes = routes;
    ctx.applied = applied;
    Ok(())
}
