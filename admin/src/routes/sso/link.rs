//! Linking a new SSO identity to the account that has its address: the callback's 202 leaves a
//! single-use link token (Redis, under its hash); `POST /auth/sso/link` proves the account with
//! its password (and second factor) and links the identity. An address alone never does.

use actix_web::{post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::AsyncConnection;
use gw_shared::db::admin_audit;
use gw_shared::db::sso as sso_db;
use gw_shared::db::{orgs, users};
use gw_shared::ids::new_id;
use gw_shared::roles::Role;
use gw_shared::sso;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;

use super::provision::{admit, Login};
use super::{binding_hash, take_json};
use crate::error::{is_unique_violation, ApiError, ApiResult, Errors};
use crate::sso_config::plan_required;
use crate::state::AppState;
use crate::tokens::TokenResponse;
use crate::{throttle, trail};

pub(super) const LINK_MESSAGE: &str =
    "An account with this e-mail address exists. Prove it is yours: send this link_token \
                            with the account's password to POST /api/v1/auth/sso/link (no password yet: reset it \
                            first). Until then, this identity signs nothing in.";

/// The answer to a sign-in whose identity is new while an account has its address.
#[derive(Serialize, ToSchema)]
pub struct LinkRequired {
    /// Always `link_required`.
    pub(super) status: &'static str,
    pub(super) message: &'static str,
    /// Send with the account's password to `POST /auth/sso/link`; single use.
    pub(super) link_token: String,
    /// Seconds the link token lives.
    pub(super) expires_in: u64,
}

/// A verified identity waiting for its account's proof (Redis, under the token's hash).
#[derive(Serialize, Deserialize)]
pub(super) struct PendingLink {
    pub(super) connection_id: Uuid,
    pub(super) issuer: String,
    pub(super) subject: String,
    pub(super) user_id: Uuid,
    pub(super) groups: Vec<String>,
    pub(super) email_verified: Option<bool>,
    pub(super) created_at: DateTime<Utc>,
}

pub(super) fn random_token() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    format!("sso_link_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

pub(super) fn link_key(token: &str) -> String {
    format!("gw:sso:link:{}", binding_hash(token))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkBody {
    /// The `link_token` of the callback's 202 answer.
    link_token: String,
    /// The password of the account that has the identity's e-mail address.
    password: String,
    /// The account's current TOTP code, when it has a second factor.
    #[serde(default)]
    totp_code: Option<String>,
    /// One of the account's recovery codes, instead of `totp_code`.
    #[serde(default)]
    recovery_code: Option<String>,
}

/// Link a new SSO identity to the account that has its address, proving the account with its
/// password (and second factor), then sign in through the connection. The link token works
/// once; a wrong password spends it.
#[utoipa::path(tag = "auth", security(()), request_body = LinkBody,
    responses((status = 200, description = "Linked and signed in", body = TokenResponse), Errors))]
#[post("/auth/sso/link")]
pub async fn link(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: crate::body::Json<LinkBody>,
) -> ApiResult<HttpResponse> {
    throttle::attempt(&state, &req, "login").await?;
    let b = body.into_inner();
    let invalid = || ApiError::Unauthorized("unknown or expired link token: sign in through SSO again".into());
    if !b.link_token.starts_with("sso_link_") || b.link_token.len() > 128 {
        return Err(invalid());
    }
    let pending = take_json::<PendingLink>(&state, &link_key(&b.link_token)).await?.ok_or_else(invalid)?;
    let user = {
        let mut conn = state.conn().await?;
        users::find(&mut conn, pending.user_id).await?.ok_or_else(invalid)?
    };
    let proof =
        crate::passwords::Proof { password: b.password, totp_code: b.totp_code, recovery_code: b.recovery_code };
    crate::passwords::prove_account(&state, &req, &user, proof).await?;

    let mut conn = state.conn().await?;
    let connection = sso_db::find_by_id(&mut conn, pending.connection_id)
        .await?
        .filter(|c| c.enabled && c.issuer == pending.issuer)
        .ok_or_else(|| ApiError::Unauthorized("this SSO connection no longer exists or is disabled".into()))?;
    let org = orgs::find(&mut conn, connection.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    if !sso::plan_allows_sso(&org.plan) {
        return Err(plan_required(&org.plan));
    }
    let email = gw_shared::email::Email { display: user.email.clone(), normalized: user.email_normalized.clone() };
    let default = sso::grantable_role(&connection.default_role).unwrap_or(Role::Viewer);
    let role = sso::role_for(&pending.groups, &sso::role_mapping_from_json(&connection.role_mapping), default);
    let team_ids = sso::teams_for(&pending.groups, &sso::team_mapping_from_json(&connection.team_mapping));
    let login = Login {
        connection: &connection,
        org: &org,
        email: &email,
        name: user.name.clone(),
        role,
        team_ids: &team_ids,
        subject: &pending.subject,
        email_verified: pending.email_verified,
        request_id: trail::request_id(&req),
    };
    let state_ref = state.get_ref();
    let tokens = conn
        .transaction(async |tx| {
            let new = sso_db::NewIdentity {
                org_id: org.id,
                connection_id: connection.id,
                issuer: &connection.issuer,
                subject: &pending.subject,
                user_id: user.id,
                linked_by: "password",
            };
            match sso_db::link(tx, new_id(), &new).await {
                Ok(()) => {}
                Err(e) if is_unique_violation(&e) => {
                    return Err(ApiError::Conflict(
                        "this identity, or another identity of this connection, is linked to an account already".into(),
                    ))
                }
                Err(e) => return Err(e.into()),
            }
            let detail = json!({"connection_id": connection.id.to_string(), "subject": pending.subject});
            admin_audit::insert(tx, &login.event(user.id, role, "user.sso_link", detail)).await?;
            admit(state_ref, tx, &login, user.clone(), false).await
        })
        .await?;
    log::info!("SSO identity linked to user {} in org {} through connection {}", user.id, org.id, connection.id);
    Ok(HttpResponse::Ok().json(tokens))
}
