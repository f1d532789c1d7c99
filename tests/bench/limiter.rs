//! The limiter's cost per request against a real Redis: building the plan and the admission
//! script's round trip (on the request path), and the settlement (off it, in the proxy's
//! background task, but Redis's and the replica's CPU all the same). Prints p50/p99 in µs for
//! a few limit sets, sequentially (c=1) and with 32 requests in flight on one multiplexed
//! connection, as the proxy runs it. Run through `tests/bench/limiter.sh`.
//!
//! Usage: limiter-bench REDIS_URL [requests-per-case]

use std::time::{Duration, Instant};

use chrono::Utc;
use gw_shared::limits::estimate::Estimate;
use gw_shared::limits::plan::{Ask, Plan, Scope};
use gw_shared::limits::script::Scripts;
use gw_shared::limits::settings::ScopeLimits;
use redis::aio::ConnectionManager;
use serde_json::json;
use uuid::Uuid;

struct Case {
    name: &'static str,
    scopes: Vec<(Scope, ScopeLimits)>,
}

fn limits(budget: Option<serde_json::Value>, rate: Option<serde_json::Value>) -> ScopeLimits {
    ScopeLimits::from_json(budget, rate)
}

fn cases() -> Vec<Case> {
    let budget = json!({"amount_usd": 1_000_000, "period": "month", "alert_thresholds": [50, 80, 95, 100]});
    let rate = json!({"rpm": 100_000_000, "tpm": 4_000_000_000u64, "max_concurrent": 100_000});
    let per_model = json!({"rpm": 100_000_000, "tpm": 4_000_000_000u64, "max_concurrent": 100_000,
        "models": {"bench": {"rpm": 100_000_000, "tpm": 4_000_000_000u64}}});
    vec![
        Case {
            name: "key rpm only (1 check)",
            scopes: vec![(Scope::Key(Uuid::new_v4()), limits(None, Some(json!({"rpm": 100_000_000}))))],
        },
        Case {
            name: "org budget + key rpm/tpm/concurrency (4 checks; the throughput bench's)",
            scopes: vec![
                (Scope::Org, limits(Some(budget.clone()), None)),
                (Scope::Key(Uuid::new_v4()), limits(None, Some(rate.clone()))),
            ],
        },
        Case {
            name: "org, team and key: budget + rpm/tpm/concurrency + per-model each (18 checks)",
            scopes: vec![
                (Scope::Org, limits(Some(budget.clone()), Some(per_model.clone()))),
                (Scope::Team(Uuid::new_v4()), limits(Some(budget.clone()), Some(per_model.clone()))),
                (Scope::Key(Uuid::new_v4()), limits(Some(budget), Some(per_model))),
            ],
        },
    ]
}

fn plan(org: Uuid, case: &Case) -> Plan {
    let scopes: Vec<(Scope, &ScopeLimits)> = case.scopes.iter().map(|(s, l)| (*s, l)).collect();
    let ask = Ask {
        model: "bench",
        estimate: Estimate { prompt_tokens: 20, prompt_tokens_max: 80, completion_tokens_max: 4096 },
        max_cost_nanos: 2_500_000,
    };
    Plan::build(org, Uuid::new_v4(), &scopes, &ask, Duration::from_secs(600), Utc::now())
}

/// One request's limiter work; returns (admission incl. plan, settlement) durations.
async fn one(scripts: &Scripts, conn: &mut ConnectionManager, org: Uuid, case: &Case) -> (Duration, Duration) {
    let t0 = Instant::now();
    let p = plan(org, case);
    let admission = match scripts.admit(conn, &p).await {
        Ok(a) => a,
        Err(e) => panic!("admit: {e}"),
    };
    assert!(admission.admitted(), "{}: refused: {admission:?}", case.name);
    let t1 = Instant::now();
    // The proxy skips a settlement with nothing to do (rpm alone), and so does this.
    let s = p.settlement(&admission, 120, 80_000);
    if !s.ops.is_empty() {
        if let Err(e) = scripts.settle(conn, &s).await {
            panic!("settle: {e}");
        }
    }
    (t1 - t0, t1.elapsed())
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn report(label: &str, mut admit: Vec<Duration>, mut settle: Vec<Duration>, wall: Duration) {
    admit.sort();
    settle.sort();
    println!(
        "  {label:<5} admit p50 {:>6.1} p99 {:>7.1} µs | settle p50 {:>6.1} p99 {:>7.1} µs | {:>7.0} requests/s",
        pct(&admit, 0.5),
        pct(&admit, 0.99),
        pct(&settle, 0.5),
        pct(&settle, 0.99),
        admit.len() as f64 / wall.as_secs_f64()
    );
}

/// Redis's own time per `EVALSHA` since the last `CONFIG RESETSTAT` (from `INFO commandstats`).
async fn redis_usec_per_call(c: &mut ConnectionManager) -> f64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(c).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let client = redis::Client::open(url.as_str()).unwrap();
    let conn = ConnectionManager::new(client).await.unwrap();
    let scripts = std::sync::Arc::new(Scripts::default());
    println!("limiter cost per request, Redis at {url}, {n} requests per case (plus 1 000 warm-up)");
    for case in cases() {
        let org = Uuid::new_v4();
        println!("{}", case.name);
        let mut c = conn.clone();
        for _ in 0..1_000 {
            one(&scripts, &mut c, org, &case).await;
        }
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut c).await.unwrap();
        let (mut admit, mut settle) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let start = Instant::now();
        for _ in 0..n {
            let (a, s) = one(&scripts, &mut c, org, &case).await;
            admit.push(a);
            settle.push(s);
        }
        report("c=1", admit, settle, start.elapsed());

        // 32 requests in flight on the one multiplexed connection, as a busy proxy worker has.
        let case = std::sync::Arc::new(case);
        let start = Instant::now();
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let (scripts, case, mut c) = (scripts.clone(), case.clone(), conn.clone());
                tokio::spawn(async move {
                    let mut out = Vec::with_capacity(n / 32);
                    for _ in 0..n / 32 {
                        out.push(one(&scripts, &mut c, org, &case).await);
                    }
                    out
                })
            })
            .collect();
        let (mut admit, mut settle) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for t in tasks {
            for (a, s) in t.await.unwrap() {
                admit.push(a);
                settle.push(s);
            }
        }
        report("c=32", admit, settle, start.elapsed());
        println!("  Redis CPU per script call (admit and settle alike): {:.1} µs", redis_usec_per_call(&mut c).await);
    }
}
