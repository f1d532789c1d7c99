//! A team's budget, rate limits (shared with organizations and keys: `gw_shared::limits`) and
//! default and mandatory policies.

use super::*;

pub use gw_shared::limits::settings::{Budget, RateLimits};

/// Most default policies a team may name.
const MAX_POLICIES: usize = 20;

pub(super) fn budget_value(b: Budget) -> ApiResult<Value> {
    crate::validate::budget(b)
}

pub(super) fn rate_limits_value(r: RateLimits) -> ApiResult<Value> {
    crate::validate::rate_limits(r)
}

/// Default or mandatory policies (`field`) as stored: names the organization's policy defines
/// (or built-ins), duplicates dropped (first occurrence kept).
pub(super) fn policies(field: &str, requested: Vec<String>, available: &[String]) -> ApiResult<Vec<String>> {
    if requested.len() > MAX_POLICIES {
        return Err(ApiError::field(field, format!("must have at most {MAX_POLICIES} entries")));
    }
    let mut out: Vec<String> = Vec::with_capacity(requested.len());
    for p in requested {
        if !available.contains(&p) {
            return Err(ApiError::field(
                field,
                format!("unknown policy {p:?}; available policies: {}", available.join(", ")),
            ));
        }
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<String> {
        gw_shared::policy::spec::OrgPolicy::default().available()
    }

    #[test]
    fn policies_are_known_and_deduplicated() {
        let p = policies(
            "default_policies",
            vec!["topic_guard".into(), "pii_redact".into(), "topic_guard".into()],
            &known(),
        )
        .unwrap();
        assert_eq!(p, ["topic_guard", "pii_redact"]);
        assert!(policies("default_policies", vec!["nope".into()], &known()).is_err());
    }
}
