//! The organization's members: list and read them; owners and admins change roles and remove
//! members. Only an owner grants the owner role or changes or removes an owner; the organization
//! always keeps at least one owner; nobody changes their own role. A removed member's sessions
//! end at once, and so does access for a demoted one (their sessions are revoked). The API keys a
//! removed member created are revoked with the removal, unless an admin first hands them to
//! another member (`POST /users/{user_id}/transfer-keys`).

use actix_web::{delete, get, patch, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::db::{api_keys, events, sessions, teams, users};
use gw_shared::roles::Role;
use gw_shared::webhooks::payloads;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::{self, Page};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::Entry;
use crate::trail::Trail;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list_users).service(get_user).service(update_user).service(remove_user).service(transfer_keys);
}

#[derive(Serialize, ToSchema)]
pub struct MemberOut {
    id: Uuid,
    email: String,
    name: String,
    /// `owner`, `admin`, `member` or `viewer`.
    role: String,
    /// When the user joined the organization.
    joined_at: DateTime<Utc>,
}

impl From<users::Member> for MemberOut {
    fn from(m: users::Member) -> Self {
        MemberOut { id: m.id, email: m.email, name: m.name, role: m.role, joined_at: m.joined_at }
    }
}

#[derive(Serialize, ToSchema)]
pub struct MemberDetailOut {
    id: Uuid,
    email: String,
    name: String,
    /// `owner`, `admin`, `member` or `viewer`.
    role: String,
    joined_at: DateTime<Utc>,
    /// The teams of the organization the user belongs to.
    teams: Vec<Uuid>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
    /// Only members with this role: `owner`, `admin`, `member` or `viewer`.
    role: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateUserBody {
    /// `owner`, `admin`, `member` or `viewer`; only an owner grants or takes away `owner`.
    role: String,
}

fn parse_role(field: &str, s: &str) -> ApiResult<Role> {
    s.parse::<Role>().map_err(|m| ApiError::field(field, m))
}

fn stored_role(s: &str) -> ApiResult<Role> {
    s.parse::<Role>().map_err(|m| ApiError::Internal(format!("stored role: {m}")))
}

/// The actor's role as it stands now, read after the owner rows are locked: an owner demoted a
/// moment ago by a concurrent request acts as what they are now, not as what their request
/// started as. Never higher than the role the request was authorized with.
async fn actor_now(conn: &mut AsyncPgConnection, org_id: Uuid, trail: &Trail, started_as: Role) -> ApiResult<Role> {
    let Some(actor) = trail.actor_user_id else {
        return Ok(started_as);
    };
    let m = users::membership(conn, org_id, actor)
        .await?
        .ok_or_else(|| ApiError::Forbidden("you are no longer a member of this organization".into()))?;
    Ok(stored_role(&m.role)?.min(started_as))
}

fn owners_only() -> ApiError {
    ApiError::Forbidden("only an owner may grant the owner role or change or remove an owner".into())
}

fn last_owner() -> ApiError {
    ApiError::Conflict("the organization must keep at least one owner: make another member owner first".into())
}

/// List the organization's members, newest accounts first.
#[utoipa::path(tag = "users", params(ListQuery), responses((status = 200, body = Page<MemberOut>), Errors))]
#[get("/users")]
pub async fn list_users(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<ListQuery>,
) -> ApiResult<HttpResponse> {
    let q = q.into_inner();
    let limit = pagination::limit(q.limit)?;
    let role = q.role.as_deref().map(|r| parse_role("role", r)).transpose()?;
    let mut conn = state.conn().await?;
    let rows = users::list_members(&mut conn, session.org_id, role.map(Role::as_str), q.cursor, limit + 1).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(rows, limit, |m| m.id, MemberOut::from)))
}

/// One member, with the teams they belong to.
#[utoipa::path(tag = "users", params(("user_id" = Uuid, Path, description = "The user's id")),
    responses((status = 200, body = MemberDetailOut), Errors))]
#[get("/users/{user_id}")]
pub async fn get_user(state: web::Data<AppState>, session: Session, path: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let user_id = path.into_inner();
    let mut conn = state.conn().await?;
    // Another org's user looks exactly like a missing one.
    let m = users::find_member(&mut conn, session.org_id, user_id).await?.ok_or(ApiError::NotFound("user"))?;
    let team_ids = teams::ids_of_member(&mut conn, session.org_id, user_id).await?;
    Ok(HttpResponse::Ok().json(MemberDetailOut {
        id: m.id,
        email: m.email,
        name: m.name,
        role: m.role,
        joined_at: m.joined_at,
        teams: team_ids,
    }))
}

/// Change a member's role. Only an owner grants the owner role or changes an owner's; the last
/// owner keeps it (409); nobody changes their own role. A lowered role ends the member's
/// sessions.
#[utoipa::path(tag = "users", params(("user_id" = Uuid, Path, description = "The user's id")),
    request_body = UpdateUserBody, responses((status = 200, body = MemberOut), Errors))]
#[patch("/users/{user_id}")]
pub async fn update_user(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
    body: crate::body::Json<UpdateUserBody>,
) -> ApiResult<HttpResponse> {
    let user_id = path.into_inner();
    let role = parse_role("role", &body.into_inner().role)?;
    if user_id == session.user_id {
        return Err(ApiError::Forbidden("you cannot change your own role: ask another owner or admin".into()));
    }
    if role == Role::Owner && session.role != Role::Owner {
        return Err(owners_only());
    }
    let trail = Trail::of(&session, &req);
    let (org_id, actor_role) = (session.org_id, session.role);
    let mut conn = state.conn().await?;
    let member =
        conn.transaction(async |conn| set_role_tx(conn, &trail, org_id, actor_role, user_id, role).await).await?;
    Ok(HttpResponse::Ok().json(MemberOut::from(member)))
}

async fn set_role_tx(
    conn: &mut AsyncPgConnection,
    trail: &Trail,
    org_id: Uuid,
    actor_role: Role,
    user_id: Uuid,
    role: Role,
) -> ApiResult<users::Member> {
    // Locked first, so two concurrent demotions cannot both pass the owner count.
    let owners = users::lock_owners(conn, org_id).await?;
    let actor_role = actor_now(conn, org_id, trail, actor_role).await?;
    let target = users::find_member(conn, org_id, user_id).await?.ok_or(ApiError::NotFound("user"))?;
    let from = stored_role(&target.role)?;
    if (from == Role::Owner || role == Role::Owner) && actor_role != Role::Owner {
        return Err(owners_only());
    }
    if from == role {
        return Ok(target);
    }
    if from == Role::Owner && owners <= 1 {
        return Err(last_owner());
    }
    if !users::set_role(conn, org_id, user_id, role.as_str()).await? {
        return Err(ApiError::NotFound("user"));
    }
    if role < from {
        sessions::revoke_for_member(conn, org_id, user_id).await?;
    }
    let entry = Entry {
        action: "user.update",
        resource_type: "user",
        resource_id: Some(user_id.to_string()),
        detail: json!({"from": from.as_str(), "to": role.as_str()}),
    };
    trail.record(conn, entry).await?;
    users::find_member(conn, org_id, user_id).await?.ok_or(ApiError::NotFound("user"))
}

/// Remove a member from the organization and its teams; their sessions end at once, and the API
/// keys they created are revoked (the proxies refuse them within a second) unless they were
/// transferred first. Only an owner removes an owner; the last owner stays (409).
#[utoipa::path(tag = "users", params(("user_id" = Uuid, Path, description = "The user's id")),
    responses((status = 204, description = "Removed"), Errors))]
#[delete("/users/{user_id}")]
pub async fn remove_user(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let user_id = path.into_inner();
    let trail = Trail::of(&session, &req);
    let (org_id, actor_role) = (session.org_id, session.role);
    let mut conn = state.conn().await?;
    let revoked = conn.transaction(async |conn| remove_tx(conn, &trail, org_id, actor_role, user_id).await).await?;
    state.announce(&revoked, format_args!("the revocation of user {user_id}'s keys")).await;
    log::info!("user {user_id} removed from org {org_id}; {} of their key secret(s) revoked", revoked.len());
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransferKeysBody {
    /// The member who becomes the keys' creator.
    to_user_id: Uuid,
}

/// How many keys changed hands.
#[derive(Serialize, ToSchema)]
pub struct KeysTransferred {
    transferred: usize,
}

/// Hand every live API key a member created to another member (before removing the first, so
/// the keys survive the removal). The keys, their secrets and restrictions stay as they are.
#[utoipa::path(tag = "users", params(("user_id" = Uuid, Path, description = "The member whose keys move")),
    request_body = TransferKeysBody, responses((status = 200, body = KeysTransferred), Errors))]
#[post("/users/{user_id}/transfer-keys")]
pub async fn transfer_keys(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
    body: crate::body::Json<TransferKeysBody>,
) -> ApiResult<HttpResponse> {
    let from = path.into_inner();
    let to = body.into_inner().to_user_id;
    if from == to {
        return Err(ApiError::field("to_user_id", "must be another member"));
    }
    let mut conn = state.conn().await?;
    users::find_member(&mut conn, session.org_id, from).await?.ok_or(ApiError::NotFound("user"))?;
    if users::find_member(&mut conn, session.org_id, to).await?.is_none() {
        return Err(ApiError::field("to_user_id", "is not a member of this organization"));
    }
    let n = api_keys::transfer_created_by(&mut conn, session.org_id, from, to).await?;
    let entry = Entry {
        action: "api_key.transfer",
        resource_type: "user",
        resource_id: Some(from.to_string()),
        detail: json!({"to_user_id": to, "keys": n}),
    };
    crate::trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::Ok().json(KeysTransferred { transferred: n }))
}

async fn remove_tx(
    conn: &mut AsyncPgConnection,
    trail: &Trail,
    org_id: Uuid,
    actor_role: Role,
    user_id: Uuid,
) -> ApiResult<Vec<(i64, gw_shared::redis::Invalidation)>> {
    let owners = users::lock_owners(conn, org_id).await?;
    let actor_role = actor_now(conn, org_id, trail, actor_role).await?;
    let target = users::find_member(conn, org_id, user_id).await?.ok_or(ApiError::NotFound("user"))?;
    let role = stored_role(&target.role)?;
    if role == Role::Owner && actor_role != Role::Owner {
        return Err(owners_only());
    }
    if role == Role::Owner && owners <= 1 {
        return Err(last_owner());
    }
    if !users::remove_membership(conn, org_id, user_id).await? {
        return Err(ApiError::NotFound("user"));
    }
    sessions::revoke_for_member(conn, org_id, user_id).await?;
    let revoked = api_keys::revoke_created_by(conn, org_id, user_id).await?;
    let keys: Vec<Uuid> = revoked.iter().map(|(id, _)| *id).collect();
    events::keys_revoked(conn, org_id, &keys, trail.actor_user_id, "member_removed").await?;
    let m = payloads::MemberFacts { user_id, email: &target.email, role: role.as_str() };
    let fate = if keys.is_empty() { "none" } else { "revoked" };
    events::emit(conn, payloads::member_removed(org_id, &m, trail.actor_user_id, fate)).await?;
    let entry = Entry {
        action: "user.remove",
        resource_type: "user",
        resource_id: Some(user_id.to_string()),
        detail: json!({"email": target.email, "role": role.as_str(), "revoked_keys": keys}),
    };
    trail.record(conn, entry).await?;
    // Last: the invalidation log's writers are serialized until commit.
    let mut logged = Vec::new();
    for (_, hashes) in &revoked {
        logged.extend(gw_shared::db::invalidations::record_keys(conn, hashes).await?);
    }
    Ok(logged)
}
