//! The replica's own limiter, for while Redis is unreachable: the same plan and the same
//! arithmetic, each limit divided by the number of replicas expected to share it, budgets
//! continuing from the spend Redis last reported. Spend settled here is kept as unsynced and
//! added to the shared counters once Redis is back, so none is lost.

use std::collections::{HashMap, HashSet};

use super::plan::{
    budget_keys, Admission, BudgetCheck, BudgetSettled, Check, Outcome, Plan, SettleOp, Settlement, WINDOW_MS,
};

#[derive(Default)]
struct LocalBudget {
    /// Spend Redis last reported for the period.
    base: i64,
    /// Spend settled on this replica since.
    spent: i64,
    /// Reservations: request → (amount, expiry in ms).
    reserved: HashMap<String, (i64, i64)>,
    /// Alerts already reported from here.
    marks: HashSet<String>,
}

/// Spend not yet in the shared counters.
#[derive(Debug, Clone, PartialEq)]
pub struct Unsynced {
    pub check: BudgetCheck,
    pub keys: [String; 2],
    pub ttl_ms: u64,
    pub nanos: i64,
}

pub struct LocalLimiter {
    replicas: u64,
    /// Window key → (minute index, count).
    windows: HashMap<String, (i64, u64)>,
    /// Concurrency key → request → lease expiry (ms).
    leases: HashMap<String, HashMap<String, i64>>,
    budgets: HashMap<String, LocalBudget>,
    unsynced: HashMap<String, Unsynced>,
}

/// Most window counters kept before old minutes are dropped.
const MAX_WINDOWS: usize = 100_000;

impl LocalLimiter {
    pub fn new(replicas: u64) -> Self {
        Self {
            replicas: replicas.max(1),
            windows: HashMap::new(),
            leases: HashMap::new(),
            budgets: HashMap::new(),
            unsynced: HashMap::new(),
        }
    }

    /// The replicas sharing the limits (from their heartbeats): each one's share while Redis is
    /// away.
    pub fn set_replicas(&mut self, replicas: u64) {
        self.replicas = replicas.max(1);
    }

    pub fn replicas(&self) -> u64 {
        self.replicas
    }

    /// This replica's share of a limit shared by all.
    fn share(&self, limit: u64) -> u64 {
        limit.div_ceil(self.replicas).max(1)
    }

    /// Remembers what Redis said of the plan's budgets, the starting point if it goes away.
    pub fn observe(&mut self, plan: &Plan, admission: &Admission) {
        for (check, outcome) in plan.checks.iter().zip(&admission.outcomes) {
            if let (Check::Budget(b), Outcome::Budget { spent, .. }) = (check, outcome) {
                let [key, _] = budget_keys(&Plan::prefix(plan.org_id), b.scope, &b.window.id);
                let entry = self.budgets.entry(key).or_default();
                if entry.spent == 0 {
                    entry.base = (*spent).max(entry.base);
                }
            }
        }
    }

    pub fn admit(&mut self, plan: &Plan, now_ms: i64) -> Admission {
        let index = now_ms.div_euclid(WINDOW_MS as i64);
        if self.windows.len() > MAX_WINDOWS {
            self.windows.retain(|_, (i, _)| *i >= index);
        }
        let mut outcomes = Vec::with_capacity(plan.checks.len());
        let mut refused = None;
        for (i, check) in plan.checks.iter().enumerate() {
            let key = plan.keys(i).swap_remove(0);
            let (outcome, ok) = match check {
                Check::Window { limit, amount, .. } => {
                    let limit = self.share(*limit);
                    let used = match self.windows.get(&key) {
                        Some((w, n)) if *w == index => *n,
                        _ => 0,
                    };
                    let reset_ms = ((index + 1) * WINDOW_MS as i64 - now_ms).max(0) as u64;
                    (Outcome::Window { limit, used, reset_ms, index }, used + amount <= limit)
                }
                Check::Concurrency { limit, .. } => {
                    let limit = self.share(*limit);
                    let busy = self.leases.get_mut(&key).map_or(0, |l| {
                        l.retain(|_, exp| *exp > now_ms);
                        l.len() as u64
                    });
                    (Outcome::Concurrency { limit, busy }, busy < limit)
                }
                Check::Budget(b) => {
                    let entry = self.budgets.entry(key).or_default();
                    entry.reserved.retain(|_, (_, exp)| *exp > now_ms);
                    let reserved: i64 = entry.reserved.values().map(|(a, _)| a).sum();
                    let spent = entry.base + entry.spent;
                    // The replica's share of what was left when Redis went away.
                    let room = (b.limit_nanos - entry.base).max(0) / self.replicas as i64;
                    let ok = !b.hard || entry.spent + reserved < room;
                    (Outcome::Budget { limit_nanos: b.limit_nanos, spent, reserved }, ok)
                }
            };
            if !ok && refused.is_none() {
                refused = Some(i);
            }
            outcomes.push(outcome);
        }
        if refused.is_none() {
            for (i, check) in plan.checks.iter().enumerate() {
                let key = plan.keys(i).swap_remove(0);
                match check {
                    Check::Window { amount, .. } => {
                        let slot = self.windows.entry(key).or_insert((index, 0));
                        if slot.0 != index {
                            *slot = (index, 0);
                        }
                        slot.1 += amount;
                    }
                    Check::Concurrency { .. } => {
                        let expiry = now_ms + plan.lease_ms as i64;
                        self.leases.entry(key).or_default().insert(plan.request_id.clone(), expiry);
                    }
                    Check::Budget(b) => {
                        let expiry = now_ms + plan.lease_ms as i64;
                        let entry = self.budgets.entry(key).or_default();
                        entry.reserved.insert(plan.request_id.clone(), (b.reserve_nanos, expiry));
                    }
                }
            }
        }
        Admission { refused, outcomes }
    }

    /// Settles a request admitted here; returns the budgets' states (alerts counted on this
    /// replica's view; the events outbox keeps them to one per threshold and period).
    pub fn settle(&mut self, s: &Settlement) -> Vec<BudgetSettled> {
        let mut out = Vec::new();
        for op in &s.ops {
            match op {
                SettleOp::Tokens { key, index, delta } => {
                    if let Some((w, n)) = self.windows.get_mut(key) {
                        if w == index {
                            *n = (*n as i64 + delta).max(0) as u64;
                        }
                    }
                }
                SettleOp::Release { key } => {
                    if let Some(l) = self.leases.get_mut(key) {
                        l.remove(&s.request_id);
                    }
                }
                SettleOp::Budget { check, keys, ttl_ms, actual_nanos } => {
                    let entry = self.budgets.entry(keys[0].clone()).or_default();
                    entry.reserved.remove(&s.request_id);
                    entry.spent += actual_nanos;
                    let spent = entry.base + entry.spent;
                    let mut settled = BudgetSettled {
                        check: check.clone(),
                        spent_nanos: spent,
                        exceeded: false,
                        thresholds_crossed: Vec::new(),
                    };
                    if spent >= check.limit_nanos {
                        settled.exceeded = entry.marks.insert(format!("x:{}", check.limit_nanos));
                    }
                    for t in &check.thresholds {
                        if spent as i128 * 100 >= check.limit_nanos as i128 * i128::from(*t)
                            && entry.marks.insert(format!("a{t}:{}", check.limit_nanos))
                        {
                            settled.thresholds_crossed.push(*t);
                        }
                    }
                    out.push(settled);
                    self.add_unsynced(check, keys, *ttl_ms, *actual_nanos);
                }
            }
        }
        out
    }

    /// Keeps the spend of a settlement Redis could not take, for later.
    pub fn defer(&mut self, s: &Settlement) {
        for op in &s.ops {
            if let SettleOp::Budget { check, keys, ttl_ms, actual_nanos } = op {
                if let Some(entry) = self.budgets.get_mut(&keys[0]) {
                    entry.spent += actual_nanos;
                }
                self.add_unsynced(check, keys, *ttl_ms, *actual_nanos);
            }
        }
    }

    fn add_unsynced(&mut self, check: &BudgetCheck, keys: &[String; 2], ttl_ms: u64, nanos: i64) {
        if nanos <= 0 {
            return;
        }
        let u = self.unsynced.entry(keys[0].clone()).or_insert_with(|| Unsynced {
            check: check.clone(),
            keys: keys.clone(),
            ttl_ms,
            nanos: 0,
        });
        u.nanos += nanos;
    }

    /// The spend to add to the shared counters; what fails to sync goes back with [`Self::restore`].
    pub fn take_unsynced(&mut self) -> Vec<Unsynced> {
        self.unsynced.drain().map(|(_, u)| u).collect()
    }

    pub fn restore(&mut self, u: Unsynced) {
        let nanos = u.nanos;
        self.unsynced.entry(u.keys[0].clone()).or_insert(Unsynced { nanos: 0, ..u }).nanos += nanos;
    }

    /// Back to the shared counters: everything this replica counted on its own is stale now.
    pub fn forget(&mut self) {
        self.budgets.clear();
        self.windows.clear();
        self.leases.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::limits::estimate::Estimate;
    use crate::limits::plan::{Ask, Scope};
    use crate::limits::settings::ScopeLimits;

    fn plan(limits: &ScopeLimits, id: u128, cost: i64) -> Plan {
        let ask = Ask {
            model: "m",
            estimate: Estimate { prompt_tokens: 5, prompt_tokens_max: 5, completion_tokens_max: 5 },
            max_cost_nanos: cost,
        };
        Plan::build(
            Uuid::nil(),
            Uuid::from_u128(id),
            &[(Scope::Org, limits)],
            &ask,
            Duration::from_secs(60),
            "2026-11-23T10:00:00Z".parse().unwrap(),
        )
    }

    fn scope(v: serde_json::Value) -> ScopeLimits {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn windows_are_shared_out_between_replicas() {
        let l = scope(json!({"rate_limits": {"rpm": 10}}));
        let mut local = LocalLimiter::new(3);
        let admitted = (0..10).filter(|i| local.admit(&plan(&l, *i, 0), 1_000).admitted()).count();
        assert_eq!(admitted, 4); // ceil(10 / 3)
                                 // The next minute starts afresh.
        assert!(local.admit(&plan(&l, 99, 0), 61_000).admitted());
    }

    #[test]
    fn leases_end_on_settlement_or_expiry() {
        let l = scope(json!({"rate_limits": {"max_concurrent": 1}}));
        let mut local = LocalLimiter::new(1);
        let p1 = plan(&l, 1, 0);
        let a1 = local.admit(&p1, 0);
        assert!(a1.admitted());
        assert!(!local.admit(&plan(&l, 2, 0), 1).admitted());
        local.settle(&p1.settlement(&a1, 0, 0));
        assert!(local.admit(&plan(&l, 3, 0), 2).admitted());
        // Request 3 never settles: its lease runs out.
        assert!(local.admit(&plan(&l, 4, 0), 60_003).admitted());
    }

    #[test]
    fn budgets_continue_from_the_shared_spend_and_keep_what_must_be_synced() {
        let l = scope(json!({"budget": {"amount_usd": 1, "period": "day", "alert_thresholds": [50, 90]}}));
        let mut local = LocalLimiter::new(2);
        let p = plan(&l, 1, 100_000_000);
        // Redis said 0.6 of 1.0 was spent: this replica may spend half the remaining 0.4.
        local.observe(
            &p,
            &Admission {
                refused: None,
                outcomes: vec![Outcome::Budget { limit_nanos: 1_000_000_000, spent: 600_000_000, reserved: 0 }],
            },
        );
        let a = local.admit(&p, 0);
        assert!(a.admitted());
        let settled = local.settle(&p.settlement(&a, 10, 150_000_000));
        assert_eq!(settled[0].spent_nanos, 750_000_000);
        // 50 % was probably reported before the outage already: the outbox keeps one row of it.
        assert_eq!(settled[0].thresholds_crossed, [50]);
        let p2 = plan(&l, 2, 100_000_000);
        let a2 = local.admit(&p2, 1);
        assert!(a2.admitted()); // 0.15 spent of a 0.2 share
        let settled = local.settle(&p2.settlement(&a2, 10, 160_000_000));
        assert_eq!(settled[0].thresholds_crossed, [90]);
        assert!(!local.admit(&plan(&l, 3, 1), 2).admitted());
        let unsynced = local.take_unsynced();
        assert_eq!(unsynced.len(), 1);
        assert_eq!(unsynced[0].nanos, 310_000_000);
        assert!(local.take_unsynced().is_empty());
        local.restore(unsynced[0].clone());
        assert_eq!(local.take_unsynced()[0].nanos, 310_000_000);
    }
}
