//! Issuing sign-in sessions and their tokens: a session row (the refresh-token family, with an
//! absolute lifetime), a short-lived access token naming it, and a refresh token. Used by
//! password sign-in and sign-up, SSO and invite acceptance.

use chrono::{DateTime, Duration, Utc};
use diesel_async::AsyncPgConnection;
use gw_shared::db::refresh_tokens::{self, NewRefreshToken};
use gw_shared::db::{orgs, sessions, users};
use gw_shared::ids::new_id;
use gw_shared::jwt::issue_access_token;
use gw_shared::keys::generate_refresh_token;
use serde::Serialize;
use uuid::Uuid;

use crate::error::ApiResult;
use crate::state::AppState;

#[derive(Serialize, utoipa::ToSchema)]
pub struct UserOut {
    pub id: Uuid,
    pub email: String,
    pub name: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct OrgOut {
    pub id: Uuid,
    pub name: String,
}

/// A signed-in session's tokens.
#[derive(Serialize, utoipa::ToSchema)]
pub struct TokenResponse {
    /// Send as `Authorization: Bearer <access_token>` on `/api/v1`.
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Seconds until the access token expires.
    pub expires_in: i64,
    /// Exchange at `POST /auth/refresh` for new tokens; single use.
    pub refresh_token: String,
    /// Seconds until the refresh token expires.
    pub refresh_expires_in: i64,
    /// When the sign-in session ends, whatever its refreshes.
    pub session_expires_at: DateTime<Utc>,
    /// `full`, or `totp_enrollment`: the organization requires a second factor this account has
    /// not enrolled, and the session may only enroll it (`/auth/totp/*`), then sign in again.
    pub scope: &'static str,
    pub role: String,
    pub user: UserOut,
    pub organization: OrgOut,
}

/// What a session may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Full,
    /// Only enroll a second factor (and sign out).
    TotpEnrollment,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Full => "full",
            Scope::TotpEnrollment => "totp_enrollment",
        }
    }

    pub fn parse(s: &str) -> Scope {
        if s == "full" {
            Scope::Full
        } else {
            Scope::TotpEnrollment
        }
    }
}

/// The live session tokens are issued for.
pub struct SessionRef {
    pub id: Uuid,
    pub expires_at: DateTime<Utc>,
    pub scope: Scope,
}

/// Opens a new sign-in session (`method`: password, sso, invite) and issues its first tokens.
/// Where the organization requires a second factor, a person without one gets a session good
/// only for enrolling it.
pub async fn open_session(
    state: &AppState,
    conn: &mut AsyncPgConnection,
    user: &users::User,
    org: &orgs::Organization,
    role: &str,
    method: &str,
) -> ApiResult<TokenResponse> {
    let scope =
        if org.require_totp && !user.has_totp() && method != "sso" { Scope::TotpEnrollment } else { Scope::Full };
    open_session_scoped(state, conn, user, org, role, method, scope).await
}

/// [`open_session`] with the scope given.
pub async fn open_session_scoped(
    state: &AppState,
    conn: &mut AsyncPgConnection,
    user: &users::User,
    org: &orgs::Organization,
    role: &str,
    method: &str,
    scope: Scope,
) -> ApiResult<TokenResponse> {
    let session = SessionRef {
        id: new_id(),
        expires_at: Utc::now() + Duration::seconds(state.cfg.admin.session_max_age_secs),
        scope,
    };
    sessions::insert(conn, session.id, user.id, org.id, method, scope.as_str(), session.expires_at).await?;
    let (tokens, _) = issue(state, conn, user, org, role, &session).await?;
    Ok(tokens)
}

/// Issues an access token and a new refresh token in `session`; returns them and the refresh
/// token's row id. The refresh token never outlives the session.
pub async fn issue(
    state: &AppState,
    conn: &mut AsyncPgConnection,
    user: &users::User,
    org: &orgs::Organization,
    role: &str,
    session: &SessionRef,
) -> ApiResult<(TokenResponse, Uuid)> {
    let (refresh_token, hash) = generate_refresh_token();
    let id = new_id();
    let refresh_expires =
        (Utc::now() + Duration::seconds(state.cfg.admin.refresh_token_ttl_secs)).min(session.expires_at);
    refresh_tokens::insert(
        conn,
        &NewRefreshToken {
            id,
            user_id: user.id,
            org_id: org.id,
            family_id: session.id,
            token_hash: &hash,
            expires_at: refresh_expires,
        },
    )
    .await?;
    Ok((response(state, user, org, role, session, refresh_token, refresh_expires)?, id))
}

/// The response for an existing refresh token (the grace-window answer to a concurrent refresh).
pub fn response(
    state: &AppState,
    user: &users::User,
    org: &orgs::Organization,
    role: &str,
    session: &SessionRef,
    refresh_token: String,
    refresh_expires: DateTime<Utc>,
) -> ApiResult<TokenResponse> {
    let ttl = state.cfg.admin.access_token_ttl_secs;
    let (access_token, _) = issue_access_token(&state.jwt_secret, user.id, org.id, session.id, role, ttl)?;
    Ok(TokenResponse {
        access_token,
        token_type: "Bearer",
        expires_in: ttl,
        refresh_token,
        // Rounded up, so a fresh token reports its full configured lifetime.
        refresh_expires_in: ((refresh_expires - Utc::now()).num_milliseconds().max(0) + 999) / 1000,
        session_expires_at: session.expires_at,
        scope: session.scope.as_str(),
        role: role.to_string(),
        user: UserOut { id: user.id, email: user.email.clone(), name: user.name.clone() },
        organization: OrgOut { id: org.id, name: org.name.clone() },
    })
}
