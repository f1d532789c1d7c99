//! Registration, login and refresh-token rotation.

use actix_web::{web, HttpResponse};
use chrono::{Duration, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::accounts::{create_org_with_owner, ROLE_OWNER};
use gw_shared::db::refresh_tokens::{self, NewRefreshToken};
use gw_shared::db::{orgs, users};
use gw_shared::ids::new_id;
use gw_shared::jwt::issue_access_token;
use gw_shared::keys::{generate_refresh_token, hash_secret, MAX_BEARER_LEN};
use gw_shared::password::{dummy_hash, verify_password_blocking, MAX_PASSWORD_LEN, MIN_PASSWORD_LEN};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{is_unique_violation, ApiError, ApiResult};
use crate::state::AppState;
use crate::validate;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterBody {
    email: String,
    password: String,
    name: String,
    org_name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginBody {
    email: String,
    password: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefreshBody {
    refresh_token: String,
}

#[derive(Serialize)]
pub struct UserOut {
    id: Uuid,
    email: String,
    name: String,
}

#[derive(Serialize)]
pub struct OrgOut {
    id: Uuid,
    name: String,
}

#[derive(Serialize)]
pub struct TokenResponse {
    access_token: String,
    token_type: &'static str,
    /// Seconds until the access token expires.
    expires_in: i64,
    refresh_token: String,
    refresh_expires_in: i64,
    role: String,
    user: UserOut,
    organization: OrgOut,
}

/// Issues an access token and a refresh token (a new family unless `family` continues one).
async fn issue_tokens(
    state: &AppState,
    conn: &mut AsyncPgConnection,
    user: &users::User,
    org: &orgs::Organization,
    role: &str,
    family: Option<Uuid>,
) -> ApiResult<TokenResponse> {
    let ttl = state.cfg.admin.access_token_ttl_secs;
    let (access_token, _) = issue_access_token(&state.jwt_secret, user.id, org.id, role, ttl)?;
    let (refresh_token, hash) = generate_refresh_token();
    let refresh_ttl = state.cfg.admin.refresh_token_ttl_secs;
    refresh_tokens::insert(
        conn,
        &NewRefreshToken {
            id: new_id(),
            user_id: user.id,
            org_id: org.id,
            family_id: family.unwrap_or_else(new_id),
            token_hash: &hash,
            expires_at: Utc::now() + Duration::seconds(refresh_ttl),
        },
    )
    .await?;
    Ok(TokenResponse {
        access_token,
        token_type: "Bearer",
        expires_in: ttl,
        refresh_token,
        refresh_expires_in: refresh_ttl,
        role: role.to_string(),
        user: UserOut { id: user.id, email: user.email.clone(), name: user.name.clone() },
        organization: OrgOut { id: org.id, name: org.name.clone() },
    })
}

fn check_password_shape(password: &str) -> ApiResult<()> {
    let n = password.chars().count();
    if n < MIN_PASSWORD_LEN || password.len() > MAX_PASSWORD_LEN {
        return Err(ApiError::Validation(format!(
            "password must be {MIN_PASSWORD_LEN} to {MAX_PASSWORD_LEN} characters long"
        )));
    }
    Ok(())
}

pub async fn register(state: web::Data<AppState>, body: web::Json<RegisterBody>) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let email = validate::email(&b.email)?;
    let name = validate::text("name", &b.name, 200)?;
    let org_name = validate::text("org_name", &b.org_name, 200)?;
    check_password_shape(&b.password)?;

    let mut conn = state.conn().await?;
    let (org, user) = match create_org_with_owner(&mut conn, &email, &name, &b.password, &org_name).await {
        Ok(v) => v,
        Err(e) if is_unique_violation(&e) => {
            return Err(ApiError::Conflict("an account with this email already exists".into()))
        }
        Err(e) => return Err(e.into()),
    };
    let tokens = issue_tokens(&state, &mut conn, &user, &org, ROLE_OWNER, None).await?;
    log::info!("registered org {} with owner {}", org.id, user.id);
    Ok(HttpResponse::Created().json(tokens))
}

pub async fn login(state: web::Data<AppState>, body: web::Json<LoginBody>) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let invalid = || ApiError::Unauthorized("invalid email or password".into());
    if b.password.len() > MAX_PASSWORD_LEN || b.email.len() > 320 {
        return Err(invalid());
    }
    let mut conn = state.conn().await?;
    let user = users::find_by_email(&mut conn, b.email.trim()).await?;
    // Verify against a dummy hash when there is no such user, so timing does not reveal accounts.
    let hash = user.as_ref().and_then(|u| u.password_hash.clone()).unwrap_or_else(|| dummy_hash().to_string());
    let ok = verify_password_blocking(b.password, hash).await;
    let user = match user {
        Some(u) if ok => u,
        _ => return Err(invalid()),
    };
    let membership = users::primary_membership(&mut conn, user.id).await?.ok_or_else(invalid)?;
    let org = orgs::find(&mut conn, membership.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    let tokens = issue_tokens(&state, &mut conn, &user, &org, &membership.role, None).await?;
    Ok(HttpResponse::Ok().json(tokens))
}

enum Rotation {
    Rotated(TokenResponse),
    Rejected(&'static str),
}

pub async fn refresh(state: web::Data<AppState>, body: web::Json<RefreshBody>) -> ApiResult<HttpResponse> {
    let token = body.into_inner().refresh_token;
    if token.is_empty() || token.len() > MAX_BEARER_LEN {
        return Err(ApiError::Unauthorized("invalid refresh token".into()));
    }
    let hash = hash_secret(&token);
    let mut conn = state.conn().await?;
    let state_ref = state.get_ref();
    // The rejection paths commit too: revoking a family on reuse must stick.
    let outcome = conn
        .transaction(async |conn| {
            let Some(rt) = refresh_tokens::find_for_update(conn, &hash).await? else {
                return Ok::<_, ApiError>(Rotation::Rejected("invalid refresh token"));
            };
            if rt.revoked_at.is_some() {
                return Ok(Rotation::Rejected("refresh token revoked"));
            }
            if rt.used_at.is_some() {
                refresh_tokens::revoke_family(conn, rt.family_id).await?;
                log::warn!("refresh token reuse for user {}: family {} revoked", rt.user_id, rt.family_id);
                return Ok(Rotation::Rejected("refresh token already used; every session of this sign-in was revoked"));
            }
            if rt.expires_at <= Utc::now() {
                return Ok(Rotation::Rejected("refresh token expired"));
            }
            refresh_tokens::mark_used(conn, rt.id).await?;
            let Some(m) = users::membership(conn, rt.org_id, rt.user_id).await? else {
                return Ok(Rotation::Rejected("no longer a member of this organization"));
            };
            let user = users::find(conn, rt.user_id).await?.ok_or(ApiError::NotFound("user"))?;
            let org = orgs::find(conn, rt.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
            let tokens = issue_tokens(state_ref, conn, &user, &org, &m.role, Some(rt.family_id)).await?;
            Ok(Rotation::Rotated(tokens))
        })
        .await?;
    match outcome {
        Rotation::Rotated(tokens) => Ok(HttpResponse::Ok().json(tokens)),
        Rotation::Rejected(why) => Err(ApiError::Unauthorized(why.into())),
    }
}
