//! Signing a verified identity in: the linked account, or a new account for an address nobody
//! has (only in the connection's proven domains), or nothing (a link is required). Everything
//! in the caller's transaction; nothing of the account outside the organization changes.

use chrono::Utc;
use diesel_async::AsyncPgConnection;
use gw_shared::db::admin_audit::{self, Event};
use gw_shared::db::sso::{self as sso_db, Connection};
use gw_shared::db::users::{self, NewUser, User};
use gw_shared::db::{orgs, teams};
use gw_shared::email::Email;
use gw_shared::ids::new_id;
use gw_shared::roles::Role;
use gw_shared::webhooks::payloads;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::error::{is_unique_violation, ApiError, ApiResult};
use crate::state::AppState;
use crate::tokens::{self, TokenResponse};

/// A verified sign-in, ready to provision.
pub(super) struct Login<'a> {
    pub(super) connection: &'a Connection,
    pub(super) org: &'a orgs::Organization,
    pub(super) email: &'a Email,
    pub(super) name: String,
    /// The role the groups map to.
    pub(super) role: Role,
    pub(super) team_ids: &'a [Uuid],
    pub(super) subject: &'a str,
    pub(super) email_verified: Option<bool>,
    pub(super) request_id: Option<String>,
}

impl Login<'_> {
    /// An admin audit event of this sign-in, by the signed-in user (built here rather than
    /// through `trail::record`, whose request is not `Send`, so it commits with the change).
    pub(super) fn event(&self, user_id: Uuid, role: Role, action: &str, detail: Value) -> Event {
        Event {
            id: new_id(),
            org_id: self.org.id,
            actor_user_id: Some(user_id),
            actor_role: Some(role.as_str().to_string()),
            action: action.to_string(),
            resource_type: "user".to_string(),
            resource_id: Some(user_id.to_string()),
            request_id: self.request_id.clone(),
            detail,
            created_at: Utc::now(),
        }
    }
}

/// What a verified callback leads to.
pub(super) enum Outcome {
    SignedIn(Box<TokenResponse>),
    /// An account (this one) has the address and no link to the identity: it must prove itself.
    LinkRequired(Uuid),
}

/// The identity's account: the linked one, or a new one when nobody has the address.
pub(super) async fn sign_in(state: &AppState, conn: &mut AsyncPgConnection, login: &Login<'_>) -> ApiResult<Outcome> {
    let c = login.connection;
    if let Some(identity) = sso_db::identity(conn, c.id, &c.issuer, login.subject).await? {
        let user = users::find(conn, identity.user_id).await?.ok_or(ApiError::NotFound("user"))?;
        return Ok(Outcome::SignedIn(Box::new(admit(state, conn, login, user, false).await?)));
    }
    // A new identity: only for the connection's proven domains.
    let domain = gw_shared::email::domain(&login.email.normalized).unwrap_or_default().to_string();
    if !sso_db::domain_proven(conn, c.id, &domain).await? {
        return Err(ApiError::Unauthorized(format!(
            "the e-mail domain {domain} does not sign in through this SSO connection"
        )));
    }
    if let Some(existing) = users::find_by_email(conn, &login.email.normalized).await? {
        return Ok(Outcome::LinkRequired(existing.id));
    }
    if state.cfg.admin.signup == gw_shared::config::SignupMode::Closed {
        return Err(ApiError::Forbidden(
            "new accounts are closed on this gateway: SSO signs in existing accounts only".into(),
        ));
    }
    let new = NewUser {
        id: new_id(),
        email: &login.email.display,
        email_normalized: &login.email.normalized,
        name: &login.name,
        password_hash: None,
    };
    let user = match users::insert(conn, &new).await {
        Ok(user) => user,
        Err(e) if is_unique_violation(&e) => {
            return Err(ApiError::Conflict("this account was created by a concurrent sign-in; sign in again".into()))
        }
        Err(e) => return Err(e.into()),
    };
    let identity = sso_db::NewIdentity {
        org_id: login.org.id,
        connection_id: c.id,
        issuer: &c.issuer,
        subject: login.subject,
        user_id: user.id,
        linked_by: "provisioned",
    };
    match sso_db::link(conn, new_id(), &identity).await {
        Ok(()) => {}
        Err(e) if is_unique_violation(&e) => {
            return Err(ApiError::Conflict("this identity was linked by a concurrent sign-in; sign in again".into()))
        }
        Err(e) => return Err(e.into()),
    }
    Ok(Outcome::SignedIn(Box::new(admit(state, conn, login, user, true).await?)))
}

/// Signs a linked account in through the connection, in the caller's transaction: its
/// membership (added with the mapped role; an existing member's role set to it, except an
/// owner's), its mapped teams (added to, never removed from), the audit events, the tokens.
/// Nothing of the account outside this organization changes.
pub(super) async fn admit(
    state: &AppState,
    conn: &mut AsyncPgConnection,
    login: &Login<'_>,
    user: User,
    created: bool,
) -> ApiResult<TokenResponse> {
    let org_id = login.org.id;
    if users::membership(conn, org_id, user.id).await?.is_none() {
        crate::seats::check(state, conn, org_id, crate::seats::Join::Member).await?;
    }
    let (membership, joined) = sso_db::ensure_membership(conn, org_id, user.id, login.role.as_str()).await?;
    let current = membership.role.parse::<Role>().ok();
    let role = if current == Some(Role::Owner) {
        Role::Owner
    } else {
        if current != Some(login.role) {
            users::set_role(conn, org_id, user.id, login.role.as_str()).await?;
        }
        login.role
    };
    if joined {
        let m = payloads::MemberFacts { user_id: user.id, email: &user.email, role: role.as_str() };
        gw_shared::db::events::emit(conn, payloads::member_added(org_id, &m, None, "sso")).await?;
    }
    let mut added_teams: Vec<Uuid> = Vec::with_capacity(login.team_ids.len());
    for team_id in login.team_ids {
        // A mapped team deleted since the mapping was saved is skipped.
        if teams::exists_in_org(conn, org_id, *team_id).await? {
            teams::ensure_member(conn, org_id, *team_id, user.id).await?;
            added_teams.push(*team_id);
        }
    }
    let connection_id = login.connection.id.to_string();
    if created {
        let detail = json!({"connection_id": connection_id, "role": role.as_str()});
        admin_audit::insert(conn, &login.event(user.id, role, "user.provision", detail)).await?;
    }
    let detail = json!({
        "connection_id": connection_id,
        "subject": login.subject,
        "email_verified": login.email_verified,
        "role": role.as_str(),
        "previous_role": current.map(Role::as_str),
        "joined": joined,
        "teams": added_teams,
    });
    admin_audit::insert(conn, &login.event(user.id, role, "user.sso_login", detail)).await?;
    tokens::open_session(state, conn, &user, login.org, role.as_str(), "sso").await
}
