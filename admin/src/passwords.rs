//! Passwords on the control plane: hashing and verification on the bounded hashing threads, and
//! the rules a new password must meet. Used by sign-up, sign-in, password changes and invites.

use gw_shared::password::{check_rules, dummy_hash, hash_password, verify_password};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

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
