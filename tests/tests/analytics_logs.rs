//! The request log (`/analytics/logs`): every request finds its entry in its own organization,
//! filters and pages, body logging, and the audit metrics. The overview is
//! `analytics_overview.rs`, the compliance export `analytics_compliance.rs`. On the test binary's
//! shared stack; each test owns its organization.

use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use gw_tests::{expect_api_error, header, query_time, user_message, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

#[tokio::test]
async fn every_request_id_finds_its_entry_for_its_organization_only() {
    let stack = Stack::shared().await;
    let (s, key, key_id) = stack.org_with_key().await;
    let (other, _, _) = stack.org_with_key().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(stack.chat_request_id(&key, &format!("hello {i}")).await);
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
        let e = stack.log_entry(&s, *id).await;
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
    let e = stack.log_entry(&s, streamed).await;
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
        mine.push(stack.chat_request_id(&key, &format!("page {i}")).await);
    }
    let team_id = stack.chat_request_id(&team_key, "from the team").await;
    let bad = stack.chat(&key, json!({"model": "no-such-model", "messages": user_message("x")})).await;
    assert_eq!(bad.status(), 404);
    let bad_id: Uuid = header(&bad, "x-gw-request-id").parse().unwrap();
    stack.log_entry(&s, bad_id).await;
    stack.log_entry(&s, team_id).await;
    for id in &mine {
        stack.log_entry(&s, *id).await;
    }

    // Pages of 3, newest first, every row once.
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/analytics/logs?limit=3&key_id={key_id}&status=2xx");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let page = stack.get_ok(&s, &path).await;
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

    let only_team = stack.get_ok(&s, &format!("/analytics/logs?team_id={team}")).await;
    let ids: Vec<&str> = only_team["data"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![team_id.to_string()]);
    let errors = stack.get_ok(&s, "/analytics/logs?status=error").await;
    let ids: Vec<&str> = errors["data"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![bad_id.to_string()]);
    let exact = stack.get_ok(&s, "/analytics/logs?status=404").await;
    assert_eq!(exact["data"].as_array().unwrap().len(), 1);
    let model = stack.get_ok(&s, "/analytics/logs?model=no-such-model").await;
    assert_eq!(model["data"].as_array().unwrap().len(), 1);
    let hits = stack.get_ok(&s, "/analytics/logs?cache=hit").await;
    assert_eq!(hits["data"].as_array().unwrap().len(), 0);
    let bypass = stack.get_ok(&s, "/analytics/logs?cache=bypass&limit=200").await;
    assert_eq!(bypass["data"].as_array().unwrap().len(), 9);
    let unacted = stack.get_ok(&s, "/analytics/logs?policy_action=none&limit=200").await;
    assert_eq!(unacted["data"].as_array().unwrap().len(), 9);
    assert!(unacted["data"].as_array().unwrap().iter().all(|r| r["policy_action"] == "none"), "{unacted}");
    let blocked = stack.get_ok(&s, "/analytics/logs?policy_action=blocked").await;
    assert_eq!(blocked["data"].as_array().unwrap().len(), 0);
    let future = query_time(Utc::now() + TimeDelta::hours(1));
    let later = stack
        .get_ok(&s, &format!("/analytics/logs?from={future}&to={}", query_time(Utc::now() + TimeDelta::hours(2))))
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
    let id = stack.chat_request_id(&key, "who can see this").await;
    stack.log_entry(&owner, id).await;
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
        let id = stack.chat_request_id(&key, "remember my words").await;
        let e = stack.log_entry(&s, id).await;
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
    let e = stack.log_entry(&s, id).await;
    let kept = e["response_body"].as_str().expect("streamed body logged");
    assert!(kept.starts_with("data: {") && sent.starts_with(kept), "{kept}");
    assert!(kept.contains("chat.completion.chunk"));

    let r = stack.admin_patch("/organizations/current", &s.access_token, &json!({"log_bodies": false})).await;
    assert_eq!(r.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let id = stack.chat_request_id(&key, "forget these").await;
        let e = stack.log_entry(&s, id).await;
        if e["request_body"] == Value::Null {
            assert_eq!(e["response_body"], Value::Null);
            break;
        }
        assert!(Instant::now() < deadline, "bodies still logged after turning it off");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn audit_and_traffic_metrics_are_exposed() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let id = stack.chat_request_id(&key, "count me").await;
    stack.log_entry(&s, id).await;
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
