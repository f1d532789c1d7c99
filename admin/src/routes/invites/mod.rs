//! Invites: owners and admins invite an address with a role (and teams). Where the operator
//! configured mail (`[mail] smtp_url`), the invite's link is mailed to the address and the
//! inviter never sees the token; otherwise the token is shown once, in the creation response,
//! for the inviter to pass on. Only its SHA-256 is stored. Whoever holds the token
//! accepts it once (`POST /auth/invites/accept`, no session): a new account is created with the
//! name and password given, or an existing account proves its password; either way the account
//! joins the organization and the invite's teams and is signed in. Only an owner invites owners.

use actix_web::{delete, get, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Duration, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::db::invites::{self, Invite, NewInvite, Status};
use gw_shared::db::{teams, users};
use gw_shared::ids::new_id;
use gw_shared::keys::hash_secret;
use gw_shared::roles::Role;
use rand::distributions::Alphanumeric;
use rand::rngs::OsRng;
use rand::Rng;
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
use crate::validate;

mod accept;

/// Every invite token starts with this.
pub const INVITE_TOKEN_PREFIX: &str = "inv_";
/// Random part: 40 base62 characters, about 238 bits.
const INVITE_TOKEN_RANDOM_LEN: usize = 40;
/// Most teams one invite may name.
const MAX_TEAMS: usize = 100;
/// Longest invite lifetime a request may ask for.
const MAX_LIFETIME_HOURS: i64 = 720;
const WARNING: &str = "Send this token to the invitee now: it is shown only once and cannot be retrieved again. \
                       It works once, until expires_at.";

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list_invites).service(create_invite).service(revoke_invite).service(accept::accept_invite);
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
    /// `mail` (the link was mailed to the address; no token here) or `token` (no mail is
    /// configured: pass `token` on to the invitee).
    delivery: &'static str,
    /// Only when `delivery` is `token`: the invitee accepts with it at `POST /auth/invites/accept`.
    token: Option<String>,
    warning: Option<&'static str>,
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
    /// When the invite stops working: at least an hour and at most 30 days from now. Default:
    /// `admin.invite_ttl_secs` (7 days) from now.
    #[serde(default)]
    expires_at: Option<DateTime<Utc>>,
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
    q: crate::body::Query<ListQuery>,
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
    let now = Utc::now();
    let lifetime = match b.expires_at {
        None => Duration::seconds(state.cfg.admin.invite_ttl_secs),
        Some(t) if t - now >= Duration::hours(1) && t - now <= Duration::hours(MAX_LIFETIME_HOURS) => t - now,
        Some(_) => {
            return Err(ApiError::field(
                "expires_at",
                format!("must be at least an hour and at most {} days from now", MAX_LIFETIME_HOURS / 24),
            ))
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
        expires_at: now + lifetime,
    };
    let trail = Trail::of(&session, &req);
    let mailed = state.cfg.mail.enabled();
    let org_name = gw_shared::db::orgs::find(&mut conn, session.org_id).await?.map(|o| o.name).unwrap_or_default();
    let letter = mailed.then(|| {
        format!(
            "You are invited to join the gw organization \"{}\" as {}.\n\n\
             Accept here: {}/accept-invite#token={token}\n\n\
             Or send {{\"token\": \"{token}\"}} (with your name and a password for a new account, or your \
             account's password) to POST /api/v1/auth/invites/accept. The invite works once, until {}.",
            org_name.replace(['\r', '\n'], " "),
            role.as_str(),
            state.cfg.admin.public_base(),
            (now + lifetime).to_rfc3339()
        )
    });
    let invite = conn
        .transaction(async |conn| {
            crate::seats::check(&state, conn, new.org_id, crate::seats::Join::Invite(new.email_normalized)).await?;
            let invite = create_tx(conn, &trail, &new).await?;
            if let Some(body) = letter {
                crate::mail::enqueue(conn, &invite.email, "invite", "You are invited to gw", body).await?;
            }
            Ok::<_, ApiError>(invite)
        })
        .await?;
    log::info!("invite {} created in org {}", invite.id, invite.org_id);
    Ok(HttpResponse::Created().json(InviteCreated {
        id: invite.id,
        email: invite.email,
        role: invite.role,
        team_ids: invite.team_ids,
        status: Status::Pending.as_str(),
        created_at: invite.created_at,
        expires_at: invite.expires_at,
        delivery: if mailed { "mail" } else { "token" },
        token: (!mailed).then_some(token),
        warning: (!mailed).then_some(WARNING),
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
