//! The role matrix, enforced in one place: every `/api/v1` operation has exactly one rule here
//! (a unit test holds the matrix equal to the OpenAPI document, so an endpoint cannot be added
//! without one), and the [`authorize`] middleware applies it before any handler runs. A request
//! whose route has no rule for its method is refused (405 when the path exists).
//!
//! Roles are ordered viewer < member < admin < owner; a rule names the least role allowed.
//! A service account's token is held to its role and, when it has scopes, to them: each
//! operation belongs to a resource ([`resource_of`]) and is a read (GET) or a write; a scope
//! `resource:read` allows reads, `resource:write` both (`*` for every resource). Service
//! accounts never reach the operator's routes, account settings or other service accounts. A
//! person's session opened only to enroll a second factor reaches account settings alone.
//! Finer rules live with the resource and are listed in `docs/roles.md`: members act only on
//! the teams they belong to; only owners grant, change or remove the owner role.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage, ResponseError};
use gw_shared::roles::Role;

use crate::error::ApiError;
use crate::session;
use crate::state::AppState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No session: sign-up, sign-in, token refresh, SSO, invite acceptance, the API document.
    Public,
    /// A live session whose member has at least this role.
    Least(Role),
    /// A live session of a gateway operator (a role above organizations, whatever the member's
    /// role in its own): the route catalog.
    Operator,
    /// A person's own account (password, second factor, sign-out), whatever their role, also
    /// from a session opened only to enroll a second factor; never a service account.
    Account,
}

#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub method: &'static str,
    /// The route pattern as registered, e.g. `/api/v1/teams/{team_id}`.
    pub path: &'static str,
    pub access: Access,
}

const fn rule(method: &'static str, path: &'static str, access: Access) -> Rule {
    Rule { method, path, access }
}

use Access::{Account, Least, Operator, Public};
const VIEWER: Access = Least(Role::Viewer);
const MEMBER: Access = Least(Role::Member);
const ADMIN: Access = Least(Role::Admin);
const OWNER: Access = Least(Role::Owner);

pub const MATRIX: &[Rule] = &[
    rule("GET", "/api/v1/openapi.json", Public),
    rule("POST", "/api/v1/auth/register", Public),
    rule("POST", "/api/v1/billing/checkout", ADMIN),
    rule("POST", "/api/v1/billing/portal", ADMIN),
    // The billing provider's events: authenticated by their signature, not a session.
    rule("POST", "/api/v1/billing/webhook", Public),
    rule("POST", "/api/v1/auth/verify-email", Public),
    rule("POST", "/api/v1/auth/login", Public),
    rule("POST", "/api/v1/auth/refresh", Public),
    rule("POST", "/api/v1/auth/logout", Account),
    rule("POST", "/api/v1/auth/logout-all", Account),
    rule("POST", "/api/v1/auth/password", Account),
    rule("POST", "/api/v1/auth/password-reset", Public),
    rule("POST", "/api/v1/auth/password-reset/confirm", Public),
    rule("GET", "/api/v1/auth/totp", Account),
    rule("POST", "/api/v1/auth/totp/setup", Account),
    rule("POST", "/api/v1/auth/totp/enable", Account),
    rule("POST", "/api/v1/auth/totp/disable", Account),
    rule("POST", "/api/v1/auth/totp/recovery-codes", Account),
    rule("GET", "/api/v1/auth/me", VIEWER),
    rule("GET", "/api/v1/auth/me/alerts", VIEWER),
    // Alerts carry governance detail (keys, members, spend): owners' and admins' to receive.
    rule("PUT", "/api/v1/auth/me/alerts", ADMIN),
    rule("POST", "/api/v1/auth/sso/initiate", Public),
    rule("GET", "/api/v1/auth/sso/callback", Public),
    rule("POST", "/api/v1/auth/sso/link", Public),
    rule("POST", "/api/v1/auth/invites/accept", Public),
    rule("GET", "/api/v1/organizations/current", VIEWER),
    rule("PATCH", "/api/v1/organizations/current", ADMIN),
    rule("GET", "/api/v1/organizations/current/limits", VIEWER),
    rule("GET", "/api/v1/organizations/current/routes", VIEWER),
    rule("PUT", "/api/v1/organizations/current/routes", ADMIN),
    rule("GET", "/api/v1/organizations/current/policy", VIEWER),
    rule("PUT", "/api/v1/organizations/current/policy", ADMIN),
    rule("PATCH", "/api/v1/organizations/current/policy", ADMIN),
    rule("GET", "/api/v1/organizations/current/policy/templates", VIEWER),
    rule("POST", "/api/v1/organizations/current/policy/apply-template", ADMIN),
    rule("GET", "/api/v1/organizations/current/policy/versions", VIEWER),
    rule("POST", "/api/v1/organizations/current/policy/revert", ADMIN),
    rule("GET", "/api/v1/organizations/current/cache", VIEWER),
    rule("PUT", "/api/v1/organizations/current/cache", ADMIN),
    rule("PATCH", "/api/v1/organizations/current/cache", ADMIN),
    rule("POST", "/api/v1/organizations/current/cache/purge", ADMIN),
    rule("PUT", "/api/v1/teams/{team_id}/cache", ADMIN),
    rule("PATCH", "/api/v1/teams/{team_id}/cache", ADMIN),
    rule("DELETE", "/api/v1/teams/{team_id}/cache", ADMIN),
    rule("GET", "/api/v1/teams", VIEWER),
    rule("POST", "/api/v1/teams", ADMIN),
    rule("GET", "/api/v1/teams/{team_id}", VIEWER),
    rule("PATCH", "/api/v1/teams/{team_id}", ADMIN),
    rule("DELETE", "/api/v1/teams/{team_id}", ADMIN),
    rule("GET", "/api/v1/teams/{team_id}/limits", VIEWER),
    rule("GET", "/api/v1/teams/{team_id}/members", VIEWER),
    rule("POST", "/api/v1/teams/{team_id}/members/{user_id}", ADMIN),
    rule("DELETE", "/api/v1/teams/{team_id}/members/{user_id}", ADMIN),
    rule("GET", "/api/v1/users", VIEWER),
    rule("GET", "/api/v1/users/{user_id}", VIEWER),
    rule("PATCH", "/api/v1/users/{user_id}", ADMIN),
    rule("DELETE", "/api/v1/users/{user_id}", ADMIN),
    rule("POST", "/api/v1/users/{user_id}/transfer-keys", ADMIN),
    rule("GET", "/api/v1/invites", ADMIN),
    rule("POST", "/api/v1/invites", ADMIN),
    rule("DELETE", "/api/v1/invites/{invite_id}", ADMIN),
    rule("GET", "/api/v1/api-keys", VIEWER),
    rule("POST", "/api/v1/api-keys", MEMBER),
    rule("GET", "/api/v1/api-keys/{key_id}", VIEWER),
    rule("PATCH", "/api/v1/api-keys/{key_id}", MEMBER),
    rule("DELETE", "/api/v1/api-keys/{key_id}", MEMBER),
    rule("POST", "/api/v1/api-keys/{key_id}/regenerate", MEMBER),
    rule("GET", "/api/v1/api-keys/{key_id}/limits", VIEWER),
    rule("GET", "/api/v1/provider-keys", VIEWER),
    rule("POST", "/api/v1/provider-keys", ADMIN),
    rule("GET", "/api/v1/provider-keys/{key_id}", VIEWER),
    rule("PATCH", "/api/v1/provider-keys/{key_id}", ADMIN),
    rule("DELETE", "/api/v1/provider-keys/{key_id}", ADMIN),
    rule("POST", "/api/v1/provider-keys/{key_id}/rotate", ADMIN),
    rule("POST", "/api/v1/provider-keys/{key_id}/test", ADMIN),
    rule("GET", "/api/v1/sso/connections", ADMIN),
    // Who signs in as whom: an admin pointing a connection at an identity provider of their own
    // must not reach the owner's account.
    rule("POST", "/api/v1/sso/connections", OWNER),
    rule("GET", "/api/v1/sso/connections/{connection_id}", ADMIN),
    rule("PATCH", "/api/v1/sso/connections/{connection_id}", OWNER),
    rule("DELETE", "/api/v1/sso/connections/{connection_id}", OWNER),
    rule("POST", "/api/v1/sso/connections/{connection_id}/domains/{domain}/verify", OWNER),
    // Credentials that act for the organization: the owner's to hand out.
    rule("GET", "/api/v1/service-accounts", OWNER),
    rule("POST", "/api/v1/service-accounts", OWNER),
    rule("GET", "/api/v1/service-accounts/{account_id}", OWNER),
    rule("DELETE", "/api/v1/service-accounts/{account_id}", OWNER),
    rule("GET", "/api/v1/audit-events", ADMIN),
    // Per-request detail (request, key and team ids), like the audit trail.
    rule("GET", "/api/v1/analytics/policy", ADMIN),
    rule("GET", "/api/v1/analytics/policy/export", ADMIN),
    rule("GET", "/api/v1/analytics/cache", ADMIN),
    rule("GET", "/api/v1/analytics/overview", ADMIN),
    rule("GET", "/api/v1/analytics/logs", ADMIN),
    rule("GET", "/api/v1/analytics/logs/{log_id}", ADMIN),
    rule("GET", "/api/v1/analytics/compliance/export", ADMIN),
    // Reconciling sends the organization's provider key (or an admin key) to the provider, and
    // runs show spend per model and day.
    rule("POST", "/api/v1/analytics/reconcile", ADMIN),
    rule("GET", "/api/v1/analytics/reconcile", ADMIN),
    rule("GET", "/api/v1/analytics/reconcile/{run_id}", ADMIN),
    rule("GET", "/api/v1/organizations/current/webhooks", VIEWER),
    rule("POST", "/api/v1/organizations/current/webhooks", ADMIN),
    rule("GET", "/api/v1/organizations/current/webhooks/{webhook_id}", VIEWER),
    rule("PATCH", "/api/v1/organizations/current/webhooks/{webhook_id}", ADMIN),
    rule("DELETE", "/api/v1/organizations/current/webhooks/{webhook_id}", ADMIN),
    rule("POST", "/api/v1/organizations/current/webhooks/{webhook_id}/rotate-secret", ADMIN),
    rule("POST", "/api/v1/organizations/current/webhooks/{webhook_id}/test", ADMIN),
    rule("GET", "/api/v1/organizations/current/webhooks/deliveries", VIEWER),
    rule("POST", "/api/v1/organizations/current/webhooks/deliveries/{delivery_id}/retry", ADMIN),
    rule("GET", "/api/v1/prompt-templates", VIEWER),
    rule("POST", "/api/v1/prompt-templates", MEMBER),
    rule("GET", "/api/v1/prompt-templates/{template_id}", VIEWER),
    rule("DELETE", "/api/v1/prompt-templates/{template_id}", ADMIN),
    rule("GET", "/api/v1/prompt-templates/{template_id}/versions", VIEWER),
    rule("POST", "/api/v1/prompt-templates/{template_id}/versions", MEMBER),
    rule("GET", "/api/v1/prompt-templates/{template_id}/versions/{version}", VIEWER),
    rule("PUT", "/api/v1/prompt-templates/{template_id}/labels/{label}", ADMIN),
    rule("DELETE", "/api/v1/prompt-templates/{template_id}/labels/{label}", ADMIN),
    rule("POST", "/api/v1/prompt-templates/{template_id}/render", VIEWER),
    rule("GET", "/api/v1/experiments", VIEWER),
    rule("POST", "/api/v1/experiments", MEMBER),
    rule("GET", "/api/v1/experiments/{experiment_id}", VIEWER),
    rule("POST", "/api/v1/experiments/{experiment_id}/start", ADMIN),
    rule("POST", "/api/v1/experiments/{experiment_id}/pause", ADMIN),
    rule("POST", "/api/v1/experiments/{experiment_id}/stop", ADMIN),
    rule("GET", "/api/v1/experiments/{experiment_id}/results", VIEWER),
    rule("PUT", "/api/v1/requests/{request_id}/feedback", MEMBER),
    rule("POST", "/api/v1/playground/compare", MEMBER),
    rule("GET", "/api/v1/gateway/routes", Operator),
    rule("GET", "/api/v1/gateway/routes/versions", Operator),
    rule("GET", "/api/v1/gateway/routes/versions/{version}", Operator),
    rule("POST", "/api/v1/gateway/routes/versions/{version}/restore", Operator),
    rule("GET", "/api/v1/gateway/providers", Operator),
    rule("POST", "/api/v1/gateway/providers", Operator),
    rule("GET", "/api/v1/gateway/providers/{name}", Operator),
    rule("PATCH", "/api/v1/gateway/providers/{name}", Operator),
    rule("DELETE", "/api/v1/gateway/providers/{name}", Operator),
    rule("GET", "/api/v1/gateway/models", Operator),
    rule("POST", "/api/v1/gateway/models", Operator),
    rule("GET", "/api/v1/gateway/models/{name}", Operator),
    rule("PATCH", "/api/v1/gateway/models/{name}", Operator),
    rule("DELETE", "/api/v1/gateway/models/{name}", Operator),
    rule("POST", "/api/v1/gateway/models/{name}/deployments", Operator),
    rule("PATCH", "/api/v1/gateway/models/{name}/deployments/{deployment_id}", Operator),
    rule("DELETE", "/api/v1/gateway/models/{name}/deployments/{deployment_id}", Operator),
    rule("GET", "/api/v1/gateway/organizations/{org_id}/quota", Operator),
    rule("PUT", "/api/v1/gateway/organizations/{org_id}/quota", Operator),
    rule("DELETE", "/api/v1/gateway/organizations/{org_id}/quota", Operator),
];

/// Whether the session's user is a gateway operator now (re-read on every request, like roles).
async fn operator(state: &AppState, session: &session::Session) -> Result<bool, ApiError> {
    let mut conn = state.conn().await?;
    Ok(gw_shared::db::route_catalog::is_operator(&mut conn, session.user_id).await?)
}

/// The resource an operation belongs to, for service-account scopes: the first path segment
/// after `/api/v1/` (`teams`, `api-keys`, `analytics`, ...), or for the organization's own
/// settings the segment after `organizations/current` (`policy`, `cache`, `routes`, `limits`;
/// `organization` for the organization itself).
pub fn resource_of(path: &str) -> &str {
    let rest = path.strip_prefix("/api/v1/").unwrap_or(path);
    let mut parts = rest.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("organizations"), Some("current"), Some(sub)) => sub,
        (Some("organizations"), _, _) => "organization",
        (Some(first), _, _) => first,
        _ => rest,
    }
}

/// Every resource a scope may name.
pub fn resources() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = MATRIX
        .iter()
        .filter(|r| matches!(r.access, Least(_)))
        .map(|r| resource_of(r.path))
        .filter(|r| *r != "service-accounts")
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Whether scopes allow an operation (empty scopes: whatever the role allows).
pub fn scopes_allow(scopes: &[String], resource: &str, write: bool) -> bool {
    if scopes.is_empty() {
        return true;
    }
    scopes.iter().any(|s| {
        let Some((r, level)) = s.split_once(':') else {
            return false;
        };
        (r == "*" || r == resource) && (level == "write" || (level == "read" && !write))
    })
}

/// Checks a principal against a rule beyond the role.
fn principal_allows(session: &session::Session, access: Access, method: &str, pattern: &str) -> Result<(), ApiError> {
    use crate::tokens::Scope;
    use session::Principal;
    match (&session.principal, access) {
        (Principal::Person { scope: Scope::TotpEnrollment }, Least(_) | Operator) => Err(ApiError::Forbidden(
            "this organization requires a second factor: this session may only enroll one (POST /api/v1/auth/totp/setup, \
             then /api/v1/auth/totp/enable), then sign in again"
                .into(),
        )),
        (Principal::Service { .. }, Account | Operator) => {
            Err(ApiError::Forbidden("service accounts cannot use this operation".into()))
        }
        (Principal::Service { scopes }, _) => {
            let resource = resource_of(pattern);
            if resource == "service-accounts" {
                return Err(ApiError::Forbidden("service accounts cannot manage service accounts".into()));
            }
            let write = !matches!(method, "GET" | "HEAD");
            if scopes_allow(scopes, resource, write) {
                Ok(())
            } else {
                let level = if write { "write" } else { "read" };
                Err(ApiError::Forbidden(format!("this service account's scopes do not include {resource}:{level}")))
            }
        }
        _ => Ok(()),
    }
}

/// The rule for a route, if the matrix has one.
pub fn lookup(method: &str, path: &str) -> Option<Access> {
    MATRIX.iter().find(|r| r.method == method && r.path == path).map(|r| r.access)
}

/// The methods the matrix allows on a path, for a 405's `Allow`.
pub fn allowed_methods(path: &str) -> Vec<&'static str> {
    MATRIX.iter().filter(|r| r.path == path).map(|r| r.method).collect()
}

/// Applies the matrix. Routes outside `/api/v1` (health, metrics) pass through; an unmatched
/// path goes on to the 404; a matched path without a rule for the method gets 405.
pub async fn authorize(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let Some(pattern) = req.match_pattern() else {
        return Ok(next.call(req).await?.map_into_left_body());
    };
    if !pattern.starts_with("/api/v1/") {
        return Ok(next.call(req).await?.map_into_left_body());
    }
    let refuse = |req: ServiceRequest, e: ApiError| Ok(req.into_response(e.error_response()).map_into_right_body());
    // PostgreSQL cannot hold NUL in text: a filter carrying one is the client's error, not a 500.
    if req.query_string().to_ascii_lowercase().contains("%00") {
        return refuse(req, ApiError::Validation("the query string must not contain NUL characters".into()));
    }
    let access = match lookup(req.method().as_str(), &pattern) {
        Some(a) => a,
        None => {
            let allow = allowed_methods(&pattern);
            if allow.is_empty() {
                return refuse(req, ApiError::NotFound("route"));
            }
            return refuse(req, ApiError::MethodNotAllowed(allow.join(", ")));
        }
    };
    if access == Public {
        return Ok(next.call(req).await?.map_into_left_body());
    }
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        return refuse(req, ApiError::Internal("application state missing".into()));
    };
    let session = match session::authenticate(&state, req.headers()).await {
        Ok(s) => s,
        Err(e) => return refuse(req, e),
    };
    if let Err(e) = principal_allows(&session, access, req.method().as_str(), &pattern) {
        return refuse(req, e);
    }
    match access {
        Least(least) if session.role < least => {
            let e =
                ApiError::Forbidden(format!("this action needs the {least} role or higher; you are {}", session.role));
            return refuse(req, e);
        }
        Operator => match operator(&state, &session).await {
            Ok(true) => {}
            Ok(false) => {
                return refuse(req, ApiError::Forbidden("this action needs the gateway operator role".into()));
            }
            Err(e) => return refuse(req, e),
        },
        _ => {}
    }
    req.extensions_mut().insert(session);
    Ok(next.call(req).await?.map_into_left_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_belong_to_resources() {
        assert_eq!(resource_of("/api/v1/teams/{team_id}/members"), "teams");
        assert_eq!(resource_of("/api/v1/organizations/current"), "organization");
        assert_eq!(resource_of("/api/v1/organizations/current/policy/versions"), "policy");
        assert_eq!(resource_of("/api/v1/analytics/logs"), "analytics");
        let all = resources();
        assert!(all.contains(&"api-keys") && all.contains(&"organization") && !all.contains(&"service-accounts"));
    }

    #[test]
    fn scopes_narrow_reads_and_writes() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(scopes_allow(&[], "teams", true));
        assert!(scopes_allow(&s(&["teams:read"]), "teams", false));
        assert!(!scopes_allow(&s(&["teams:read"]), "teams", true));
        assert!(scopes_allow(&s(&["teams:write"]), "teams", false));
        assert!(!scopes_allow(&s(&["teams:write"]), "api-keys", false));
        assert!(scopes_allow(&s(&["*:read"]), "api-keys", false));
        assert!(!scopes_allow(&s(&["*:read"]), "api-keys", true));
        assert!(!scopes_allow(&s(&["teams"]), "teams", false));
    }

    #[test]
    fn one_rule_per_operation() {
        for (i, a) in MATRIX.iter().enumerate() {
            for b in &MATRIX[i + 1..] {
                assert!(!(a.method == b.method && a.path == b.path), "{} {} twice", a.method, a.path);
            }
        }
    }

    #[test]
    fn the_matrix_is_the_documented_api() {
        use utoipa::OpenApi;
        let doc = crate::openapi::document();
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, item) in &doc.paths.paths {
            let ops = [
                ("GET", item.get.is_some()),
                ("POST", item.post.is_some()),
                ("PATCH", item.patch.is_some()),
                ("PUT", item.put.is_some()),
                ("DELETE", item.delete.is_some()),
            ];
            for (m, present) in ops {
                if present {
                    documented.push((m.to_string(), path.clone()));
                }
            }
        }
        let _ = crate::openapi::ApiDoc::openapi();
        for (m, p) in &documented {
            assert!(lookup(m, p).is_some(), "{m} {p} is documented but has no rule in the role matrix");
        }
        for r in MATRIX {
            assert!(
                documented.iter().any(|(m, p)| m == r.method && p == r.path),
                "{} {} has a rule but is not a documented operation",
                r.method,
                r.path
            );
        }
    }
}
