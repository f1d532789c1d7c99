//! Spend at a glance: a team's or a key's spend in its current period, whether or not a budget
//! is set. The period is the budget's (`day`, `week`, `month`, `total`) when there is one, else
//! the calendar month (UTC). The figure is the audit log's (through the hourly rollups), so it
//! counts every settled request and trails the proxies by the audit writer's flush interval;
//! the budget counters themselves are read by `GET .../limits`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use diesel_async::AsyncPgConnection;
use gw_shared::db::rollups::{self, Owner};
use gw_shared::limits::period::Period;
use gw_shared::limits::settings::Budget;
use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::ApiResult;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PeriodSpend {
    /// `day`, `week`, `month` or `total`: the budget's period, else `month`.
    pub period: &'static str,
    /// The start of the current period (UTC); null for `total`.
    pub period_start: Option<DateTime<Utc>>,
    /// Spend of the requests settled in the period, US dollars.
    #[schema(value_type = String)]
    pub spend_usd: String,
}

/// The period a stored budget (JSON) puts its owner's spend in.
pub fn period_of(budget: Option<&serde_json::Value>) -> Period {
    budget.and_then(|b| serde_json::from_value::<Budget>(b.clone()).ok()).map(|b| b.period()).unwrap_or(Period::Month)
}

/// The current period's spend of each of `owners` (id and period): `org_id` itself, or teams or
/// keys of it.
pub async fn current(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    owner: Owner,
    owners: &[(Uuid, Period)],
) -> ApiResult<HashMap<Uuid, PeriodSpend>> {
    let now = Utc::now();
    let mut out = HashMap::with_capacity(owners.len());
    for period in [Period::Day, Period::Week, Period::Month, Period::Total] {
        let ids: Vec<Uuid> = owners.iter().filter(|(_, p)| *p == period).map(|(id, _)| *id).collect();
        if ids.is_empty() {
            continue;
        }
        let start = period.window(now).start;
        let from = start.unwrap_or(DateTime::UNIX_EPOCH);
        let spend = rollups::spend(conn, org_id, owner, &ids, from, now).await?;
        for id in ids {
            let usd = spend.get(&id).copied().unwrap_or(Decimal::ZERO);
            out.insert(
                id,
                PeriodSpend { period: period.as_str(), period_start: start, spend_usd: gw_shared::money::text(usd) },
            );
        }
    }
    Ok(out)
}

/// A new team's or key's spend: nothing yet.
pub fn none(budget: Option<&serde_json::Value>) -> PeriodSpend {
    zero(period_of(budget))
}

/// No spend in the current `period`.
pub fn zero(period: Period) -> PeriodSpend {
    PeriodSpend { period: period.as_str(), period_start: period.window(Utc::now()).start, spend_usd: "0".into() }
}

/// One team's or key's current spend.
pub async fn of_one(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    owner: Owner,
    id: Uuid,
    budget: Option<&serde_json::Value>,
) -> ApiResult<PeriodSpend> {
    let mut all = current(conn, org_id, owner, &[(id, period_of(budget))]).await?;
    Ok(all.remove(&id).unwrap_or_else(|| none(budget)))
}
