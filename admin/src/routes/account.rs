//! A person's own account: password change, password reset by mail, sign out everywhere, and
//! the second factor (TOTP with recovery codes). See docs/accounts.md.
//!
//! - `POST /auth/password`: the current password (and second factor) proves the change; every
//!   other session of the account ends.
//! - `POST /auth/password-reset`: always 202, whether or not the address has an account; when it
//!   has, a single-use link (1 hour by default) is mailed. `POST /auth/password-reset/confirm`
//!   with the link's token sets a new password, ends every session and clears the account's
//!   sign-in throttle. A second factor still applies at the next sign-in.
//! - `POST /auth/logout-all`: every session of the account, in every organization, ends.
//! - `/auth/totp/*`: enroll (`setup` with the password, then `enable` with a first code, which
//!   returns ten recovery codes once), see, disable, and replace the recovery codes.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::db::{orgs, sessions, users};
use gw_shared::keys::{hash_secret, MAX_BEARER_LEN};
use gw_shared::password::MAX_PASSWORD_LEN;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;

use crate::error::{ApiError, ApiResult, Errors};
use crate::passwords::{hash_new_password, password_rules, prove_account, Proof};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{self, Entry};
use crate::{mail, second_factor, throttle, validate};

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(change_password)
        .service(request_reset)
        .service(confirm_reset)
        .service(logout_all)
        .service(totp_status)
        .service(totp_setup)
        .service(totp_enable)
        .service(totp_disable)
        .service(recovery_codes);
}

/// Every reset token starts with this.
const RESET_TOKEN_PREFIX: &str = "pwr_";
/// Reset links one account may be sent per hour.
const RESETS_PER_HOUR: i64 = 5;

/// The rules for a new password, as a field error of `new_password` (never echoing it).
fn new_password_rules(password: &str, normalized_email: &str) -> ApiResult<()> {
    password_rules(password, normalized_email).map_err(|_| {
        ApiError::field(
            "new_password",
            "must be 12 to 1024 characters, at least 5 different, not a well-known password, not your address",
        )
    })
}

/// Proves the session's own account again; a wrong password is a field error of `field`.
async fn reprove(state: &AppState, req: &HttpRequest, user: &users::User, proof: Proof, field: &str) -> ApiResult<()> {
    prove_account(state, req, user, proof).await.map_err(|e| match e {
        ApiError::Unauthorized(_) => ApiError::field(field, "is not your current password"),
        other => other,
    })
}

async fn me(state: &AppState, session: &Session) -> ApiResult<users::User> {
    let mut conn = state.conn().await?;
    users::find(&mut conn, session.user_id).await?.ok_or(ApiError::NotFound("user"))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangePasswordBody {
    current_password: String,
    /// 12 to 1024 characters, at least 5 different ones; not a well-known password.
    new_password: String,
    #[serde(default)]
    totp_code: Option<String>,
    #[serde(default)]
    recovery_code: Option<String>,
}

/// Change your password. Every other session of your account ends; this one goes on.
#[utoipa::path(tag = "auth", request_body = ChangePasswordBody,
    responses((status = 204, description = "Changed"), Errors))]
#[post("/auth/password")]
pub async fn change_password(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<ChangePasswordBody>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let user = me(&state, &session).await?;
    if user.password_hash.is_none() {
        return Err(ApiError::Validation(
            "this account has no password yet: set one with POST /api/v1/auth/password-reset".into(),
        ));
    }
    new_password_rules(&b.new_password, &user.email_normalized)?;
    let proof = Proof { password: b.current_password, totp_code: b.totp_code, recovery_code: b.recovery_code };
    reprove(&state, &req, &user, proof, "current_password").await?;
    let hash = hash_new_password(&state, b.new_password).await?;
    let mut conn = state.conn().await?;
    let ended = conn
        .transaction(async |conn| {
            users::set_password(conn, user.id, &hash).await?;
            let ended = sessions::revoke_others(conn, user.id, session.session_id).await?;
            Ok::<_, ApiError>(ended)
        })
        .await?;
    let entry = Entry {
        action: "user.password_change",
        resource_type: "user",
        resource_id: Some(user.id.to_string()),
        detail: serde_json::json!({"sessions_ended": ended}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetRequestBody {
    email: String,
}

/// The answer to every reset request: the same whether or not the address has an account.
#[derive(Serialize, ToSchema)]
pub struct ResetSent {
    /// Always `reset_sent`.
    status: &'static str,
    message: &'static str,
}

const RESET_SENT: ResetSent = ResetSent {
    status: "reset_sent",
    message: "If this address has an account, a password reset link is on its way to it.",
};

fn random_token(len: usize) -> String {
    use rand::distributions::Alphanumeric;
    use rand::Rng;
    rand::rngs::OsRng.sample_iter(&Alphanumeric).take(len).map(char::from).collect()
}

/// Ask for a password reset link by mail. Always 202: the answer does not tell whether the
/// address has an account.
#[utoipa::path(tag = "auth", security(()), request_body = ResetRequestBody,
    responses((status = 202, description = "A link is mailed if the address has an account", body = ResetSent), Errors))]
#[post("/auth/password-reset")]
pub async fn request_reset(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: crate::body::Json<ResetRequestBody>,
) -> ApiResult<HttpResponse> {
    throttle::attempt(&state, &req, "reset").await?;
    let email = validate::email("email", &body.into_inner().email)?;
    let mut conn = state.conn().await?;
    let Some(user) = users::find_by_email(&mut conn, &email.normalized).await?.filter(|u| !u.is_service()) else {
        return Ok(HttpResponse::Accepted().json(RESET_SENT));
    };
    let since = Utc::now() - chrono::Duration::hours(1);
    if users::password_resets_since(&mut conn, user.id, since).await? >= RESETS_PER_HOUR {
        // Quietly: the mailbox already holds live links, and the answer stays the same.
        log::info!("password reset for user {} not sent: {RESETS_PER_HOUR} this hour already", user.id);
        return Ok(HttpResponse::Accepted().json(RESET_SENT));
    }
    let token = format!("{RESET_TOKEN_PREFIX}{}", random_token(40));
    let expires_at = Utc::now() + chrono::Duration::seconds(state.cfg.admin.password_reset_ttl_secs);
    let body = format!(
        "Someone asked to reset the password of your gw account. If it was you, choose a new password here:\n\n\
         {}/reset-password#token={token}\n\n\
         Or send {{\"token\": \"{token}\", \"new_password\": \"...\"}} to POST /api/v1/auth/password-reset/confirm.\n\
         The link works once, until {}. If it was not you, ignore this message: your password stays as it is.",
        state.cfg.admin.public_base(),
        expires_at.to_rfc3339()
    );
    conn.transaction(async |conn| {
        users::insert_password_reset(conn, user.id, &hash_secret(&token), expires_at).await?;
        mail::enqueue(conn, &user.email, "password_reset", "Reset your gw password", body).await
    })
    .await?;
    Ok(HttpResponse::Accepted().json(RESET_SENT))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetConfirmBody {
    /// The token of the reset link (`pwr_…`).
    token: String,
    /// 12 to 1024 characters, at least 5 different ones; not a well-known password.
    new_password: String,
}

/// Set a new password with a reset link's token. The token works once; every session of the
/// account ends. Sign in afterwards (with the second factor, if the account has one).
#[utoipa::path(tag = "auth", security(()), request_body = ResetConfirmBody,
    responses((status = 204, description = "Password set"), Errors))]
#[post("/auth/password-reset/confirm")]
pub async fn confirm_reset(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: crate::body::Json<ResetConfirmBody>,
) -> ApiResult<HttpResponse> {
    throttle::attempt(&state, &req, "reset").await?;
    let b = body.into_inner();
    let invalid = || ApiError::field("token", "this reset link is invalid, expired or already used");
    if !b.token.starts_with(RESET_TOKEN_PREFIX) || b.token.len() > MAX_BEARER_LEN {
        return Err(invalid());
    }
    let hash = hash_secret(&b.token);
    let mut conn = state.conn().await?;
    let state_ref = state.get_ref();
    // Spent in its own transaction, which a new password breaking the rules rolls back (the
    // link stays good); two confirmations at once cannot both pass.
    let user = conn
        .transaction(async |conn| {
            let Some(reset) = users::take_password_reset(conn, &hash).await? else {
                return Err(invalid());
            };
            let user = users::find(conn, reset.user_id).await?.ok_or_else(invalid)?;
            new_password_rules(&b.new_password, &user.email_normalized)?;
            Ok::<_, ApiError>(user)
        })
        .await?;
    let password_hash = hash_new_password(state_ref, b.new_password).await?;
    let ended = conn
        .transaction(async |conn| {
            users::set_password(conn, user.id, &password_hash).await?;
            Ok::<_, ApiError>(sessions::revoke_all_for_user(conn, user.id).await?)
        })
        .await?;
    throttle::account_reset(&state, &user.email_normalized).await;
    log::info!("password of user {} reset by mail; {ended} session(s) ended", user.id);
    Ok(HttpResponse::NoContent().finish())
}

/// Sign out everywhere: every session of your account, in every organization, ends now.
#[utoipa::path(tag = "auth", responses((status = 204, description = "Signed out everywhere"), Errors))]
#[post("/auth/logout-all")]
pub async fn logout_all(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let ended = sessions::revoke_all_for_user(&mut conn, session.user_id).await?;
    log::info!("user {} signed out everywhere ({ended} session(s))", session.user_id);
    Ok(HttpResponse::NoContent().finish())
}

/// Your second factor.
#[derive(Serialize, ToSchema)]
pub struct TotpStatus {
    enabled: bool,
    enabled_at: Option<DateTime<Utc>>,
    recovery_codes_left: i64,
    /// The organization of this session requires a second factor.
    required_by_organization: bool,
}

/// Whether your account has a second factor, and how many recovery codes are left.
#[utoipa::path(tag = "auth", responses((status = 200, body = TotpStatus), Errors))]
#[get("/auth/totp")]
pub async fn totp_status(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let user = users::find(&mut conn, session.user_id).await?.ok_or(ApiError::NotFound("user"))?;
    let org = orgs::find(&mut conn, session.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    let left = if user.has_totp() { users::recovery_codes_left(&mut conn, user.id).await? } else { 0 };
    Ok(HttpResponse::Ok().json(TotpStatus {
        enabled: user.has_totp(),
        enabled_at: user.totp_enabled_at,
        recovery_codes_left: left,
        required_by_organization: org.require_totp,
    }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TotpSetupBody {
    /// Your password: enrolling a second factor needs it.
    password: String,
}

/// A TOTP secret for your authenticator app; shown once.
#[derive(Serialize, ToSchema)]
pub struct TotpSetup {
    /// The secret, base32: type it into the app, or use `otpauth_uri` (a QR code).
    secret: String,
    otpauth_uri: String,
    /// Send a first code from the app to `POST /auth/totp/enable` to turn the second factor on.
    next: &'static str,
}

/// Start enrolling a second factor: a new TOTP secret (it replaces one not yet enabled).
#[utoipa::path(tag = "auth", request_body = TotpSetupBody, responses((status = 200, body = TotpSetup), Errors))]
#[post("/auth/totp/setup")]
pub async fn totp_setup(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<TotpSetupBody>,
) -> ApiResult<HttpResponse> {
    let user = me(&state, &session).await?;
    if user.has_totp() {
        return Err(ApiError::Conflict("a second factor is enabled already: disable it first".into()));
    }
    let password = body.into_inner().password;
    if user.password_hash.is_none() || password.len() > MAX_PASSWORD_LEN {
        return Err(ApiError::field("password", "is not your current password"));
    }
    let proof = Proof { password, totp_code: None, recovery_code: None };
    reprove(&state, &req, &user, proof, "password").await?;
    let ring = state.keyring("a second factor needs")?;
    let secret = second_factor::new_secret();
    let (version, sealed) = ring.seal(&secret, &users::totp_aad(user.id))?;
    let mut conn = state.conn().await?;
    if !users::set_pending_totp(&mut conn, user.id, version, &sealed).await? {
        return Err(ApiError::Conflict("a second factor is enabled already: disable it first".into()));
    }
    let (encoded, uri) = second_factor::enrollment(&state, &secret, &user.email)?;
    Ok(HttpResponse::Ok().json(TotpSetup {
        secret: encoded,
        otpauth_uri: uri,
        next: "POST /api/v1/auth/totp/enable with {\"code\": \"<6 digits>\"}",
    }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TotpEnableBody {
    /// The app's current 6-digit code.
    code: String,
}

/// Recovery codes: shown once; each signs in once in place of a TOTP code.
#[derive(Serialize, ToSchema)]
pub struct RecoveryCodes {
    recovery_codes: Vec<String>,
    warning: &'static str,
}

const RECOVERY_WARNING: &str = "Keep these codes somewhere safe: each works once in place of a code from your app, \
                                and they are shown only now.";

async fn issue_recovery_codes(conn: &mut AsyncPgConnection, user_id: uuid::Uuid) -> ApiResult<Vec<String>> {
    let codes = second_factor::new_recovery_codes();
    let hashes: Vec<[u8; 32]> = codes.iter().map(|(_, h)| *h).collect();
    users::replace_recovery_codes(conn, user_id, &hashes).await?;
    Ok(codes.into_iter().map(|(c, _)| c).collect())
}

/// Turn the second factor on with a first code from the app; returns the recovery codes. A
/// session opened only to enroll becomes a full one.
#[utoipa::path(tag = "auth", request_body = TotpEnableBody, responses((status = 200, body = RecoveryCodes), Errors))]
#[post("/auth/totp/enable")]
pub async fn totp_enable(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<TotpEnableBody>,
) -> ApiResult<HttpResponse> {
    let user = me(&state, &session).await?;
    if user.has_totp() {
        return Err(ApiError::Conflict("a second factor is enabled already".into()));
    }
    if user.totp_secret_sealed.is_none() {
        return Err(ApiError::Validation("start with POST /api/v1/auth/totp/setup".into()));
    }
    let code = body.into_inner().code;
    if code.len() > 32 || !second_factor::accept_code(&state, &user, &code).await? {
        return Err(ApiError::field("code", "is not the app's current code"));
    }
    let mut conn = state.conn().await?;
    let codes = conn
        .transaction(async |conn| {
            users::enable_totp(conn, user.id).await?;
            sessions::set_scope(conn, session.session_id, "full").await?;
            issue_recovery_codes(conn, user.id).await
        })
        .await?;
    let entry = Entry {
        action: "user.totp_enable",
        resource_type: "user",
        resource_id: Some(user.id.to_string()),
        detail: serde_json::json!({}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::Ok().json(RecoveryCodes { recovery_codes: codes, warning: RECOVERY_WARNING }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TotpProveBody {
    password: String,
    #[serde(default)]
    totp_code: Option<String>,
    #[serde(default)]
    recovery_code: Option<String>,
}

async fn prove_with_factor(
    state: &AppState,
    req: &HttpRequest,
    session: &Session,
    b: TotpProveBody,
) -> ApiResult<users::User> {
    let user = me(state, session).await?;
    if !user.has_totp() {
        return Err(ApiError::Conflict("this account has no second factor".into()));
    }
    let proof = Proof { password: b.password, totp_code: b.totp_code, recovery_code: b.recovery_code };
    reprove(state, req, &user, proof, "password").await?;
    Ok(user)
}

/// Turn the second factor off (password and a code, or a recovery code).
#[utoipa::path(tag = "auth", request_body = TotpProveBody, responses((status = 204, description = "Disabled"), Errors))]
#[post("/auth/totp/disable")]
pub async fn totp_disable(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<TotpProveBody>,
) -> ApiResult<HttpResponse> {
    let user = prove_with_factor(&state, &req, &session, body.into_inner()).await?;
    let mut conn = state.conn().await?;
    users::disable_totp(&mut conn, user.id).await?;
    let entry = Entry {
        action: "user.totp_disable",
        resource_type: "user",
        resource_id: Some(user.id.to_string()),
        detail: serde_json::json!({}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Replace your recovery codes (the old ones stop working).
#[utoipa::path(tag = "auth", request_body = TotpProveBody, responses((status = 200, body = RecoveryCodes), Errors))]
#[post("/auth/totp/recovery-codes")]
pub async fn recovery_codes(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<TotpProveBody>,
) -> ApiResult<HttpResponse> {
    let user = prove_with_factor(&state, &req, &session, body.into_inner()).await?;
    let mut conn = state.conn().await?;
    let codes = issue_recovery_codes(&mut conn, user.id).await?;
    Ok(HttpResponse::Ok().json(RecoveryCodes { recovery_codes: codes, warning: RECOVERY_WARNING }))
}
