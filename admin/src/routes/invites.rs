//! Invites: owners and admins invite an address with a role (and teams); the invite's token is
//! shown once, in the creation response, and only its SHA-256 is stored. Whoever holds the token
//! accepts it once (`POST /auth/invites/accept`, no session): a new account is created with the
//! name and password given, or an existing account proves its password; either way the account
//! joins the organization and the invite's teams and is signed in. Only an owner invites owners.

use actix_web::{delete, get, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Duration, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::db::invites::{self, Invite, NewInvite, Status};
use gw_shared::db::{orgs, teams, users};
use gw_shared::ids::new_id;
use gw_shared::keys::{hash_secret, MAX_BEARER_LEN};
use gw_shared::password::MAX_PASSWORD_LEN;
use gw_shared::roles::Role;
use rand::distributions::Alphanumeric;
use rand::rngs::OsRng;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{is_unique_violation, ApiError, ApiResult, Errors};
use crate::pagination::{self, Page};
use crate::passwords::{hash_new_password, password_rules, verify};
use crate::session::Session;
use crate::state::AppState;
use crate::tokens::{self, TokenResponse};
use crate::trail::Trail;
use crate::trail::{self, Entry};
use crate::{throttle, validate};

/// Every invite token starts with this.
pub const INVITE_TOKEN_PREFIX: &str = "inv_";
/// Random part: 40 base62 characters, about 238 bits.
const INVITE_TOKEN_RANDOM_LEN: usize = 40;
/// Most teams one invite may name.
const MAX_TEAMS: usize = 100;
/// Longest invite lifetime a request may ask for.
const MAX_EXPIRES_IN_HOURS: i64 = 720;
const WARNING: &str = "Send this token to the invitee now: it is shown only once and cannot be retrieved again. \
                       It works once, until expires_at.";

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list_invites).service(create_invite).service(revoke_invite).service(accept_invite);
}

fn new_token() -> String {
    let random: String = OsRng.sample_iter(&Alphanumeric).take(INVITE_TOKEN_RANDOM_LEN).map(char::from).collect();
    format!("{INVITE_TOKEN_PREFIX}{random}")
}

#[derive(Serialize, ToSchema)]
pub struct InviteOut {
    id: Uuid,
    email: String,
    role: String,
    /// Teams the invitee joins on acceptance (those still live then).
    team_ids: Vec<Uuid>,
    /// `pending`, `accepted`, `revoked` or `expired`.
    status: &'static str,
    invited_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    accepted_at: Option<DateTime<Utc>>,
    accepted_by: Option<Uuid>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<Invite> for InviteOut {
    fn from(i: Invite) -> Self {
        let status = i.status(Utc::now()).as_str();
        InviteOut {
            id: i.id,
            email: i.email,
            role: i.role,
            team_ids: i.team_ids,
            status,
            invited_by: i.invited_by,
            created_at: i.created_at,
            expires_at: i.expires_at,
            accepted_at: i.accepted_at,
            accepted_by: i.accepted_by,
            revoked_at: i.revoked_at,
        }
    }
}

/// A new invite, with its token: shown here once, never again.
#[derive(Serialize, ToSchema)]
pub struct InviteCreated {
    id: Uuid,
    email: String,
    role: String,
    team_ids: Vec<Uuid>,
    /// Always `pending`.
    status: &'static str,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    /// The invite token: give it to the invitee, who accepts with `POST /auth/invites/accept`.
    token: String,
    warning: &'static str,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateInviteBody {
    email: String,
    /// `owner`, `admin`, `member` (default) or `viewer`; only an owner invites owners.
    #[serde(default)]
    role: Option<String>,
    /// Live teams of the organization the invitee joins; default none.
    #[serde(default)]
    team_ids: Option<Vec<Uuid>>,
    /// 1 to 720; default `admin.invite_ttl_secs` (7 days).
    #[serde(default)]
    expires_in_hours: Option<i64>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcceptBody {
    /// The invite token (`inv_…`).
    token: String,
    /// Required when the address has no account yet: the new account's name.
    #[serde(default)]
    name: Option<String>,
    /// A new account's password (12 to 1024 characters, at least 5 different ones, not a
    /// well-known password), or the existing account's password.
    #[serde(default)]
    password: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
    /// `pending`, `accepted`, `revoked` or `expired`.
    status: Option<String>,
}

/// List the organization's invites, newest first (never their tokens).
#[utoipa::path(tag = "invites", params(ListQuery), responses((status = 200, body = Page<InviteOut>), Errors))]
#[get("/invites")]
pub async fn list_invites(
    state: web::Data<AppState>,
    session: Session,
    q: web::Query<ListQuery>,
) -> ApiResult<HttpResponse> {
    let q = q.into_inner();
    let limit = pagination::limit(q.limit)?;
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(
            Status::parse(s)
                .ok_or_else(|| ApiError::field("status", "must be pending, accepted, revoked or expired"))?,
        ),
    };
    let mut conn = state.conn().await?;
    let rows = invites::list(&mut conn, session.org_id, status, q.cursor, limit + 1).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(rows, limit, |i| i.id, InviteOut::from)))
}

/// Invite an address into the organization; the token is in the response and nowhere else.
#[utoipa::path(tag = "invites", request_body = CreateInviteBody,
    responses((status = 201, body = InviteCreated), Errors))]
#[post("/invites")]
pub async fn create_invite(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<CreateInviteBody>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let email = validate::email("email", &b.email)?;
    let role = match b.role.as_deref() {
        None => Role::Member,
        Some(r) => r.parse::<Role>().map_err(|m| ApiError::field("role", m))?,
    };
    if role == Role::Owner && session.role != Role::Owner {
        return Err(ApiError::Forbidden("only an owner may invite owners".into()));
    }
    let requested = b.team_ids.unwrap_or_default();
    if requested.len() > MAX_TEAMS {
        return Err(ApiError::field("team_ids", format!("must have at most {MAX_TEAMS} entries")));
    }
    let mut team_ids: Vec<Uuid> = Vec::with_capacity(requested.len());
    for t in requested {
        if !team_ids.contains(&t) {
            team_ids.push(t);
        }
    }
    let lifetime = match b.expires_in_hours {
        None => Duration::seconds(state.cfg.admin.invite_ttl_secs),
        Some(h) if (1..=MAX_EXPIRES_IN_HOURS).contains(&h) => Duration::hours(h),
        Some(_) => {
            return Err(ApiError::field("expires_in_hours", format!("must be between 1 and {MAX_EXPIRES_IN_HOURS}")))
        }
    };
    let mut conn = state.conn().await?;
    for t in &team_ids {
        // Another org's team looks exactly like a missing one.
        if !teams::exists_in_org(&mut conn, session.org_id, *t).await? {
            return Err(ApiError::field("team_ids", format!("{t} does not name a team of this organization")));
        }
    }
    if let Some(user) = users::find_by_email(&mut conn, &email.normalized).await? {
        if users::membership(&mut conn, session.org_id, user.id).await?.is_some() {
            return Err(ApiError::Conflict("this address already belongs to a member of the organization".into()));
        }
    }
    let token = new_token();
    let hash = hash_secret(&token);
    let new = NewInvite {
        id: new_id(),
        org_id: session.org_id,
        email: &email.display,
        email_normalized: &email.normalized,
        role: role.as_str(),
        team_ids: &team_ids,
        token_hash: &hash,
        invited_by: Some(session.user_id),
        expires_at: Utc::now() + lifetime,
    };
    let trail = Trail::of(&session, &req);
    let invite = conn.transaction(async |conn| create_tx(conn, &trail, &new).await).await?;
    log::info!("invite {} created in org {}", invite.id, invite.org_id);
    Ok(HttpResponse::Created().json(InviteCreated {
        id: invite.id,
        email: invite.email,
        role: invite.role,
        team_ids: invite.team_ids,
        status: Status::Pending.as_str(),
        created_at: invite.created_at,
        expires_at: invite.expires_at,
        token,
        warning: WARNING,
    }))
}

/// Creates the invite, replacing any pending one to the same address (revoked, with its own trail
/// entry): one pending invite per address, the latest role and teams.
async fn create_tx(conn: &mut AsyncPgConnection, trail: &Trail, new: &NewInvite<'_>) -> ApiResult<Invite> {
    for replaced in invites::revoke_pending_to(conn, new.org_id, new.email_normalized).await? {
        let entry = Entry {
            action: "invite.revoke",
            resource_type: "invite",
            resource_id: Some(replaced.to_string()),
            detail: json!({"reason": "replaced by a new invite to the same address"}),
        };
        trail.record(conn, entry).await?;
    }
    let invite = invites::insert(conn, new).await.map_err(|e| {
        if crate::error::is_unique_violation(&e) {
            ApiError::Conflict("another invite to this address was created at the same time; retry".into())
        } else {
            ApiError::from(e)
        }
    })?;
    let entry = Entry {
        action: "invite.create",
        resource_type: "invite",
        resource_id: Some(invite.id.to_string()),
        detail: json!({"email": invite.email, "role": invite.role, "team_ids": invite.team_ids, "expires_at": invite.expires_at}),
    };
    trail.record(conn, entry).await?;
    Ok(invite)
}

/// Revoke a pending invite: its token stops working. An accepted invite cannot be revoked (409);
/// revoking again is a no-op.
#[utoipa::path(tag = "invites", params(("invite_id" = Uuid, Path, description = "The invite's id")),
    responses((status = 204, description = "Revoked"), Errors))]
#[delete("/invites/{invite_id}")]
pub async fn revoke_invite(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let invite_id = path.into_inner();
    let mut conn = state.conn().await?;
    let invite = invites::find(&mut conn, session.org_id, invite_id).await?.ok_or(ApiError::NotFound("invite"))?;
    match invite.status(Utc::now()) {
        Status::Accepted => return Err(ApiError::Conflict("this invite was accepted already".into())),
        Status::Revoked => return Ok(HttpResponse::NoContent().finish()),
        Status::Pending | Status::Expired => {}
    }
    let trail = Trail::of(&session, &req);
    let org_id = session.org_id;
    conn.transaction(async |conn| revoke_tx(conn, &trail, org_id, &invite).await).await?;
    Ok(HttpResponse::NoContent().finish())
}

async fn revoke_tx(conn: &mut AsyncPgConnection, trail: &Trail, org_id: Uuid, invite: &Invite) -> ApiResult<()> {
    if !invites::revoke(conn, org_id, invite.id).await? {
        // Accepted or revoked meanwhile.
        return match invites::find(conn, org_id, invite.id).await? {
            Some(i) if i.accepted_at.is_some() => Err(ApiError::Conflict("this invite was accepted already".into())),
            Some(_) => Ok(()),
            None => Err(ApiError::NotFound("invite")),
        };
    }
    let entry = Entry {
        action: "invite.revoke",
        resource_type: "invite",
        resource_id: Some(invite.id.to_string()),
        detail: json!({"email": invite.email, "role": invite.role}),
    };
    trail.record(conn, entry).await
}

fn invalid_token() -> ApiError {
    ApiError::field("token", "this invite is invalid, expired, revoked or already used")
}

/// What acceptance does for the account, decided (and the password hashed or verified) before
/// the transaction, without holding a database connection.
enum Account {
    /// No account has the address: create one.
    New { name: String, password_hash: String },
    /// The account with the address, its password verified.
    Existing(Uuid),
}

/// Accept an invite: creates the account (with `name` and `password`) when the address has
/// none, or signs in the existing one (with its `password`); joins the organization with the
/// invite's role and its teams that are still live; returns a session.
#[utoipa::path(tag = "auth", security(()), request_body = AcceptBody,
    responses((status = 201, description = "Joined and signed in", body = TokenResponse), Errors))]
#[post("/auth/invites/accept")]
pub async fn accept_invite(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: crate::body::Json<AcceptBody>,
) -> ApiResult<HttpResponse> {
    throttle::attempt(&state, &req, "invite").await?;
    let b = body.into_inner();
    if b.token.is_empty() || b.token.len() > MAX_BEARER_LEN {
        return Err(invalid_token());
    }
    let hash = hash_secret(&b.token);
    // The connection goes back to the pool before the slow hash.
    let (invite, existing) = {
        let mut conn = state.conn().await?;
        let invite = invites::find_by_hash(&mut conn, &hash).await?.ok_or_else(invalid_token)?;
        if invite.status(Utc::now()) != Status::Pending {
            return Err(invalid_token());
        }
        let existing = users::find_by_email(&mut conn, &invite.email_normalized).await?;
        (invite, existing)
    };
    let account = match existing {
        None => {
            let name = match b.name.as_deref() {
                Some(n) => validate::text("name", n, 200)?,
                None => return Err(ApiError::field("name", "is required to create your account")),
            };
            let Some(password) = b.password else {
                return Err(ApiError::field("password", "is required to create your account"));
            };
            password_rules(&password, &invite.email_normalized)?;
            let password_hash = hash_new_password(&state, password).await?;
            Account::New { name, password_hash }
        }
        Some(user) => {
            let Some(password) = b.password else {
                return Err(ApiError::field("password", "is required: this address has an account; give its password"));
            };
            let invalid = || ApiError::Unauthorized("invalid email or password".into());
            if password.len() > MAX_PASSWORD_LEN {
                return Err(invalid());
            }
            throttle::account_attempt(&state, &invite.email_normalized).await?;
            if !verify(&state, password, user.password_hash.clone()).await? {
                return Err(invalid());
            }
            throttle::account_succeeded(&state, &invite.email_normalized).await;
            Account::Existing(user.id)
        }
    };
    let request_id = trail::request_id(&req);
    let state_ref = state.get_ref();
    let mut conn = state.conn().await?;
    let tokens =
        conn.transaction(async |conn| accept_tx(state_ref, conn, &hash, &account, request_id.as_deref()).await).await?;
    log::info!("invite {} accepted by user {}", invite.id, tokens.user.id);
    Ok(HttpResponse::Created().json(tokens))
}

async fn accept_tx(
    state: &AppState,
    conn: &mut AsyncPgConnection,
    hash: &[u8],
    account: &Account,
    request_id: Option<&str>,
) -> ApiResult<TokenResponse> {
    // Locked: of two acceptances at once, one wins and the other sees the invite used.
    let invite = invites::find_by_hash_for_update(conn, hash).await?.ok_or_else(invalid_token)?;
    if invite.status(Utc::now()) != Status::Pending {
        return Err(invalid_token());
    }
    // An invite is only as good as its inviter's standing now: one removed or demoted since
    // (or who left) cannot bring anyone in through invites made before.
    let inviter = match invite.invited_by {
        Some(by) => users::membership(conn, invite.org_id, by).await?.and_then(|m| m.role.parse::<Role>().ok()),
        None => None,
    };
    let needed = if invite.role == Role::Owner.as_str() { Role::Owner } else { Role::Admin };
    if inviter.is_none_or(|r| r < needed) {
        return Err(invalid_token());
    }
    let raced =
        || ApiError::Conflict("the account of this address changed while accepting; accept the invite again".into());
    let existing = users::find_by_email(conn, &invite.email_normalized).await?;
    let (user, new_user) = match (account, existing) {
        (Account::New { name, password_hash }, None) => {
            let new = users::NewUser {
                id: new_id(),
                email: &invite.email,
                email_normalized: &invite.email_normalized,
                name,
                password_hash: Some(password_hash.as_str()),
            };
            match users::insert(conn, &new).await {
                Ok(u) => (u, true),
                Err(e) if is_unique_violation(&e) => return Err(raced()),
                Err(e) => return Err(e.into()),
            }
        }
        (Account::Existing(id), Some(user)) if user.id == *id => (user, false),
        _ => return Err(raced()),
    };
    let role = match users::membership(conn, invite.org_id, user.id).await? {
        // Already a member (joined another way meanwhile): the role stays as it is.
        Some(m) => m.role,
        None => {
            users::add_membership(conn, invite.org_id, user.id, &invite.role).await?;
            invite.role.clone()
        }
    };
    let mut joined: Vec<Uuid> = Vec::with_capacity(invite.team_ids.len());
    for team in &invite.team_ids {
        // A team deleted since the invite was sent is skipped.
        if teams::exists_in_org(conn, invite.org_id, *team).await? {
            teams::ensure_member(conn, invite.org_id, *team, user.id).await?;
            joined.push(*team);
        }
    }
    if !invites::mark_accepted(conn, invite.id, user.id).await? {
        return Err(invalid_token());
    }
    let trail = Trail {
        org_id: invite.org_id,
        actor_user_id: Some(user.id),
        actor_role: Some(role.clone()),
        request_id: request_id.map(str::to_string),
    };
    let entry = Entry {
        action: "invite.accept",
        resource_type: "invite",
        resource_id: Some(invite.id.to_string()),
        detail: json!({"user_id": user.id, "new_account": new_user, "role": role, "team_ids": joined}),
    };
    trail.record(conn, entry).await?;
    let org = orgs::find(conn, invite.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    tokens::open_session(state, conn, &user, &org, &role, "invite").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_have_the_prefix_and_enough_entropy() {
        let t = new_token();
        assert!(t.starts_with(INVITE_TOKEN_PREFIX));
        assert_eq!(t.len(), INVITE_TOKEN_PREFIX.len() + INVITE_TOKEN_RANDOM_LEN);
        assert!(t[INVITE_TOKEN_PREFIX.len()..].chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(new_token(), t);
    }
}
