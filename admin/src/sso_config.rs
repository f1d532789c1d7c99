//! What SSO's two route modules (connections and sign-in) share: the callback URL identity
//! providers are given and the plan check (the keyring sealing client secrets is
//! `AppState::keyring`).

use crate::error::ApiError;
use crate::state::AppState;

/// Where identity providers send users back: `{admin.public_url}/api/v1/auth/sso/callback`.
pub fn redirect_uri(state: &AppState) -> String {
    format!("{}/api/v1/auth/sso/callback", state.cfg.admin.public_base())
}

/// 402 for an organization whose plan does not include SSO.
pub fn plan_required(plan: &str) -> ApiError {
    ApiError::PlanRequired(format!("SSO needs the growth or enterprise plan; this organization is on {plan}"))
}
