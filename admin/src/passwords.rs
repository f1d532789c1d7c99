//! Passwords on the control plane: hashing and verification on the bounded hashing threads, the
//! rules a new password must meet, and the one proof of an account (password, then its second
//! factor when it has one) used by sign-in, SSO linking and invite acceptance.

use actix_web::HttpRequest;
use gw_shared::db::users::{self, User};
use gw_shared::password::{check_rules, dummy_hash, hash_password, verify_password, MAX_PASSWORD_LEN};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::{second_factor, throttle};

/// What a person gives to prove an account.
pub struct Proof {
    pub password: String,
    pub totp_code: Option<String>,
    pub recovery_code: Option<String>,
}

/// Proves an account: throttled per account and address before any hashing, the password
/// (against a dummy hash when the account has none, so timing tells nothing), then the second
/// factor when the account has one: a TOTP code (once per time step) or a recovery code (once).
/// Wrong: 401 `invalid email or password`; a missing or wrong second factor: 401
/// `second_factor_required`.
pub async fn prove_account(state: &AppState, req: &HttpRequest, user: &User, proof: Proof) -> ApiResult<()> {
    let invalid = || ApiError::Unauthorized("invalid email or password".into());
    throttle::account_attempt(state, req, &user.email_normalized).await?;
    if proof.password.len() > MAX_PASSWORD_LEN || user.is_service() {
        return Err(invalid());
    }
    if !verify(state, proof.password, user.password_hash.clone()).await? {
        return Err(invalid());
    }
    if user.has_totp() {
        second_factor_of(state, user, proof.totp_code.as_deref(), proof.recovery_code.as_deref()).await?;
    }
    throttle::account_succeeded(state, req, &user.email_normalized).await;
    Ok(())
}

/// Checks the second factor given with a proof.
pub async fn second_factor_of(
    state: &AppState,
    user: &User,
    totp_code: Option<&str>,
    recovery_code: Option<&str>,
) -> ApiResult<()> {
    let ok = match (totp_code, recovery_code) {
        (Some(code), _) if code.len() <= 32 => second_factor::accept_code(state, user, code).await?,
        (None, Some(code)) if code.len() <= 64 => {
            let mut conn = state.conn().await?;
            users::use_recovery_code(&mut conn, user.id, &second_factor::recovery_hash(code)).await?
        }
        (None, None) => {
            return Err(ApiError::SecondFactorRequired(
                "this account has a second factor: send totp_code (or a recovery_code)".into(),
            ))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::SecondFactorRequired(
            "the second factor is wrong or was used already: send a current totp_code or an unused recovery_code"
                .into(),
        ))
    }
}

/// Hashes a new password on a hashing thread.
pub async fn hash_new_password(state: &AppState, password: String) -> ApiResult<String> {
    state.hash(move || hash_password(&password)).await?.map_err(ApiError::from)
}

/// Verifies a password on a hashing thread (against a dummy hash when there is none).
pub async fn verify(state: &AppState, password: String, hash: Option<String>) -> ApiResult<bool> {
    state
        .hash(move || {
            let hash = hash.unwrap_or_else(|| dummy_hash().to_string());
            verify_password(&password, &hash)
        })
        .await
}

/// The password rules, as a field error.
pub fn password_rules(password: &str, normalized_email: &str) -> ApiResult<()> {
    let local = normalized_email.split('@').next().unwrap_or_default();
    check_rules(password, local).map_err(|m| ApiError::field("password", m))
}
