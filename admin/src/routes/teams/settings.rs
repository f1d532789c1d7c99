//! A team's budget, rate limits and default policies: their shapes and validation. Stored now;
//! the limits and policy steps of the proxy enforce them.

use super::*;

/// Budget periods.
pub const BUDGET_PERIODS: &[&str] = &["day", "week", "month", "total"];
/// The largest budget, in US dollars.
const MAX_BUDGET_USD: f64 = 1e9;
/// Most default policies a team may name.
const MAX_POLICIES: usize = 20;

fn default_thresholds() -> Vec<u8> {
    vec![50, 80, 95, 100]
}

fn default_true() -> bool {
    true
}

/// A team's spending limit. Stored and validated now; the proxy enforces it in a later release.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// US dollars per period: more than 0, at most 1e9.
    pub amount_usd: f64,
    /// `day`, `week`, `month` or `total`.
    pub period: String,
    /// Percentages of `amount_usd` at which alerts fire: each 1 to 100, ascending, no repeats.
    /// Default `[50, 80, 95, 100]`.
    #[serde(default = "default_thresholds")]
    pub alert_thresholds: Vec<u8>,
    /// Refuse requests once the budget is spent (default); `false` only alerts.
    #[serde(default = "default_true")]
    pub hard_limit: bool,
}

/// A team's rate limits; at least one must be set. Stored and validated now; the proxy enforces
/// them in a later release.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// Requests per minute; at least 1.
    #[serde(default)]
    pub rpm: Option<u32>,
    /// Tokens per minute; at least 1.
    #[serde(default)]
    pub tpm: Option<u32>,
    /// Requests in flight at once; at least 1.
    #[serde(default)]
    pub max_concurrent: Option<u32>,
}

pub(super) fn budget_value(b: Budget) -> ApiResult<Value> {
    if !(b.amount_usd > 0.0 && b.amount_usd <= MAX_BUDGET_USD) {
        return Err(ApiError::field("budget.amount_usd", "must be more than 0 and at most 1000000000"));
    }
    if !BUDGET_PERIODS.contains(&b.period.as_str()) {
        return Err(ApiError::field("budget.period", "must be day, week, month or total"));
    }
    if b.alert_thresholds.iter().any(|t| !(1..=100).contains(t)) {
        return Err(ApiError::field("budget.alert_thresholds", "each must be between 1 and 100"));
    }
    if b.alert_thresholds.windows(2).any(|w| w.first() >= w.last()) {
        return Err(ApiError::field("budget.alert_thresholds", "must be in ascending order without repeats"));
    }
    serde_json::to_value(&b).map_err(|e| ApiError::Internal(format!("cannot encode a budget: {e}")))
}

pub(super) fn rate_limits_value(r: RateLimits) -> ApiResult<Value> {
    for (field, v) in
        [("rate_limits.rpm", r.rpm), ("rate_limits.tpm", r.tpm), ("rate_limits.max_concurrent", r.max_concurrent)]
    {
        if v == Some(0) {
            return Err(ApiError::field(field, "must be at least 1"));
        }
    }
    if r.rpm.is_none() && r.tpm.is_none() && r.max_concurrent.is_none() {
        return Err(ApiError::field(
            "rate_limits",
            "set at least one of rpm, tpm and max_concurrent (send null to remove the limits)",
        ));
    }
    serde_json::to_value(&r).map_err(|e| ApiError::Internal(format!("cannot encode rate limits: {e}")))
}

/// Default policies as stored: known names, duplicates dropped (first occurrence kept).
pub(super) fn policies(requested: Vec<String>) -> ApiResult<Vec<String>> {
    if requested.len() > MAX_POLICIES {
        return Err(ApiError::field("default_policies", format!("must have at most {MAX_POLICIES} entries")));
    }
    let mut out: Vec<String> = Vec::with_capacity(requested.len());
    for p in requested {
        if !KNOWN_POLICIES.contains(&p.as_str()) {
            return Err(ApiError::field(
                "default_policies",
                format!("unknown policy {p:?}; known policies: {}", KNOWN_POLICIES.join(", ")),
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

    fn budget(v: Value) -> ApiResult<Value> {
        budget_value(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn budgets_get_defaults_and_bounds() {
        let v = budget(json!({"amount_usd": 100.0, "period": "month"})).unwrap();
        assert_eq!(v["alert_thresholds"], json!([50, 80, 95, 100]));
        assert_eq!(v["hard_limit"], json!(true));
        for (bad, field) in [
            (json!({"amount_usd": 0.0, "period": "month"}), "budget.amount_usd"),
            (json!({"amount_usd": 2e9, "period": "month"}), "budget.amount_usd"),
            (json!({"amount_usd": 1.0, "period": "year"}), "budget.period"),
            (json!({"amount_usd": 1.0, "period": "day", "alert_thresholds": [0]}), "budget.alert_thresholds"),
            (json!({"amount_usd": 1.0, "period": "day", "alert_thresholds": [101]}), "budget.alert_thresholds"),
            (json!({"amount_usd": 1.0, "period": "day", "alert_thresholds": [80, 50]}), "budget.alert_thresholds"),
            (json!({"amount_usd": 1.0, "period": "day", "alert_thresholds": [50, 50]}), "budget.alert_thresholds"),
        ] {
            match budget(bad.clone()) {
                Err(ApiError::Field { field: f, .. }) => assert_eq!(f, field, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(serde_json::from_value::<Budget>(json!({"amount_usd": 1.0, "period": "day", "x": 1})).is_err());
    }

    #[test]
    fn rate_limits_need_one_positive_limit() {
        assert!(rate_limits_value(RateLimits { rpm: Some(60), tpm: None, max_concurrent: None }).is_ok());
        assert!(rate_limits_value(RateLimits { rpm: None, tpm: None, max_concurrent: None }).is_err());
        match rate_limits_value(RateLimits { rpm: Some(1), tpm: Some(0), max_concurrent: None }) {
            Err(ApiError::Field { field, .. }) => assert_eq!(field, "rate_limits.tpm"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn policies_are_known_and_deduplicated() {
        let p = policies(vec!["topic_guard".into(), "pii_redact".into(), "topic_guard".into()]).unwrap();
        assert_eq!(p, ["topic_guard", "pii_redact"]);
        assert!(policies(vec!["nope".into()]).is_err());
    }
}
