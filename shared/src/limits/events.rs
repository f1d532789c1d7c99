//! Budget events for the outbox: `budget.threshold_crossed` per alert threshold and
//! `budget.exceeded`, each at most once per budget amount per period (the dedupe key says so, and
//! the outbox's unique index holds it).

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use super::plan::{BudgetSettled, Scope};

pub const THRESHOLD_CROSSED: &str = "budget.threshold_crossed";
pub const EXCEEDED: &str = "budget.exceeded";

/// An event on its way to the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub id: Uuid,
    pub org_id: Uuid,
    pub event_type: &'static str,
    pub dedupe_key: String,
    pub payload: Value,
    pub created_at: DateTime<Utc>,
}

fn dollars(nanos: i64) -> String {
    crate::money::from_nanos(nanos).to_string()
}

/// The events a settlement makes due.
pub fn budget_events(org_id: Uuid, s: &BudgetSettled, at: DateTime<Utc>) -> Vec<NewEvent> {
    let b = &s.check;
    let percent = if b.limit_nanos > 0 { s.spent_nanos as f64 * 100.0 / b.limit_nanos as f64 } else { 0.0 };
    let (team_id, api_key_id) = match b.scope {
        Scope::Org | Scope::Gateway => (None, None),
        Scope::Team(t) => (Some(t), None),
        Scope::Key(k) => (None, Some(k)),
    };
    let base = |kind: &'static str, threshold: Option<u8>| {
        let mut dedupe = format!("{kind}:{}:{}:{}", b.scope.tag(), b.window.id, b.limit_nanos);
        if let Some(t) = threshold {
            dedupe.push_str(&format!(":{t}"));
        }
        NewEvent {
            id: crate::ids::new_id(),
            org_id,
            event_type: kind,
            dedupe_key: dedupe,
            payload: json!({
                "type": kind,
                "organization_id": org_id,
                "scope": b.scope.label(),
                "team_id": team_id,
                "api_key_id": api_key_id,
                "budget": {
                    "amount_usd": crate::money::text(b.amount_usd),
                    "period": b.period.as_str(),
                    "period_id": b.window.id,
                    "period_start": b.window.start,
                    "period_end": b.window.end,
                    "hard_limit": b.hard,
                },
                "threshold_percent": threshold,
                "spend_usd": dollars(s.spent_nanos),
                "limit_usd": dollars(b.limit_nanos),
                "percent_used": (percent * 100.0).round() / 100.0,
                "occurred_at": at,
            }),
            created_at: at,
        }
    };
    let mut out: Vec<NewEvent> = s.thresholds_crossed.iter().map(|t| base(THRESHOLD_CROSSED, Some(*t))).collect();
    if s.exceeded {
        out.push(base(EXCEEDED, None));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::period::Period;
    use crate::limits::plan::BudgetCheck;

    #[test]
    fn one_event_per_threshold_with_a_stable_dedupe_key() {
        let team = Uuid::now_v7();
        let at: DateTime<Utc> = "2026-11-23T10:00:00Z".parse().unwrap();
        let check = BudgetCheck {
            scope: Scope::Team(team),
            period: Period::Month,
            window: Period::Month.window(at),
            amount_usd: rust_decimal::Decimal::from(10),
            limit_nanos: 10_000_000_000,
            reserve_nanos: 1,
            hard: true,
            thresholds: vec![50, 80, 100],
        };
        let s = BudgetSettled { check, spent_nanos: 10_500_000_000, exceeded: true, thresholds_crossed: vec![80, 100] };
        let events = budget_events(Uuid::nil(), &s, at);
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].dedupe_key, format!("budget.threshold_crossed:team:{team}:2026-11:10000000000:80"));
        assert_eq!(events[2].event_type, EXCEEDED);
        let p = &events[1].payload;
        assert_eq!(p["team_id"], team.to_string());
        assert_eq!(p["percent_used"], 105.0);
        assert_eq!(p["spend_usd"], "10.5");
        assert_eq!(p["threshold_percent"], 100);
        assert_eq!(p["budget"]["period_id"], "2026-11");
        // The same crossing computed again (another replica, a replay) has the same key.
        assert_eq!(budget_events(Uuid::nil(), &s, at)[0].dedupe_key, events[0].dedupe_key);
    }
}
