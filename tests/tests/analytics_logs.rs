//! The request log (`/analytics/logs`), the overview, the compliance export with its hash-chain
//! verification, body logging and the audit metrics. On the test binary's shared stack; each
//! test owns its organization.

use std::time::{Duration, Instant};

use chrono::{DateTime, Datelike, SecondsFormat, TimeDelta, Utc};
use gw_tests::{db, expect_api_error, header, user_message, Session, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

fn chat_body(text: &str) -> Value {
    json!({"model": "mock-model", "messages": user_message(text)})
}

/// Sends a chat request and returns its request id.
async fn request(stack: &Stack, key: &str, text: &str) -> Uuid {
    let r = stack.chat(key, chat_body(text)).await;
    assert_eq!(r.status(), 200);
    header(&r, "x-gw-request-id").parse().unwrap()
}

/// GET `/analytics/logs/{id}`, waiting (up to 2 s) for the row the proxy writes behind.
async fn log_entry(stack: &Stack, s: &Session, id: Uuid) -> Value {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let r = stack.admin_get(&format!("/analytics/logs/{id}"), &s.access_token).await;
        if r.status() == 200 {
            return r.json().await.unwrap();
        }
        assert_eq!(r.status(), 404);
        assert!(Instant::now() < deadline, "log {id} not readable within 2 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true).replace('+', "%2B")
}

async fn get_json(stack: &Stack, s: &Session, path: &str) -> Value {
    let r = stack.admin_get(path, &s.access_token).await;
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.unwrap()
}

#[tokio::test]
async fn every_request_id_finds_its_entry_for_its_organization_only() {
    let stack = Stack::shared().await;
    let (s, key, key_id) = stack.org_with_key().await;
    let (other, _, _) = stack.org_with_key().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(request(&stack, &key, &format!("hello {i}")).await);
    }
    let r = stack
        .http
        .post(format!("{}/v1/chat/completions", stack.proxy))
        .bearer_auth(&key)
        .header("user-agent", "audit-test/1.0")
        .json(&json!({"model": "mock-model", "messages": user_message("hi"), "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let streamed: Uuid = header(&r, "x-gw-request-id").parse().unwrap();
    let _ = r.text().await.unwrap();
    ids.push(streamed);
    for id in &ids {
        let e = log_entry(&stack, &s, *id).await;
        assert_eq!(e["id"], id.to_string());
        assert_eq!(e["key_id"], key_id);
        assert!(e["key_prefix"].as_str().is_some_and(|p| key.starts_with(p)), "{e}");
        assert_eq!(e["status"], 200);
        assert_eq!(e["model"], "mock-model");
        assert!(e["tokens"]["total"].as_i64().unwrap() > 0);
        assert!(e["latency"]["overhead_us"].as_i64().is_some(), "{e}");
        assert_eq!(e["cache"], "bypass");
        assert!(e["chain"]["seq"].as_i64().unwrap() >= 1);
        assert_eq!(e["chain"]["row_hash"].as_str().unwrap().len(), 64);
        assert_eq!(e["client_ip"], "127.0.0.1");
        // Another organization never sees it.
        let r = stack.admin_get(&format!("/analytics/logs/{id}"), &other.access_token).await;
        expect_api_error(r, 404).await;
    }
    let e = log_entry(&stack, &s, streamed).await;
    assert_eq!(e["stream"], true);
    assert_eq!(e["user_agent"], "audit-test/1.0");
    // Bodies are off by default.
    assert_eq!(e["request_body"], Value::Null);
    assert_eq!(e["response_body"], Value::Null);
}

#[tokio::test]
async fn logs_filter_and_paginate() {
    let stack = Stack::shared().await;
    let (s, key, key_id) = stack.org_with_key().await;
    let team = stack.create_team(&s, "search").await;
    let team_key = {
        let r = stack.create_key(&s, json!({"name": "team key", "team_id": team})).await;
        assert_eq!(r.status(), 201);
        let b: Value = r.json().await.unwrap();
        b["key"].as_str().unwrap().to_string()
    };
    let mut mine = Vec::new();
    for i in 0..7 {
        mine.push(request(&stack, &key, &format!("page {i}")).await);
    }
    let team_id = request(&stack, &team_key, "from the team").await;
    let bad = stack.chat(&key, json!({"model": "no-such-model", "messages": user_message("x")})).await;
    assert_eq!(bad.status(), 404);
    let bad_id: Uuid = header(&bad, "x-gw-request-id").parse().unwrap();
    log_entry(&stack, &s, bad_id).await;
    log_entry(&stack, &s, team_id).await;
    for id in &mine {
        log_entry(&stack, &s, *id).await;
    }

    // Pages of 3, newest first, every row once.
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/analytics/logs?limit=3&key_id={key_id}&status=2xx");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let page = get_json(&stack, &s, &path).await;
        let data = page["data"].as_array().unwrap();
        assert!(data.len() <= 3);
        seen.extend(data.iter().map(|e| e["id"].as_str().unwrap().to_string()));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let mut expected: Vec<String> = mine.iter().rev().map(|u| u.to_string()).collect();
    assert_eq!(seen, expected);
    expected.reverse();

    let only_team = get_json(&stack, &s, &format!("/analytics/logs?team_id={team}")).await;
    let ids: Vec<&str> = only_team["data"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![team_id.to_string()]);
    let errors = get_json(&stack, &s, "/analytics/logs?status=error").await;
    let ids: Vec<&str> = errors["data"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![bad_id.to_string()]);
    let exact = get_json(&stack, &s, "/analytics/logs?status=404").await;
    assert_eq!(exact["data"].as_array().unwrap().len(), 1);
    let model = get_json(&stack, &s, "/analytics/logs?model=no-such-model").await;
    assert_eq!(model["data"].as_array().unwrap().len(), 1);
    let hits = get_json(&stack, &s, "/analytics/logs?cache=hit").await;
    assert_eq!(hits["data"].as_array().unwrap().len(), 0);
    let bypass = get_json(&stack, &s, "/analytics/logs?cache=bypass&limit=200").await;
    assert_eq!(bypass["data"].as_array().unwrap().len(), 9);
    let unacted = get_json(&stack, &s, "/analytics/logs?policy_action=none&limit=200").await;
    assert_eq!(unacted["data"].as_array().unwrap().len(), 9);
    let blocked = get_json(&stack, &s, "/analytics/logs?policy_action=blocked").await;
    assert_eq!(blocked["data"].as_array().unwrap().len(), 0);
    let future = ts(Utc::now() + TimeDelta::hours(1));
    let later =
        get_json(&stack, &s, &format!("/analytics/logs?from={future}&to={}", ts(Utc::now() + TimeDelta::hours(2))))
            .await;
    assert_eq!(later["data"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn log_queries_refuse_bad_filters() {
    let stack = Stack::shared().await;
    let (s, _, _) = stack.org_with_key().await;
    for (query, field) in [
        ("status=7xx", "status"),
        ("status=abc", "status"),
        ("status=99", "status"),
        ("cache=L4", "cache"),
        ("policy_action=maybe", "policy_action"),
        ("cursor=nonsense", "cursor"),
        ("cursor=12_notauuid", "cursor"),
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("from=2026-01-02&to=2026-01-01", "to"),
        ("from=2024-01-01&to=2026-01-01", "from"),
        ("from=yesterday", "from"),
    ] {
        let r = stack.admin_get(&format!("/analytics/logs?{query}"), &s.access_token).await;
        let b = expect_api_error(r, 400).await;
        assert_eq!(b["error"]["fields"][0]["field"], field, "{query}: {b}");
    }
    let r = stack.admin_get("/analytics/logs?colour=red", &s.access_token).await;
    expect_api_error(r, 400).await;
    let r = stack.admin_get(&format!("/analytics/logs/{}", Uuid::now_v7()), &s.access_token).await;
    expect_api_error(r, 404).await;
    let r = stack.admin_get("/analytics/logs/not-a-uuid", &s.access_token).await;
    expect_api_error(r, 404).await;
}

#[tokio::test]
async fn only_admins_read_the_log() {
    let stack = Stack::shared().await;
    let (owner, key, _) = stack.org_with_key().await;
    let id = request(&stack, &key, "who can see this").await;
    log_entry(&stack, &owner, id).await;
    for role in ["member", "viewer"] {
        let s = stack.join(&owner, role, &[]).await;
        for path in [
            format!("/analytics/logs/{id}"),
            "/analytics/logs".to_string(),
            "/analytics/overview".to_string(),
            "/analytics/compliance/export?from=2026-01-01&to=2026-02-01".to_string(),
        ] {
            let r = stack.admin_get(&path, &s.access_token).await;
            expect_api_error(r, 403).await;
        }
    }
}

#[tokio::test]
async fn bodies_are_logged_only_when_the_organization_turns_it_on() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let r = stack.admin_patch("/organizations/current", &s.access_token, &json!({"log_bodies": true})).await;
    assert_eq!(r.status(), 200);
    let org: Value = r.json().await.unwrap();
    assert_eq!(org["log_bodies"], true);
    // The proxy hears of the change through the invalidation channel.
    let deadline = Instant::now() + Duration::from_secs(5);
    let e = loop {
        let id = request(&stack, &key, "remember my words").await;
        let e = log_entry(&stack, &s, id).await;
        if e["request_body"] != Value::Null || Instant::now() > deadline {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let req = e["request_body"].as_str().expect("request body logged");
    assert!(req.contains("remember my words"), "{req}");
    let resp: Value = serde_json::from_str(e["response_body"].as_str().expect("response body logged")).unwrap();
    assert_eq!(resp["object"], "chat.completion");
    // A streamed answer is kept as the events the client received.
    let r =
        stack.chat(&key, json!({"model": "mock-model", "messages": user_message("stream it"), "stream": true})).await;
    let id: Uuid = header(&r, "x-gw-request-id").parse().unwrap();
    let sent = r.text().await.unwrap();
    let e = log_entry(&stack, &s, id).await;
    let kept = e["response_body"].as_str().expect("streamed body logged");
    assert!(kept.starts_with("data: {") && sent.starts_with(kept), "{kept}");
    assert!(kept.contains("chat.completion.chunk"));

    let r = stack.admin_patch("/organizations/current", &s.access_token, &json!({"log_bodies": false})).await;
    assert_eq!(r.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let id = request(&stack, &key, "forget these").await;
        let e = log_entry(&stack, &s, id).await;
        if e["request_body"] == Value::Null {
            assert_eq!(e["response_body"], Value::Null);
            break;
        }
        assert!(Instant::now() < deadline, "bodies still logged after turning it off");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

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
        id: Uuid::now_v7(),
        org_id: org,
        team_id: team,
        endpoint: "/v1/chat/completions".into(),
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
        created_at: at,
        routing: json!([]),
        policy: json!([]),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_overview_adds_up_rolled_hours_and_recent_rows() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
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
        live.push(request(&stack, &key, &format!("now {i}")).await);
    }
    for id in &live {
        log_entry(&stack, &s, *id).await;
    }
    // The rows above landed in hours already aggregated: the job (every second here) finds them
    // by their arrival and aggregates those hours again.
    let from = ts(now - TimeDelta::hours(30));
    let deadline = Instant::now() + Duration::from_secs(60);
    let o = loop {
        let o = get_json(&stack, &s, &format!("/analytics/overview?from={from}")).await;
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

    let by_model = get_json(&stack, &s, &format!("/analytics/overview?from={from}&group_by=model")).await;
    let groups = by_model["groups"].as_array().unwrap();
    let g = |k: &str| groups.iter().find(|g| g["key"] == k).cloned().unwrap_or(Value::Null);
    assert_eq!(g("gpt-a")["requests"], 40);
    assert_eq!(g("gpt-b")["requests"], 11);
    assert_eq!(g("gpt-b")["errors"], 1);
    assert_eq!(g("mock-model")["requests"], 3);
    let gpt_a_p95 = g("gpt-a")["latency"]["p95_ms"].as_f64().unwrap();
    assert!((125.0..150.0).contains(&gpt_a_p95), "p95 {gpt_a_p95}");

    let by_team = get_json(&stack, &s, &format!("/analytics/overview?from={from}&group_by=team")).await;
    let teams = by_team["groups"].as_array().unwrap();
    let ops = teams.iter().find(|g| g["key"] == team.to_string()).unwrap();
    assert_eq!((ops["requests"].as_i64(), ops["name"].as_str()), (Some(40), Some("ops")));
    let by_provider = get_json(&stack, &s, &format!("/analytics/overview?from={from}&group_by=provider")).await;
    let providers = by_provider["groups"].as_array().unwrap();
    let mock = providers.iter().find(|g| g["key"] == "mock").unwrap();
    assert_eq!((mock["requests"].as_i64(), mock["name"].as_str()), (Some(54), Some("mock")), "{by_provider}");
    // The calendar month so far: from its first instant, UTC; this hour's requests are in it.
    let month = get_json(&stack, &s, "/analytics/overview?period=month").await;
    let first = now.date_naive().with_day(1).unwrap().and_hms_opt(0, 0, 0).unwrap().and_utc();
    assert_eq!(month["from"].as_str().unwrap().parse::<DateTime<Utc>>().unwrap(), first);
    assert!(month["requests"].as_i64().unwrap() >= 3, "{month}");
    let by_day = get_json(&stack, &s, &format!("/analytics/overview?from={from}&group_by=day")).await;
    let days: i64 = by_day["groups"].as_array().unwrap().iter().map(|g| g["requests"].as_i64().unwrap()).sum();
    assert_eq!(days, 54);
    let one_team = get_json(&stack, &s, &format!("/analytics/overview?from={from}&team_id={team}")).await;
    assert_eq!(one_team["requests"], 40);
    let last_hour = get_json(&stack, &s, "/analytics/overview?period=1h").await;
    assert_eq!(last_hour["requests"], 3);
    let other = stack.org_with_key().await.0;
    let theirs = get_json(&stack, &other, &format!("/analytics/overview?from={from}")).await;
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
        ("period=7d&start=2026-01-01", "period"),
        ("from=2026-01-01&start=2026-01-01", "start"),
        ("start=2026-01-05&end=2026-01-01", "end"),
        ("group_by=colour", "group_by"),
    ] {
        let r = stack.admin_get(&format!("/analytics/overview?{query}"), &s.access_token).await;
        let b = expect_api_error(r, 400).await;
        assert_eq!(b["error"]["fields"][0]["field"], field, "{query}: {b}");
    }
}

async fn export(stack: &Stack, s: &Session, query: &str) -> (Vec<Value>, Value) {
    let r = stack.admin_get(&format!("/analytics/compliance/export?{query}"), &s.access_token).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let mut lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let summary = lines.pop().expect("a verification line");
    assert_eq!(summary["record_type"], "verification");
    assert!(lines.iter().all(|l| l["record_type"] == "log"));
    (lines, summary)
}

fn ids(lines: &[Value]) -> Vec<String> {
    lines.iter().map(|l| l["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn the_compliance_export_holds_the_range_and_proves_it_untouched() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let before = request(&stack, &key, "before the range").await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let from = Utc::now();
    let mut inside = Vec::new();
    for i in 0..12 {
        inside.push(request(&stack, &key, &format!("inside {i}")).await);
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    let to = Utc::now();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let after = request(&stack, &key, "after the range").await;
    for id in inside.iter().chain([&before, &after]) {
        log_entry(&stack, &s, *id).await;
    }
    let range = format!("from={}&to={}", ts(from), ts(to));

    let (lines, summary) = export(&stack, &s, &range).await;
    let mut got = ids(&lines);
    got.sort();
    let mut want: Vec<String> = inside.iter().map(|u| u.to_string()).collect();
    want.sort();
    assert_eq!(got, want, "exactly the rows in range");
    assert_eq!(summary["verified"], true, "{summary}");
    assert_eq!(summary["rows"], 12);
    assert_eq!(summary["breaks"], json!([]));
    assert!(lines.iter().all(|l| l["row_hash"].as_str().is_some_and(|h| h.len() == 64)));
    // Chain order: each row follows the one before it.
    for w in lines.windows(2) {
        assert_eq!(w[1]["prev_hash"], w[0]["row_hash"]);
    }

    // CSV: the same rows, and the summary in the last row.
    let r = stack.admin_get(&format!("/analytics/compliance/export?{range}&format=csv"), &s.access_token).await;
    assert_eq!(r.status(), 200);
    assert!(header(&r, "content-type").starts_with("text/csv"));
    let csv = r.text().await.unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].starts_with("record_type,id,created_at"));
    assert_eq!(rows.len(), 1 + 12 + 1);
    assert!(rows[13].starts_with("verification,") && rows[13].contains("\"\"verified\"\":true"), "{}", rows[13]);

    // Edit one row and delete another straight in the database: the export names both.
    let edited = inside[3];
    let deleted = inside[7];
    let mut conn = db::connect().await;
    use diesel_async::RunQueryDsl;
    diesel::sql_query(format!("UPDATE audit_logs SET cost_usd = cost_usd + 1 WHERE id = '{edited}'"))
        .execute(&mut conn)
        .await
        .unwrap();
    diesel::sql_query(format!("DELETE FROM audit_logs WHERE id = '{deleted}'")).execute(&mut conn).await.unwrap();
    let (lines, summary) = export(&stack, &s, &range).await;
    assert_eq!(lines.len(), 11);
    assert_eq!(summary["verified"], false);
    let breaks = summary["breaks"].as_array().unwrap();
    let edited_seq = lines.iter().find(|l| l["id"] == edited.to_string()).unwrap()["chain_seq"].as_i64().unwrap();
    assert!(
        breaks.iter().any(|b| b["problem"] == "altered" && b["log_id"] == edited.to_string() && b["seq"] == edited_seq),
        "{summary}"
    );
    let after_deleted = inside[8];
    assert!(
        breaks.iter().any(|b| b["problem"] == "missing" && b["before_log_id"] == after_deleted.to_string()),
        "{summary}"
    );
}

#[tokio::test]
async fn deleting_the_last_rows_of_a_range_is_caught() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let from = Utc::now();
    let mut ids_ = Vec::new();
    for i in 0..4 {
        ids_.push(request(&stack, &key, &format!("tail {i}")).await);
    }
    for id in &ids_ {
        log_entry(&stack, &s, *id).await;
    }
    let range = format!("from={}&to={}", ts(from), ts(Utc::now() + TimeDelta::seconds(1)));
    let (_, summary) = export(&stack, &s, &range).await;
    assert_eq!(summary["verified"], true, "{summary}");
    let mut conn = db::connect().await;
    use diesel_async::RunQueryDsl;
    diesel::sql_query(format!("DELETE FROM audit_logs WHERE id = '{}'", ids_[3])).execute(&mut conn).await.unwrap();
    let (lines, summary) = export(&stack, &s, &range).await;
    assert_eq!(lines.len(), 3);
    assert_eq!(summary["verified"], false);
    assert_eq!(summary["breaks"][0]["problem"], "missing_after", "{summary}");
    assert_eq!(summary["breaks"][0]["after_seq"], 3);
}

#[tokio::test]
async fn the_compliance_export_narrows_to_a_team_and_refuses_bad_ranges() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let team = stack.create_team(&s, "legal").await;
    let r = stack.create_key(&s, json!({"name": "legal key", "team_id": team})).await;
    let team_key = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    let from = Utc::now();
    let a = request(&stack, &key, "no team").await;
    let b = request(&stack, &team_key, "the team").await;
    log_entry(&stack, &s, a).await;
    log_entry(&stack, &s, b).await;
    let range = format!("from={}&to={}", ts(from), ts(Utc::now() + TimeDelta::seconds(1)));
    let (lines, summary) = export(&stack, &s, &format!("{range}&team_id={team}")).await;
    assert_eq!(ids(&lines), vec![b.to_string()]);
    assert_eq!(summary["verified"], true);
    assert_eq!(summary["links_checked"], 2, "the walk covers the rows the filter leaves out");
    let (lines, _) = export(&stack, &s, &format!("{range}&policy=pii_redact")).await;
    assert!(lines.is_empty());
    // Another organization's export of the same range holds none of these rows.
    let (other, _, _) = stack.org_with_key().await;
    let (lines, summary) = export(&stack, &other, &range).await;
    assert!(lines.is_empty());
    assert_eq!(summary["verified"], true);

    for (query, field) in [
        ("from=2026-01-02&to=2026-01-01", "to"),
        ("from=2024-01-01&to=2026-01-01", "from"),
        ("to=1990-01-01T00:00:00Z&from=1990-01-01T00:00:00Z", "to"),
        ("from=2026-01-01&to=2026-01-02&format=xml", "format"),
    ] {
        let r = stack.admin_get(&format!("/analytics/compliance/export?{query}"), &s.access_token).await;
        let body = expect_api_error(r, 400).await;
        if !field.is_empty() {
            assert_eq!(body["error"]["fields"][0]["field"], field, "{query}: {body}");
        }
    }
}

#[tokio::test]
async fn audit_and_traffic_metrics_are_exposed() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let id = request(&stack, &key, "count me").await;
    log_entry(&stack, &s, id).await;
    let text = stack.http.get(format!("{}/metrics", stack.proxy_metrics)).send().await.unwrap().text().await.unwrap();
    for series in [
        "gw_proxy_model_requests_total{model=\"mock-model\",provider=",
        "gw_proxy_team_requests_total{status=\"2xx\",team=\"none\"}",
        "gw_proxy_tokens_total{kind=\"prompt\",model=\"mock-model\"}",
        "gw_proxy_overhead_seconds_bucket",
        "gw_audit_queue_depth",
        "gw_audit_spool_bytes",
        "gw_audit_flush_duration_seconds_bucket",
        "gw_audit_spilled_total",
    ] {
        assert!(text.contains(series), "{series} missing from {text}");
    }
    let admin = stack.http.get(format!("{}/metrics", stack.admin)).send().await.unwrap().text().await.unwrap();
    assert!(admin.contains("gw_admin_audit_upkeep_duration_seconds"), "{admin}");
}
