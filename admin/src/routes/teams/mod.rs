//! Teams: create, list, read, update and delete them; add, list and remove their members.
//!
//! A team carries settings for the requests made with its API keys: a model allow-list
//! (`models`, enforced by the proxy now), default policies, a budget and rate limits. Default
//! policies, budgets and rate limits are validated and stored here; their enforcement by the
//! proxy arrives in a later issue. Changes are published to the proxies once committed.
//!
//! Deleting a team never leaves live keys pointing at it: the delete is refused while the team
//! has live API keys, unless `?revoke_keys=true` revokes them with it.

use actix_web::{delete, get, patch, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::db::invalidations;
use gw_shared::db::rollups::Owner;
use gw_shared::db::teams::{self, NewTeam, Team, TeamChange, TeamMember, TEAM_ROLES};
use gw_shared::db::users;
use gw_shared::ids::new_id;
use gw_shared::redis::Invalidation;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{is_unique_violation, ApiError, ApiResult, Errors};
use crate::pagination::{self, Page};
use crate::read_only::{self, Fixed};
use crate::session::Session;
use crate::spend::{self, PeriodSpend};
use crate::state::AppState;
use crate::trail::{Entry, Trail};
use crate::validate;

mod members;
mod settings;

use settings::{budget_value, policies, rate_limits_value};
pub use settings::{Budget, RateLimits};

const MAX_DESCRIPTION: usize = 2000;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list_teams)
        .service(create_team)
        .service(get_team)
        .service(update_team)
        .service(delete_team)
        .service(members::list_team_members)
        .service(members::add_team_member)
        .service(members::remove_team_member);
}

#[derive(Serialize, ToSchema)]
pub struct TeamOut {
    id: Uuid,
    name: String,
    description: String,
    #[schema(value_type = Object)]
    metadata: Value,
    /// Policies applied to the team's requests by default; a request may switch one off with
    /// `x-gw-policy: -name`.
    default_policies: Vec<String>,
    /// Policies applied to every request of the team, which `x-gw-policy` cannot switch off.
    mandatory_policies: Vec<String>,
    budget: Option<Budget>,
    rate_limits: Option<RateLimits>,
    /// The model allow-list (names or aliases); null: every model.
    models: Option<Vec<String>>,
    member_count: i64,
    /// The team's spend in its budget's current period, or this calendar month without one.
    spend: PeriodSpend,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TeamOut {
    fn new(t: Team, member_count: i64, spend: PeriodSpend) -> Self {
        TeamOut {
            id: t.id,
            name: t.name,
            description: t.description,
            metadata: t.metadata,
            default_policies: t.default_policies,
            mandatory_policies: t.mandatory_policies,
            budget: t.budget.and_then(|v| serde_json::from_value(v).ok()),
            rate_limits: t.rate_limits.and_then(|v| serde_json::from_value(v).ok()),
            models: t.allowed_models,
            member_count,
            spend,
            created_at: t.created_at,
            updated_at: t.updated_at,
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTeamBody {
    /// 1 to 200 characters; unique among the organization's teams, whatever the case.
    name: String,
    /// At most 2000 characters.
    #[serde(default)]
    description: Option<String>,
    /// A JSON object of at most 64 keys and 16 KiB.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// Names the organization's policy document defines, or built-ins; at most 20.
    #[serde(default)]
    default_policies: Option<Vec<String>>,
    /// Like `default_policies`, but not switched off by `x-gw-policy: -name`; at most 20.
    #[serde(default)]
    mandatory_policies: Option<Vec<String>>,
    #[serde(default)]
    budget: Option<Budget>,
    #[serde(default)]
    rate_limits: Option<RateLimits>,
    /// Models the team's keys may use (configured names or aliases); omitted or null: every
    /// model; `[]`: none.
    #[serde(default)]
    models: Option<Vec<String>>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTeamBody {
    #[serde(default)]
    name: Option<String>,
    /// An empty string clears it.
    #[serde(default)]
    description: Option<String>,
    /// Replaces the metadata.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// Replaces the default policies.
    #[serde(default)]
    default_policies: Option<Vec<String>>,
    /// Replaces the mandatory policies.
    #[serde(default)]
    mandatory_policies: Option<Vec<String>>,
    /// A new budget, or null to remove it.
    #[serde(default, deserialize_with = "crate::validate::double_option")]
    #[schema(value_type = Option<Budget>)]
    budget: Option<Option<Budget>>,
    /// New rate limits, or null to remove them.
    #[serde(default, deserialize_with = "crate::validate::double_option")]
    #[schema(value_type = Option<RateLimits>)]
    rate_limits: Option<Option<RateLimits>>,
    /// A new model allow-list, or null for every model.
    #[serde(default, deserialize_with = "crate::validate::double_option")]
    #[schema(value_type = Option<Vec<String>>)]
    models: Option<Option<Vec<String>>>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
    /// Case-insensitive part of the name.
    name: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// Revoke the team's live API keys with it; without this a team with live keys is not
    /// deleted (409).
    revoke_keys: Option<bool>,
}

/// What a team's `GET` body holds that the server derives.
const TEAM_DERIVED: &[&str] = &["member_count", "spend", "created_at", "updated_at"];

fn name_taken() -> ApiError {
    ApiError::Conflict("a team of this organization already has this name".into())
}

/// List the organization's teams, newest first.
#[utoipa::path(tag = "teams", params(ListQuery), responses((status = 200, body = Page<TeamOut>), Errors))]
#[get("/teams")]
pub async fn list_teams(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<ListQuery>,
) -> ApiResult<HttpResponse> {
    let q = q.into_inner();
    let limit = pagination::limit(q.limit)?;
    let name = q.name.as_deref().map(|n| validate::text("name", n, 200)).transpose()?;
    let mut conn = state.conn().await?;
    let rows = teams::list_live(&mut conn, session.org_id, name.as_deref(), q.cursor, limit + 1).await?;
    let ids: Vec<Uuid> = rows.iter().map(|t| t.id).collect();
    let counts = teams::member_counts(&mut conn, session.org_id, &ids).await?;
    let owners: Vec<_> = rows.iter().map(|t| (t.id, spend::period_of(t.budget.as_ref()))).collect();
    let mut spends = spend::current(&mut conn, session.org_id, Owner::Team, &owners).await?;
    let page = Page::from_rows(
        rows,
        limit,
        |t| t.id,
        |t| {
            let n = counts.get(&t.id).copied().unwrap_or(0);
            let s = spends.remove(&t.id).unwrap_or_else(|| spend::none(t.budget.as_ref()));
            TeamOut::new(t, n, s)
        },
    );
    Ok(HttpResponse::Ok().json(page))
}

/// Create a team.
#[utoipa::path(tag = "teams", request_body = CreateTeamBody, responses((status = 201, body = TeamOut), Errors))]
#[post("/teams")]
pub async fn create_team(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<CreateTeamBody>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let mut conn = state.conn().await?;
    let available = crate::org_policy::available(&mut conn, session.org_id).await?;
    let new = NewTeam {
        id: new_id(),
        org_id: session.org_id,
        name: validate::text("name", &b.name, 200)?,
        description: validate::optional_text(
            "description",
            b.description.as_deref().unwrap_or_default(),
            MAX_DESCRIPTION,
        )?,
        metadata: validate::metadata("metadata", b.metadata.unwrap_or_else(|| json!({})))?,
        default_policies: policies("default_policies", b.default_policies.unwrap_or_default(), &available)?,
        mandatory_policies: policies("mandatory_policies", b.mandatory_policies.unwrap_or_default(), &available)?,
        budget: b.budget.map(budget_value).transpose()?,
        rate_limits: b.rate_limits.map(rate_limits_value).transpose()?,
        allowed_models: match b.models {
            Some(m) => Some(validate::models(&state.routes().await?, m)?),
            None => None,
        },
    };
    let trail = Trail::of(&session, &req);
    let team = conn.transaction(async |conn| create_tx(conn, &trail, new).await).await?;
    log::info!("team {} created in org {}", team.id, team.org_id);
    let s = spend::none(team.budget.as_ref());
    Ok(HttpResponse::Created().json(TeamOut::new(team, 0, s)))
}

async fn create_tx(conn: &mut AsyncPgConnection, trail: &Trail, new: NewTeam) -> ApiResult<Team> {
    let team = match teams::create(conn, new).await {
        Ok(t) => t,
        Err(e) if is_unique_violation(&e) => return Err(name_taken()),
        Err(e) => return Err(e.into()),
    };
    let entry = Entry {
        action: "team.create",
        resource_type: "team",
        resource_id: Some(team.id.to_string()),
        detail: json!({"name": team.name}),
    };
    trail.record(conn, entry).await?;
    Ok(team)
}

/// One team.
#[utoipa::path(tag = "teams", params(("team_id" = Uuid, Path, description = "The team's id")),
    responses((status = 200, body = TeamOut), Errors))]
#[get("/teams/{team_id}")]
pub async fn get_team(state: web::Data<AppState>, session: Session, path: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let team_id = path.into_inner();
    let mut conn = state.conn().await?;
    let team = teams::find_live(&mut conn, session.org_id, team_id).await?.ok_or(ApiError::NotFound("team"))?;
    let n = teams::member_count(&mut conn, session.org_id, team_id).await?;
    let s = spend::of_one(&mut conn, session.org_id, Owner::Team, team.id, team.budget.as_ref()).await?;
    Ok(HttpResponse::Ok().json(TeamOut::new(team, n, s)))
}

/// Update a team's name, description, metadata or settings; `null` removes a budget, rate limits
/// or the model allow-list; absent fields stay as they are. The body `GET` answers may be sent
/// back: `id` as it is, `member_count`, `spend`, `created_at` and `updated_at` ignored.
#[utoipa::path(tag = "teams", params(("team_id" = Uuid, Path, description = "The team's id")),
    request_body = UpdateTeamBody, responses((status = 200, body = TeamOut), Errors))]
#[patch("/teams/{team_id}")]
pub async fn update_team(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
    body: crate::body::Json<Value>,
) -> ApiResult<HttpResponse> {
    let team_id = path.into_inner();
    let fixed = [Fixed::new("id", team_id, "it names the team")];
    let b: UpdateTeamBody = read_only::writable(body.into_inner(), &fixed, TEAM_DERIVED)?;
    let mut conn = state.conn().await?;
    let available = match (&b.default_policies, &b.mandatory_policies) {
        (None, None) => vec![],
        _ => crate::org_policy::available(&mut conn, session.org_id).await?,
    };
    let change = TeamChange {
        name: b.name.as_deref().map(|n| validate::text("name", n, 200)).transpose()?,
        description: b
            .description
            .as_deref()
            .map(|d| validate::optional_text("description", d, MAX_DESCRIPTION))
            .transpose()?,
        metadata: b.metadata.map(|m| validate::metadata("metadata", m)).transpose()?,
        default_policies: b.default_policies.map(|p| policies("default_policies", p, &available)).transpose()?,
        mandatory_policies: b.mandatory_policies.map(|p| policies("mandatory_policies", p, &available)).transpose()?,
        budget: b.budget.map(|o| o.map(budget_value).transpose()).transpose()?,
        rate_limits: b.rate_limits.map(|o| o.map(rate_limits_value).transpose()).transpose()?,
        allowed_models: match b.models {
            Some(Some(m)) => Some(Some(validate::models(&state.routes().await?, m)?)),
            Some(None) => Some(None),
            None => None,
        },
    };
    let changed: Vec<&'static str> = [
        ("name", change.name.is_some()),
        ("description", change.description.is_some()),
        ("metadata", change.metadata.is_some()),
        ("default_policies", change.default_policies.is_some()),
        ("mandatory_policies", change.mandatory_policies.is_some()),
        ("budget", change.budget.is_some()),
        ("rate_limits", change.rate_limits.is_some()),
        ("models", change.allowed_models.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(field, _)| field)
    .collect();
    if changed.is_empty() {
        return Err(ApiError::Validation(
            "nothing to update: send name, description, metadata, default_policies, mandatory_policies, budget, \
             rate_limits or models"
                .into(),
        ));
    }
    let trail = Trail::of(&session, &req);
    let org_id = session.org_id;
    let (team, n, logged) = conn
        .transaction(async |conn| {
            let (team, n) = update_tx(conn, &trail, org_id, team_id, &change, &changed).await?;
            let logged = invalidations::record_all(conn, [Invalidation::Team { org_id, team_id }]).await?;
            Ok::<_, ApiError>((team, n, logged))
        })
        .await?;
    state.announce(&logged, format_args!("the change of team {team_id}")).await;
    let s = spend::of_one(&mut conn, session.org_id, Owner::Team, team.id, team.budget.as_ref()).await?;
    Ok(HttpResponse::Ok().json(TeamOut::new(team, n, s)))
}

async fn update_tx(
    conn: &mut AsyncPgConnection,
    trail: &Trail,
    org_id: Uuid,
    team_id: Uuid,
    change: &TeamChange,
    changed: &[&'static str],
) -> ApiResult<(Team, i64)> {
    let team = match teams::update(conn, org_id, team_id, change).await {
        Ok(Some(t)) => t,
        Ok(None) => return Err(ApiError::NotFound("team")),
        Err(e) if is_unique_violation(&e) => return Err(name_taken()),
        Err(e) => return Err(e.into()),
    };
    let n = teams::member_count(conn, org_id, team_id).await?;
    let entry = Entry {
        action: "team.update",
        resource_type: "team",
        resource_id: Some(team_id.to_string()),
        detail: json!({"name": team.name, "changed": changed}),
    };
    trail.record(conn, entry).await?;
    Ok((team, n))
}

/// Delete a team and remove its members. Refused (409) while the team has live API keys, unless
/// `revoke_keys=true` revokes them with it; the proxies refuse them within a second.
#[utoipa::path(tag = "teams", params(("team_id" = Uuid, Path, description = "The team's id"), DeleteQuery),
    responses((status = 204, description = "Deleted"), Errors))]
#[delete("/teams/{team_id}")]
pub async fn delete_team(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
    q: crate::body::Query<DeleteQuery>,
) -> ApiResult<HttpResponse> {
    let team_id = path.into_inner();
    let revoke_keys = q.into_inner().revoke_keys.unwrap_or(false);
    let trail = Trail::of(&session, &req);
    let org_id = session.org_id;
    let mut conn = state.conn().await?;
    // The deletion, the revocations and their invalidation-log entries commit together.
    let (revoked, keys, team) = conn
        .transaction(async |conn| {
            let revoked = delete_tx(conn, &trail, org_id, team_id, revoke_keys).await?;
            let hashes: Vec<Vec<u8>> = revoked.iter().map(|(_, hash)| hash.clone()).collect();
            let keys = invalidations::record_keys(conn, &hashes).await?;
            let team = invalidations::record_all(conn, [Invalidation::Team { org_id, team_id }]).await?;
            Ok::<_, ApiError>((revoked, keys, team))
        })
        .await?;
    log::info!("team {team_id} deleted in org {org_id}, {} key(s) revoked", revoked.len());
    for ((id, _), entry) in revoked.iter().zip(&keys) {
        state.announce(std::slice::from_ref(entry), format_args!("the revocation of key {id}")).await;
    }
    state.announce(&team, format_args!("the change of team {team_id}")).await;
    Ok(HttpResponse::NoContent().finish())
}

async fn delete_tx(
    conn: &mut AsyncPgConnection,
    trail: &Trail,
    org_id: Uuid,
    team_id: Uuid,
    revoke_keys: bool,
) -> ApiResult<Vec<(Uuid, Vec<u8>)>> {
    // The lock keeps concurrent member changes and deletes of this team in line.
    let team = teams::find_live_for_update(conn, org_id, team_id).await?.ok_or(ApiError::NotFound("team"))?;
    let live = teams::live_keys_of_team(conn, org_id, team_id).await?;
    if !live.is_empty() && !revoke_keys {
        return Err(ApiError::Conflict(format!(
            "the team has {} live API key(s): revoke them first, or delete with ?revoke_keys=true to revoke them \
             with the team",
            live.len()
        )));
    }
    // Expired keys are revoked too, so no key of a deleted team can come back to life.
    let revoked = teams::revoke_keys_of_team(conn, org_id, team_id).await?;
    let mut revoked_ids: Vec<Uuid> = revoked.iter().map(|(id, _)| *id).collect();
    revoked_ids.dedup();
    gw_shared::db::events::keys_revoked(conn, org_id, &revoked_ids, trail.actor_user_id, "team_deleted").await?;
    for (id, _) in &revoked {
        let entry = Entry {
            action: "api_key.revoke",
            resource_type: "api_key",
            resource_id: Some(id.to_string()),
            detail: json!({"reason": "team.delete", "team_id": team_id}),
        };
        trail.record(conn, entry).await?;
    }
    teams::soft_delete(conn, org_id, team_id).await?;
    let key_ids: Vec<Uuid> = revoked.iter().map(|(id, _)| *id).collect();
    let entry = Entry {
        action: "team.delete",
        resource_type: "team",
        resource_id: Some(team_id.to_string()),
        detail: json!({"name": team.name, "revoked_keys": key_ids}),
    };
    trail.record(conn, entry).await?;
    Ok(revoked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_tells_null_from_absent() {
        let b: UpdateTeamBody = serde_json::from_value(json!({"budget": null})).unwrap();
        assert!(matches!(b.budget, Some(None)));
        assert!(b.rate_limits.is_none());
        let b: UpdateTeamBody = serde_json::from_value(json!({"models": ["a"]})).unwrap();
        assert!(matches!(b.models, Some(Some(_))));
    }
}
