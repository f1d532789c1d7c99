//! SSO sign-in (OpenID Connect, authorization code flow with PKCE):
//!
//! 1. `POST /auth/sso/initiate` with the user's `email` (its domain picks the connection) or a
//!    `connection_id`: returns the identity provider's authorization URL. The state, nonce and
//!    PKCE verifier stay server-side in Redis under the state for ten minutes.
//! 2. The identity provider sends the browser to `GET /auth/sso/callback?code&state`: the state
//!    is taken (single use), the code exchanged, the ID token verified (signature, issuer,
//!    audience, expiry, nonce), and the user signed in: found by e-mail or created without a
//!    password (just-in-time provisioning), made a member with the role its groups map to (an
//!    owner stays owner), added to the teams its groups map to. Returns the session's tokens.
//!
//! Members of an organization with SSO can still sign in with a password if they have one;
//! accounts created through SSO have none. See docs/sso.md.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::db::admin_audit::{self, Event};
use gw_shared::db::sso::{self as sso_db, Connection};
use gw_shared::db::users::{self, NewUser, User};
use gw_shared::db::{orgs, teams};
use gw_shared::email::Email;
use gw_shared::ids::new_id;
use gw_shared::roles::Role;
use gw_shared::sso;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{is_unique_violation, ApiError, ApiResult, Errors};
use crate::oidc;
use crate::sso_config::{keyring, plan_required, redirect_uri};
use crate::state::AppState;
use crate::tokens::{self, TokenResponse};
use crate::{throttle, trail, validate};

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(initiate).service(callback);
}

/// The longest authorization code accepted from a callback.
const MAX_CODE_LEN: usize = 4096;
/// The longest error description from an identity provider repeated in a message.
const MAX_IDP_TEXT: usize = 200;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InitiateBody {
    /// The user's e-mail address: its domain picks the connection. Send this or `connection_id`.
    #[serde(default)]
    email: Option<String>,
    /// The connection to sign in through. Send this or `email`.
    #[serde(default)]
    connection_id: Option<Uuid>,
}

/// A started SSO sign-in.
#[derive(Serialize, ToSchema)]
pub struct InitiateOut {
    /// Send the user's browser here.
    authorization_url: String,
    /// The `state` the identity provider echoes to the callback (single use).
    state: String,
    /// Seconds the sign-in may take before the state expires.
    expires_in: u64,
}

/// What the identity provider appends to the redirect URI.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    /// The authorization code.
    #[serde(default)]
    code: Option<String>,
    /// The state from `POST /auth/sso/initiate`.
    #[serde(default)]
    state: Option<String>,
    /// Set instead of `code` when the identity provider refused the sign-in.
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_description: Option<String>,
    /// The issuer (RFC 9207), when the identity provider sends it: must be the connection's.
    #[serde(default)]
    iss: Option<String>,
}

/// A started sign-in as Redis keeps it (under `gw_shared::sso::state_key(state)`).
#[derive(Serialize, Deserialize)]
struct Pending {
    connection_id: Uuid,
    nonce: String,
    pkce_verifier: String,
    created_at: DateTime<Utc>,
    /// SHA-256 (hex) of the value of the cookie set on the browser that started the sign-in: the
    /// callback must come from that browser (no login CSRF).
    #[serde(default)]
    binding: String,
}

/// The cookie binding a sign-in to the browser that started it.
const BINDING_COOKIE: &str = "gw_sso_binding";

fn binding_hash(value: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(value.as_bytes()))
}

/// The binding cookie (`value` empty with `max_age` 0 clears it). Only the SSO paths see it;
/// `SameSite=Lax` lets the identity provider's redirect (a top-level GET) carry it.
fn binding_cookie(state: &AppState, value: &str, max_age: i64) -> actix_web::cookie::Cookie<'static> {
    let mut c = actix_web::cookie::Cookie::build(BINDING_COOKIE, value.to_string())
        .path("/api/v1/auth/sso")
        .http_only(true)
        .same_site(actix_web::cookie::SameSite::Lax)
        .max_age(actix_web::cookie::time::Duration::seconds(max_age))
        .finish();
    c.set_secure(state.cfg.admin.public_base().starts_with("https://"));
    c
}

fn redis_error(e: impl Into<gw_shared::Error>) -> ApiError {
    ApiError::from(e.into())
}

async fn store(state: &AppState, csrf: &str, pending: &Pending) -> ApiResult<()> {
    let text = serde_json::to_string(pending).map_err(|e| ApiError::Internal(format!("encoding SSO state: {e}")))?;
    let mut rc = state.redis.get().await.map_err(redis_error)?;
    let _: () = deadpool_redis::redis::cmd("SET")
        .arg(sso::state_key(csrf))
        .arg(text)
        .arg("EX")
        .arg(sso::STATE_TTL_SECS)
        .query_async(&mut rc)
        .await
        .map_err(redis_error)?;
    Ok(())
}

/// Takes a started sign-in (GETDEL: a state works once).
async fn take(state: &AppState, csrf: &str) -> ApiResult<Option<Pending>> {
    let mut rc = state.redis.get().await.map_err(redis_error)?;
    let text: Option<String> = deadpool_redis::redis::cmd("GETDEL")
        .arg(sso::state_key(csrf))
        .query_async(&mut rc)
        .await
        .map_err(redis_error)?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

/// Start an SSO sign-in: the identity provider's authorization URL for the connection of the
/// e-mail's domain (or the given connection).
#[utoipa::path(tag = "auth", security(()), request_body = InitiateBody,
    responses((status = 200, description = "Send the user to `authorization_url`", body = InitiateOut), Errors))]
#[post("/auth/sso/initiate")]
pub async fn initiate(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: crate::body::Json<InitiateBody>,
) -> ApiResult<HttpResponse> {
    throttle::attempt(&state, &req, "sso").await?;
    let b = body.into_inner();
    let mut conn = state.conn().await?;
    let (connection, hint) = match (b.email, b.connection_id) {
        (Some(raw), None) => {
            let email = validate::email("email", &raw)?;
            let not_found = || ApiError::NotFound("SSO connection for this e-mail domain");
            let domain = gw_shared::email::domain(&email.normalized).ok_or_else(not_found)?;
            let c = sso_db::find_by_domain(&mut conn, domain).await?.filter(|c| c.enabled).ok_or_else(not_found)?;
            (c, Some(email.display))
        }
        (None, Some(id)) => {
            let c = sso_db::find_by_id(&mut conn, id)
                .await?
                .filter(|c| c.enabled)
                .ok_or(ApiError::NotFound("SSO connection"))?;
            (c, None)
        }
        _ => return Err(ApiError::Validation("send either email or connection_id".into())),
    };
    let org = orgs::find(&mut conn, connection.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    if !sso::plan_allows_sso(&org.plan) {
        return Err(plan_required(&org.plan));
    }
    // No database connection is held across the identity provider's discovery.
    drop(conn);
    let redirect = redirect_uri(&state);
    let started =
        oidc::authorization_request(&state, &connection.issuer, &connection.client_id, &redirect, hint.as_deref())
            .await?;
    let binding = {
        use base64::Engine;
        let bytes: [u8; 32] = rand::random();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    };
    let pending = Pending {
        connection_id: connection.id,
        nonce: started.nonce,
        pkce_verifier: started.pkce_verifier,
        created_at: Utc::now(),
        binding: binding_hash(&binding),
    };
    store(&state, &started.state, &pending).await?;
    let ttl = i64::try_from(sso::STATE_TTL_SECS).unwrap_or(600);
    Ok(HttpResponse::Ok().cookie(binding_cookie(&state, &binding, ttl)).json(InitiateOut {
        authorization_url: started.url,
        state: started.state,
        expires_in: sso::STATE_TTL_SECS,
    }))
}

/// An identity provider's error code, reduced to the characters such codes use.
fn idp_code(raw: &str) -> String {
    raw.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || *c == '.').take(64).collect()
}

/// An identity provider's free text, without control characters and bounded.
fn idp_text(raw: &str) -> String {
    raw.chars().filter(|c| !c.is_control()).take(MAX_IDP_TEXT).collect()
}

/// The name a new account gets: the ID token's `name`, else the e-mail's local part.
fn display_name(claimed: Option<&str>, email: &Email) -> String {
    if let Some(name) = claimed.and_then(|n| validate::text("name", n, 200).ok()) {
        return name;
    }
    let local = email.display.rsplit_once('@').map(|(l, _)| l).unwrap_or(email.display.as_str());
    let cleaned: String = local.chars().filter(|c| !c.is_control()).take(200).collect();
    if cleaned.is_empty() {
        "SSO user".to_string()
    } else {
        cleaned
    }
}

/// Complete an SSO sign-in: where the identity provider sends the user back. Returns the new
/// session's tokens.
#[utoipa::path(tag = "auth", security(()), params(CallbackQuery),
    responses((status = 200, description = "Signed in", body = TokenResponse), Errors))]
#[get("/auth/sso/callback")]
pub async fn callback(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: crate::body::Query<CallbackQuery>,
) -> ApiResult<HttpResponse> {
    let q = q.into_inner();
    // The state is spent whatever happens next.
    let pending = match q.state.as_deref() {
        Some(s) if sso::plausible_state(s) => take(&state, s).await?,
        _ => None,
    };
    if let Some(error) = q.error.as_deref() {
        let description = q.error_description.as_deref().map(idp_text).filter(|d| !d.is_empty());
        let message = match description {
            Some(d) => format!("the identity provider refused the sign-in: {} ({d})", idp_code(error)),
            None => format!("the identity provider refused the sign-in: {}", idp_code(error)),
        };
        return Err(ApiError::Unauthorized(message));
    }
    let Some(pending) = pending else {
        return Err(ApiError::Unauthorized("unknown or expired SSO state: start the sign-in again".into()));
    };
    let cookie = req.cookie(BINDING_COOKIE).map(|c| c.value().to_string()).unwrap_or_default();
    if pending.binding.is_empty() || cookie.is_empty() || binding_hash(&cookie) != pending.binding {
        return Err(ApiError::Unauthorized(
            "this sign-in was not started in this browser: start the sign-in again".into(),
        ));
    }
    // Redis expires it; this also holds if the key outlived its TTL (a restored snapshot).
    let age = (Utc::now() - pending.created_at).num_seconds();
    if u64::try_from(age).is_ok_and(|age| age > sso::STATE_TTL_SECS) {
        return Err(ApiError::Unauthorized("unknown or expired SSO state: start the sign-in again".into()));
    }
    let code = q
        .code
        .filter(|c| !c.is_empty() && c.len() <= MAX_CODE_LEN)
        .ok_or_else(|| ApiError::Unauthorized("the callback has no authorization code".into()))?;

    let mut conn = state.conn().await?;
    let connection = sso_db::find_by_id(&mut conn, pending.connection_id)
        .await?
        .filter(|c| c.enabled)
        .ok_or_else(|| ApiError::Unauthorized("this SSO connection no longer exists or is disabled".into()))?;
    if q.iss.as_deref().is_some_and(|iss| iss != connection.issuer) {
        return Err(ApiError::Unauthorized("the callback's iss does not match the connection's issuer".into()));
    }
    let org = orgs::find(&mut conn, connection.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    if !sso::plan_allows_sso(&org.plan) {
        return Err(plan_required(&org.plan));
    }
    let client_secret = connection.client_secret(keyring(&state)?)?;
    // No database connection is held across the token exchange.
    drop(conn);

    let redirect = redirect_uri(&state);
    let identity = oidc::exchange(
        &state,
        oidc::Exchange {
            issuer: &connection.issuer,
            client_id: &connection.client_id,
            client_secret: &client_secret,
            redirect_uri: &redirect,
            groups_claim: &connection.groups_claim,
            code,
            nonce: pending.nonce,
            pkce_verifier: pending.pkce_verifier,
        },
    )
    .await?;
    let email = gw_shared::email::parse(&identity.email)
        .map_err(|_| ApiError::Unauthorized("the identity provider sent an invalid e-mail address".into()))?;
    if !sso::email_in_domains(&email.normalized, &connection.email_domains) {
        let domain = gw_shared::email::domain(&email.normalized).unwrap_or_default();
        return Err(ApiError::Unauthorized(format!(
            "the e-mail domain {domain} does not sign in through this SSO connection"
        )));
    }
    let default = sso::grantable_role(&connection.default_role).unwrap_or(Role::Viewer);
    let role = sso::role_for(&identity.groups, &sso::role_mapping_from_json(&connection.role_mapping), default);
    let team_ids = sso::teams_for(&identity.groups, &sso::team_mapping_from_json(&connection.team_mapping));
    let login = Login {
        connection: &connection,
        org: &org,
        email: &email,
        name: display_name(identity.name.as_deref(), &email),
        role,
        team_ids: &team_ids,
        subject: &identity.subject,
        email_verified: identity.email_verified,
        request_id: trail::request_id(&req),
    };
    let mut conn = state.conn().await?;
    let state_ref = state.get_ref();
    let tokens = conn.transaction(async |tx| provision(state_ref, tx, &login).await).await?;
    log::info!(
        "SSO sign-in of user {} to org {} through connection {} as {}",
        tokens.user.id,
        org.id,
        connection.id,
        tokens.role
    );
    Ok(HttpResponse::Ok().cookie(binding_cookie(&state, "", 0)).json(tokens))
}

/// A verified sign-in, ready to provision.
struct Login<'a> {
    connection: &'a Connection,
    org: &'a orgs::Organization,
    email: &'a Email,
    name: String,
    /// The role the groups map to.
    role: Role,
    team_ids: &'a [Uuid],
    subject: &'a str,
    email_verified: Option<bool>,
    request_id: Option<String>,
}

impl Login<'_> {
    /// An admin audit event of this sign-in, by the signed-in user (built here rather than
    /// through `trail::record`, whose request is not `Send`, so it commits with the change).
    fn event(&self, user_id: Uuid, role: Role, action: &str, detail: Value) -> Event {
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

/// The account of the address, created without a password when there is none.
async fn find_or_create_user(conn: &mut AsyncPgConnection, login: &Login<'_>) -> ApiResult<(User, bool)> {
    if let Some(user) = users::find_by_email(conn, &login.email.normalized).await? {
        return Ok((user, false));
    }
    let new = NewUser {
        id: new_id(),
        email: &login.email.display,
        email_normalized: &login.email.normalized,
        name: &login.name,
        password_hash: None,
    };
    match users::insert(conn, &new).await {
        Ok(user) => Ok((user, true)),
        Err(e) if is_unique_violation(&e) => {
            Err(ApiError::Conflict("this account was created by a concurrent sign-in; sign in again".into()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Just-in-time provisioning and the session, in one transaction: the user (created if new),
/// its membership (added with the mapped role; an existing member's role set to it, except an
/// owner's), its mapped teams (added to, never removed from), the audit events, the tokens.
async fn provision(state: &AppState, conn: &mut AsyncPgConnection, login: &Login<'_>) -> ApiResult<TokenResponse> {
    let (user, created) = find_or_create_user(conn, login).await?;
    let org_id = login.org.id;
    let (membership, joined) = sso_db::ensure_membership(conn, org_id, user.id, login.role.as_str()).await?;
    // An account that already existed with a password, joining this organization through its
    // identity provider: whoever set that password (perhaps someone who signed the address up
    // before its owner) loses it, with every session it opened. The provider has just proved
    // who holds the address; passwords are never verified by mail here.
    let password_cleared = joined && !created && user.password_hash.is_some();
    if password_cleared {
        users::clear_password(conn, user.id).await?;
        gw_shared::db::sessions::revoke_all_for_user(conn, user.id).await?;
    }
    let current = membership.role.parse::<Role>().ok();
    let role = if current == Some(Role::Owner) {
        Role::Owner
    } else {
        if current != Some(login.role) {
            users::set_role(conn, org_id, user.id, login.role.as_str()).await?;
        }
        login.role
    };
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
        "password_cleared": password_cleared,
        "teams": added_teams,
    });
    admin_audit::insert(conn, &login.event(user.id, role, "user.sso_login", detail)).await?;
    tokens::open_session(state, conn, &user, login.org, role.as_str(), "sso").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idp_errors_are_reduced_before_being_repeated() {
        assert_eq!(idp_code("access_denied"), "access_denied");
        assert_eq!(idp_code("bad<script>code"), "badscriptcode");
        assert_eq!(idp_code(&"a".repeat(500)).len(), 64);
        assert_eq!(idp_text("line\nbreak"), "linebreak");
        assert_eq!(idp_text(&"x".repeat(1000)).chars().count(), MAX_IDP_TEXT);
    }

    #[test]
    fn names_fall_back_to_the_local_part() {
        let email = gw_shared::email::parse("Jane.Doe@example.com").unwrap();
        assert_eq!(display_name(Some(" Jane Doe "), &email), "Jane Doe");
        assert_eq!(display_name(None, &email), "Jane.Doe");
        assert_eq!(display_name(Some("   "), &email), "Jane.Doe");
        assert_eq!(display_name(Some("a\u{0}b"), &email), "Jane.Doe");
    }

    #[test]
    fn pending_sign_ins_round_trip() {
        let p = Pending {
            connection_id: Uuid::now_v7(),
            nonce: "n".into(),
            pkce_verifier: "v".into(),
            created_at: Utc::now(),
            binding: binding_hash("cookie value"),
        };
        let back: Pending = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back.connection_id, p.connection_id);
        assert_eq!(back.pkce_verifier, "v");
        assert_eq!(back.binding, binding_hash("cookie value"));
        assert_ne!(back.binding, binding_hash("another"), "the hash tells values apart");
        assert!(!back.binding.contains("cookie"), "only the hash is kept");
    }
}
