//! What SSO's two route modules (connections and sign-in) share: the callback URL identity
//! providers are given, the keyring that seals client secrets, and the plan check.

use gw_shared::crypto::Keyring;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Where identity providers send users back: `{admin.public_url}/api/v1/auth/sso/callback`.
pub fn redirect_uri(state: &AppState) -> String {
    format!("{}/api/v1/auth/sso/callback", state.cfg.admin.public_base())
}

/// The master keyring; without it no client secret can be sealed or opened.
pub fn keyring(state: &AppState) -> ApiResult<&Keyring> {
    state.cfg.secrets.keyring.as_ref().ok_or_else(|| {
        log::error!("SSO needs GW_ENCRYPTION_KEY, which is not set");
        ApiError::Unavailable("SSO connections need GW_ENCRYPTION_KEY".into())
    })
}

/// 402 for an organization whose plan does not include SSO.
pub fn plan_required(plan: &str) -> ApiError {
    ApiError::PlanRequired(format!("SSO needs the growth or enterprise plan; this organization is on {plan}"))
}
