//! One request's limits as checks: which counters at which level, with which limits and amounts;
//! what admission said of each; and what settling the request changes. The same plan runs in the
//! shared Redis script ([`super::script`]) or, while Redis is away, in the replica's own limiter
//! ([`super::local`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::estimate::Estimate;
use super::period::{Period, PeriodWindow};
use super::settings::ScopeLimits;
use super::{LimitState, LimitWindow};

/// Width of the rate-limit windows: UTC calendar minutes.
pub const WINDOW_MS: u64 = 60_000;

/// The level a limit is set at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Org,
    Team(Uuid),
    Key(Uuid),
    /// The organization's quota on the gateway's own provider credentials (its plan's, from
    /// `[gateway_quota]`): counted only for requests those credentials serve.
    Gateway,
}

impl Scope {
    /// The scope's part of counter keys and event dedupe keys.
    pub fn tag(&self) -> String {
        match self {
            Scope::Org => "org".into(),
            Scope::Team(id) => format!("team:{id}"),
            Scope::Key(id) => format!("key:{id}"),
            Scope::Gateway => "gateway".into(),
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Scope::Org => "organization",
            Scope::Team(_) => "team",
            Scope::Key(_) => "key",
            Scope::Gateway => "gateway quota",
        }
    }

    /// How a refusal names it: by the names the caller knows (`names`), the id only when the
    /// name is not known.
    pub fn describe(&self, names: &ScopeNames<'_>) -> String {
        match (self, names) {
            (Scope::Org, _) => "this organization".into(),
            (Scope::Team(_), ScopeNames { team: Some(name), .. }) => format!("team '{name}'"),
            (Scope::Team(id), _) => format!("team {id}"),
            (Scope::Key(_), ScopeNames { key: Some((name, prefix)), .. }) => format!("API key '{name}' ({prefix}...)"),
            (Scope::Key(id), _) => format!("API key {id}"),
            (Scope::Gateway, _) => "this organization's quota on the gateway's provider credentials".into(),
        }
    }
}

/// The names of the request's team and key, for refusal messages (a key by its name and the
/// prefix its owner sees in the console, never its id alone).
#[derive(Debug, Clone, Copy, Default)]
pub struct ScopeNames<'a> {
    pub team: Option<&'a str>,
    /// The key's name and prefix.
    pub key: Option<(&'a str, &'a str)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    Requests,
    Tokens,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// A per-minute counter: requests (amount 1) or tokens (the estimate).
    Window { scope: Scope, measure: Measure, model: Option<String>, limit: u64, amount: u64 },
    /// Requests in flight.
    Concurrency { scope: Scope, limit: u64 },
    /// A budget: the request reserves its maximum cost until it settles.
    Budget(BudgetCheck),
}

#[derive(Debug, Clone, PartialEq)]
pub struct BudgetCheck {
    pub scope: Scope,
    pub period: Period,
    pub window: PeriodWindow,
    pub amount_usd: rust_decimal::Decimal,
    pub limit_nanos: i64,
    /// The reservation: the request's maximum possible cost.
    pub reserve_nanos: i64,
    pub hard: bool,
    pub thresholds: Vec<u8>,
}

/// Everything one request's admission needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub org_id: Uuid,
    /// Names the request's reservations and concurrency lease.
    pub request_id: String,
    /// How long a reservation or lease outlives a request that never settles (a replica died).
    pub lease_ms: u64,
    pub checks: Vec<Check>,
    /// When the plan was made (budget periods are this instant's).
    pub at: DateTime<Utc>,
}

/// What a request asks of the limits.
pub struct Ask<'a> {
    pub model: &'a str,
    pub estimate: Estimate,
    pub max_cost_nanos: i64,
}

impl Plan {
    /// The checks of the scopes' limits, broadest scope first.
    pub fn build(
        org_id: Uuid,
        request_id: Uuid,
        scopes: &[(Scope, &ScopeLimits)],
        ask: &Ask<'_>,
        lease: Duration,
        at: DateTime<Utc>,
    ) -> Plan {
        let mut checks = Vec::new();
        let tokens = ask.estimate.tokens();
        for (scope, limits) in scopes {
            let scope = *scope;
            if let Some(r) = &limits.rate_limits {
                let model_limits = r.for_model(ask.model);
                let windows = [
                    (Measure::Requests, None, r.rpm, 1),
                    (Measure::Tokens, None, r.tpm, tokens),
                    (Measure::Requests, Some(ask.model), model_limits.and_then(|m| m.rpm), 1),
                    (Measure::Tokens, Some(ask.model), model_limits.and_then(|m| m.tpm), tokens),
                ];
                for (measure, model, limit, amount) in windows {
                    if let Some(limit) = limit {
                        let model = model.map(str::to_string);
                        checks.push(Check::Window { scope, measure, model, limit: u64::from(limit), amount });
                    }
                }
                if let Some(c) = r.max_concurrent {
                    checks.push(Check::Concurrency { scope, limit: u64::from(c) });
                }
            }
            if let Some(b) = &limits.budget {
                let period = b.period();
                checks.push(Check::Budget(BudgetCheck {
                    scope,
                    period,
                    window: period.window(at),
                    amount_usd: b.amount_usd,
                    limit_nanos: b.limit_nanos(),
                    reserve_nanos: ask.max_cost_nanos.max(0),
                    hard: b.hard_limit,
                    thresholds: b.alert_thresholds.clone(),
                }));
            }
        }
        Plan { org_id, request_id: request_id.simple().to_string(), lease_ms: lease.as_millis() as u64, checks, at }
    }

    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// Every counter key of the organization shares one Redis Cluster hash slot (`{org}`), so one
    /// script may touch them all.
    pub fn prefix(org_id: Uuid) -> String {
        format!("gw:lim:{{{org_id}}}")
    }

    /// The Redis keys of check `i` (a window key gets its minute's index appended by the script).
    pub fn keys(&self, i: usize) -> Vec<String> {
        let p = Self::prefix(self.org_id);
        match &self.checks[i] {
            Check::Window { scope, measure, model, .. } => vec![window_key(&p, *scope, *measure, model.as_deref())],
            Check::Concurrency { scope, .. } => vec![format!("{p}:c:{}", scope.tag())],
            Check::Budget(b) => budget_keys(&p, b.scope, &b.window.id).to_vec(),
        }
    }

    /// The redis key's TTL for a budget's counters: a day past the period's end (none for
    /// `total`).
    pub fn budget_ttl_ms(&self, b: &BudgetCheck) -> u64 {
        match b.window.end {
            Some(end) => (end - self.at).num_milliseconds().max(0) as u64 + 86_400_000,
            None => 0,
        }
    }
}

pub fn window_key(prefix: &str, scope: Scope, measure: Measure, model: Option<&str>) -> String {
    let m = match measure {
        Measure::Requests => "r",
        Measure::Tokens => "t",
    };
    match model {
        Some(model) => format!("{prefix}:w:{}:m:{model}:{m}", scope.tag()),
        None => format!("{prefix}:w:{}:{m}", scope.tag()),
    }
}

/// The budget's counters (a hash: `spent`, `reserved`, alert marks) and its reservations (a sorted
/// set of `<request>:<nano-dollars>` by lease expiry; `reserved` is always the sum of its members'
/// amounts, so an expired member says what to release without another lookup).
pub fn budget_keys(prefix: &str, scope: Scope, period_id: &str) -> [String; 2] {
    let h = format!("{prefix}:b:{}:{period_id}", scope.tag());
    let z = format!("{h}:leases");
    [h, z]
}

/// What admission found for one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `used`: the window's count before this request; `index`: the window (minute) counted in.
    Window {
        limit: u64,
        used: u64,
        reset_ms: u64,
        index: i64,
    },
    Concurrency {
        limit: u64,
        busy: u64,
    },
    /// `spent` and `reserved` before this request's reservation.
    Budget {
        limit_nanos: i64,
        spent: i64,
        reserved: i64,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    /// The first check that refused, if one did (then nothing was counted).
    pub refused: Option<usize>,
    pub outcomes: Vec<Outcome>,
}

/// Why a request was refused, for the 429.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub budget: bool,
    /// The OpenAI error `type`: `requests`, `tokens` (as OpenAI's rate limits say) or
    /// `insufficient_quota` (a budget).
    pub error_type: &'static str,
    pub message: String,
    pub retry_after: Duration,
}

impl Admission {
    pub fn admitted(&self) -> bool {
        self.refused.is_none()
    }

    /// The tightest request and token windows, as the `x-ratelimit-*` headers report them.
    pub fn state(&self, plan: &Plan) -> LimitState {
        let mut state = LimitState::default();
        let counted = self.admitted();
        for (check, outcome) in plan.checks.iter().zip(&self.outcomes) {
            let (Check::Window { measure, amount, .. }, Outcome::Window { limit, used, reset_ms, .. }) =
                (check, outcome)
            else {
                continue;
            };
            let after = if counted { used.saturating_add(*amount) } else { *used };
            let w = LimitWindow {
                limit: *limit,
                remaining: limit.saturating_sub(after),
                reset: Duration::from_millis(*reset_ms),
            };
            let slot = match measure {
                Measure::Requests => &mut state.requests,
                Measure::Tokens => &mut state.tokens,
            };
            if slot.is_none_or(|s| w.remaining < s.remaining) {
                *slot = Some(w);
            }
        }
        state
    }

    /// The refusal, when there is one.
    pub fn refusal(&self, plan: &Plan, names: &ScopeNames<'_>) -> Option<Refusal> {
        let i = self.refused?;
        let (check, outcome) = (plan.checks.get(i)?, self.outcomes.get(i)?);
        Some(match (check, outcome) {
            (Check::Window { scope, measure, model, amount, .. }, Outcome::Window { limit, used, reset_ms, .. }) => {
                let what = match measure {
                    Measure::Requests => "requests per minute",
                    Measure::Tokens => "tokens per minute",
                };
                let model = model.as_ref().map(|m| format!(" for model {m}")).unwrap_or_default();
                let retry = Duration::from_millis((*reset_ms).max(1));
                let message = if *measure == Measure::Tokens && amount > limit {
                    format!(
                        "Request too large for {}{model}: it may use {amount} tokens, more than the limit of {limit} \
                         tokens per minute. Lower max_tokens or shorten the prompt.",
                        scope.describe(names)
                    )
                } else {
                    format!(
                        "Rate limit reached for {}{model} on {what}: limit {limit}, used {used}. Retry in {}.",
                        scope.describe(names),
                        human(retry)
                    )
                };
                let error_type = match measure {
                    Measure::Requests => "requests",
                    Measure::Tokens => "tokens",
                };
                Refusal { budget: false, error_type, message, retry_after: retry }
            }
            (Check::Concurrency { scope, limit }, _) => Refusal {
                budget: false,
                error_type: "requests",
                message: format!(
                    "Rate limit reached for {}: at most {limit} requests in flight at once. Retry shortly.",
                    scope.describe(names)
                ),
                retry_after: Duration::from_secs(1),
            },
            (Check::Budget(b), Outcome::Budget { spent, .. }) => {
                let (retry_after, resets) = match b.window.end {
                    Some(end) => {
                        let left = (end - plan.at).to_std().unwrap_or_default().max(Duration::from_secs(1));
                        (left, format!("It resets at {}.", end.format("%Y-%m-%dT%H:%M:%SZ")))
                    }
                    None => (Duration::from_secs(3600), "It does not reset: raise it to continue.".into()),
                };
                Refusal {
                    budget: true,
                    error_type: "insufficient_quota",
                    message: format!(
                        "Budget exceeded for {}: {} of its {} budget is spent. {resets}",
                        b.scope.describe(names),
                        usd(*spent),
                        match b.period {
                            Period::Total => format!("{} total", usd(b.limit_nanos)),
                            p => format!("{} per {}", usd(b.limit_nanos), p.as_str()),
                        }
                    ),
                    retry_after,
                }
            }
            _ => return None,
        })
    }
}

/// Dollars for messages: cents, or more places for amounts under a cent.
pub fn usd(nanos: i64) -> String {
    let d = nanos as f64 / 1e9;
    if d != 0.0 && d.abs() < 0.01 {
        format!("${d:.6}")
    } else {
        format!("${d:.2}")
    }
}

fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} s", d.as_secs_f64().ceil() as u64)
    }
}

/// What settling a request changes.
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    pub org_id: Uuid,
    pub request_id: String,
    pub ops: Vec<SettleOp>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SettleOp {
    /// Corrects a tokens window (the minute counted in) by real minus estimated tokens.
    Tokens { key: String, index: i64, delta: i64 },
    /// Ends a concurrency lease.
    Release { key: String },
    /// Releases the reservation and adds the real cost.
    Budget { check: BudgetCheck, keys: [String; 2], ttl_ms: u64, actual_nanos: i64 },
}

impl Plan {
    /// The settlement of an admitted request that used `tokens` and cost `cost_nanos`.
    pub fn settlement(&self, admission: &Admission, tokens: u64, cost_nanos: i64) -> Settlement {
        let mut ops = Vec::new();
        for (i, (check, outcome)) in self.checks.iter().zip(&admission.outcomes).enumerate() {
            match (check, outcome) {
                (Check::Window { measure: Measure::Tokens, amount, .. }, Outcome::Window { index, .. }) => {
                    let delta = tokens as i64 - *amount as i64;
                    if delta != 0 {
                        let key = self.keys(i).swap_remove(0);
                        ops.push(SettleOp::Tokens { key, index: *index, delta });
                    }
                }
                (Check::Concurrency { .. }, _) => ops.push(SettleOp::Release { key: self.keys(i).swap_remove(0) }),
                (Check::Budget(b), _) => {
                    let [h, z] = budget_keys(&Self::prefix(self.org_id), b.scope, &b.window.id);
                    ops.push(SettleOp::Budget {
                        check: b.clone(),
                        keys: [h, z],
                        ttl_ms: self.budget_ttl_ms(b),
                        actual_nanos: cost_nanos.max(0),
                    });
                }
                _ => {}
            }
        }
        Settlement { org_id: self.org_id, request_id: self.request_id.clone(), ops }
    }
}

/// A budget's state after a settlement: its spend, and the alerts that are now due (each
/// reported once per period by whichever settlement crossed it first).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetSettled {
    pub check: BudgetCheck,
    pub spent_nanos: i64,
    pub exceeded: bool,
    pub thresholds_crossed: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::limits::settings::{Budget, RateLimits};

    fn limits(rate: serde_json::Value, budget: Option<serde_json::Value>) -> ScopeLimits {
        ScopeLimits {
            rate_limits: Some(serde_json::from_value::<RateLimits>(rate).unwrap()),
            budget: budget.map(|b| serde_json::from_value::<Budget>(b).unwrap()),
        }
    }

    fn plan(scopes: &[(Scope, &ScopeLimits)]) -> Plan {
        let ask = Ask {
            model: "gpt-4o",
            estimate: Estimate { prompt_tokens: 10, prompt_tokens_max: 40, completion_tokens_max: 90 },
            max_cost_nanos: 5_000,
        };
        Plan::build(
            Uuid::nil(),
            Uuid::nil(),
            scopes,
            &ask,
            Duration::from_secs(60),
            "2026-11-23T10:00:00Z".parse().unwrap(),
        )
    }

    #[test]
    fn plans_hold_every_configured_check_and_keys_share_the_org_slot() {
        let team = Uuid::now_v7();
        let org = limits(json!({"rpm": 10, "models": {"gpt-4o": {"tpm": 500}, "other": {"rpm": 1}}}), None);
        let t = limits(json!({"max_concurrent": 2}), Some(json!({"amount_usd": 5, "period": "day"})));
        let p = plan(&[(Scope::Org, &org), (Scope::Team(team), &t)]);
        assert_eq!(p.checks.len(), 4);
        assert!(
            matches!(&p.checks[1], Check::Window { measure: Measure::Tokens, amount: 100, model: Some(m), .. } if m == "gpt-4o")
        );
        let Check::Budget(b) = &p.checks[3] else { panic!() };
        assert_eq!((b.limit_nanos, b.reserve_nanos, b.window.id.as_str()), (5_000_000_000, 5_000, "2026-11-23"));
        assert_eq!(p.budget_ttl_ms(b), 14 * 3_600_000 + 86_400_000);
        for i in 0..p.checks.len() {
            assert!(p.keys(i).iter().all(|k| k.starts_with("gw:lim:{00000000-0000-0000-0000-000000000000}:")));
        }
        assert_eq!(p.keys(1)[0], format!("{}:w:org:m:gpt-4o:t", Plan::prefix(Uuid::nil())));
        assert!(plan(&[(Scope::Org, &ScopeLimits::default())]).is_empty());
    }

    #[test]
    fn headers_report_the_tightest_window_and_refusals_name_it() {
        let org = limits(json!({"rpm": 10, "tpm": 1000}), None);
        let key = limits(json!({"rpm": 3}), None);
        let p = plan(&[(Scope::Org, &org), (Scope::Key(Uuid::nil()), &key)]);
        let a = Admission {
            refused: None,
            outcomes: vec![
                Outcome::Window { limit: 10, used: 1, reset_ms: 5_000, index: 1 },
                Outcome::Window { limit: 1000, used: 0, reset_ms: 5_000, index: 1 },
                Outcome::Window { limit: 3, used: 1, reset_ms: 5_000, index: 1 },
            ],
        };
        let s = a.state(&p);
        assert_eq!(s.requests.map(|w| (w.limit, w.remaining)), Some((3, 1)));
        assert_eq!(s.tokens.map(|w| (w.limit, w.remaining)), Some((1000, 900)));
        assert!(a.refusal(&p, &ScopeNames::default()).is_none());
        let refused = Admission { refused: Some(2), ..a };
        let r = refused.refusal(&p, &ScopeNames::default()).unwrap();
        assert!(!r.budget);
        assert_eq!(r.retry_after, Duration::from_secs(5));
        assert!(r.message.contains("requests per minute"), "{}", r.message);
        assert!(r.message.contains(&format!("API key {}", Uuid::nil())), "{}", r.message);
        let names = ScopeNames { team: None, key: Some(("ci bot", "gw_live_ab12")) };
        let named = refused.refusal(&p, &names).unwrap();
        assert!(
            named.message.starts_with("Rate limit reached for API key 'ci bot' (gw_live_ab12...)"),
            "{}",
            named.message
        );
        assert_eq!(refused.state(&p).requests.map(|w| w.remaining), Some(2));
    }

    #[test]
    fn budget_refusals_say_when_the_period_resets() {
        let b = limits(json!({"rpm": 1000}), Some(json!({"amount_usd": 10, "period": "month"})));
        let p = plan(&[(Scope::Team(Uuid::nil()), &b)]);
        let a = Admission {
            refused: Some(1),
            outcomes: vec![
                Outcome::Window { limit: 1000, used: 0, reset_ms: 1, index: 0 },
                Outcome::Budget { limit_nanos: 10_000_000_000, spent: 10_000_000_001, reserved: 0 },
            ],
        };
        let r = a.refusal(&p, &ScopeNames::default()).unwrap();
        assert!(r.budget);
        assert!(r.message.contains("2026-12-01T00:00:00Z"), "{}", r.message);
        let named = a.refusal(&p, &ScopeNames { team: Some("search"), key: None }).unwrap();
        assert!(named.message.starts_with("Budget exceeded for team 'search':"), "{}", named.message);
        assert_eq!(r.retry_after.as_secs(), (7 * 24 + 14) * 3600);
        let s = p.settlement(&Admission { refused: None, ..a }, 50, 123);
        assert!(matches!(&s.ops[..], [SettleOp::Budget { actual_nanos: 123, .. }]));
    }

    #[test]
    fn settlements_correct_tokens_release_leases_and_settle_budgets() {
        let l = limits(json!({"tpm": 1000, "max_concurrent": 5}), Some(json!({"amount_usd": 1, "period": "total"})));
        let p = plan(&[(Scope::Org, &l)]);
        let a = Admission {
            refused: None,
            outcomes: vec![
                Outcome::Window { limit: 1000, used: 0, reset_ms: 1, index: 7 },
                Outcome::Concurrency { limit: 5, busy: 0 },
                Outcome::Budget { limit_nanos: 1, spent: 0, reserved: 0 },
            ],
        };
        let s = p.settlement(&a, 30, 9);
        assert!(matches!(&s.ops[0], SettleOp::Tokens { index: 7, delta: -70, .. }));
        assert!(matches!(&s.ops[1], SettleOp::Release { .. }));
        assert!(matches!(&s.ops[2], SettleOp::Budget { ttl_ms: 0, .. }));
        assert_eq!(usd(1_500_000_000), "$1.50");
        assert_eq!(usd(1_000), "$0.000001");
    }
}
