//! Metered usage, end to end on a simulated clock.
//!
//! The hourly sync (`GW_TEST_CLOCK_FILE`, read by
//! the proxy's `created_at` and the admin's jobs): 24 hours of proxy traffic for three metered
//! organizations, the admin killed (SIGKILL) in the middle of a run and started again, then a
//! proxy's audit spool replayed into an hour already synced. Against the mock upstream's Stripe
//! dialect, which counts each meter event identifier once as Stripe does: every hour of every
//! organization is billed exactly once, each organization's meter total equals its audit log's,
//! and the late replay produces exactly one adjustment. A fourth organization whose customer the
//! provider always fails gets `usage.sync_failed` after the configured tries. A private Postgres
//! (the test stops it) and a private stack.
//!
//! Air-gapped mode: a full cycle (traffic, the hourly jobs, the operator's plan change, usage
//! export in every format) with the billing provider's address pointing at a listener that
//! records connections: none is ever opened, and the exported totals are the audit log's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use diesel::sql_types::{BigInt, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use gw_tests::{user_message, PrivatePostgres, Stack, StackOptions};
use serde_json::{json, Value};
use uuid::Uuid;

const HOURS: i64 = 24;
/// Requests per organization and hour.
const PER_HOUR: usize = 2;

struct Clock(PathBuf);

impl Clock {
    fn set(&self, t: DateTime<Utc>) {
        std::fs::write(&self.0, format!("{}\n", t.timestamp())).expect("write the clock file");
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn db(url: &str) -> AsyncPgConnection {
    AsyncPgConnection::establish(url).await.expect("connect to the private postgres")
}

async fn exec(url: &str, sql: &str) {
    diesel::sql_query(sql).execute(&mut db(url).await).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn count(url: &str, sql: &str) -> i64 {
    let c: Count = diesel::sql_query(sql).get_result(&mut db(url).await).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    c.n
}

async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn audit_rows(url: &str) -> i64 {
    count(url, "SELECT count(*) AS n FROM audit_logs").await
}

async fn chat(stack: &Stack, key: &str, n: usize) {
    for i in 0..n {
        let body = json!({"model": "gpt-4o-mini", "messages": user_message(&format!("metered request {i}"))});
        let r = stack.chat(key, body).await;
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    }
}

async fn meter_events(stack: &Stack) -> Vec<Value> {
    let r = stack.http.get(format!("{}/_mock/stripe/meter_events", stack.mock)).send().await.expect("meter events");
    r.json().await.expect("meter events JSON")
}

async fn meter_requests(stack: &Stack) -> Vec<Value> {
    let r = stack.http.get(format!("{}/_mock/stripe/requests", stack.mock)).send().await.expect("requests");
    let all: Vec<Value> = r.json().await.expect("requests JSON");
    all.into_iter().filter(|r| r["path"] == "/v1/billing/meter_events").collect()
}

async fn delay_meter_events(stack: &Stack, ms: u64) {
    let r = stack
        .http
        .post(format!("{}/_mock/stripe/delay", stack.mock))
        .json(&json!({"meter_events_ms": ms}))
        .send()
        .await
        .expect("delay");
    assert!(r.status().is_success());
}

#[derive(QueryableByName)]
struct HourTotal {
    #[diesel(sql_type = Timestamptz)]
    hour: DateTime<Utc>,
    #[diesel(sql_type = BigInt)]
    cost_units: i64,
    #[diesel(sql_type = BigInt)]
    tokens: i64,
}

/// An organization's usage by hour straight from the audit log: gateway-credential cost in
/// 10^-10 USD, and tokens.
async fn audit_by_hour(url: &str, org: Uuid) -> BTreeMap<i64, (i64, i64)> {
    let rows: Vec<HourTotal> = diesel::sql_query(format!(
        "SELECT date_trunc('hour', created_at) AS hour, \
           (coalesce(sum(cost_usd) FILTER (WHERE coalesce(routing->-1->>'credential', 'gateway') = 'gateway'), 0) \
             * 10000000000)::bigint AS cost_units, \
           coalesce(sum(prompt_tokens + completion_tokens), 0)::bigint AS tokens \
         FROM audit_logs WHERE org_id = '{org}' GROUP BY 1"
    ))
    .load(&mut db(url).await)
    .await
    .expect("audit totals");
    rows.into_iter().map(|r| (r.hour.timestamp(), (r.cost_units, r.tokens))).collect()
}

/// The counted meter events of `org`: (hour, revision) → value.
fn billed(events: &[Value], org: Uuid) -> BTreeMap<(i64, i64), i64> {
    let prefix = format!("gw-{org}-");
    let mut out = BTreeMap::new();
    for e in events {
        let id = e["identifier"].as_str().unwrap_or_default();
        let Some(rest) = id.strip_prefix(&prefix) else { continue };
        let parts: Vec<&str> = rest.rsplitn(3, '-').collect();
        let (rev, hour) = (parts[0].trim_start_matches('r').parse().unwrap(), parts[1].parse().unwrap());
        let value: i64 = e["payload"]["value"].as_str().unwrap().parse().unwrap();
        assert!(out.insert((hour, rev), value).is_none(), "{id} counted twice");
    }
    out
}

#[derive(QueryableByName)]
struct Failure {
    #[diesel(sql_type = Text)]
    payload: String,
}

#[tokio::test]
async fn a_day_of_usage_is_billed_exactly_once_through_a_crash_and_a_late_spool_replay() {
    let pg = PrivatePostgres::start();
    let url = pg.url();
    let clock = Clock(std::env::temp_dir().join(format!("gw-clock-{}", Uuid::new_v4())));
    // A day that ended a few hours ago, so every hour is within the provider's window.
    let start = Utc::now().duration_trunc(TimeDelta::hours(1)).unwrap() - TimeDelta::hours(HOURS + 6);
    clock.set(start + TimeDelta::minutes(10));
    let mut stack = Stack::start_with(StackOptions {
        database_url: Some(url.clone()),
        proxy_config: "audit_flush_interval_ms = 50\nauth_failures_per_minute = 1000000\nkey_cache_ttl_secs = 2\n\
                       key_cache_max_stale_secs = 600"
            .into(),
        extra_config: "[billing]\napi_base = \"{mock}\"\nusage_sync_secs = 1\nusage_settle_secs = 0\n\
                       usage_retry_secs = 60\nusage_max_attempts = 2\n\
                       [billing.meters.growth]\nevent_name = \"gw_gateway_cost\"\nusage = \"gateway_cost\"\n\
                       [billing.meters.enterprise]\nevent_name = \"gw_tokens\"\nusage = \"tokens\"\n"
            .into(),
        env: vec![
            ("GW_TEST_CLOCK_FILE".into(), clock.0.display().to_string()),
            ("STRIPE_SECRET_KEY".into(), "sk_test_usage_sync".into()),
        ],
        ..Default::default()
    })
    .await;

    // Three metered organizations (two on Growth billed by gateway cost, one on Enterprise by
    // tokens) and one whose customer the provider always fails.
    let mut orgs = Vec::new();
    for (name, plan) in [("a", "growth"), ("b", "growth"), ("c", "enterprise"), ("unreachable", "growth")] {
        let (session, key, _) = stack.org_with_key().await;
        let org = session.org_id;
        exec(&url, &format!("UPDATE organizations SET plan = '{plan}' WHERE id = '{org}'")).await;
        exec(&url, &format!("INSERT INTO billing_accounts (org_id, customer_id) VALUES ('{org}', 'cus_{name}_{org}')"))
            .await;
        orgs.push((org, key, plan));
    }
    // The sync's first run starts billing from the current hour.
    wait_for("the sync's first run", Duration::from_secs(20), async || {
        count(&url, "SELECT count(*) AS n FROM billing_sync_state WHERE synced_until > 'epoch'").await == 1
    })
    .await;

    let mut sent = audit_rows(&url).await;
    for h in 0..HOURS {
        if h == 12 {
            // From here each send is answered a second after the provider counted it, so the
            // admin can be killed while one it sent is counted but unanswered.
            delay_meter_events(&stack, 1000).await;
        }
        // Moving into hour h completes hour h - 1: the next run sends it.
        clock.set(start + TimeDelta::hours(h) + TimeDelta::minutes(10));
        for (_, key, _) in &orgs {
            chat(&stack, key, PER_HOUR).await;
        }
        sent += (orgs.len() * PER_HOUR) as i64;
        wait_for("the hour's audit rows", Duration::from_secs(20), async || audit_rows(&url).await == sent).await;
    }
    clock.set(start + TimeDelta::hours(HOURS) + TimeDelta::minutes(1));
    // The admin dies right after the provider counted one of its sends, before the answer.
    let counted = meter_events(&stack).await.len();
    wait_for("a send in flight", Duration::from_secs(60), async || meter_events(&stack).await.len() > counted).await;
    stack.crash_and_restart_admin().await;
    delay_meter_events(&stack, 0).await;
    // The crashed run's claims are leased for two minutes of the sync's clock.
    clock.set(start + TimeDelta::hours(HOURS) + TimeDelta::minutes(5));
    let every_hour = 3 * HOURS as usize;
    wait_for("every hour of the three organizations sent", Duration::from_secs(90), async || {
        count(&url, "SELECT count(*) AS n FROM billing_usage_sync WHERE status = 'sent' AND revision = 0").await
            == every_hour as i64
    })
    .await;
    let requests = meter_requests(&stack).await;
    let resent = requests.iter().filter(|r| r["form"]["identifier"].as_str().is_some()).count()
        - requests.iter().map(|r| r["form"]["identifier"].as_str()).collect::<BTreeSet<_>>().len();
    assert!(resent >= 1, "the send the crash left unanswered was made again (same identifier, counted once)");

    // A proxy's spool replayed into hour 5, long synced: Postgres stops, organization a's
    // requests are spooled, Postgres comes back and the proxy replays them.
    let (org_a, key_a, _) = orgs[0].clone();
    pg.stop_server();
    clock.set(start + TimeDelta::hours(5) + TimeDelta::minutes(30));
    chat(&stack, &key_a, 3).await;
    clock.set(start + TimeDelta::hours(HOURS) + TimeDelta::minutes(10));
    assert!(pg.start_server(), "Postgres did not start again: {}", pg.log());
    sent += 3;
    wait_for("the spool's rows", Duration::from_secs(60), async || audit_rows(&url).await == sent).await;
    wait_for("the adjustment sent", Duration::from_secs(60), async || {
        count(&url, "SELECT count(*) AS n FROM billing_usage_sync WHERE revision > 0 AND status = 'sent'").await >= 1
    })
    .await;
    // A resume long after a crash: two sent hours are unconfirmed again and the provider forgot
    // their idempotency keys; it refuses the known identifiers, which counts as sent.
    let r = stack.http.post(format!("{}/_mock/stripe/expire_idempotency", stack.mock)).send().await.unwrap();
    assert!(r.status().is_success());
    let (org_b, _, _) = orgs[1].clone();
    let resume = format!(
        "UPDATE billing_usage_sync SET status = 'pending', next_attempt_at = 'epoch' \
         WHERE org_id = '{org_b}' AND revision = 0 AND hour < '{}'",
        (start + TimeDelta::hours(2)).to_rfc3339()
    );
    exec(&url, &resume).await;
    let pending =
        format!("SELECT count(*) AS n FROM billing_usage_sync WHERE org_id = '{org_b}' AND status = 'pending'");
    wait_for("the resumed sends", Duration::from_secs(30), async || count(&url, &pending).await == 0).await;
    let sent_b = format!(
        "SELECT count(*) AS n FROM billing_usage_sync WHERE org_id = '{org_b}' AND revision = 0 AND status = 'sent'"
    );
    assert_eq!(count(&url, &sent_b).await, HOURS, "{}", ledger_text(&url, org_b).await);
    // Room for a few more runs (one a second), which must send nothing more.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let events = meter_events(&stack).await;
    let adjustments: Vec<(Uuid, (i64, i64))> = orgs
        .iter()
        .flat_map(|(org, _, _)| billed(&events, *org).into_keys().filter(|(_, rev)| *rev > 0).map(|k| (*org, k)))
        .collect();
    let hour5 = (start + TimeDelta::hours(5)).timestamp();
    assert_eq!(adjustments, vec![(org_a, (hour5, 1))], "exactly one adjustment, for the replayed hour");
    for (org, _, plan) in &orgs[..3] {
        let audit = audit_by_hour(&url, *org).await;
        let bills = billed(&events, *org);
        let hours: BTreeSet<i64> = bills.keys().filter(|(_, rev)| *rev == 0).map(|(h, _)| *h).collect();
        let expected: BTreeSet<i64> = (0..HOURS).map(|h| (start + TimeDelta::hours(h)).timestamp()).collect();
        assert_eq!(hours, expected, "each of the 24 hours billed once");
        let pick = |(cost, tokens): (i64, i64)| if *plan == "growth" { cost } else { tokens };
        let audit_total: i64 = audit.values().map(|v| pick(*v)).sum();
        let billed_total: i64 = bills.values().sum();
        assert!(audit_total > 0);
        assert_eq!(billed_total, audit_total, "the meter's total is the audit log's");
        for (hour, v) in &audit {
            let for_hour: i64 = bills.iter().filter(|((h, _), _)| h == hour).map(|(_, v)| *v).sum();
            assert_eq!(for_hour, pick(*v), "hour {hour}");
        }
    }

    // The unreachable customer: given up after two tries, in the ledger, the trail and the outbox.
    let (org_d, _, _) = orgs[3].clone();
    assert!(billed(&events, org_d).is_empty());
    // Its last hours' second tries come due a minute after their first.
    clock.set(start + TimeDelta::hours(HOURS) + TimeDelta::minutes(15));
    let given_up =
        format!("SELECT count(*) AS n FROM billing_usage_sync WHERE org_id = '{org_d}' AND status = 'failed'");
    wait_for("every hour given up", Duration::from_secs(30), async || count(&url, &given_up).await == HOURS).await;
    let failures: Vec<Failure> = diesel::sql_query(format!(
        "SELECT payload::text AS payload FROM events WHERE org_id = '{org_d}' AND event_type = 'usage.sync_failed' \
         ORDER BY payload->>'hour'"
    ))
    .load(&mut db(&url).await)
    .await
    .expect("failures");
    assert_eq!(failures.len(), HOURS as usize, "one usage.sync_failed per hour");
    let first: Value = serde_json::from_str(&failures[0].payload).unwrap();
    insta::assert_json_snapshot!(first, {".organization_id" => "[org]", ".occurred_at" => "[time]", ".hour" => "[hour]",
                                        ".identifier" => "[identifier]", ".quantity" => "[quantity]"}, @r#"
    {
      "attempts": 2,
      "error": "the billing provider answered 500: An unknown error occurred",
      "event_name": "gw_gateway_cost",
      "hour": "[hour]",
      "identifier": "[identifier]",
      "occurred_at": "[time]",
      "organization_id": "[org]",
      "quantity": "[quantity]",
      "revision": 0,
      "type": "usage.sync_failed",
      "usage": "gateway_cost"
    }
    "#);
    let ledger_failed = count(
        &url,
        &format!("SELECT count(*) AS n FROM billing_usage_sync WHERE org_id = '{org_d}' AND status = 'failed'"),
    )
    .await;
    assert_eq!(ledger_failed as usize, failures.len());
    let trail = count(
        &url,
        &format!("SELECT count(*) AS n FROM admin_audit_events WHERE org_id = '{org_d}' AND action = 'billing.usage_sync_failed'"),
    )
    .await;
    assert_eq!(trail as usize, failures.len());
    // The operator queues them again (`gw-admin usage retry`): nothing is left given up.
    stack.admin_command(&["usage", "retry", &org_d.to_string()]);
    let status = format!("SELECT count(*) AS n FROM billing_usage_sync WHERE org_id = '{org_d}' AND status = ");
    assert_eq!(count(&url, &format!("{status} 'failed'")).await, 0);
    let pending = count(&url, &format!("{status} 'pending'")).await as usize;
    assert_eq!(pending, failures.len(), "{}", ledger_text(&url, org_d).await);
}

async fn ledger_text(url: &str, org: Uuid) -> String {
    #[derive(QueryableByName)]
    struct Line {
        #[diesel(sql_type = Text)]
        line: String,
    }
    let lines: Vec<Line> = diesel::sql_query(format!(
        "SELECT concat_ws(' ', hour, revision, status, attempts, quantity, last_error) AS line FROM billing_usage_sync \
         WHERE org_id = '{org}' ORDER BY hour, revision"
    ))
    .load(&mut db(url).await)
    .await
    .expect("the ledger");
    lines.into_iter().map(|l| l.line).collect::<Vec<_>>().join("\n")
}

/// A TCP listener that counts the connections made to it (and closes each at once).
async fn recording_listener() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the recording listener");
    let addr = listener.local_addr().expect("its address");
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(socket);
        }
    });
    (format!("http://{addr}"), seen)
}

#[derive(QueryableByName)]
struct Cost {
    #[diesel(sql_type = Text)]
    usd: String,
}

fn decimal(s: &str) -> rust_decimal::Decimal {
    s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

#[tokio::test]
async fn air_gapped_a_full_cycle_opens_no_connection_and_exports_the_audit_logs_totals() {
    let url = gw_tests::db::fresh_database().await;
    let (provider, connections) = recording_listener().await;
    let clock = Clock(std::env::temp_dir().join(format!("gw-clock-{}", Uuid::new_v4())));
    let start = Utc::now().duration_trunc(TimeDelta::hours(1)).unwrap() - TimeDelta::hours(10);
    clock.set(start + TimeDelta::minutes(10));
    let stack = Stack::start_with(StackOptions {
        database_url: Some(url.clone()),
        extra_config: format!(
            "[billing]\napi_base = \"{provider}\"\nusage_sync_secs = 1\nusage_settle_secs = 0\ngrace_check_secs = 1\n\
             [billing.prices]\ngrowth = \"price_growth\"\n\
             [billing.meters.growth]\nevent_name = \"gw_gateway_cost\"\nusage = \"gateway_cost\"\n"
        ),
        env: vec![
            ("GW_TEST_CLOCK_FILE".into(), clock.0.display().to_string()),
            ("AIRGAP_MODE".into(), "true".into()),
            // Configured, and still never used.
            ("STRIPE_SECRET_KEY".into(), "sk_test_airgap".into()),
            ("STRIPE_WEBHOOK_SECRET".into(), "whsec_airgap".into()),
        ],
        ..Default::default()
    })
    .await;
    let (owner, key, _) = stack.org_with_key().await;
    let org = owner.org_id;
    // A customer left from before the switch to air-gapped mode: still nothing is sent for it.
    exec(&url, &format!("INSERT INTO billing_accounts (org_id, customer_id) VALUES ('{org}', 'cus_airgap_{org}')"))
        .await;
    stack.admin_command(&["plan", "set", &org.to_string(), "growth"]);
    let me = stack.get_ok(&owner, "/organizations/current").await;
    assert_eq!(me["plan"], "growth");

    let mut sent = audit_rows(&url).await;
    for h in 0..6 {
        clock.set(start + TimeDelta::hours(h) + TimeDelta::minutes(10));
        chat(&stack, &key, 3).await;
        sent += 3;
        wait_for("the hour's audit rows", Duration::from_secs(20), async || audit_rows(&url).await == sent).await;
    }
    let end = start + TimeDelta::hours(6);
    clock.set(end + TimeDelta::minutes(1));
    let rolled = format!("SELECT count(*) AS n FROM audit_rollup_state WHERE rolled_until >= '{}'", end.to_rfc3339());
    wait_for("the hourly rollups", Duration::from_secs(30), async || count(&url, &rolled).await == 1).await;
    // Several sync periods pass; the provider's endpoints answer 403 without calling out.
    let checkout =
        json!({"plan": "growth", "success_url": "https://app.example/ok", "cancel_url": "https://app.example/no"});
    let portal = json!({"return_url": "https://app.example/back"});
    for (path, body) in [("/billing/checkout", checkout), ("/billing/portal", portal)] {
        assert_eq!(stack.admin_post(path, &owner.access_token, &body).await.status(), 403, "{path}");
    }
    let r = stack.http.post(format!("{}/api/v1/billing/webhook", stack.admin)).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 403);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(count(&url, "SELECT count(*) AS n FROM billing_usage_sync").await, 0, "no usage was queued");

    let audit: Cost = diesel::sql_query(format!(
        "SELECT coalesce(sum(cost_usd), 0)::text AS usd FROM audit_logs WHERE org_id = '{org}' \
         AND created_at >= '{}' AND created_at < '{}'",
        start.to_rfc3339(),
        end.to_rfc3339()
    ))
    .get_result(&mut db(&url).await)
    .await
    .expect("the audit log's total");
    let audit = decimal(&audit.usd);
    assert!(audit > rust_decimal::Decimal::ZERO);
    let export = |format: &str| {
        let out = std::env::temp_dir().join(format!("gw-usage-{}.{format}", Uuid::new_v4()));
        let (from, to, path) = (start.to_rfc3339(), end.to_rfc3339(), out.display().to_string());
        stack.admin_command(&[
            "usage",
            "export",
            &org.to_string(),
            "--from",
            &from,
            "--to",
            &to,
            "--format",
            format,
            "--out",
            &path,
        ]);
        let text = std::fs::read_to_string(&out).expect("the export");
        let _ = std::fs::remove_file(&out);
        text
    };
    let jsonl: rust_decimal::Decimal = export("jsonl")
        .lines()
        .map(|l| decimal(serde_json::from_str::<Value>(l).unwrap()["cost_usd"].as_str().unwrap()))
        .sum();
    assert_eq!(jsonl, audit, "JSON lines");
    let csv_text = export("csv");
    let mut csv_lines = csv_text.lines();
    let header: Vec<&str> = csv_lines.next().unwrap().split(',').collect();
    let at = header.iter().position(|c| *c == "cost_usd").unwrap();
    let rows: Vec<Vec<&str>> = csv_lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 6, "one row per hour (one model, one provider)");
    assert_eq!(rows.iter().map(|r| decimal(r[at])).sum::<rust_decimal::Decimal>(), audit, "CSV");
    let focus = export("focus");
    let mut focus_lines = focus.lines();
    let header: Vec<&str> = focus_lines.next().unwrap().split(',').collect();
    let billed = header.iter().position(|c| *c == "BilledCost").unwrap();
    let currency = header.iter().position(|c| *c == "BillingCurrency").unwrap();
    let mut focus_total = rust_decimal::Decimal::ZERO;
    for line in focus_lines {
        // The Tags column holds JSON (quoted, with commas) and comes last: split before it.
        let fields: Vec<&str> = line.splitn(header.len(), ',').collect();
        assert_eq!(fields[currency], "USD");
        focus_total += decimal(fields[billed]);
    }
    assert_eq!(focus_total, audit, "FOCUS");

    let opened = std::sync::atomic::AtomicUsize::load(&connections, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(opened, 0, "connections to the billing provider");
}
