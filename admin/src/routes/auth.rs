//! Sign-up, sign-in, refresh-token rotation and sign-out.
//!
//! Sign-in work is bounded: attempts are throttled per client address and failed sign-ins per
//! account (Redis, shared by replicas) before any hashing; hashing waits for one of a few slots
//! (`admin.max_concurrent_hashes`) and never holds a database connection. Unknown accounts are
//! verified against a dummy hash so timing does not tell them apart.

use actix_web::{post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::accounts::{create_org_with_owner, ROLE_OWNER};
use gw_shared::crypto::EncryptionKey;
use gw_shared::db::{orgs, refresh_tokens, sessions, users};
use gw_shared::ids::new_id;
use gw_shared::keys::{hash_secret, MAX_BEARER_LEN};
use gw_shared::password::MAX_PASSWORD_LEN;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{is_unique_violation, ApiError, ApiResult, Errors};
use crate::passwords::{hash_new_password, password_rules, prove_account, verify, Proof};
use crate::session::Session;
use crate::state::AppState;
use crate::tokens::{self, Scope, SessionRef, TokenResponse};
use crate::trail::{self, Actor, Entry};
use crate::{throttle, validate};

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(register).service(verify_email).service(login).service(refresh).service(logout);
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterBody {
    email: String,
    /// 12 to 1024 characters, at least 5 different ones; not a well-known password.
    password: String,
    name: String,
    org_name: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginBody {
    email: String,
    password: String,
    /// The organization to sign in to, for a user of several; default: the oldest membership.
    #[serde(default)]
    organization_id: Option<Uuid>,
    /// The current code of the account's authenticator app, when it has a second factor.
    #[serde(default)]
    totp_code: Option<String>,
    /// One of the account's recovery codes, instead of `totp_code` (each works once).
    #[serde(default)]
    recovery_code: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefreshBody {
    refresh_token: String,
}

/// The answer to every sign-up when addresses are verified: the same for a new address and a
/// registered one, so sign-up does not tell which addresses have accounts.
#[derive(Serialize, ToSchema)]
pub struct VerificationSent {
    /// Always `verification_sent`.
    status: &'static str,
    message: &'static str,
}

const VERIFICATION_SENT: VerificationSent = VerificationSent {
    status: "verification_sent",
    message: "If this address can be registered, a confirmation link is on its way to it; the link completes \
              the sign-up.",
};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyBody {
    /// The token from the confirmation link.
    token: String,
    /// The password chosen at sign-up: a link alone does not complete a sign-up someone else
    /// may have started with this address and a password of their own.
    password: String,
}

/// Create an organization and its owner. With `admin.email_verification` off (the default) the
/// answer is 201 with the owner's session, and 409 when the address is registered; with it on,
/// always 202 `verification_sent`, and the session comes from `POST /auth/verify-email`.
#[utoipa::path(tag = "auth", security(()), request_body = RegisterBody,
    responses((status = 201, description = "Registered and signed in", body = TokenResponse),
              (status = 202, description = "Confirmation link sent (when addresses are verified)", body = VerificationSent),
              Errors))]
#[post("/auth/register")]
pub async fn register(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: crate::body::Json<RegisterBody>,
) -> ApiResult<HttpResponse> {
    throttle::attempt(&state, &req, "register").await?;
    signup_open(&state)?;
    let b = body.into_inner();
    let email = validate::email("email", &b.email)?;
    let name = validate::text("name", &b.name, 200)?;
    let org_name = validate::text("org_name", &b.org_name, 200)?;
    password_rules(&b.password, &email.normalized)?;
    // Hashed on both paths below, so a registered address takes as long as a new one.
    let hash = hash_new_password(&state, b.password).await?;

    let mut conn = state.conn().await?;
    if state.cfg.admin.email_verification {
        let pending = Pending { email, name, org_name, password_hash: hash };
        pending_sign_up(&state, &mut conn, pending).await?;
        return Ok(HttpResponse::Accepted().json(VERIFICATION_SENT));
    }
    let (org, user) = match create_org_with_owner(&mut conn, &email, &name, &hash, &org_name).await {
        Ok(v) => v,
        Err(e) if is_unique_violation(&e) => {
            return Err(ApiError::Conflict("this e-mail address cannot be registered; sign in instead".into()))
        }
        Err(e) => return Err(e.into()),
    };
    let tokens = signed_up(&state, &mut conn, &req, &org, &user).await?;
    Ok(HttpResponse::Created().json(tokens))
}

/// Sign-up is refused unless the operator opened it (`admin.signup = "open"`).
fn signup_open(state: &AppState) -> ApiResult<()> {
    use gw_shared::config::SignupMode;
    match state.cfg.admin.signup {
        SignupMode::Open => Ok(()),
        SignupMode::InviteOnly => Err(ApiError::Forbidden(
            "sign-up is by invitation only on this gateway: ask an organization for an invite".into(),
        )),
        SignupMode::Closed => Err(ApiError::Forbidden("sign-up is closed on this gateway".into())),
    }
}

struct Pending {
    email: gw_shared::email::Email,
    name: String,
    org_name: String,
    password_hash: String,
}

/// Queues the confirmation mail of a sign-up, or, for an address that already has an account,
/// a notice to its owner (no token): the caller answers the same either way.
async fn pending_sign_up(state: &AppState, conn: &mut AsyncPgConnection, p: Pending) -> ApiResult<()> {
    use gw_shared::db::registrations::{self, Mail};
    let now = Utc::now();
    let existing = users::find_by_email(conn, &p.email.normalized).await?;
    let mail = if existing.is_some() {
        Mail {
            id: new_id(),
            to_address: p.email.display.clone(),
            kind: "registration_attempt".into(),
            subject: "Someone tried to sign up with your address".into(),
            body: "Someone tried to create a gw organization with this address, which already has an account. \
                   If it was you, sign in instead. Otherwise you can ignore this message."
                .into(),
            created_at: now,
            sent_at: None,
        }
    } else {
        let token = format!("ver_{}", random_token(40));
        let ttl = chrono::Duration::seconds(state.cfg.admin.verification_ttl_secs);
        let row = registrations::Pending {
            id: new_id(),
            email: p.email.display.clone(),
            email_normalized: p.email.normalized.clone(),
            name: p.name,
            org_name: p.org_name,
            password_hash: p.password_hash,
            token_hash: hash_secret(&token).to_vec(),
            created_at: now,
            expires_at: now + ttl,
            completed_at: None,
        };
        registrations::insert(conn, &row).await?;
        Mail {
            id: new_id(),
            to_address: p.email.display.clone(),
            kind: "verify_email".into(),
            subject: "Confirm your address to finish signing up".into(),
            body: format!(
                "Confirm your address to create your gw organization: {}/verify-email#token={token}\n\
                 Or send {{\"token\": \"{token}\"}} to POST /api/v1/auth/verify-email. The link expires at {}.",
                state.cfg.admin.public_base(),
                (now + ttl).to_rfc3339()
            ),
            created_at: now,
            sent_at: None,
        }
    };
    registrations::enqueue(conn, &mail).await?;
    Ok(())
}

fn random_token(len: usize) -> String {
    use rand::distributions::Alphanumeric;
    use rand::Rng;
    rand::rngs::OsRng.sample_iter(&Alphanumeric).take(len).map(char::from).collect()
}

/// Records the new organization and opens the owner's first session.
async fn signed_up(
    state: &AppState,
    conn: &mut AsyncPgConnection,
    req: &HttpRequest,
    org: &orgs::Organization,
    user: &users::User,
) -> ApiResult<TokenResponse> {
    let actor = Actor { user_id: Some(user.id), role: Some(ROLE_OWNER.into()) };
    let entry = Entry {
        action: "organization.create",
        resource_type: "organization",
        resource_id: Some(org.id.to_string()),
        detail: serde_json::json!({"name": org.name}),
    };
    trail::record(conn, org.id, actor, req, entry).await?;
    log::info!("registered org {} with owner {}", org.id, user.id);
    tokens::open_session(state, conn, user, org, ROLE_OWNER, "password").await
}

/// Complete a sign-up with the token of its confirmation link: creates the organization and its
/// owner and returns the owner's session. A token works once, until it expires.
#[utoipa::path(tag = "auth", security(()), request_body = VerifyBody,
    responses((status = 201, description = "Registered and signed in", body = TokenResponse), Errors))]
#[post("/auth/verify-email")]
pub async fn verify_email(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: crate::body::Json<VerifyBody>,
) -> ApiResult<HttpResponse> {
    throttle::attempt(&state, &req, "verify").await?;
    signup_open(&state)?;
    let b = body.into_inner();
    let token = b.token.clone();
    let invalid = || ApiError::field("token", "this confirmation link is invalid, expired or already used");
    if token.is_empty() || token.len() > MAX_BEARER_LEN {
        return Err(invalid());
    }
    let hash = hash_secret(&token);
    let pending = {
        let mut conn = state.conn().await?;
        gw_shared::db::registrations::find_live(&mut conn, &hash).await?.ok_or_else(invalid)?
    };
    if b.password.len() > MAX_PASSWORD_LEN || !verify(&state, b.password, Some(pending.password_hash)).await? {
        return Err(ApiError::field("password", "is not the password chosen at sign-up"));
    }
    let mut conn = state.conn().await?;
    let created = conn
        .transaction(async |conn| {
            let Some(p) = gw_shared::db::registrations::find_live_for_update(conn, &hash).await? else {
                return Ok::<_, ApiError>(None);
            };
            gw_shared::db::registrations::complete(conn, p.id).await?;
            let email = gw_shared::email::Email { display: p.email, normalized: p.email_normalized };
            match create_org_with_owner(conn, &email, &p.name, &p.password_hash, &p.org_name).await {
                Ok(v) => Ok(Some(v)),
                // Registered meanwhile (another link, an invite, SSO): the account exists.
                Err(e) if is_unique_violation(&e) => {
                    Err(ApiError::Conflict("this address was registered meanwhile; sign in instead".into()))
                }
                Err(e) => Err(e.into()),
            }
        })
        .await?;
    let (org, user) = created.ok_or_else(invalid)?;
    let tokens = signed_up(&state, &mut conn, &req, &org, &user).await?;
    Ok(HttpResponse::Created().json(tokens))
}

/// Sign in with e-mail and password.
#[utoipa::path(tag = "auth", security(()), request_body = LoginBody,
    responses((status = 200, description = "Signed in", body = TokenResponse), Errors))]
#[post("/auth/login")]
pub async fn login(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: crate::body::Json<LoginBody>,
) -> ApiResult<HttpResponse> {
    throttle::attempt(&state, &req, "login").await?;
    let b = body.into_inner();
    let invalid = || ApiError::Unauthorized("invalid email or password".into());
    let email = validate::email("email", &b.email)?;
    if b.password.len() > MAX_PASSWORD_LEN {
        return Err(invalid());
    }
    // The connection goes back to the pool before the slow hash.
    let user = {
        let mut conn = state.conn().await?;
        users::find_by_email(&mut conn, &email.normalized).await?
    };
    let Some(user) = user else {
        // Unknown accounts cost a hash and count like known ones, so neither timing nor
        // throttling tells them apart.
        throttle::account_attempt(&state, &req, &email.normalized).await?;
        let _ = verify(&state, b.password, None).await?;
        return Err(invalid());
    };
    let proof = Proof { password: b.password, totp_code: b.totp_code, recovery_code: b.recovery_code };
    prove_account(&state, &req, &user, proof).await?;
    let mut conn = state.conn().await?;
    let membership = match b.organization_id {
        Some(org_id) => users::membership(&mut conn, org_id, user.id).await?,
        None => users::primary_membership(&mut conn, user.id).await?,
    };
    let membership =
        membership.ok_or_else(|| ApiError::Unauthorized("this account belongs to no such organization".into()))?;
    let org = orgs::find(&mut conn, membership.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    // Where the organization requires a second factor this account has not enrolled, the
    // session is good only for enrolling it.
    let tokens = tokens::open_session(&state, &mut conn, &user, &org, &membership.role, "password").await?;
    Ok(HttpResponse::Ok().json(tokens))
}

enum Rotation {
    Rotated(Box<TokenResponse>),
    Rejected(&'static str),
}

/// What a rotated token keeps of its successor, sealed with a key derived from itself.
#[derive(Serialize, Deserialize)]
struct Successor {
    token: String,
    expires_at: DateTime<Utc>,
}

const SUCCESSOR_PURPOSE: &[u8] = b"gw refresh-token successor v1";

fn seal_successor(presented: &str, row: Uuid, s: &Successor) -> ApiResult<Vec<u8>> {
    let key = EncryptionKey::derive_from_secret(presented.as_bytes(), SUCCESSOR_PURPOSE)?;
    let plain = serde_json::to_vec(s).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(key.encrypt(&plain, row.as_bytes())?)
}

fn open_successor(presented: &str, row: Uuid, sealed: &[u8]) -> Option<Successor> {
    let key = EncryptionKey::derive_from_secret(presented.as_bytes(), SUCCESSOR_PURPOSE).ok()?;
    serde_json::from_slice(&key.decrypt(sealed, row.as_bytes()).ok()?).ok()
}

/// Exchange a refresh token for new tokens. Each refresh token works once: a second use within
/// `admin.refresh_grace_secs` (two tabs refreshing at once) gets the same successor; any later
/// reuse revokes the whole session.
#[utoipa::path(tag = "auth", security(()), request_body = RefreshBody,
    responses((status = 200, description = "New tokens", body = TokenResponse), Errors))]
#[post("/auth/refresh")]
pub async fn refresh(state: web::Data<AppState>, body: crate::body::Json<RefreshBody>) -> ApiResult<HttpResponse> {
    let token = body.into_inner().refresh_token;
    if token.is_empty() || token.len() > MAX_BEARER_LEN {
        return Err(ApiError::Unauthorized("invalid refresh token".into()));
    }
    let hash = hash_secret(&token);
    let mut conn = state.conn().await?;
    let state_ref = state.get_ref();
    // The rejection paths commit too: revoking a session on reuse must stick.
    let outcome = conn.transaction(async |conn| rotate(state_ref, conn, &token, &hash).await).await?;
    match outcome {
        Rotation::Rotated(tokens) => Ok(HttpResponse::Ok().json(tokens)),
        Rotation::Rejected(why) => Err(ApiError::Unauthorized(why.into())),
    }
}

async fn rotate(state: &AppState, conn: &mut AsyncPgConnection, token: &str, hash: &[u8]) -> ApiResult<Rotation> {
    let Some(rt) = refresh_tokens::find_for_update(conn, hash).await? else {
        return Ok(Rotation::Rejected("invalid refresh token"));
    };
    if rt.revoked_at.is_some() {
        return Ok(Rotation::Rejected("refresh token revoked"));
    }
    let Some(session) = sessions::find(conn, rt.family_id).await? else {
        return Ok(Rotation::Rejected("this session has ended; sign in again"));
    };
    if session.revoked_at.is_some() || session.expires_at <= Utc::now() {
        return Ok(Rotation::Rejected("this session has ended; sign in again"));
    }
    let Some(m) = users::membership(conn, rt.org_id, rt.user_id).await? else {
        return Ok(Rotation::Rejected("no longer a member of this organization"));
    };
    let user = users::find(conn, rt.user_id).await?.ok_or(ApiError::NotFound("user"))?;
    let org = orgs::find(conn, rt.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    let sref = SessionRef { id: session.id, expires_at: session.expires_at, scope: Scope::parse(&session.scope) };
    if let Some(used_at) = rt.used_at {
        let grace = chrono::Duration::seconds(state.cfg.admin.refresh_grace_secs);
        let successor = rt.successor_sealed.as_deref().and_then(|s| open_successor(token, rt.id, s));
        if let Some(next) = successor.filter(|_| Utc::now() - used_at <= grace) {
            if refresh_tokens::is_live(conn, &hash_secret(&next.token)).await? {
                let tokens = tokens::response(state, &user, &org, &m.role, &sref, next.token, next.expires_at)?;
                return Ok(Rotation::Rotated(Box::new(tokens)));
            }
        }
        sessions::revoke(conn, rt.family_id).await?;
        state.metrics.refresh_reuse.inc();
        log::warn!("refresh token reuse for user {}: session {} revoked", rt.user_id, rt.family_id);
        return Ok(Rotation::Rejected("refresh token already used; this session was revoked: sign in again"));
    }
    if rt.expires_at <= Utc::now() {
        return Ok(Rotation::Rejected("refresh token expired"));
    }
    let (tokens, _) = tokens::issue(state, conn, &user, &org, &m.role, &sref).await?;
    let expires_at = Utc::now() + chrono::Duration::seconds(tokens.refresh_expires_in);
    let sealed = seal_successor(token, rt.id, &Successor { token: tokens.refresh_token.clone(), expires_at })?;
    refresh_tokens::mark_used(conn, rt.id, &sealed).await?;
    Ok(Rotation::Rotated(Box::new(tokens)))
}

/// Sign out: ends this session at once (its access and refresh tokens stop working).
#[utoipa::path(tag = "auth", responses((status = 204, description = "Signed out"), Errors))]
#[post("/auth/logout")]
pub async fn logout(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    sessions::revoke(&mut conn, session.session_id).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successors_open_only_with_the_presented_token() {
        let row = Uuid::now_v7();
        let s = Successor { token: "rt_next".into(), expires_at: Utc::now() };
        let sealed = seal_successor("rt_old", row, &s).unwrap();
        assert_eq!(open_successor("rt_old", row, &sealed).map(|s| s.token).as_deref(), Some("rt_next"));
        assert!(open_successor("rt_other", row, &sealed).is_none());
        assert!(open_successor("rt_old", Uuid::now_v7(), &sealed).is_none());
    }
}
