//! Sessions: a valid access token in `Authorization: Bearer` whose sign-in session is still live
//! and whose user is still a member, or a service account's token (`gw_sa_…`) that is live. The
//! role is re-read from the database on every request, so logout, refresh-reuse revocation,
//! removal, demotion and revocation take effect at once. API keys are refused with a message
//! that says so. The [`crate::authz`] middleware authenticates; handlers take [`Session`] from
//! the request.

use std::future::{ready, Ready};

use actix_web::dev::Payload;
use actix_web::http::header::HeaderMap;
use actix_web::{FromRequest, HttpMessage, HttpRequest};
use diesel_async::AsyncPgConnection;
use gw_shared::db::teams;
use gw_shared::jwt::verify_access_token;
use gw_shared::keys::{hash_secret, parse_bearer, API_KEY_PREFIX, MAX_BEARER_LEN, SERVICE_TOKEN_PREFIX};
use gw_shared::roles::Role;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::tokens::Scope;

/// Who is behind a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A person, signed in; `scope` says what the sign-in session may do.
    Person { scope: Scope },
    /// A service account's token; `scopes` narrows what its role allows (empty: no narrowing).
    Service { scopes: Vec<String> },
}

/// An authenticated management session, scoped to one organization.
#[derive(Debug, Clone)]
pub struct Session {
    pub user_id: Uuid,
    pub org_id: Uuid,
    /// The sign-in session (refresh-token family) the access token belongs to.
    pub session_id: Uuid,
    /// The member's role as the database holds it now.
    pub role: Role,
    pub principal: Principal,
}

impl Session {
    pub fn is_admin(&self) -> bool {
        self.role.is_admin()
    }

    /// Members act only on teams they belong to; admins and owners on every team of the org.
    pub async fn require_team(&self, conn: &mut AsyncPgConnection, team_id: Uuid) -> ApiResult<()> {
        if self.is_admin() || teams::is_member(conn, self.org_id, team_id, self.user_id).await? {
            return Ok(());
        }
        Err(ApiError::Forbidden("members act only on the teams they belong to".into()))
    }
}

pub async fn authenticate(state: &AppState, headers: &HeaderMap) -> ApiResult<Session> {
    let header = headers
        .get(actix_web::http::header::AUTHORIZATION)
        .ok_or_else(|| ApiError::Unauthorized("missing Authorization: Bearer <access_token>".into()))?;
    let token = parse_bearer(header.as_bytes()).ok_or_else(|| {
        ApiError::Unauthorized("malformed Authorization header: expected Bearer <access_token>".into())
    })?;
    if token.starts_with(API_KEY_PREFIX) {
        return Err(ApiError::Unauthorized(
            "API keys are not accepted on the management API: sign in and use a session access token".into(),
        ));
    }
    if token.starts_with(SERVICE_TOKEN_PREFIX) {
        return service_account(state, token).await;
    }
    let claims = verify_access_token(&state.jwt_secret, token)
        .map_err(|_| ApiError::Unauthorized("invalid or expired access token".into()))?;
    let mut conn = state.conn().await?;
    let (role, scope) =
        gw_shared::db::sessions::live_role(&mut conn, claims.sid, claims.sub, claims.org).await?.ok_or_else(|| {
            ApiError::Unauthorized("this session has ended (signed out, revoked or expired): sign in again".into())
        })?;
    let role = role.parse::<Role>().map_err(ApiError::Internal)?;
    Ok(Session {
        user_id: claims.sub,
        org_id: claims.org,
        session_id: claims.sid,
        role,
        principal: Principal::Person { scope: Scope::parse(&scope) },
    })
}

async fn service_account(state: &AppState, token: &str) -> ApiResult<Session> {
    let refused = || ApiError::Unauthorized("invalid, expired or revoked service account token".into());
    if token.len() > MAX_BEARER_LEN {
        return Err(refused());
    }
    let mut conn = state.conn().await?;
    let (sa, role) =
        gw_shared::db::service_accounts::authenticate(&mut conn, &hash_secret(token)).await?.ok_or_else(refused)?;
    let role = role.parse::<Role>().map_err(ApiError::Internal)?;
    Ok(Session {
        user_id: sa.id,
        org_id: sa.org_id,
        session_id: sa.id,
        role,
        principal: Principal::Service { scopes: sa.scopes },
    })
}

impl FromRequest for Session {
    type Error = ApiError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            req.extensions()
                .get::<Session>()
                .cloned()
                .ok_or_else(|| ApiError::Unauthorized("missing Authorization: Bearer <access_token>".into())),
        )
    }
}
