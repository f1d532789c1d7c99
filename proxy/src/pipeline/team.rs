//! Team attribution: the key's team, else the `x-gw-team` header's, which must be a live team of
//! the key's organization (a cached lookup like keys, with unknown teams remembered as unknown).
//! The team's record also brings its model allow-list, limits and default policies.

use gw_shared::headers;
use pingora::proxy::Session;
use uuid::Uuid;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::lookup::LookupError;
use crate::state::Gateway;

pub async fn run(gw: &Gateway, session: &Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let Some(key) = ctx.key.clone() else { return Err(ProxyError::MissingAuth) };
    let Some(raw) = session.req_header().headers.get(headers::TEAM) else {
        if let Some(bound) = key.team_id {
            return bound_team(gw, ctx, key.org_id, bound).await;
        }
        return Ok(());
    };
    let team = raw
        .to_str()
        .ok()
        .and_then(|s| Uuid::parse_str(s.trim()).ok())
        .ok_or_else(|| ProxyError::InvalidTeam("x-gw-team must be a team id (UUID).".into()))?;
    if let Some(bound) = key.team_id {
        if bound != team {
            return Err(ProxyError::InvalidTeam(
                "This API key is bound to another team; x-gw-team cannot override it.".into(),
            ));
        }
        return bound_team(gw, ctx, key.org_id, bound).await;
    }
    let pass = gw.throttle.pass(ctx.client_ip);
    match gw.lookups.teams.get(&(key.org_id, team), &|| pass.admit()).await {
        Ok(Some(t)) => {
            ctx.team_id = Some(team);
            ctx.team = Some(t);
            Ok(())
        }
        Ok(None) => {
            pass.failed().await;
            Err(ProxyError::InvalidTeam(format!("No team {team} in this organization.")))
        }
        Err(LookupError::NotAllowed) => {
            gw.metrics.auth_throttled.inc();
            Err(ProxyError::AuthThrottled(gw.throttle.retry_after(ctx.client_ip)))
        }
        Err(LookupError::Unavailable) => Err(ProxyError::StoreUnavailable),
    }
}

/// The team a key is bound to: its record for the allow-list. The key itself authenticated, so
/// this lookup is not throttled; a team deleted since the key was made ends the key's use.
async fn bound_team(gw: &Gateway, ctx: &mut RequestCtx, org_id: Uuid, team_id: Uuid) -> Result<(), ProxyError> {
    ctx.team_id = Some(team_id);
    match gw.lookups.teams.get(&(org_id, team_id), &|| true).await {
        Ok(Some(t)) => {
            ctx.team = Some(t);
            Ok(())
        }
        Ok(None) => Err(ProxyError::InvalidTeam("The team this API key is bound to no longer exists.".into())),
        Err(LookupError::NotAllowed | LookupError::Unavailable) => Err(ProxyError::StoreUnavailable),
    }
}
