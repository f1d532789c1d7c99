//! Budgets and rate limits as operators set them on an organization, a team or a key: their
//! shapes (the management API's and the stored JSON's) and validation. The proxy reads them
//! through [`ScopeLimits`].

use std::collections::BTreeMap;

use diesel::deserialize::{self, Queryable};
use diesel::pg::Pg;
use diesel::sql_types::{Jsonb, Nullable};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::period::Period;

/// The largest budget, in US dollars.
pub const MAX_BUDGET_USD: i64 = 1_000_000_000;
/// Most models with limits of their own in one `rate_limits`.
pub const MAX_MODEL_LIMITS: usize = 100;

fn default_thresholds() -> Vec<u8> {
    vec![50, 80, 95, 100]
}

fn default_true() -> bool {
    true
}

/// A budget that names no period is a monthly one, as providers bill.
fn default_period() -> String {
    "month".into()
}

/// A spending limit: US dollars per period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// US dollars per period, as a decimal string (a JSON number is accepted too): more than 0,
    /// at most 1000000000, at most 9 decimal places.
    #[serde(with = "crate::money::usd")]
    #[schema(value_type = String, example = "100.00")]
    pub amount_usd: Decimal,
    /// `day`, `week` (ISO, from Monday), `month` (default) or `total`; periods roll over at UTC
    /// midnight.
    #[serde(default = "default_period")]
    pub period: String,
    /// Percentages of `amount_usd` at which a `budget.threshold_crossed` event is written, once
    /// per threshold per period: each 1 to 100, ascending, no repeats. Default `[50, 80, 95, 100]`.
    #[serde(default = "default_thresholds")]
    pub alert_thresholds: Vec<u8>,
    /// Refuse requests once the budget is spent (default); `false` only alerts.
    #[serde(default = "default_true")]
    pub hard_limit: bool,
}

/// Limits of one model, within a scope's `rate_limits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelRateLimits {
    /// Requests per minute for this model; at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    /// Tokens per minute for this model; at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u32>,
}

/// Rate limits; at least one must be set. Minutes are UTC calendar minutes, shared by every
/// proxy replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// Requests per minute; at least 1.
    #[serde(default)]
    pub rpm: Option<u32>,
    /// Tokens per minute (prompt plus completion; estimated at admission, corrected with the
    /// real usage); at least 1.
    #[serde(default)]
    pub tpm: Option<u32>,
    /// Requests in flight at once; at least 1.
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// Limits per model name (as clients ask for it), on top of the ones above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<BTreeMap<String, ModelRateLimits>>,
}

/// A validation failure: the field (dotted path) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub field: String,
    pub message: String,
}

fn problem(prefix: &str, field: &str, message: impl Into<String>) -> FieldProblem {
    FieldProblem { field: format!("{prefix}.{field}"), message: message.into() }
}

impl Budget {
    /// Checks the budget; `prefix` names it in the problem (`budget`).
    pub fn validate(&self, prefix: &str) -> Result<(), FieldProblem> {
        if !(self.amount_usd > Decimal::ZERO && self.amount_usd <= Decimal::from(MAX_BUDGET_USD)) {
            return Err(problem(prefix, "amount_usd", "must be more than 0 and at most 1000000000"));
        }
        if self.amount_usd.normalize().scale() > 9 {
            return Err(problem(prefix, "amount_usd", "must have at most 9 decimal places"));
        }
        if Period::parse(&self.period).is_none() {
            return Err(problem(prefix, "period", "must be day, week, month or total"));
        }
        if self.alert_thresholds.len() > 20 {
            return Err(problem(prefix, "alert_thresholds", "must have at most 20 entries"));
        }
        if self.alert_thresholds.iter().any(|t| !(1..=100).contains(t)) {
            return Err(problem(prefix, "alert_thresholds", "each must be between 1 and 100"));
        }
        if self.alert_thresholds.windows(2).any(|w| w.first() >= w.last()) {
            return Err(problem(prefix, "alert_thresholds", "must be in ascending order without repeats"));
        }
        Ok(())
    }

    pub fn period(&self) -> Period {
        Period::parse(&self.period).unwrap_or(Period::Month)
    }

    /// The amount in nano-dollars, the unit of the shared counters.
    pub fn limit_nanos(&self) -> i64 {
        crate::money::to_nanos(self.amount_usd).unwrap_or(i64::MAX)
    }
}

impl RateLimits {
    pub fn validate(&self, prefix: &str) -> Result<(), FieldProblem> {
        for (field, v) in [("rpm", self.rpm), ("tpm", self.tpm), ("max_concurrent", self.max_concurrent)] {
            if v == Some(0) {
                return Err(problem(prefix, field, "must be at least 1"));
            }
        }
        let models = self.models.as_ref();
        if self.rpm.is_none()
            && self.tpm.is_none()
            && self.max_concurrent.is_none()
            && models.is_none_or(|m| m.is_empty())
        {
            return Err(FieldProblem {
                field: prefix.to_string(),
                message: "set at least one of rpm, tpm, max_concurrent and models (send null to remove the limits)"
                    .into(),
            });
        }
        if let Some(models) = models {
            if models.len() > MAX_MODEL_LIMITS {
                return Err(problem(prefix, "models", format!("must name at most {MAX_MODEL_LIMITS} models")));
            }
            for (name, m) in models {
                let field = format!("models.{name}");
                if name.is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
                    return Err(problem(prefix, "models", "model names must be 1 to 256 printable characters"));
                }
                for (what, v) in [("rpm", m.rpm), ("tpm", m.tpm)] {
                    if v == Some(0) {
                        return Err(problem(prefix, &format!("{field}.{what}"), "must be at least 1"));
                    }
                }
                if m.rpm.is_none() && m.tpm.is_none() {
                    return Err(problem(prefix, &field, "set rpm, tpm or both"));
                }
            }
        }
        Ok(())
    }

    /// The limits of `model`, if it has its own.
    pub fn for_model(&self, model: &str) -> Option<&ModelRateLimits> {
        self.models.as_ref().and_then(|m| m.get(model))
    }
}

/// The budget and rate limits of one scope (organization, team or key), as the proxy caches them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScopeLimits {
    #[serde(default)]
    pub budget: Option<Budget>,
    #[serde(default)]
    pub rate_limits: Option<RateLimits>,
}

impl ScopeLimits {
    /// From the stored JSON columns. A value that no longer decodes (written by another version)
    /// is logged and ignored rather than failing every request of the scope.
    pub fn from_json(budget: Option<Value>, rate_limits: Option<Value>) -> Self {
        fn decode<T: serde::de::DeserializeOwned>(what: &str, v: Option<Value>) -> Option<T> {
            let v = v?;
            match serde_json::from_value(v) {
                Ok(t) => Some(t),
                Err(e) => {
                    log::error!("ignoring a stored {what} that does not decode: {e}");
                    None
                }
            }
        }
        Self { budget: decode("budget", budget), rate_limits: decode("rate_limits", rate_limits) }
    }

    pub fn is_empty(&self) -> bool {
        self.budget.is_none() && self.rate_limits.is_none()
    }
}

impl Queryable<(Nullable<Jsonb>, Nullable<Jsonb>), Pg> for ScopeLimits {
    type Row = (Option<Value>, Option<Value>);

    fn build((budget, rate_limits): Self::Row) -> deserialize::Result<Self> {
        Ok(Self::from_json(budget, rate_limits))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn budget(v: Value) -> Result<(), FieldProblem> {
        serde_json::from_value::<Budget>(v)
            .map_err(|e| FieldProblem { field: "?".into(), message: e.to_string() })?
            .validate("budget")
    }

    #[test]
    fn budgets_get_defaults_and_bounds() {
        let b: Budget = serde_json::from_value(json!({"amount_usd": 100.0, "period": "month"})).unwrap();
        assert_eq!(b.alert_thresholds, [50, 80, 95, 100]);
        assert!(b.hard_limit);
        assert_eq!(b.limit_nanos(), 100_000_000_000);
        let monthly: Budget = serde_json::from_value(json!({"amount_usd": 100.0})).unwrap();
        assert_eq!(monthly, b);
        for (bad, field) in [
            (json!({"amount_usd": 0.0, "period": "month"}), "budget.amount_usd"),
            (json!({"amount_usd": 2e9, "period": "month"}), "budget.amount_usd"),
            (json!({"amount_usd": 1.0, "period": "year"}), "budget.period"),
            (json!({"amount_usd": 1.0, "period": "day", "alert_thresholds": [0]}), "budget.alert_thresholds"),
            (json!({"amount_usd": 1.0, "period": "day", "alert_thresholds": [101]}), "budget.alert_thresholds"),
            (json!({"amount_usd": 1.0, "period": "day", "alert_thresholds": [80, 50]}), "budget.alert_thresholds"),
            (json!({"amount_usd": 1.0, "period": "day", "alert_thresholds": [50, 50]}), "budget.alert_thresholds"),
        ] {
            assert_eq!(budget(bad.clone()).unwrap_err().field, field, "{bad}");
        }
        assert!(serde_json::from_value::<Budget>(json!({"amount_usd": 1.0, "period": "day", "x": 1})).is_err());
    }

    fn limits(v: Value) -> Result<(), FieldProblem> {
        serde_json::from_value::<RateLimits>(v).unwrap().validate("rate_limits")
    }

    #[test]
    fn rate_limits_need_one_positive_limit() {
        assert!(limits(json!({"rpm": 60})).is_ok());
        assert!(limits(json!({"models": {"gpt-4o": {"tpm": 1000}}})).is_ok());
        assert_eq!(limits(json!({})).unwrap_err().field, "rate_limits");
        assert_eq!(limits(json!({"models": {}})).unwrap_err().field, "rate_limits");
        assert_eq!(limits(json!({"rpm": 1, "tpm": 0})).unwrap_err().field, "rate_limits.tpm");
        assert_eq!(limits(json!({"models": {"m": {"rpm": 0}}})).unwrap_err().field, "rate_limits.models.m.rpm");
        assert_eq!(limits(json!({"models": {"m": {}}})).unwrap_err().field, "rate_limits.models.m");
        assert_eq!(limits(json!({"models": {"": {"rpm": 1}}})).unwrap_err().field, "rate_limits.models");
    }

    #[test]
    fn stored_values_that_do_not_decode_are_ignored() {
        let l = ScopeLimits::from_json(Some(json!({"amount_usd": "x"})), Some(json!({"rpm": 5})));
        assert!(l.budget.is_none());
        assert_eq!(l.rate_limits.and_then(|r| r.rpm), Some(5));
        assert!(ScopeLimits::from_json(None, None).is_empty());
    }
}
