//! An SSO connection's fields, checked: the client secret, e-mail domains (each held by one
//! connection across organizations), the groups claim, and the role and team mappings.

use std::collections::BTreeMap;

use diesel_async::AsyncPgConnection;
use gw_shared::db::sso as sso_db;
use gw_shared::db::teams;
use gw_shared::roles::Role;
use gw_shared::sso::{self, RoleMapping, TeamMapping};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::validate;

pub(super) fn secret(value: &str) -> ApiResult<String> {
    validate::secret("client_secret", value)
}

/// 1 to 20 domains, each normalized; duplicates dropped (first kept).
pub(super) fn domains(raw: &[String]) -> ApiResult<Vec<String>> {
    if raw.is_empty() || raw.len() > sso::MAX_DOMAINS {
        return Err(ApiError::field("email_domains", format!("must list 1 to {} domains", sso::MAX_DOMAINS)));
    }
    let mut out: Vec<String> = Vec::with_capacity(raw.len());
    for d in raw {
        let d = sso::normalize_domain(d).map_err(|m| ApiError::field("email_domains", m))?;
        if !out.contains(&d) {
            out.push(d);
        }
    }
    Ok(out)
}

pub(super) fn groups_claim(raw: &str) -> ApiResult<String> {
    sso::validate_groups_claim(raw).map_err(|m| ApiError::field("groups_claim", m))
}

pub(super) fn role_mapping(raw: &BTreeMap<String, String>) -> ApiResult<RoleMapping> {
    sso::parse_role_mapping(raw).map_err(|m| ApiError::field("role_mapping", m))
}

pub(super) fn default_role(raw: &str) -> ApiResult<Role> {
    sso::grantable_role(raw).map_err(|m| ApiError::field("default_role", m))
}

/// A team mapping whose every team is a live team of the organization.
pub(super) async fn team_mapping(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    raw: &BTreeMap<String, Vec<Uuid>>,
) -> ApiResult<TeamMapping> {
    let mapping = sso::check_team_mapping(raw).map_err(|m| ApiError::field("team_mapping", m))?;
    let mut checked: Vec<Uuid> = Vec::new();
    for team in mapping.values().flatten() {
        if checked.contains(team) {
            continue;
        }
        // Another organization's team looks exactly like a missing one.
        if !teams::exists_in_org(conn, org_id, *team).await? {
            return Err(ApiError::field("team_mapping", format!("{team} is not a team of this organization")));
        }
        checked.push(*team);
    }
    Ok(mapping)
}

/// 409 naming a domain another connection already signs in, if any.
pub(super) async fn domains_free(
    conn: &mut AsyncPgConnection,
    domains: &[String],
    except: Option<Uuid>,
) -> ApiResult<()> {
    match sso_db::domain_taken(conn, domains, except).await? {
        Some(d) => {
            Err(ApiError::Conflict(format!("the e-mail domain {d} already signs in through another SSO connection")))
        }
        None => Ok(()),
    }
}

pub(super) fn domain_conflict() -> ApiError {
    ApiError::Conflict("one of email_domains already signs in through another SSO connection".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_checked_without_being_echoed() {
        assert_eq!(secret(" s3cret\n").ok().as_deref(), Some("s3cret"));
        for bad in ["", "  ", "a\u{0}hidden"] {
            let e = secret(bad).unwrap_err();
            assert!(matches!(e, ApiError::Field { .. }));
            assert!(!e.to_string().contains("hidden"), "{e}");
        }
        assert!(secret(&"x".repeat(crate::validate::MAX_SECRET_CHARS + 1)).is_err());
    }

    #[test]
    fn domain_lists() {
        let raw = vec!["Example.com".to_string(), "example.com".to_string(), "b.example".to_string()];
        assert_eq!(domains(&raw).unwrap(), vec!["example.com".to_string(), "b.example".to_string()]);
        assert!(domains(&[]).is_err());
        let many: Vec<String> = (0..=sso::MAX_DOMAINS).map(|i| format!("d{i}.example")).collect();
        assert!(domains(&many).is_err());
        assert!(domains(&["*.example.com".to_string()]).is_err());
    }

    #[test]
    fn roles_must_be_grantable() {
        assert_eq!(default_role("viewer").ok(), Some(Role::Viewer));
        assert!(default_role("owner").is_err());
        let raw: BTreeMap<String, String> = [("g".to_string(), "owner".to_string())].into_iter().collect();
        assert!(role_mapping(&raw).is_err());
    }
}
