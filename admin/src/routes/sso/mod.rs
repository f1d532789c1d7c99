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
use diesel_async::AsyncConnection;
use gw_shared::db::orgs;
use gw_shared::db::sso as sso_db;
use gw_shared::email::Email;
use gw_shared::roles::Role;
use gw_shared::sso;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::oidc;
use crate::sso_config::{plan_required, redirect_uri};
use crate::state::AppState;
use crate::tokens::TokenResponse;
use crate::{throttle, trail, validate};

mod link;
mod provision;

use link::{link_key, random_token, LinkRequired, PendingLink, LINK_MESSAGE};
use provision::{sign_in, Login, Outcome};

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(initiate).service(callback).service(link::link);
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

/// Keeps `value` as JSON under `key` for as long as a sign-in may take (`sso::STATE_TTL_SECS`).
async fn put_json<T: Serialize>(state: &AppState, key: &str, value: &T) -> ApiResult<()> {
    let text = serde_json::to_string(value).map_err(|e| ApiError::Internal(format!("encoding SSO state: {e}")))?;
    let mut rc = state.redis.get().await.map_err(redis_error)?;
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(text)
        .arg("EX")
        .arg(sso::STATE_TTL_SECS)
        .query_async(&mut rc)
        .await
        .map_err(redis_error)?;
    Ok(())
}

/// Takes what [`put_json`] kept (GETDEL: it works once).
async fn take_json<T: serde::de::DeserializeOwned>(state: &AppState, key: &str) -> ApiResult<Option<T>> {
    let mut rc = state.redis.get().await.map_err(redis_error)?;
    let text: Option<String> = redis::cmd("GETDEL").arg(key).query_async(&mut rc).await.map_err(redis_error)?;
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
    put_json(&state, &sso::state_key(&started.state), &pending).await?;
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
    // A browser the identity provider sent here is forwarded to the console, which brings `code`
    // and `state` back with `fetch` and keeps the tokens in its memory (docs/console.md); the
    // state is not spent by the forward.
    if navigated(&req) {
        let to = format!("/console#/sso-callback?{}", req.query_string());
        return Ok(HttpResponse::SeeOther().insert_header((actix_web::http::header::LOCATION, to)).finish());
    }
    let q = q.into_inner();
    // The state is spent whatever happens next.
    let pending = match q.state.as_deref() {
        Some(s) if sso::plausible_state(s) => take_json::<Pending>(&state, &sso::state_key(s)).await?,
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
    let client_secret = connection.client_secret(state.keyring("SSO connections need")?)?;
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
            put_json(&state, &link_key(&token), &pending).await?;
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

/// A top-level browser navigation (its `Accept` puts HTML first), not an API client.
fn navigated(req: &HttpRequest) -> bool {
    let accept = req.headers().get(actix_web::http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    accept.split(',').next().is_some_and(|first| first.trim().starts_with("text/html"))
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
