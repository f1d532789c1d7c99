//! `POST /auth/invites/accept`: whoever holds an invite's token joins the organization with it,
//! once: as a new account (name and password given) or as the existing account of the address
//! (its password proved), and is signed in.

use actix_web::{post, web, HttpRequest, HttpResponse};
use chrono::Utc;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::db::invites::{self, Status};
use gw_shared::db::{events, orgs, teams, users};
use gw_shared::ids::new_id;
use gw_shared::keys::{hash_secret, MAX_BEARER_LEN};
use gw_shared::roles::Role;
use gw_shared::webhooks::payloads;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::{is_unique_violation, ApiError, ApiResult, Errors};
use crate::passwords::{hash_new_password, password_rules, prove_account, Proof};
use crate::state::AppState;
use crate::throttle;
use crate::tokens::{self, TokenResponse};
use crate::trail::{self, Entry, Trail};
use crate::validate;

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
    /// The existing account's TOTP code, when it has a second factor.
    #[serde(default)]
    totp_code: Option<String>,
    /// One of the existing account's recovery codes, instead of `totp_code`.
    #[serde(default)]
    recovery_code: Option<String>,
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
        None if state.cfg.admin.signup == gw_shared::config::SignupMode::Closed => {
            return Err(ApiError::Forbidden(
                "new accounts are closed on this gateway: only an existing account accepts an invite".into(),
            ))
        }
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
            let proof = Proof { password, totp_code: b.totp_code, recovery_code: b.recovery_code };
            prove_account(&state, &req, &user, proof).await?;
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
            crate::seats::check(state, conn, invite.org_id, crate::seats::Join::Member).await?;
            users::add_membership(conn, invite.org_id, user.id, &invite.role).await?;
            let m = payloads::MemberFacts { user_id: user.id, email: &user.email, role: &invite.role };
            events::emit(conn, payloads::member_added(invite.org_id, &m, invite.invited_by, "invite")).await?;
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
