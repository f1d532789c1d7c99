//! Budgets and rate limits: exact across replicas (three proxies on one Redis), refusals in
//! OpenAI's shape with `x-ratelimit-*` headers, budget alerts written once, visibility through
//! the management API, and a Redis outage that fails no request.

use std::time::{Duration, Instant};

use diesel::dsl::{count_star, sum};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use futures::future::join_all;
use gw_shared::db::schema::audit_logs;
use gw_tests::*;
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;

fn body(text: &str) -> Value {
    json!({"model": "mock-model", "messages": user_message(text), "max_tokens": 50})
}

/// A key of a new org, with the given settings (`budget`, `rate_limits`, `team_id`).
/// Waits until the current UTC minute has at least `secs` seconds left, so a burst stays in it.
async fn room_in_minute(secs: u64) {
    loop {
        let into = chrono::Utc::now().timestamp_millis().rem_euclid(60_000) as u64;
        if 60_000 - into >= secs * 1000 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn audit_totals(org_id: Uuid) -> (i64, Decimal) {
    let mut conn = db::connect().await;
    audit_logs::table
        .filter(audit_logs::org_id.eq(org_id))
        .select((count_star(), sum(audit_logs::cost_usd)))
        .first::<(i64, Option<Decimal>)>(&mut conn)
        .await
        .map(|(n, s)| (n, s.unwrap_or_default()))
        .expect("audit totals")
}

/// Waits until `n` audit rows of the org are written; returns their total cost.
async fn settled_spend(org_id: Uuid, n: i64) -> Decimal {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (rows, cost) = audit_totals(org_id).await;
        if rows >= n {
            return cost;
        }
        assert!(Instant::now() < deadline, "only {rows} of {n} audit rows appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn stack_with_replicas(opts: StackOptions) -> (Stack, Vec<(Proc, String)>) {
    let stack = Stack::start_with(opts).await;
    let mut replicas = Vec::new();
    for _ in 0..2 {
        replicas.push(stack.proxy_replica().await);
    }
    (stack, replicas)
}

#[tokio::test]
async fn an_rpm_limit_admits_exactly_n_per_minute_across_three_replicas() {
    let (stack, replicas) = stack_with_replicas(StackOptions::default()).await;
    let proxies: Vec<String> =
        std::iter::once(stack.proxy.clone()).chain(replicas.iter().map(|r| r.1.clone())).collect();
    let s = stack.register().await;
    let (key, _) = stack.key_with(&s, json!({"rate_limits": {"rpm": 25}})).await;
    room_in_minute(20).await;
    let b = body("count me");
    let sends = (0..90).map(|i| stack.chat_with(&proxies[i % 3], &key, &b, &[]));
    let responses = join_all(sends).await;
    let ok = responses.iter().filter(|r| r.status() == 200).count();
    let refused: Vec<&reqwest::Response> = responses.iter().filter(|r| r.status() == 429).collect();
    assert_eq!(ok, 25, "admitted {ok} of an rpm limit of 25");
    assert_eq!(refused.len(), 65);
    for r in &refused {
        assert_eq!(header(r, "x-ratelimit-limit-requests"), "25");
        assert_eq!(header(r, "x-ratelimit-remaining-requests"), "0");
        let retry: u64 = header(r, "retry-after").parse().unwrap();
        assert!((1..=60).contains(&retry));
    }
    let b = expect_openai_error(responses.into_iter().find(|r| r.status() == 429).unwrap(), 429).await;
    // The message names the key's prefix and the seconds left in the minute: checked apart.
    let message = b["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("Rate limit reached for API key 'test key' (sk_live_"), "{message}");
    assert!(message.contains("on requests per minute: limit 25, used 25. Retry in "), "{message}");
    insta::assert_json_snapshot!(b, {".error.message" => "[message]"}, @r#"
    {
      "error": {
        "code": "rate_limit_exceeded",
        "message": "[message]",
        "param": null,
        "type": "requests"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "rate_limit_exceeded");
    assert_eq!(b["error"]["type"], "requests");
}

#[tokio::test]
async fn a_team_budget_overshoots_by_at_most_one_request_across_three_replicas() {
    let (stack, replicas) = stack_with_replicas(StackOptions::default()).await;
    let proxies: Vec<String> =
        std::iter::once(stack.proxy.clone()).chain(replicas.iter().map(|r| r.1.clone())).collect();
    let s = stack.register().await;
    let team = stack.create_team(&s, "budgeted").await;
    let budget_usd = 0.0004;
    let resp = stack
        .admin_patch(
            &format!("/teams/{team}"),
            &s.access_token,
            &json!({"budget": {"amount_usd": budget_usd, "period": "month", "alert_thresholds": [50, 80, 95, 100]}}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let (key, _) = stack.key_with(&s, json!({"team_id": team})).await;
    // Let the proxies forget any copy of the team from before the budget (none was read yet, but
    // the invalidation is asynchronous by design).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = body("spend my budget");
    // One request's maximum cost at the mock deployment's prices (0.15 / 0.60 per million): at
    // most a token per byte of the body, plus framing, and max_tokens out.
    let max_cost = ((b.to_string().len() as f64 + 7.0) * 0.15 + 50.0 * 0.60) / 1e6;
    let mut sent = 0;
    let mut statuses = Vec::new();
    for _round in 0..30 {
        let sends = (0..300).map(|i| stack.chat_with(&proxies[i % 3], &key, &b, &[]));
        let round: Vec<u16> = join_all(sends).await.iter().map(|r| r.status().as_u16()).collect();
        sent += 300;
        assert!(round.iter().all(|s| *s == 200 || *s == 429), "{round:?}");
        let spent = settled_spend(s.org_id, sent).await.to_f64().unwrap();
        assert!(spent <= budget_usd + max_cost, "spent {spent} of a {budget_usd} budget (max cost {max_cost})");
        let all_refused = round.iter().all(|s| *s == 429);
        statuses.extend(round);
        if all_refused {
            break;
        }
        // Settlements of the last requests land after their responses.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let spent = settled_spend(s.org_id, sent).await.to_f64().unwrap();
    assert!(spent >= budget_usd - max_cost, "the budget stopped at {spent} of {budget_usd}");
    assert!(statuses.contains(&200));

    // The refusals are budget refusals.
    let r = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
    assert_eq!(header(&r, "x-should-retry"), "false");
    let e = expect_openai_error(r, 429).await;
    assert_eq!(e["error"]["code"], "budget_exceeded");
    assert_eq!(e["error"]["type"], "insufficient_quota");

    // What the management API reports is what the audit log says was spent.
    let v: Value = stack.admin_get(&format!("/teams/{team}/limits"), &s.access_token).await.json().await.unwrap();
    let b = &v["budget"];
    assert_eq!(v["scope"], "team");
    let redis_spent = usd(&b["spend_usd"]).to_f64().unwrap();
    let requests = statuses.iter().filter(|s| **s == 200).count() as f64;
    assert!((redis_spent - spent).abs() <= requests * 1e-9 + 1e-12, "redis {redis_spent} vs audit {spent}");
    assert_eq!((&b["reserved_usd"], &b["remaining_usd"]), (&json!("0"), &json!("0")));
    assert!(b["percent_used"].as_f64().unwrap() >= 100.0);

    // Exactly one event per threshold, and one budget.exceeded, for all three replicas.
    let mut conn = db::connect().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let events = loop {
        let events = gw_shared::db::events::list(&mut conn, s.org_id, Some("budget."), None, 100).await.unwrap();
        if events.len() >= 5 || Instant::now() > deadline {
            break events;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut thresholds: Vec<i64> = events
        .iter()
        .filter(|e| e.event_type == "budget.threshold_crossed")
        .map(|e| e.payload["threshold_percent"].as_i64().unwrap())
        .collect();
    thresholds.sort();
    assert_eq!(thresholds, [50, 80, 95, 100], "{events:#?}");
    let exceeded: Vec<_> = events.iter().filter(|e| e.event_type == "budget.exceeded").collect();
    assert_eq!(exceeded.len(), 1);
    let p = &exceeded[0].payload;
    assert_eq!(p["team_id"], team.to_string());
    assert_eq!(p["scope"], "team");
    assert_eq!(usd(&p["limit_usd"]).to_f64(), Some(budget_usd));
    assert!(usd(&p["spend_usd"]).to_f64().unwrap() >= budget_usd);
    assert!(p["percent_used"].as_f64().unwrap() >= 100.0);
}

#[tokio::test]
async fn every_response_carries_the_tightest_windows() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let resp = stack
        .admin_patch("/organizations/current", &s.access_token, &json!({"rate_limits": {"rpm": 100, "tpm": 100000}}))
        .await;
    assert_eq!(resp.status(), 200);
    let (key, key_id) = stack.key_with(&s, json!({"rate_limits": {"rpm": 5}})).await;
    room_in_minute(10).await;
    let r = stack.chat(&key, body("headers please")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-ratelimit-limit-requests"), "5");
    assert_eq!(header(&r, "x-ratelimit-remaining-requests"), "4");
    assert_eq!(header(&r, "x-ratelimit-limit-tokens"), "100000");
    let remaining: u64 = header(&r, "x-ratelimit-remaining-tokens").parse().unwrap();
    assert!(remaining < 100000 && remaining > 99000, "{remaining}");
    assert!(header(&r, "x-ratelimit-reset-requests").ends_with('s'));
    // Streams carry them too.
    let mut b = body("stream please");
    b["stream"] = json!(true);
    let r = stack.chat(&key, b).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-ratelimit-remaining-requests"), "3");
    // The visibility endpoint sees the same minute (tokens corrected to the real usage).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let v: Value = stack.admin_get(&format!("/api-keys/{key_id}/limits"), &s.access_token).await.json().await.unwrap();
    assert_eq!(v["rate_limits"]["rpm"]["used"], 2);
    assert_eq!(v["budget"], Value::Null);
    let v: Value = stack.admin_get("/organizations/current/limits", &s.access_token).await.json().await.unwrap();
    let used = v["rate_limits"]["tpm"]["used"].as_u64().unwrap();
    assert!(used > 0 && used < 200, "tokens after correction: {used}");
}

#[tokio::test]
async fn a_request_larger_than_the_token_limit_is_refused_as_such() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (key, key_id) = stack.key_with(&s, json!({"rate_limits": {"tpm": 40}})).await;
    let e = expect_openai_error(stack.chat(&key, body("too big")).await, 429).await;
    assert_eq!(e["error"]["code"], "rate_limit_exceeded");
    assert_eq!(e["error"]["type"], "tokens");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("Request too large"), "{e}");
    // The key is named as its owner knows it: its name and the prefix the console shows.
    let prefix = &key[..gw_shared::keys::DISPLAY_PREFIX_LEN];
    assert!(message.contains(&format!("API key 'test key' ({prefix}...)")), "{e}");
    assert!(!message.contains(&key_id), "{e}");
}

#[tokio::test]
async fn per_model_limits_count_only_their_model() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (key, _) = stack.key_with(&s, json!({"rate_limits": {"models": {"mock-model": {"rpm": 1}}}})).await;
    room_in_minute(10).await;
    let r = stack.chat(&key, body("one")).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    let e = expect_openai_error(stack.chat(&key, body("two")).await, 429).await;
    assert!(e["error"]["message"].as_str().unwrap().contains("for model mock-model"), "{e}");
    let other = json!({"model": "gpt-4o-mini", "messages": user_message("other model")});
    assert_eq!(stack.chat(&key, other).await.status(), 200);
}

#[tokio::test]
async fn concurrent_requests_past_the_limit_are_refused_and_leases_end() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (key, _) = stack.key_with(&s, json!({"rate_limits": {"max_concurrent": 1}})).await;
    let slow = json!({"model": "gpt-4o-mini", "messages": user_message("slow"), "mock": {"latency_ms": 800}});
    let (first, second) = tokio::join!(stack.chat(&key, slow), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        stack.chat(&key, body("meanwhile")).await
    });
    assert_eq!(first.status(), 200);
    assert_eq!(header(&second, "retry-after"), "1");
    let e = expect_openai_error(second, 429).await;
    assert!(e["error"]["message"].as_str().unwrap().contains("in flight"), "{e}");
    // The first one's lease ended with it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stack.chat(&key, body("after")).await.status(), 200);
}

#[tokio::test]
async fn alert_only_budgets_alert_but_never_refuse() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (key, _) = stack.key_with(
        &s,
        json!({"budget": {"amount_usd": 0.000001, "period": "day", "hard_limit": false, "alert_thresholds": [100]}}),
    )
    .await;
    for _ in 0..5 {
        assert_eq!(stack.chat(&key, body("over and over")).await.status(), 200);
    }
    let mut conn = db::connect().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = gw_shared::db::events::list(&mut conn, s.org_id, Some("budget."), None, 10).await.unwrap();
        if events.len() >= 2 {
            assert_eq!(events.len(), 2, "{events:#?}");
            assert!(events.iter().any(|e| e.event_type == "budget.exceeded"));
            assert!(events.iter().all(|e| e.payload["scope"] == "key"));
            break;
        }
        assert!(Instant::now() < deadline, "no budget events: {events:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_redis_outage_fails_no_request_and_shared_limiting_resumes() {
    let mut redis = PrivateRedis::start();
    let stack = Stack::start_with(StackOptions {
        redis_url: Some(redis.url()),
        proxy_config: "audit_flush_interval_ms = 50\nlimits_replicas = 3".into(),
        ..Default::default()
    })
    .await;
    let s = stack.register().await;
    let (key, key_id) = stack
        .key_with(&s, json!({"budget": {"amount_usd": 100, "period": "day"}, "rate_limits": {"rpm": 100000}}))
        .await;
    let b = body("through the outage");
    for _ in 0..5 {
        assert_eq!(stack.chat(&key, b.clone()).await.status(), 200);
    }
    redis.stop_server();
    let stopped = Instant::now();
    let mut outage_cost = 0.0;
    let mut during = 0;
    while stopped.elapsed() < Duration::from_secs(2) {
        let r = stack.chat(&key, b.clone()).await;
        assert_eq!(r.status(), 200, "a request failed while Redis was down");
        outage_cost += header(&r, "x-gw-cost-usd").parse::<f64>().unwrap();
        during += 1;
    }
    assert!(during > 5);
    let metrics =
        stack.http.get(format!("{}/metrics", stack.proxy_metrics)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("gw_limits_degraded 1"), "{metrics}");
    redis.start_server();
    let back = Instant::now();
    loop {
        let r = stack.chat(&key, b.clone()).await;
        assert_eq!(r.status(), 200);
        let m = stack.http.get(format!("{}/metrics", stack.proxy_metrics)).send().await.unwrap().text().await.unwrap();
        if m.contains("gw_limits_degraded 0") {
            break;
        }
        assert!(back.elapsed() < Duration::from_secs(5), "shared limiting did not resume within 5 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The spend recorded while Redis was away is in the shared counters (which the restart
    // emptied of everything before).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v: Value =
            stack.admin_get(&format!("/api-keys/{key_id}/limits"), &s.access_token).await.json().await.unwrap();
        let spent = usd(&v["budget"]["spend_usd"]).to_f64().unwrap_or(0.0);
        if spent + 1e-9 * during as f64 >= outage_cost {
            break;
        }
        assert!(Instant::now() < deadline, "shared spend {spent} < outage spend {outage_cost}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_gateways_credentials_are_spent_within_the_plans_quota() {
    let stack = Stack::start_with(StackOptions {
        // A budget no request fits in (a rate limit would depend on where the UTC minute falls).
        extra_config: "[gateway_quota.free]\nbudget = { amount_usd = \"0.000000001\", period = \"month\" }\n".into(),
        ..Default::default()
    })
    .await;
    let chat = || serde_json::json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    // On the free plan, without a provider key of its own: the gateway's credentials serve it.
    let (free, key, _) = stack.org_with_key().await;
    // The first request spends past the quota; one that follows its settlement is refused.
    let mut refused = None;
    for _ in 0..40 {
        let r = stack.chat(&key, chat()).await;
        if r.status() == 429 {
            refused = Some(r.json::<serde_json::Value>().await.unwrap());
            break;
        }
        assert_eq!(r.status(), 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = refused.expect("the quota refused the organization");
    assert_eq!(b["error"]["code"], "budget_exceeded");
    let message = b["error"]["message"].as_str().unwrap();
    assert!(message.contains("this organization's quota on the gateway's provider credentials"), "{message}");
    // Its own provider key is not counted against the quota: the same organization, refused on
    // the gateway's credentials, is served on its own.
    let body = serde_json::json!({"provider": "upstream", "name": "ours", "secret": "sk-our-own-upstream-key"});
    let ours = json_of(stack.admin_post("/provider-keys", &free.access_token, &body).await, 201).await;
    until_status(&stack, &key, 200).await;
    for _ in 0..4 {
        assert_eq!(stack.chat(&key, chat()).await.status(), 200);
    }
    // Without it again, the gateway's credentials and their quota are back.
    let gone =
        stack.admin_delete(&format!("/provider-keys/{}", ours["id"].as_str().unwrap()), &free.access_token).await;
    assert_eq!(gone.status(), 204);
    until_status(&stack, &key, 429).await;
    let (own, own_key, _) = stack.org_with_key().await;
    assert_eq!(stack.admin_post("/provider-keys", &own.access_token, &body).await.status(), 201);
    for _ in 0..4 {
        assert_eq!(stack.chat(&own_key, chat()).await.status(), 200);
    }
    // A plan without a quota entry has none.
    let (growth, growth_key, _) = stack.org_with_key().await;
    gw_tests::db::set_plan(growth.org_id, "growth").await;
    for _ in 0..4 {
        assert_eq!(stack.chat(&growth_key, chat()).await.status(), 200);
    }

    // The operator overrides one organization's quota: the growth organization gets one of its
    // own, the free one is let off its plan's, and removing an override restores the plan's.
    let op = stack.operator().await;
    let growth_quota = format!("/gateway/organizations/{}/quota", growth.org_id);
    let tiny = json!({"budget": {"amount_usd": "0.000000001", "period": "month"}});
    let q = json_of(stack.admin_put(&growth_quota, &op.access_token, &tiny).await, 200).await;
    assert_eq!((q["plan"].as_str(), q["source"].as_str()), (Some("growth"), Some("override")));
    assert_eq!(q["plan_quota"], Value::Null);
    assert_eq!(q["effective"]["budget"]["amount_usd"], "0.000000001");
    until_status(&stack, &growth_key, 429).await;
    let free_quota = format!("/gateway/organizations/{}/quota", free.org_id);
    let q = json_of(stack.admin_put(&free_quota, &op.access_token, &json!({})).await, 200).await;
    assert_eq!(q["source"], "override");
    assert_eq!(q["effective"], json!({"budget": null, "rate_limits": null}));
    assert_eq!(q["plan_quota"]["budget"]["amount_usd"], "0.000000001");
    until_status(&stack, &key, 200).await;
    let q = json_of(stack.admin_delete(&free_quota, &op.access_token).await, 200).await;
    assert_eq!((q["source"].as_str(), &q["override"]), (Some("plan"), &Value::Null));
    until_status(&stack, &key, 429).await;
    // The organization's admins see the operator's changes in their own trail.
    let trail = stack.admin_get("/audit-events?action=gateway_quota.remove", &free.access_token).await;
    assert_eq!(json_of(trail, 200).await["data"].as_array().map(Vec::len), Some(1));
    // An organization that does not exist.
    let r = stack.admin_get(&format!("/gateway/organizations/{}/quota", Uuid::new_v4()), &op.access_token).await;
    let b = expect_api_error(r, 404).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "not_found",
        "fields": [],
        "message": "organization not found"
      }
    }
    "#);
}

/// Sends until the proxy answers `status` (a quota change reaches it through invalidation).
async fn until_status(stack: &Stack, key: &str, status: u16) {
    let chat = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = stack.chat(key, chat.clone()).await.status().as_u16();
        if got == status {
            return;
        }
        assert!(Instant::now() < deadline, "still {got}, not {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `gw_limits_replicas` on the main proxy equals `n` (within ten seconds: heartbeats are every
/// second and a silent replica counts for five).
async fn until_replicas(stack: &Stack, n: u64) {
    let want = format!("gw_limits_replicas {n}\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = stack.http.get(format!("{}/metrics", stack.proxy_metrics)).send().await.unwrap().text().await.unwrap();
        if m.contains(&want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never {want:?}: {}",
            m.lines().find(|l| l.starts_with("gw_limits_replicas")).unwrap_or("")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn without_redis_each_replica_takes_its_share_by_the_replicas_alive() {
    let mut redis = PrivateRedis::start();
    let (stack, mut replicas) = stack_with_replicas(StackOptions {
        redis_url: Some(redis.url()),
        // What the replicas' heartbeats replace: never the divisor here.
        proxy_config: "limits_replicas = 7".into(),
        ..Default::default()
    })
    .await;
    until_replicas(&stack, 3).await;
    // A replica that stops no longer counts.
    drop(replicas.pop());
    until_replicas(&stack, 2).await;
    let s = stack.register().await;
    let (key, _) = stack.key_with(&s, json!({"rate_limits": {"rpm": 30}})).await;
    room_in_minute(20).await;
    redis.stop_server();
    let b = body("shared out");
    let mut admitted = 0;
    for _ in 0..20 {
        let r = stack.chat(&key, b.clone()).await;
        match r.status().as_u16() {
            200 => admitted += 1,
            429 => {}
            other => panic!("{other} while Redis was away"),
        }
    }
    // Two replicas alive when Redis went away: this one's share of 30 is 15.
    assert_eq!(admitted, 15);
}

#[tokio::test]
async fn a_deployments_rpm_cap_is_shared_by_three_replicas() {
    let (stack, replicas) = stack_with_replicas(StackOptions {
        extra_config: "[[models]]\nname = \"capped-model\"\ndeployments = [{ provider = \"mock\", model = \"gpt-4o-mini\", rpm = 12 }]\n"
            .into(),
        ..Default::default()
    })
    .await;
    let proxies: Vec<String> =
        std::iter::once(stack.proxy.clone()).chain(replicas.iter().map(|r| r.1.clone())).collect();
    let (_, key, _) = stack.org_with_key().await;
    room_in_minute(20).await;
    let b = json!({"model": "capped-model", "messages": user_message("capped"), "max_tokens": 5});
    let sends = (0..36).map(|i| stack.chat_with(&proxies[i % 3], &key, &b, &[]));
    let statuses: Vec<u16> = join_all(sends).await.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 12, "{statuses:?}");
    // Past the cap the model has no deployment to offer.
    assert_eq!(statuses.iter().filter(|s| **s == 503).count(), 24, "{statuses:?}");
}

/// `/v1/messages` and `/v1/responses` (translated, and passed through to a deployment serving
/// the Responses API) run the same admission and settlement as chat: a budget near its end,
/// spent through all three across three replicas, overshoots by at most one request and then
/// refuses on each, in its API's error shape.
#[tokio::test]
async fn a_budget_holds_across_three_replicas_through_messages_and_responses() {
    let opts = StackOptions { extra_config: RESPONSES_DEPLOYMENT.into(), ..Default::default() };
    let (stack, replicas) = stack_with_replicas(opts).await;
    let proxies: Vec<String> =
        std::iter::once(stack.proxy.clone()).chain(replicas.iter().map(|r| r.1.clone())).collect();
    let s = stack.register().await;
    let budget_usd = 0.0002;
    let (key, _) = stack.key_with(&s, json!({"budget": {"amount_usd": budget_usd, "period": "day"}})).await;
    let http = reqwest::Client::new();
    let text = "spend my budget through the other APIs";
    let messages = json!({"model": "mock-model", "max_tokens": 50, "messages": [{"role": "user", "content": text}]});
    let responses = json!({"model": "mock-model", "max_output_tokens": 50, "input": text});
    let passed = json!({"model": "gpt-responses", "max_output_tokens": 50, "input": text});
    // One request's maximum cost at gpt-4o-mini's prices (0.15 / 0.60 per million), any API.
    let longest = [&messages, &responses, &passed].iter().map(|b| b.to_string().len()).max().unwrap_or_default();
    let max_cost = ((longest as f64 + 7.0) * 0.15 + 50.0 * 0.60) / 1e6;
    let send = |i: usize| {
        let (path, body) = match i % 3 {
            0 => ("messages", &messages),
            1 => ("responses", &responses),
            _ => ("responses", &passed),
        };
        http.post(format!("{}/v1/{path}", proxies[(i / 3) % 3])).bearer_auth(&key).json(body).send()
    };
    let mut sent = 0;
    let mut answered = 0;
    for _round in 0..30 {
        let round: Vec<u16> =
            join_all((0..120).map(send)).await.iter().map(|r| r.as_ref().unwrap().status().as_u16()).collect();
        sent += 120;
        assert!(round.iter().all(|s| *s == 200 || *s == 429), "{round:?}");
        answered += round.iter().filter(|s| **s == 200).count();
        let spent = settled_spend(s.org_id, sent).await.to_f64().unwrap();
        assert!(spent <= budget_usd + max_cost, "spent {spent} of a {budget_usd} budget (max cost {max_cost})");
        if round.iter().all(|s| *s == 429) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let spent = settled_spend(s.org_id, sent).await.to_f64().unwrap();
    assert!(spent >= budget_usd - max_cost, "the budget stopped at {spent} of {budget_usd}");
    assert!(answered > 0);
    // Refused on both, each in its own shape.
    let r = send(0).await.unwrap();
    assert_eq!(r.status(), 429);
    let e: Value = r.json().await.unwrap();
    assert_eq!((&e["type"], &e["error"]["type"]), (&json!("error"), &json!("rate_limit_error")));
    for i in [1, 2] {
        let e = expect_openai_error(send(i).await.unwrap(), 429).await;
        assert_eq!(e["error"]["code"], "budget_exceeded");
    }
    let mut conn = db::connect().await;
    let passed_through: i64 = audit_logs::table
        .filter(audit_logs::org_id.eq(s.org_id))
        .filter(audit_logs::provider.eq("responses"))
        .filter(audit_logs::status_code.eq(200))
        .filter(audit_logs::cost_usd.gt(Decimal::ZERO))
        .select(count_star())
        .first(&mut conn)
        .await
        .unwrap();
    assert!(passed_through > 0, "the passed-through requests were answered and billed too");
}
