//! The limiter's Redis scripts against the real Redis of the test stack, without a proxy: the
//! paths a proxy test cannot reach on demand (a reservation whose request died, a settlement
//! after its window expired, a free request, several settlements in one call).

use std::time::Duration;

use chrono::Utc;
use gw_shared::limits::estimate::Estimate;
use gw_shared::limits::plan::{budget_keys, Ask, Plan, Scope};
use gw_shared::limits::script::Scripts;
use gw_shared::limits::settings::ScopeLimits;
use gw_tests::redis_url;
use redis::aio::ConnectionManager;
use serde_json::{json, Value};
use uuid::Uuid;

async fn conn() -> ConnectionManager {
    ConnectionManager::new(redis::Client::open(redis_url()).unwrap()).await.unwrap()
}

fn limits(budget: Option<Value>, rate: Option<Value>) -> ScopeLimits {
    ScopeLimits::from_json(budget, rate)
}

fn plan(org: Uuid, scopes: &[(Scope, &ScopeLimits)], max_cost_nanos: i64, lease: Duration) -> Plan {
    let ask = Ask {
        model: "m",
        estimate: Estimate { prompt_tokens: 10, prompt_tokens_max: 40, completion_tokens_max: 100 },
        max_cost_nanos,
    };
    Plan::build(org, Uuid::now_v7(), scopes, &ask, lease, Utc::now())
}

async fn budget_state(c: &mut ConnectionManager, scripts: &Scripts, org: Uuid, scope: Scope) -> (i64, i64, i64) {
    let period = Utc::now().format("%Y-%m").to_string();
    scripts.peek(c, &budget_keys(&Plan::prefix(org), scope, &period)).await.unwrap()
}

#[tokio::test]
async fn a_dead_requests_reservation_is_released_when_its_lease_expires() {
    let (mut c, scripts, org) = (conn().await, Scripts::default(), Uuid::now_v7());
    let l = limits(Some(json!({"amount_usd": 1, "period": "month"})), None);
    let scopes = [(Scope::Org, &l)];
    // Reserves 0.6 of 1 USD and never settles.
    let dead = plan(org, &scopes, 600_000_000, Duration::from_millis(200));
    assert!(scripts.admit(&mut c, &dead).await.unwrap().admitted());
    assert_eq!(budget_state(&mut c, &scripts, org, Scope::Org).await, (0, 600_000_000, 1));
    // Another 0.6 still fits (the check is against what was committed before it)...
    let second = plan(org, &scopes, 600_000_000, Duration::from_secs(60));
    let a = scripts.admit(&mut c, &second).await.unwrap();
    assert!(a.admitted());
    // ...and a third does not, until the dead one's lease runs out.
    let third = plan(org, &scopes, 1, Duration::from_secs(60));
    assert!(!scripts.admit(&mut c, &third).await.unwrap().admitted());
    scripts.settle(&mut c, &second.settlement(&a, 10, 500_000_000)).await.unwrap();
    assert!(!scripts.admit(&mut c, &third).await.unwrap().admitted(), "the dead reservation still holds 0.6");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(budget_state(&mut c, &scripts, org, Scope::Org).await, (500_000_000, 0, 0));
    assert!(scripts.admit(&mut c, &third).await.unwrap().admitted());
}

#[tokio::test]
async fn a_free_request_settles_and_leaves_nothing_reserved() {
    let (mut c, scripts, org) = (conn().await, Scripts::default(), Uuid::now_v7());
    let key = Scope::Key(Uuid::now_v7());
    let l = limits(Some(json!({"amount_usd": 1, "period": "month"})), Some(json!({"max_concurrent": 1})));
    let p = plan(org, &[(key, &l)], 0, Duration::from_secs(60));
    let a = scripts.admit(&mut c, &p).await.unwrap();
    assert!(a.admitted());
    let settled = scripts.settle(&mut c, &p.settlement(&a, 0, 0)).await.unwrap();
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].spent_nanos, 0);
    assert_eq!(budget_state(&mut c, &scripts, org, key).await, (0, 0, 0));
    // The concurrency lease ended too.
    let again = plan(org, &[(key, &l)], 0, Duration::from_secs(60));
    assert!(scripts.admit(&mut c, &again).await.unwrap().admitted());
}

#[tokio::test]
async fn a_token_correction_after_its_window_expired_leaves_no_key_behind() {
    let (mut c, scripts, org) = (conn().await, Scripts::default(), Uuid::now_v7());
    let key = Scope::Key(Uuid::now_v7());
    let l = limits(None, Some(json!({"tpm": 100_000})));
    let p = plan(org, &[(key, &l)], 0, Duration::from_secs(60));
    let a = scripts.admit(&mut c, &p).await.unwrap();
    let s = p.settlement(&a, 500, 0);
    let gw_shared::limits::plan::SettleOp::Tokens { key: window, index, .. } = &s.ops[0] else {
        panic!("expected a tokens correction: {s:?}")
    };
    let counter = format!("{window}:{index}");
    // The window is gone (expired, or Redis restarted) before the request ends.
    let _: () = redis::cmd("DEL").arg(&counter).query_async(&mut c).await.unwrap();
    scripts.settle(&mut c, &s).await.unwrap();
    let exists: i64 = redis::cmd("EXISTS").arg(&counter).query_async(&mut c).await.unwrap();
    assert_eq!(exists, 0, "a counter without a TTL would never go away");
    // A correction on a live window lands, with its TTL kept.
    let p2 = plan(org, &[(key, &l)], 0, Duration::from_secs(60));
    let a2 = scripts.admit(&mut c, &p2).await.unwrap();
    let s2 = p2.settlement(&a2, 20, 0);
    let gw_shared::limits::plan::SettleOp::Tokens { key: window, index, .. } = &s2.ops[0] else {
        panic!("expected a tokens correction: {s2:?}")
    };
    let counter = format!("{window}:{index}");
    scripts.settle(&mut c, &s2).await.unwrap();
    let (used, ttl): (i64, i64) = redis::pipe().get(&counter).pttl(&counter).query_async(&mut c).await.unwrap();
    assert_eq!(used, 20);
    assert!(ttl > 0, "ttl {ttl}");
}

#[tokio::test]
async fn settlements_in_one_call_report_each_ones_budgets_and_each_threshold_once() {
    let (mut c, scripts, org) = (conn().await, Scripts::default(), Uuid::now_v7());
    let team = Scope::Team(Uuid::now_v7());
    let org_limits = limits(Some(json!({"amount_usd": 10, "period": "month", "alert_thresholds": [50]})), None);
    let team_limits = limits(Some(json!({"amount_usd": 1, "period": "day", "alert_thresholds": [50, 80]})), None);
    let scopes = [(Scope::Org, &org_limits), (team, &team_limits)];
    let mut settlements = Vec::new();
    for _ in 0..3 {
        let p = plan(org, &scopes, 400_000_000, Duration::from_secs(60));
        let a = scripts.admit(&mut c, &p).await.unwrap();
        assert!(a.admitted());
        settlements.push(p.settlement(&a, 10, 300_000_000));
    }
    let results = scripts.settle_many(&mut c, &settlements).await.unwrap();
    assert_eq!(results.len(), 3);
    let spent: Vec<(i64, i64)> = results.iter().map(|r| (r[0].spent_nanos, r[1].spent_nanos)).collect();
    assert_eq!(spent, [(300_000_000, 300_000_000), (600_000_000, 600_000_000), (900_000_000, 900_000_000)]);
    // The team's 50 % is crossed by the second, its 80 % by the third; the org's 50 % by none.
    let crossed: Vec<Vec<u8>> = results.iter().map(|r| r[1].thresholds_crossed.clone()).collect();
    assert_eq!(crossed, [vec![], vec![50], vec![80]]);
    assert!(results.iter().all(|r| r[0].thresholds_crossed.is_empty() && !r[1].exceeded));
    assert_eq!(budget_state(&mut c, &scripts, org, Scope::Org).await, (900_000_000, 0, 0));
}
