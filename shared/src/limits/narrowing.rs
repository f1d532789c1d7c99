//! Whether a change to a key's restrictions loosens them. Members may tighten the restrictions
//! of their team's keys, never loosen them (a model allow-list, a budget, rate limits, an
//! expiry): only admins and owners do (docs/roles.md). Anything that cannot be compared (a
//! budget's period changed) counts as loosening.

use chrono::{DateTime, Utc};

use super::settings::{Budget, ModelRateLimits, RateLimits};

/// A new allow-list lets a model through that the current one does not (`None`: every model).
pub fn models_loosened(current: Option<&[String]>, new: Option<&[String]>) -> bool {
    match (current, new) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(cur), Some(new)) => new.iter().any(|m| !cur.contains(m)),
    }
}

/// A new budget allows more spend, in another period, or only alerts where the current refuses.
pub fn budget_loosened(current: Option<&Budget>, new: Option<&Budget>) -> bool {
    match (current, new) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(cur), Some(new)) => {
            new.amount_usd > cur.amount_usd || new.period != cur.period || (cur.hard_limit && !new.hard_limit)
        }
    }
}

fn limit_loosened(current: Option<u32>, new: Option<u32>) -> bool {
    match (current, new) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(c), Some(n)) => n > c,
    }
}

fn model_limits_loosened(current: &ModelRateLimits, new: Option<&ModelRateLimits>) -> bool {
    match new {
        None => current.rpm.is_some() || current.tpm.is_some(),
        Some(n) => limit_loosened(current.rpm, n.rpm) || limit_loosened(current.tpm, n.tpm),
    }
}

/// New rate limits drop or raise one the current ones set.
pub fn rate_limits_loosened(current: Option<&RateLimits>, new: Option<&RateLimits>) -> bool {
    let Some(cur) = current else {
        return false;
    };
    let Some(new) = new else {
        return true;
    };
    if limit_loosened(cur.rpm, new.rpm)
        || limit_loosened(cur.tpm, new.tpm)
        || limit_loosened(cur.max_concurrent, new.max_concurrent)
    {
        return true;
    }
    let Some(cur_models) = cur.models.as_ref() else {
        return false;
    };
    cur_models
        .iter()
        .any(|(model, limits)| model_limits_loosened(limits, new.models.as_ref().and_then(|m| m.get(model))))
}

/// A new expiry is later than the current one, or none where there is one.
pub fn expiry_loosened(current: Option<DateTime<Utc>>, new: Option<DateTime<Utc>>) -> bool {
    match (current, new) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(c), Some(n)) => n > c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn budget(amount: i64, period: &str, hard: bool) -> Budget {
        Budget {
            amount_usd: Decimal::from(amount),
            period: period.into(),
            alert_thresholds: vec![50, 80, 95, 100],
            hard_limit: hard,
        }
    }

    #[test]
    fn allow_lists_may_only_shrink() {
        let cur = s(&["a", "b"]);
        assert!(!models_loosened(Some(&cur), Some(&s(&["a"]))));
        assert!(!models_loosened(Some(&cur), Some(&s(&["b", "a"]))));
        assert!(models_loosened(Some(&cur), Some(&s(&["a", "c"]))));
        assert!(models_loosened(Some(&cur), None));
        assert!(!models_loosened(None, Some(&s(&["a"]))));
        assert!(!models_loosened(None, None));
    }

    #[test]
    fn budgets_may_only_shrink_in_their_period() {
        let cur = budget(10, "month", true);
        assert!(!budget_loosened(Some(&cur), Some(&budget(5, "month", true))));
        assert!(budget_loosened(Some(&cur), Some(&budget(11, "month", true))));
        assert!(budget_loosened(Some(&cur), Some(&budget(5, "day", true))));
        assert!(budget_loosened(Some(&cur), Some(&budget(5, "month", false))));
        assert!(budget_loosened(Some(&cur), None));
        assert!(!budget_loosened(None, Some(&cur)));
    }

    #[test]
    fn rate_limits_may_only_shrink() {
        let cur = RateLimits { rpm: Some(60), tpm: None, max_concurrent: Some(4), models: None };
        let lower = RateLimits { rpm: Some(30), tpm: Some(1000), max_concurrent: Some(4), models: None };
        assert!(!rate_limits_loosened(Some(&cur), Some(&lower)));
        let higher = RateLimits { rpm: Some(61), ..cur.clone() };
        assert!(rate_limits_loosened(Some(&cur), Some(&higher)));
        let dropped = RateLimits { max_concurrent: None, ..cur.clone() };
        assert!(rate_limits_loosened(Some(&cur), Some(&dropped)));
        assert!(rate_limits_loosened(Some(&cur), None));
        let per_model = RateLimits {
            models: Some([("m".to_string(), ModelRateLimits { rpm: Some(5), tpm: None })].into()),
            ..cur.clone()
        };
        assert!(rate_limits_loosened(Some(&per_model), Some(&cur)), "a model's limit dropped");
        assert!(!rate_limits_loosened(Some(&cur), Some(&per_model)), "a model's limit added");
    }

    #[test]
    fn expiries_may_only_come_sooner() {
        let now = Utc::now();
        assert!(!expiry_loosened(Some(now), Some(now - chrono::Duration::hours(1))));
        assert!(expiry_loosened(Some(now), Some(now + chrono::Duration::hours(1))));
        assert!(expiry_loosened(Some(now), None));
        assert!(!expiry_loosened(None, Some(now)));
    }
}
