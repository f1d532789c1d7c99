//! SSO sign-in (OpenID Connect, authorization code flow with PKCE):
//!
//! 1. `POST /auth/sso/initiate` with the user's `email` (its domain picks the connection) or a
//!    `connection_id`: returns the identity provider's authorization URL. The state, nonce and
//!    PKCE verifier stay server-side in Redis under the state for ten minutes.
//! 2. The identity provider sends the browser to `GET /auth/sso/callback?code&state`: the state
//!    is taken (single use) and checked against the browser's binding cookie, the code
//!    exchanged, the ID token verified (signature, issuer, audience, expiry, nonce), and the
//!    identity (connection, issuer, subject) looked up:
//!    - linked to an account: that account is signed in, made a member with the role its
//!      groups map to (an owner stays owner), added to the teams its groups map to;
//!    - new, and no account has the address: an account is created without a password (just-in-
//!      time provisioning, only for addresses of the connection's proven domains) and linked;
//!    - new, and an account has the address: nothing is signed in or changed. The answer is 202
//!      with a `link_token`; `POST /auth/sso/link` with it and the account's password links the
//!      identity and signs in. An address asserted by an identity provider never opens an
//!      existing account by itself.
//!
//! Members of an organization with SSO can still sign in with a password if they have one;
//! accounts created through SSO have none (a password reset sets one). See docs/sso.md.

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
    cfg.service(initiate).service(callback).service(link);
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
    responses((status = 200, description = "Signed in", body = TokenResponse),
              (status = 202, description = "An account has this address: prove it to link the identity", body = LinkRequired),
              Errors))]
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
    let outcome = conn.transaction(async |tx| sign_in(state_ref, tx, &login).await).await?;
    let clear = binding_cookie(&state, "", 0);
    match outcome {
        Outcome::SignedIn(tokens) => {
            log::info!(
                "SSO sign-in of user {} to org {} through connection {} as {}",
                tokens.user.id,
                org.id,
                connection.id,
                tokens.role
            );
            Ok(HttpResponse::Ok().cookie(clear).json(tokens))
        }
        Outcome::LinkRequired(user_id) => {
            let token = random_token();
            let pending = PendingLink {
                connection_id: connection.id,
                issuer: connection.issuer.clone(),
                subject: identity.subject.clone(),
                user_id,
                groups: identity.groups.clone(),
                email_verified: identity.email_verified,
                created_at: Utc::now(),
            };
            store_link(&state, &token, &pending).await?;
            log::info!("SSO sign-in through connection {} needs a link to user {user_id}", connection.id);
            Ok(HttpResponse::Accepted().cookie(clear).json(LinkRequired {
                status: "link_required",
                message: LINK_MESSAGE,
                link_token: token,
                expires_in: sso::STATE_TTL_SECS,
            }))
        }
    }
}

const LINK_MESSAGE: &str = "An account with this e-mail address exists. Prove it is yours: send this link_token \
                            with the account's password to POST /api/v1/auth/sso/link (no password yet: reset it \
                            first). Until then, this identity signs nothing in.";

/// The answer to a sign-in whose identity is new while an account has its address.
#[derive(Serialize, ToSchema)]
pub struct LinkRequired {
    /// Always `link_required`.
    status: &'static str,
    message: &'static str,
    /// Send with the account's password to `POST /auth/sso/link`; single use.
    link_token: String,
    /// Seconds the link token lives.
    expires_in: u64,
}

/// A verified identity waiting for its account's proof (Redis, under the token's hash).
#[derive(Serialize, Deserialize)]
struct PendingLink {
    connection_id: Uuid,
    issuer: String,
    subject: String,
    user_id: Uuid,
    groups: Vec<String>,
    email_verified: Option<bool>,
    created_at: DateTime<Utc>,
}

fn random_token() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    format!("sso_link_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

fn link_key(token: &str) -> String {
    format!("gw:sso:link:{}", binding_hash(token))
}

async fn store_link(state: &AppState, token: &str, pending: &PendingLink) -> ApiResult<()> {
    let text = serde_json::to_string(pending).map_err(|e| ApiError::Internal(format!("encoding SSO link: {e}")))?;
    let mut rc = state.redis.get().await.map_err(redis_error)?;
    let _: () = deadpool_redis::redis::cmd("SET")
        .arg(link_key(token))
        .arg(text)
        .arg("EX")
        .arg(sso::STATE_TTL_SECS)
        .query_async(&mut rc)
        .await
        .map_err(redis_error)?;
    Ok(())
}

async fn take_link(state: &AppState, token: &str) -> ApiResult<Option<PendingLink>> {
    let mut rc = state.redis.get().await.map_err(redis_error)?;
    let text: Option<String> =
        deadpool_redis::redis::cmd("GETDEL").arg(link_key(token)).query_async(&mut rc).await.map_err(redis_error)?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
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
    let pending = take_link(&state, &b.link_token).await?.ok_or_else(invalid)?;
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

/// What a verified callback leads to.
enum Outcome {
    SignedIn(Box<TokenResponse>),
    /// An account (this one) has the address and no link to the identity: it must prove itself.
    LinkRequired(Uuid),
}

/// The identity's account: the linked one, or a new one when nobody has the address.
async fn sign_in(state: &AppState, conn: &mut AsyncPgConnection, login: &Login<'_>) -> ApiResult<Outcome> {
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
async fn admit(
    state: &AppState,
    conn: &mut AsyncPgConnection,
    login: &Login<'_>,
    user: User,
    created: bool,
) -> ApiResult<TokenResponse> {
    let org_id = login.org.id;
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
