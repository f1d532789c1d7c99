//! Single sign-on (OpenID Connect) rules that need neither the network nor the database: which
//! role and teams a user's groups give, the forms of e-mail domains and issuer URLs a connection
//! may name, how a groups claim is read, and where a pending sign-in is kept in Redis.
//!
//! The owner role is never granted through SSO: a role mapping may only hold `admin`, `member`
//! or `viewer`, and [`role_for`] never answers `owner` whatever it is given.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::Value;
use uuid::Uuid;

use crate::roles::Role;

/// The most e-mail domains one connection may sign in.
pub const MAX_DOMAINS: usize = 20;
/// The claim read for group names when a connection names none.
pub const DEFAULT_GROUPS_CLAIM: &str = "groups";
/// How long a started sign-in (state, nonce, PKCE verifier) waits for its callback.
pub const STATE_TTL_SECS: u64 = 600;
/// The most group names read from one ID token.
pub const MAX_GROUPS: usize = 1000;
/// The most entries a role or team mapping may have.
pub const MAX_MAPPING_ENTRIES: usize = 100;
/// The most teams one group may map to.
pub const MAX_TEAMS_PER_GROUP: usize = 50;
/// The longest group name a mapping may hold.
pub const MAX_GROUP_NAME_CHARS: usize = 256;
/// The longest issuer URL accepted.
pub const MAX_ISSUER_LEN: usize = 2048;

/// Plans that include SSO.
pub const SSO_PLANS: &[&str] = &["growth", "enterprise"];

/// Claims that are not a group list: registered JWT claims and OpenID Connect standard claims.
/// A connection cannot name one of them as its groups claim.
pub const RESERVED_CLAIMS: &[&str] = &[
    "iss",
    "sub",
    "aud",
    "exp",
    "iat",
    "nbf",
    "jti",
    "auth_time",
    "nonce",
    "acr",
    "amr",
    "azp",
    "at_hash",
    "c_hash",
    "sid",
    "name",
    "given_name",
    "family_name",
    "middle_name",
    "nickname",
    "preferred_username",
    "profile",
    "picture",
    "website",
    "email",
    "email_verified",
    "gender",
    "birthdate",
    "zoneinfo",
    "locale",
    "phone_number",
    "phone_number_verified",
    "address",
    "updated_at",
];

/// Group name → role (never owner).
pub type RoleMapping = BTreeMap<String, Role>;
/// Group name → team ids.
pub type TeamMapping = BTreeMap<String, Vec<Uuid>>;

/// Whether an organization on `plan` may use SSO.
pub fn plan_allows_sso(plan: &str) -> bool {
    SSO_PLANS.contains(&plan)
}

/// The Redis key holding a started sign-in, by its `state` parameter.
pub fn state_key(state: &str) -> String {
    format!("gw:sso:state:{state}")
}

/// Whether `state` has the shape of a state gw issued (URL-safe base64, bounded), so nothing
/// else is ever looked up in Redis.
pub fn plausible_state(state: &str) -> bool {
    !state.is_empty()
        && state.len() <= 256
        && state.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A role SSO may grant: `admin`, `member` or `viewer`.
pub fn grantable_role(name: &str) -> Result<Role, String> {
    match name.parse::<Role>() {
        Ok(Role::Owner) => Err("the owner role cannot be granted through SSO; use admin, member or viewer".into()),
        Ok(role) => Ok(role),
        Err(_) => Err(format!("unknown role {name:?}; use admin, member or viewer")),
    }
}

/// The role a user's groups give: the highest role among the mapped groups the user is in, or
/// `default` when none is mapped. Never owner (a stray owner is held to admin).
pub fn role_for(groups: &[String], mapping: &RoleMapping, default: Role) -> Role {
    groups.iter().filter_map(|g| mapping.get(g)).copied().max().unwrap_or(default).min(Role::Admin)
}

/// The teams a user's groups give: every team any of the user's groups maps to, once each, in
/// id order.
pub fn teams_for(groups: &[String], mapping: &TeamMapping) -> Vec<Uuid> {
    let mut teams: Vec<Uuid> = groups.iter().filter_map(|g| mapping.get(g)).flatten().copied().collect();
    teams.sort();
    teams.dedup();
    teams
}

/// Checks a group name used as a mapping key.
pub fn group_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > MAX_GROUP_NAME_CHARS {
        return Err(format!("group names must be 1 to {MAX_GROUP_NAME_CHARS} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("group names must not contain control characters".into());
    }
    Ok(())
}

/// A role mapping as sent (`{"group": "admin"}`), checked: bounded, group names sane, roles
/// grantable.
pub fn parse_role_mapping(raw: &BTreeMap<String, String>) -> Result<RoleMapping, String> {
    if raw.len() > MAX_MAPPING_ENTRIES {
        return Err(format!("must have at most {MAX_MAPPING_ENTRIES} groups"));
    }
    let mut out = RoleMapping::new();
    for (group, role) in raw {
        group_name(group)?;
        let role = grantable_role(role).map_err(|m| format!("group {group:?}: {m}"))?;
        out.insert(group.clone(), role);
    }
    Ok(out)
}

/// A team mapping as sent (`{"group": ["team id", ...]}`), checked for shape only (whether the
/// teams exist is the caller's to check): bounded, group names sane, no empty lists.
pub fn check_team_mapping(raw: &TeamMapping) -> Result<TeamMapping, String> {
    if raw.len() > MAX_MAPPING_ENTRIES {
        return Err(format!("must have at most {MAX_MAPPING_ENTRIES} groups"));
    }
    let mut out = TeamMapping::new();
    for (group, teams) in raw {
        group_name(group)?;
        if teams.is_empty() || teams.len() > MAX_TEAMS_PER_GROUP {
            return Err(format!("group {group:?} must map to 1 to {MAX_TEAMS_PER_GROUP} teams"));
        }
        let mut teams = teams.clone();
        teams.sort();
        teams.dedup();
        out.insert(group.clone(), teams);
    }
    Ok(out)
}

/// A role mapping as stored (JSONB).
pub fn role_mapping_to_json(mapping: &RoleMapping) -> Value {
    Value::Object(mapping.iter().map(|(g, r)| (g.clone(), Value::String(r.as_str().to_string()))).collect())
}

/// A stored role mapping. Entries that do not hold a grantable role are dropped (they cannot be
/// written through the API): a damaged row grants less, never more.
pub fn role_mapping_from_json(value: &Value) -> RoleMapping {
    let Value::Object(map) = value else {
        return RoleMapping::new();
    };
    map.iter().filter_map(|(g, r)| r.as_str().and_then(|r| grantable_role(r).ok()).map(|r| (g.clone(), r))).collect()
}

/// A team mapping as stored (JSONB).
pub fn team_mapping_to_json(mapping: &TeamMapping) -> Value {
    Value::Object(
        mapping
            .iter()
            .map(|(g, teams)| (g.clone(), Value::Array(teams.iter().map(|t| Value::String(t.to_string())).collect())))
            .collect(),
    )
}

/// A stored team mapping; entries that are not team ids are dropped.
pub fn team_mapping_from_json(value: &Value) -> TeamMapping {
    let Value::Object(map) = value else {
        return TeamMapping::new();
    };
    map.iter()
        .filter_map(|(g, teams)| {
            let teams: Vec<Uuid> =
                teams.as_array()?.iter().filter_map(|t| t.as_str().and_then(|s| s.parse().ok())).collect();
            Some((g.clone(), teams))
        })
        .collect()
}

/// An e-mail domain as a connection holds it: the same normalization as addresses
/// (`crate::email::normalize`: NFKC, lower case), then checked: a dotted host name of labels of
/// letters, digits and inner hyphens; no wildcard, port, path, `@` or IP address.
pub fn normalize_domain(raw: &str) -> Result<String, String> {
    let d = crate::email::normalize(raw);
    if d.is_empty() {
        return Err("an e-mail domain must not be empty".into());
    }
    if d.len() > 253 {
        return Err("an e-mail domain must be at most 253 bytes".into());
    }
    if d.contains('*') {
        return Err("wildcard domains are not allowed: list each domain".into());
    }
    if d.contains(':') {
        return Err("an e-mail domain must not have a port".into());
    }
    if d.contains('@') {
        return Err("give the domain only (example.com), not an address".into());
    }
    let labels: Vec<&str> = d.split('.').collect();
    if labels.len() < 2 {
        return Err("an e-mail domain must have at least two labels (example.com)".into());
    }
    for label in &labels {
        if label.is_empty() || label.chars().count() > 63 {
            return Err("each label of an e-mail domain must be 1 to 63 characters".into());
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("labels of an e-mail domain must not start or end with a hyphen".into());
        }
        if !label.chars().all(|c| c.is_alphanumeric() || c == '-') {
            return Err("an e-mail domain may hold only letters, digits, hyphens and dots".into());
        }
    }
    if labels.last().is_some_and(|tld| tld.chars().all(|c| c.is_ascii_digit())) {
        return Err("an e-mail domain must be a host name, not an IP address".into());
    }
    Ok(d)
}

/// Whether a normalized address is in one of `domains` (normalized too).
pub fn email_in_domains(normalized_email: &str, domains: &[String]) -> bool {
    crate::email::domain(normalized_email).is_some_and(|d| domains.iter().any(|x| x == d))
}

/// Whether `host` (as `url` reports it) is a loopback host: `localhost`, `127.0.0.0/8`, `::1`.
fn is_loopback(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => IpAddr::V4(*ip).is_loopback(),
        url::Host::Ipv6(ip) => IpAddr::V6(*ip).is_loopback(),
    }
}

/// Checks an issuer URL and returns it exactly as given (trimmed): the ID token's `iss` must
/// equal it character for character, so it is never rewritten (no trailing slash added).
/// `https` is required, except plain `http` on a loopback host (a local identity provider).
/// No user info, query or fragment.
pub fn validate_issuer(raw: &str) -> Result<String, String> {
    let issuer = raw.trim();
    if issuer.is_empty() {
        return Err("must not be empty".into());
    }
    if issuer.len() > MAX_ISSUER_LEN {
        return Err(format!("must be at most {MAX_ISSUER_LEN} bytes"));
    }
    if issuer.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("must not contain spaces or control characters".into());
    }
    if issuer.contains('?') || issuer.contains('#') {
        return Err("must not have a query or a fragment".into());
    }
    let url = url::Url::parse(issuer).map_err(|_| "must be an absolute URL (https://idp.example.com)".to_string())?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not contain user info".into());
    }
    let Some(host) = url.host() else {
        return Err("must name a host".into());
    };
    match url.scheme() {
        "https" => Ok(issuer.to_string()),
        "http" if is_loopback(&host) => Ok(issuer.to_string()),
        "http" => Err("must use https (plain http only on localhost, 127.0.0.1 or ::1)".into()),
        _ => Err("must be an https URL".into()),
    }
}

/// Checks the name of the claim that holds group names.
pub fn validate_groups_claim(raw: &str) -> Result<String, String> {
    let name = raw.trim();
    if name.is_empty() || name.chars().count() > 100 {
        return Err("must be 1 to 100 characters".into());
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("must not contain spaces or control characters".into());
    }
    if RESERVED_CLAIMS.contains(&name) {
        return Err(format!("{name:?} is a standard claim, not a list of groups"));
    }
    Ok(name.to_string())
}

/// The group names in a groups claim: absent or null is none; a string is one group; an array
/// must hold only strings. Anything else is refused rather than guessed at.
pub fn parse_groups(value: Option<&Value>) -> Result<Vec<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => {
            if items.len() > MAX_GROUPS {
                return Err(format!("holds more than {MAX_GROUPS} groups"));
            }
            items
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(|| "must hold only strings".to_string()))
                .collect()
        }
        Some(_) => Err("must be a string or an array of strings".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn groups(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn mapping() -> RoleMapping {
        [("admins", Role::Admin), ("eng", Role::Member), ("contractors", Role::Viewer)]
            .into_iter()
            .map(|(g, r)| (g.to_string(), r))
            .collect()
    }

    #[test]
    fn the_highest_mapped_role_wins() {
        let m = mapping();
        assert_eq!(role_for(&groups(&["eng", "admins"]), &m, Role::Viewer), Role::Admin);
        assert_eq!(role_for(&groups(&["contractors", "eng"]), &m, Role::Viewer), Role::Member);
        assert_eq!(role_for(&groups(&["contractors"]), &m, Role::Member), Role::Viewer);
        assert_eq!(role_for(&groups(&["unmapped"]), &m, Role::Member), Role::Member);
        assert_eq!(role_for(&[], &m, Role::Viewer), Role::Viewer);
    }

    #[test]
    fn owner_is_never_granted() {
        let mut m = mapping();
        m.insert("root".into(), Role::Owner);
        assert_eq!(role_for(&groups(&["root"]), &m, Role::Member), Role::Admin);
        assert_eq!(role_for(&[], &m, Role::Owner), Role::Admin);
        assert!(grantable_role("owner").is_err());
        assert!(grantable_role("root").is_err());
        assert_eq!(grantable_role("viewer"), Ok(Role::Viewer));
        let raw: BTreeMap<String, String> = [("g".to_string(), "owner".to_string())].into_iter().collect();
        assert!(parse_role_mapping(&raw).is_err());
        // A stored owner entry (not writable through the API) is dropped, not honoured.
        let stored = role_mapping_from_json(&json!({"g": "owner", "h": "admin", "i": 3}));
        assert_eq!(stored.len(), 1);
        assert_eq!(stored.get("h"), Some(&Role::Admin));
    }

    #[test]
    fn role_mappings_round_trip() {
        let m = mapping();
        assert_eq!(role_mapping_from_json(&role_mapping_to_json(&m)), m);
        assert!(role_mapping_from_json(&json!([1])).is_empty());
        let too_many: BTreeMap<String, String> =
            (0..=MAX_MAPPING_ENTRIES).map(|i| (format!("g{i}"), "member".to_string())).collect();
        assert!(parse_role_mapping(&too_many).is_err());
        let bad_name: BTreeMap<String, String> = [("a\u{0}".to_string(), "member".to_string())].into_iter().collect();
        assert!(parse_role_mapping(&bad_name).is_err());
    }

    #[test]
    fn teams_are_the_union_of_the_groups() {
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let m: TeamMapping =
            [("eng".to_string(), vec![a, b]), ("ops".to_string(), vec![b, c]), ("x".to_string(), vec![c])]
                .into_iter()
                .collect();
        let mut want = vec![a, b, c];
        want.sort();
        assert_eq!(teams_for(&groups(&["ops", "eng", "nope"]), &m), want);
        assert!(teams_for(&groups(&["nope"]), &m).is_empty());
        assert_eq!(team_mapping_from_json(&team_mapping_to_json(&m)), m);
        assert!(check_team_mapping(&[("g".to_string(), vec![])].into_iter().collect()).is_err());
        let dup = check_team_mapping(&[("g".to_string(), vec![a, a])].into_iter().collect()).unwrap();
        assert_eq!(dup.get("g"), Some(&vec![a]));
    }

    #[test]
    fn domains() {
        assert_eq!(normalize_domain(" Example.COM ").as_deref(), Ok("example.com"));
        assert_eq!(normalize_domain("sub.corp-x.example").as_deref(), Ok("sub.corp-x.example"));
        assert_eq!(normalize_domain("ＥＸＡＭＰＬＥ.com").as_deref(), Ok("example.com"));
        for bad in [
            "",
            "   ",
            "*.example.com",
            "example.com:443",
            "a@example.com",
            "localhost",
            ".example.com",
            "example.com.",
            "exa mple.com",
            "example..com",
            "-a.example.com",
            "a-.example.com",
            "example.com/x",
            "10.0.0.1",
            "exa_mple.com",
        ] {
            assert!(normalize_domain(bad).is_err(), "{bad:?}");
        }
        assert!(normalize_domain(&format!("{}.com", "a".repeat(64))).is_err());
        let domains = vec!["example.com".to_string()];
        assert!(email_in_domains("a@example.com", &domains));
        assert!(!email_in_domains("a@sub.example.com", &domains));
        assert!(!email_in_domains("a@example.com.evil", &domains));
        assert!(!email_in_domains("no-at-sign", &domains));
    }

    #[test]
    fn issuers() {
        for ok in [
            "https://idp.example.com",
            "https://idp.example.com/",
            "https://login.example.com/tenant/v2.0",
            "http://127.0.0.1:9400",
            "http://localhost:9400",
            "http://[::1]:9400",
            " https://idp.example.com ",
        ] {
            assert_eq!(validate_issuer(ok).as_deref(), Ok(ok.trim()), "{ok}");
        }
        // Kept exactly as given: a trailing slash is neither added nor removed.
        assert_eq!(validate_issuer("http://127.0.0.1:9400").as_deref(), Ok("http://127.0.0.1:9400"));
        for bad in [
            "",
            "idp.example.com",
            "http://idp.example.com",
            "http://10.0.0.1",
            "ftp://idp.example.com",
            "https://user:pw@idp.example.com",
            "https://user@idp.example.com",
            "https://idp.example.com/?x=1",
            "https://idp.example.com/#frag",
            "https://idp.example.com/a b",
            "javascript:alert(1)",
            "https://",
        ] {
            assert!(validate_issuer(bad).is_err(), "{bad:?}");
        }
        assert!(validate_issuer(&format!("https://idp.example.com/{}", "a".repeat(MAX_ISSUER_LEN))).is_err());
    }

    #[test]
    fn groups_claims() {
        assert_eq!(parse_groups(None), Ok(vec![]));
        assert_eq!(parse_groups(Some(&Value::Null)), Ok(vec![]));
        assert_eq!(parse_groups(Some(&json!("admins"))), Ok(groups(&["admins"])));
        assert_eq!(parse_groups(Some(&json!(["a", "b"]))), Ok(groups(&["a", "b"])));
        assert!(parse_groups(Some(&json!(["a", 1]))).is_err());
        assert!(parse_groups(Some(&json!({"a": 1}))).is_err());
        assert!(parse_groups(Some(&json!(true))).is_err());
        let many: Vec<String> = (0..=MAX_GROUPS).map(|i| format!("g{i}")).collect();
        assert!(parse_groups(Some(&json!(many))).is_err());
        assert_eq!(validate_groups_claim(" roles ").as_deref(), Ok("roles"));
        assert!(validate_groups_claim("email").is_err());
        assert!(validate_groups_claim("").is_err());
        assert!(validate_groups_claim("a b").is_err());
    }

    #[test]
    fn states_and_plans() {
        assert!(plausible_state("abcDEF123-_"));
        assert!(!plausible_state(""));
        assert!(!plausible_state("a:b"));
        assert!(!plausible_state(&"a".repeat(257)));
        assert_eq!(state_key("xyz"), "gw:sso:state:xyz");
        assert!(plan_allows_sso("growth") && plan_allows_sso("enterprise"));
        assert!(!plan_allows_sso("free"));
    }
}
