//! `GET /analytics/overview`: rolled-up hours and recent rows add up, grouped by team, key,
//! model, provider or day, over explicit or calendar periods; bad periods are refused.

use std::time::{Duration, Instant};

use chrono::{DateTime, Datelike, TimeDelta, Utc};
use gw_tests::*;
use serde_json::Value;
use uuid::Uuid;

/// Audit rows of `org` in a past hour, as the proxy would have written them.
fn past_row(
    org: Uuid,
    team: Option<Uuid>,
    model: &str,
    at: DateTime<Utc>,
    latency_ms: i32,
    status: i32,
) -> gw_shared::audit::AuditRecord {
    gw_shared::audit::AuditRecord {
        team_id: team,
        model: Some(model.into()),
        provider: Some("mock".into()),
        upstream_model: Some(model.into()),
        status_code: status,
        prompt_tokens: 10,
        completion_tokens: 5,
        total_tokens: 15,
        cost_usd: "0.0015".parse().unwrap(),
        latency_ms,
        cache_status: if latency_ms < 5 { "L1".into() } else { "miss".into() },
        ..db::record(org, at)
    }
}

#[tokio::test]
async fn the_overview_adds_up_rolled_hours_and_recent_rows() {
    let stack = Stack::shared().await;
    let (s, key, key_id) = stack.org_with_key().await;
    let team = stack.create_team(&s, "ops").await;
    let now = Utc::now();
    let three_hours_ago = now - TimeDelta::hours(3);
    let yesterday = now - TimeDelta::hours(26);
    let mut rows = Vec::new();
    for i in 0..40 {
        rows.push(past_row(s.org_id, Some(team), "gpt-a", three_hours_ago, 100 + i, 200));
    }
    for _ in 0..10 {
        rows.push(past_row(s.org_id, None, "gpt-b", yesterday, 2, 200));
    }
    rows.push(past_row(s.org_id, None, "gpt-b", yesterday, 900, 500));
    let mut conn = db::connect().await;
    gw_shared::db::audit_logs::insert_batch(&mut conn, &rows).await.unwrap();
    // And a few live requests this hour.
    let mut live = Vec::new();
    for i in 0..3 {
        live.push(stack.chat_request_id(&key, &format!("now {i}")).await);
    }
    for id in &live {
        stack.log_entry(&s, *id).await;
    }
    // The rows above landed in hours already aggregated: the job (every second here) finds them
    // by their arrival and aggregates those hours again.
    let from = query_time(now - TimeDelta::hours(30));
    let deadline = Instant::now() + Duration::from_secs(60);
    let o = loop {
        let o = stack.get_ok(&s, &format!("/analytics/overview?from={from}")).await;
        if o["requests"] == 54 || Instant::now() > deadline {
            break o;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(o["requests"], 54, "{o}");
    assert_eq!(o["errors"], 1);
    assert!(o["tokens"]["prompt"].as_i64().unwrap() >= 510);
    assert_eq!(o["cache"]["hits"], 10);
    let p50 = o["latency"]["p50_ms"].as_f64().unwrap();
    assert!((100.0..160.0).contains(&p50), "p50 {p50}");
    // Spend: 51 rows at 0.0015 plus the live requests (the mock model costs nothing).
    assert!(o["spend_usd"].as_str().unwrap().starts_with("0.0765"), "{o}");

    let by_model = stack.get_ok(&s, &format!("/analytics/overview?from={from}&group_by=model")).await;
    let groups = by_model["groups"].as_array().unwrap();
    let g = |k: &str| groups.iter().find(|g| g["key"] == k).cloned().unwrap_or(Value::Null);
    assert_eq!(g("gpt-a")["requests"], 40);
    assert_eq!(g("gpt-b")["requests"], 11);
    assert_eq!(g("gpt-b")["errors"], 1);
    assert_eq!(g("mock-model")["requests"], 3);
    let gpt_a_p95 = g("gpt-a")["latency"]["p95_ms"].as_f64().unwrap();
    assert!((125.0..150.0).contains(&gpt_a_p95), "p95 {gpt_a_p95}");

    let by_team = stack.get_ok(&s, &format!("/analytics/overview?from={from}&group_by=team")).await;
    let teams = by_team["groups"].as_array().unwrap();
    let ops = teams.iter().find(|g| g["key"] == team.to_string()).unwrap();
    assert_eq!((ops["requests"].as_i64(), ops["name"].as_str()), (Some(40), Some("ops")));
    let by_key = stack.get_ok(&s, &format!("/analytics/overview?from={from}&group_by=key")).await;
    let keys = by_key["groups"].as_array().unwrap();
    let ours = keys.iter().find(|g| g["key"] == key_id.as_str()).unwrap();
    assert_eq!((ours["requests"].as_i64(), ours["name"].as_str()), (Some(3), Some("test key")), "{by_key}");
    let keyless = keys.iter().find(|g| g["key"].is_null()).unwrap();
    assert_eq!((keyless["requests"].as_i64(), &keyless["name"]), (Some(51), &Value::Null));
    let one_key = stack.get_ok(&s, &format!("/analytics/overview?from={from}&key_id={key_id}")).await;
    assert_eq!(one_key["requests"], 3);
    let by_provider = stack.get_ok(&s, &format!("/analytics/overview?from={from}&group_by=provider")).await;
    let providers = by_provider["groups"].as_array().unwrap();
    let mock = providers.iter().find(|g| g["key"] == "mock").unwrap();
    assert_eq!((mock["requests"].as_i64(), mock["name"].as_str()), (Some(54), Some("mock")), "{by_provider}");
    // The calendar month so far: from its first instant, UTC; this hour's requests are in it.
    let month = stack.get_ok(&s, "/analytics/overview?period=month").await;
    let first = now.date_naive().with_day(1).unwrap().and_hms_opt(0, 0, 0).unwrap().and_utc();
    assert_eq!(month["from"].as_str().unwrap().parse::<DateTime<Utc>>().unwrap(), first);
    assert!(month["requests"].as_i64().unwrap() >= 3, "{month}");
    let by_day = stack.get_ok(&s, &format!("/analytics/overview?from={from}&group_by=day")).await;
    let days: i64 = by_day["groups"].as_array().unwrap().iter().map(|g| g["requests"].as_i64().unwrap()).sum();
    assert_eq!(days, 54);
    let one_team = stack.get_ok(&s, &format!("/analytics/overview?from={from}&team_id={team}")).await;
    assert_eq!(one_team["requests"], 40);
    let last_hour = stack.get_ok(&s, "/analytics/overview?period=1h").await;
    assert_eq!(last_hour["requests"], 3);
    let other = stack.org_with_key().await.0;
    let theirs = stack.get_ok(&other, &format!("/analytics/overview?from={from}")).await;
    assert_eq!(theirs["requests"], 0);
}

#[tokio::test]
async fn overview_refuses_bad_periods() {
    let stack = Stack::shared().await;
    let (s, _, _) = stack.org_with_key().await;
    for (query, field) in [
        ("period=7w", "period"),
        ("period=0d", "period"),
        ("period=400d", "period"),
        ("period=7d&from=2026-01-01", "period"),
        ("from=2026-01-05&to=2026-01-01", "to"),
        ("start=2026-01-01", "start"),
        ("group_by=colour", "group_by"),
    ] {
        let r = stack.admin_get(&format!("/analytics/overview?{query}"), &s.access_token).await;
        let b = expect_api_error(r, 400).await;
        assert_eq!(b["error"]["fields"][0]["field"], field, "{query}: {b}");
    }
}
