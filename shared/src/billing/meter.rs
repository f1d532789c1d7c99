//! Metered usage: what a metered plan's hour of usage amounts to at the billing provider, in
//! whole units (Stripe's meter events carry whole numbers), and the identifier that makes each
//! send idempotent (`docs/billing.md`).

use chrono::{DateTime, Utc};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What a metered plan bills by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Usage {
    /// Requests answered (status below 400), cache hits included.
    Requests,
    /// Prompt and completion tokens, of every request (upstreams bill failed ones too).
    Tokens,
    /// What requests answered on the gateway's own provider credentials cost, in units of
    /// 10^-10 USD: the audit log's cost is exact to 10 decimals, so the meter is exact too.
    GatewayCost,
}

/// 10^-10 USD units per USD (the audit log's cost has 10 decimals).
pub const COST_UNITS_PER_USD: i64 = 10_000_000_000;

impl Usage {
    pub fn label(self) -> &'static str {
        match self {
            Usage::Requests => "requests",
            Usage::Tokens => "tokens",
            Usage::GatewayCost => "gateway_cost",
        }
    }

    pub fn parse(s: &str) -> Option<Usage> {
        [Usage::Requests, Usage::Tokens, Usage::GatewayCost].into_iter().find(|u| u.label() == s)
    }

    /// The hour's quantity in the meter's whole units; `None` past what a meter event carries.
    pub fn quantity(self, h: &HourUsage) -> Option<i64> {
        match self {
            Usage::Requests => Some(h.answered),
            Usage::Tokens => Some(h.tokens),
            Usage::GatewayCost => h.gateway_cost_usd.checked_mul(Decimal::from(COST_UNITS_PER_USD))?.trunc().to_i64(),
        }
    }
}

/// An organization's usage in one hour, from the audit rollups.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HourUsage {
    pub answered: i64,
    pub tokens: i64,
    pub gateway_cost_usd: Decimal,
}

/// The identifier (and idempotency key) of the `revision`th send of an hour's usage: 0 is the
/// hour itself, 1 and on the adjustments late rows made. The same send retried, resumed after a
/// crash or run by two replicas carries the same identifier, so the provider counts it once.
pub fn identifier(org_id: Uuid, usage: Usage, hour: DateTime<Utc>, revision: i32) -> String {
    format!("gw-{org_id}-{}-{}-r{revision}", usage.label(), hour.timestamp())
}

/// The time a meter event for `hour` carries: the hour's start, unless that is further back than
/// the provider accepts (Stripe: 35 days) after a long outage; then the oldest time it does.
pub fn event_time(hour: DateTime<Utc>, now: DateTime<Utc>) -> DateTime<Utc> {
    hour.max(now - chrono::Duration::days(35) + chrono::Duration::hours(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::str::FromStr;

    #[test]
    fn each_usage_counts_its_own_quantity() {
        let h = HourUsage { answered: 7, tokens: 1234, gateway_cost_usd: Decimal::from_str("0.0000123456").unwrap() };
        assert_eq!(Usage::Requests.quantity(&h), Some(7));
        assert_eq!(Usage::Tokens.quantity(&h), Some(1234));
        assert_eq!(Usage::GatewayCost.quantity(&h), Some(123_456));
        let huge = HourUsage { gateway_cost_usd: Decimal::from(i64::MAX), ..h.clone() };
        assert_eq!(Usage::GatewayCost.quantity(&huge), None);
        let beyond = HourUsage { gateway_cost_usd: Decimal::MAX, ..h };
        assert_eq!(Usage::GatewayCost.quantity(&beyond), None);
        for u in [Usage::Requests, Usage::Tokens, Usage::GatewayCost] {
            assert_eq!(Usage::parse(u.label()), Some(u));
        }
        assert_eq!(Usage::parse("dollars"), None);
    }

    #[test]
    fn identifiers_name_the_organization_meter_hour_and_revision_within_stripes_limit() {
        let org = Uuid::from_u128(1);
        let hour = DateTime::from_timestamp(1_795_000_000 / 3600 * 3600, 0).unwrap();
        let id = identifier(org, Usage::GatewayCost, hour, 2);
        assert_eq!(id, "gw-00000000-0000-0000-0000-000000000001-gateway_cost-1794999600-r2");
        assert!(id.len() <= 100);
        assert_ne!(identifier(org, Usage::GatewayCost, hour, 0), identifier(org, Usage::Tokens, hour, 0));
    }

    #[test]
    fn event_times_stay_within_the_providers_window() {
        let now = DateTime::from_timestamp(1_795_000_000, 0).unwrap();
        let recent = now - chrono::Duration::hours(3);
        assert_eq!(event_time(recent, now), recent);
        let old = now - chrono::Duration::days(40);
        assert_eq!(event_time(old, now), now - chrono::Duration::days(35) + chrono::Duration::hours(1));
    }

    proptest! {
        /// A cost with the audit log's 10 decimals converts to whole units without loss.
        #[test]
        fn costs_convert_exactly(units in 0i64..1_000_000_000_000_000) {
            let usd = Decimal::new(units, 10);
            let h = HourUsage { gateway_cost_usd: usd, ..HourUsage::default() };
            prop_assert_eq!(Usage::GatewayCost.quantity(&h), Some(units));
        }
    }
}
