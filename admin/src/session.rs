//! The session extractor: a valid access token in `Authorization: Bearer`, and nothing else.
//! API keys are refused here with a message that says so.

use std::future::{ready, Ready};

use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use gw_shared::accounts::{ROLE_ADMIN, ROLE_OWNER};
use gw_shared::jwt::{verify_access_token, AccessClaims};
use gw_shared::keys::{parse_bearer, API_KEY_PREFIX};
use uuid::Uuid;

use crate::error::ApiError;
use crate::state::AppState;

/// An authenticated management session, scoped to one organization.
#[derive(Debug, Clone)]
pub struct Session {
    pub user_id: Uuid,
    pub org_id: Uuid,
    pub role: String,
}

impl Session {
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.role == ROLE_OWNER || self.role == ROLE_ADMIN {
            Ok(())
        } else {
            Err(ApiError::Forbidden("this action needs the owner or admin role".into()))
        }
    }
}

impl From<AccessClaims> for Session {
    fn from(c: AccessClaims) -> Self {
        Session { user_id: c.sub, org_id: c.org, role: c.role }
    }
}

fn authenticate(req: &HttpRequest) -> Result<Session, ApiError> {
    let state =
        req.app_data::<web::Data<AppState>>().ok_or_else(|| ApiError::Internal("application state missing".into()))?;
    let header = req
        .headers()
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
    let claims = verify_access_token(&state.jwt_secret, token)
        .map_err(|_| ApiError::Unauthorized("invalid or expired access token".into()))?;
    Ok(claims.into())
}

impl FromRequest for Session {
    type Error = ApiError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(authenticate(req))
    }
}
