//! The response cache through the proxy: tier order (L1; L2 from another replica or when L1
//! cannot hold the answer; L3 for a paraphrase, never for a different question), isolation
//! between organizations, parameters and determinism of the key, streams and plain requests
//! sharing entries, errors and broken streams never stored, the request's own directives, team
//! settings, purges, the audit row, analytics, and Redis going away and coming back.

use std::time::{Duration, Instant};

use gw_tests::*;
use serde_json::{json, Value};
use uuid::Uuid;

fn body(text: &str, tag: &str) -> Value {
    json!({"model": "gpt-4o-mini", "messages": user_message(text), "mock": {"tag": tag}})
}

async fn enable(stack: &Stack, s: &Session, settings: Value) {
    let r = stack.admin_put("/organizations/current/cache", &s.access_token, &settings).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
}

/// An organization with a key and these cache settings (set before the proxy ever saw it).
async fn org(stack: &Stack, settings: Value) -> (Session, String) {
    let (s, key, _) = stack.org_with_key().await;
    enable(stack, &s, settings).await;
    (s, key)
}

async fn upstream_calls(stack: &Stack, tag: &str) -> u64 {
    stack.mock_stats_for(tag).await["requests"].as_u64().unwrap_or(0)
}

fn content(v: &Value) -> String {
    v["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string()
}

/// Sends until the answer comes from `tier` (the store behind a miss is asynchronous for L2/L3).
/// The organization's L2 entries in the Redis at `url` (its ledger left out).
async fn l2_entries(url: &str, org_id: Uuid) -> Vec<String> {
    let mut conn = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let pattern = format!("{}*", gw_shared::cache::key::org_prefix(org_id));
    let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut conn).await.unwrap();
    keys.into_iter().filter(|k| !k.contains(":ledger:")).collect()
}

/// Waits until Redis holds `n` L2 entries of the organization.
async fn until_l2_entries(org_id: Uuid, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let keys = l2_entries(&redis_url(), org_id).await;
        if keys.len() >= n {
            return;
        }
        assert!(Instant::now() < deadline, "L2 holds {} of {n} entries", keys.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn until_tier(stack: &Stack, key: &str, body: &Value, tier: &str) -> reqwest::Response {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = stack.chat_with(&stack.proxy, key, body, &[]).await;
        assert_eq!(r.status(), 200);
        if header(&r, "x-gw-cache") == tier {
            return r;
        }
        assert!(Instant::now() < deadline, "never answered from {tier}; last {}", header(&r, "x-gw-cache"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_repeat_comes_from_l1_at_no_cost_with_the_original_usage() {
    let stack = Stack::shared().await;
    let (s, key) = org(&stack, json!({"l1": true})).await;
    let tag = unique_tag();
    let b = body("What is the capital of France?", &tag);
    let first = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-gw-cache"), "miss");
    let cost = header(&first, "x-gw-cost-usd").to_string();
    assert_ne!(cost.parse::<f64>().unwrap(), 0.0);
    let first: Value = first.json().await.unwrap();

    let again = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
    assert_eq!(header(&again, "x-gw-cache"), "L1");
    assert_eq!(header(&again, "x-gw-cost-usd").parse::<f64>().unwrap(), 0.0);
    assert_eq!(header(&again, "x-gw-provider"), "upstream");
    assert!(again.headers().get("x-gw-cache-similarity").is_none());
    let id = header(&again, "x-gw-request-id").parse::<Uuid>().unwrap();
    let again: Value = again.json().await.unwrap();
    assert_eq!(content(&again), content(&first));
    assert_eq!(again["usage"], first["usage"], "usage reports what the cached answer contained");
    assert_ne!(again["id"], first["id"], "a replay carries its own id");
    assert_eq!(upstream_calls(&stack, &tag).await, 1);

    let row = db::audit_row(s.org_id, id).await;
    assert_eq!(row.cache_status, "L1");
    assert_eq!(row.cost_usd, rust_decimal::Decimal::ZERO);
    assert_eq!(row.cache_saved_usd.to_string().parse::<f64>().unwrap(), cost.parse::<f64>().unwrap());
    assert_eq!(row.total_tokens as u64, first["usage"]["total_tokens"].as_u64().unwrap());
    assert_eq!(row.provider.as_deref(), Some("upstream"));
}

#[tokio::test]
async fn a_cached_answer_replays_as_a_real_stream_and_a_stream_is_stored_as_a_response() {
    let stack = Stack::shared().await;
    let (_, key) = org(&stack, json!({"l1": true})).await;
    let tag = unique_tag();
    let plain = body("Tell me a long story about a lighthouse keeper and the sea", &tag);
    let answer: Value = stack.chat_with(&stack.proxy, &key, &plain, &[]).await.json().await.unwrap();

    let mut streamed = plain.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let r = stack.chat_with(&stack.proxy, &key, &streamed, &[]).await;
    assert_eq!(header(&r, "x-gw-cache"), "L1");
    assert!(header(&r, "content-type").starts_with("text/event-stream"));
    let text = r.text().await.unwrap();
    let events = sse_data(&text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let pieces: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect::<Vec<_>>().concat();
    assert_eq!(pieces, content(&answer));
    assert!(
        chunks.iter().filter(|c| c["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty())).count()
            > 2
    );
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]), "the usage chunk comes last with empty choices");
    assert_eq!(last["usage"], answer["usage"]);
    assert_eq!(upstream_calls(&stack, &tag).await, 1);

    // The other way round: a completed stream answers a later plain request.
    let tag = unique_tag();
    let mut first = body("Name three rivers in Africa", &tag);
    first["stream"] = json!(true);
    let r = stack.chat_with(&stack.proxy, &key, &first, &[]).await;
    assert_eq!(header(&r, "x-gw-cache"), "miss");
    let streamed_text: String = sse_data(&r.text().await.unwrap())
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect();
    let r = stack.chat_with(&stack.proxy, &key, &body("Name three rivers in Africa", &tag), &[]).await;
    assert_eq!(header(&r, "x-gw-cache"), "L1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(content(&v), streamed_text);
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert_eq!(upstream_calls(&stack, &tag).await, 1);
}

#[tokio::test]
async fn the_same_prompt_in_two_organizations_never_shares_an_entry() {
    let stack = Stack::shared().await;
    let (_, key_a) = org(&stack, json!({"l1": true, "l2": true})).await;
    let (_, key_b) = org(&stack, json!({"l1": true, "l2": true})).await;
    let tag = unique_tag();
    let b = body("Which planet is largest?", &tag);
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key_a, &b, &[]).await, "x-gw-cache"), "miss");
    until_tier(&stack, &key_a, &b, "L1").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key_b, &b, &[]).await, "x-gw-cache"), "miss");
    assert_eq!(upstream_calls(&stack, &tag).await, 2);
}

#[tokio::test]
async fn parameters_that_change_the_answer_change_the_key() {
    let stack = Stack::shared().await;
    let (_, key) = org(&stack, json!({"l1": true})).await;
    let tag = unique_tag();
    let mut b = body("Suggest a name for a cat", &tag);
    b["temperature"] = json!(0.2);
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &b, &[]).await, "x-gw-cache"), "miss");
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &b, &[]).await, "x-gw-cache"), "L1");
    let mut other = b.clone();
    other["temperature"] = json!(0.9);
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &other, &[]).await, "x-gw-cache"), "miss");
    let mut tools = b.clone();
    tools["tools"] = json!([{"type": "function", "function": {"name": "pick", "parameters": {"type": "object"}}}]);
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &tools, &[]).await, "x-gw-cache"), "miss");
    let mut other_tools = tools.clone();
    other_tools["tools"][0]["function"]["name"] = json!("choose");
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &other_tools, &[]).await, "x-gw-cache"), "miss");
    let mut other_model = b.clone();
    other_model["model"] = json!("mock-model");
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &other_model, &[]).await, "x-gw-cache"), "miss");
}

#[tokio::test]
async fn reordered_fields_and_other_whitespace_hit_the_same_entry() {
    let stack = Stack::shared().await;
    let (_, key) = org(&stack, json!({"l1": true})).await;
    let tag = unique_tag();
    let compact = format!(
        r#"{{"model":"gpt-4o-mini","temperature":0.5,"messages":[{{"role":"user","content":"Spell cat"}}],"mock":{{"tag":"{tag}"}}}}"#
    );
    let spaced = format!(
        "{{\n  \"mock\" : {{ \"tag\" : \"{tag}\" }},\n\t\"messages\" : [ {{ \"content\" : \"Spell cat\" , \"role\" : \"user\" }} ] ,\n  \"temperature\" : 0.50 , \"model\" : \"gpt-4o-mini\"\n}}"
    );
    let send = |raw: String| {
        stack
            .http
            .post(format!("{}/v1/chat/completions", stack.proxy))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(raw)
            .send()
    };
    assert_eq!(header(&send(compact).await.unwrap(), "x-gw-cache"), "miss");
    assert_eq!(header(&send(spaced).await.unwrap(), "x-gw-cache"), "L1");
}

#[tokio::test]
async fn upstream_errors_and_broken_streams_are_never_stored() {
    let stack = Stack::shared().await;
    let (_, key) = org(&stack, json!({"l1": true, "l2": true})).await;
    let tag = unique_tag();
    let mut b = body("An answer that fails first", &tag);
    b["mock"]["fail_first"] = json!(1);
    let r = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
    assert!(r.status().is_server_error(), "{}", r.status());
    let r = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
    assert_eq!(r.status(), 200, "the error was served from the cache");
    assert_eq!(header(&r, "x-gw-cache"), "miss");
    assert_eq!(upstream_calls(&stack, &tag).await, 2);

    for knob in ["truncate_stream", "error_mid_stream", "drop_connection"] {
        let tag = unique_tag();
        let mut b = body("A stream that breaks", &tag);
        b["stream"] = json!(true);
        b["mock"][knob] = json!(true);
        let r = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
        let _ = r.text().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
        assert_ne!(header(&r, "x-gw-cache"), "L1", "{knob}: a broken stream was stored");
        assert_ne!(header(&r, "x-gw-cache"), "L2", "{knob}: a broken stream was stored");
        let _ = r.text().await;
        assert_eq!(upstream_calls(&stack, &tag).await, 2, "{knob}");
    }
}

#[tokio::test]
async fn no_cache_skips_the_lookup_but_stores_and_no_store_does_neither() {
    let stack = Stack::shared().await;
    let (_, key) = org(&stack, json!({"l1": true})).await;
    let tag = unique_tag();
    let b = body("Directive test", &tag);
    let r = stack.chat_with(&stack.proxy, &key, &b, &[("cache-control", "no-store")]).await;
    assert_eq!(header(&r, "x-gw-cache"), "bypass");
    let r = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
    assert_eq!(header(&r, "x-gw-cache"), "miss", "no-store kept the answer");
    let r = stack.chat_with(&stack.proxy, &key, &b, &[("cache-control", "no-cache")]).await;
    assert_eq!(header(&r, "x-gw-cache"), "bypass");
    assert_eq!(upstream_calls(&stack, &tag).await, 3);
    let r = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
    assert_eq!(header(&r, "x-gw-cache"), "L1");
    assert_eq!(upstream_calls(&stack, &tag).await, 3);
}

#[tokio::test]
async fn the_ttl_header_bounds_the_entry_and_a_bad_one_is_refused() {
    let stack = Stack::shared().await;
    let (_, key) = org(&stack, json!({"l1": true})).await;
    let tag = unique_tag();
    let b = body("Short-lived answer", &tag);
    assert_eq!(
        header(&stack.chat_with(&stack.proxy, &key, &b, &[("x-gw-cache-ttl", "1")]).await, "x-gw-cache"),
        "miss"
    );
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &b, &[]).await, "x-gw-cache"), "L1");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &b, &[]).await, "x-gw-cache"), "miss");

    let r = stack.chat_with(&stack.proxy, &key, &b, &[("x-gw-cache-ttl", "forever")]).await;
    let e = expect_openai_error(r, 400).await;
    insta::assert_json_snapshot!(e, @r#"
    {
      "error": {
        "code": "invalid_request",
        "message": "x-gw-cache-ttl must be a whole number of seconds from 1 to 2592000.",
        "param": "x-gw-cache-ttl",
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(e["error"]["param"], "x-gw-cache-ttl");
}

#[tokio::test]
async fn a_clients_ttl_never_outlives_the_organizations() {
    let stack = Stack::shared().await;
    let (_, key) = org(&stack, json!({"l1": true, "ttl_seconds": 1})).await;
    let tag = unique_tag();
    let b = body("Kept no longer than the organization says", &tag);
    let r = stack.chat_with(&stack.proxy, &key, &b, &[("x-gw-cache-ttl", "86400")]).await;
    assert_eq!(header(&r, "x-gw-cache"), "miss");
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &b, &[]).await, "x-gw-cache"), "L1");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &b, &[]).await, "x-gw-cache"), "miss");
}

#[tokio::test]
async fn caching_is_off_until_the_organization_turns_it_on() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let tag = unique_tag();
    let b = body("Off by default", &tag);
    for _ in 0..2 {
        assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &b, &[]).await, "x-gw-cache"), "bypass");
    }
    assert_eq!(upstream_calls(&stack, &tag).await, 2);
}

#[tokio::test]
async fn a_team_can_turn_the_cache_off_for_itself() {
    let stack = Stack::shared().await;
    let (s, _key) = org(&stack, json!({"l1": true})).await;
    let team = stack.create_team(&s, "no-cache team").await;
    let r = stack.admin_put(&format!("/teams/{team}/cache"), &s.access_token, &json!({"l1": false})).await;
    assert_eq!(r.status(), 200);
    let got: Value = stack.admin_get("/organizations/current/cache", &s.access_token).await.json().await.unwrap();
    assert_eq!(got["teams"][0]["team_id"], team.to_string());
    assert_eq!(got["teams"][0]["settings"], json!({"l1": false}));
    let r = stack.create_key(&s, json!({"name": "team key", "team_id": team})).await;
    let team_key = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    let tag = unique_tag();
    let b = body("Team answer", &tag);
    for _ in 0..2 {
        assert_eq!(header(&stack.chat_with(&stack.proxy, &team_key, &b, &[]).await, "x-gw-cache"), "bypass");
    }
    let r = stack.admin_delete(&format!("/teams/{team}/cache"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let deadline = Instant::now() + Duration::from_secs(5);
    while header(&stack.chat_with(&stack.proxy, &team_key, &b, &[]).await, "x-gw-cache") == "bypass" {
        assert!(Instant::now() < deadline, "the team's reset never reached the proxy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn output_policies_apply_to_cached_answers() {
    let stack = Stack::shared().await;
    let (_, key) = org(&stack, json!({"l1": true})).await;
    let tag = unique_tag();
    let mut b = body("What is the support address?", &tag);
    b["mock"]["reply"] = json!("Write to help.desk@example.com any time");
    let plain: Value = stack.chat_with(&stack.proxy, &key, &b, &[]).await.json().await.unwrap();
    assert!(content(&plain).contains("help.desk@example.com"));
    let r = stack.chat_with(&stack.proxy, &key, &b, &[("x-gw-policy", "pii_redact")]).await;
    assert_eq!(header(&r, "x-gw-cache"), "L1");
    assert_eq!(header(&r, "x-gw-policy-action"), "redacted");
    let v: Value = r.json().await.unwrap();
    assert!(!content(&v).contains("help.desk@example.com"), "{}", content(&v));
    let mut streamed = b.clone();
    streamed["stream"] = json!(true);
    let r = stack.chat_with(&stack.proxy, &key, &streamed, &[("x-gw-policy", "pii_redact")]).await;
    assert_eq!(header(&r, "x-gw-cache"), "L1");
    let text = r.text().await.unwrap();
    assert!(!text.contains("help.desk@example.com"), "{text}");
    assert_eq!(upstream_calls(&stack, &tag).await, 1);
}

#[tokio::test]
async fn a_paraphrase_comes_from_l3_and_a_different_question_does_not() {
    let stack = Stack::shared().await;
    let (s, key) = org(&stack, json!({"l3": true})).await;
    let tag = unique_tag();
    let first = body("How do I reverse a list in Python?", &tag);
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &first, &[]).await, "x-gw-cache"), "miss");
    let para = body("how to reverse a list in python", &tag);
    let r = until_tier(&stack, &key, &para, "L3").await;
    let similarity: f64 = header(&r, "x-gw-cache-similarity").parse().unwrap();
    assert!((0.85..=1.0).contains(&similarity), "{similarity}");
    let id = header(&r, "x-gw-request-id").parse::<Uuid>().unwrap();
    let row = db::audit_row(s.org_id, id).await;
    assert_eq!(row.cache_status, "L3");
    assert!(row.cache_similarity.is_some());
    let calls = upstream_calls(&stack, &tag).await;
    for other in ["How do I sort a list in Python?", "How do I reverse a list in JavaScript?"] {
        let r = stack.chat_with(&stack.proxy, &key, &body(other, &tag), &[]).await;
        assert_eq!(header(&r, "x-gw-cache"), "miss", "{other}");
    }
    assert_eq!(upstream_calls(&stack, &tag).await, calls + 2);
    // The same paraphrase under another system prompt is another conversation.
    let mut with_system = para.clone();
    with_system["messages"] = json!([{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "how to reverse a list in python"}]);
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &with_system, &[]).await, "x-gw-cache"), "miss");
}

#[tokio::test]
async fn a_purge_empties_every_tier_of_one_organization_or_one_model() {
    let stack = Stack::shared().await;
    let (s, key) = org(&stack, json!({"l1": true, "l2": true})).await;
    let (other, other_key) = org(&stack, json!({"l1": true, "l2": true})).await;
    let tag = unique_tag();
    let a = body("Purge me", &tag);
    let mut m = body("Keep me", &tag);
    m["model"] = json!("mock-model");
    for (k, b) in [(&key, &a), (&key, &m), (&other_key, &a)] {
        stack.chat_with(&stack.proxy, k, b, &[]).await;
        until_tier(&stack, k, b, "L1").await;
    }
    // L2 is written behind the answers: wait until Redis holds all three.
    until_l2_entries(s.org_id, 2).await;
    until_l2_entries(other.org_id, 1).await;
    let r =
        stack.admin_post("/organizations/current/cache/purge", &s.access_token, &json!({"model": "gpt-4o-mini"})).await;
    assert_eq!(r.status(), 200);
    let out: Value = r.json().await.unwrap();
    assert_eq!(out["l2_deleted"], 1);
    // The proxies drop their in-memory copies when the purge's announcement reaches them.
    let deadline = Instant::now() + Duration::from_secs(5);
    while header(&stack.chat_with(&stack.proxy, &key, &a, &[]).await, "x-gw-cache") != "miss" {
        assert!(Instant::now() < deadline, "the purged model still answered from the cache");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        header(&stack.chat_with(&stack.proxy, &key, &m, &[]).await, "x-gw-cache"),
        "L1",
        "another model was purged"
    );
    assert_eq!(
        header(&stack.chat_with(&stack.proxy, &other_key, &a, &[]).await, "x-gw-cache"),
        "L1",
        "another organization was purged"
    );

    let r = stack.admin_post("/organizations/current/cache/purge", &s.access_token, &json!({})).await;
    assert_eq!(r.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    while header(&stack.chat_with(&stack.proxy, &key, &m, &[]).await, "x-gw-cache") != "miss" {
        assert!(Instant::now() < deadline, "the purge never reached the proxy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn analytics_count_hits_per_tier_and_the_cost_they_saved() {
    let stack = Stack::shared().await;
    let (s, key) = org(&stack, json!({"l1": true})).await;
    let tag = unique_tag();
    let b = body("Count me", &tag);
    let first = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
    let cost: f64 = header(&first, "x-gw-cost-usd").parse().unwrap();
    for _ in 0..3 {
        assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &b, &[]).await, "x-gw-cache"), "L1");
    }
    stack.chat_with(&stack.proxy, &key, &b, &[("cache-control", "no-store")]).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let stats = loop {
        let v: Value = stack.admin_get("/analytics/cache", &s.access_token).await.json().await.unwrap();
        if v["requests"] == 5 {
            break v;
        }
        assert!(Instant::now() < deadline, "{v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(stats["lookups"], 4);
    assert_eq!(stats["hits"], 3);
    assert_eq!(stats["misses"], 1);
    assert_eq!(stats["bypassed"], 1);
    assert_eq!(stats["hit_rate"], 0.75);
    assert_eq!(stats["tiers"]["L1"]["hits"], 3);
    assert_eq!(stats["tiers"]["L2"]["hits"], 0);
    let saved: f64 = stats["saved_usd"].as_str().unwrap().parse().unwrap();
    assert!((saved - 3.0 * cost).abs() < 1e-9, "{saved} vs {cost}");
    let overview: Value = stack.admin_get("/analytics/overview", &s.access_token).await.json().await.unwrap();
    assert_eq!(overview["requests"], 5);
    assert_eq!(overview["cache"]["hit_rate"], 0.75);
    let r = stack.admin_get("/analytics/cache?from=2026-01-02&to=2026-01-01", &s.access_token).await;
    insta::assert_json_snapshot!(expect_api_error(r, 400).await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "to",
            "message": "must be after from"
          }
        ],
        "message": "to: must be after from"
      }
    }
    "#);
}

#[tokio::test]
async fn l2_answers_another_replica_and_when_l1_cannot_hold_the_answer() {
    let stack = Stack::start_with(StackOptions::default()).await;
    let (_, key) = org(&stack, json!({"l1": true, "l2": true})).await;
    let (_replica, replica_url) = stack.proxy_replica().await;
    let tag = unique_tag();
    let b = body("Shared between replicas", &tag);
    assert_eq!(header(&stack.chat_with(&stack.proxy, &key, &b, &[]).await, "x-gw-cache"), "miss");
    let on_replica = |b: Value| {
        let url = format!("{replica_url}/v1/chat/completions");
        let req = stack.http.post(url).bearer_auth(&key).json(&b);
        async move { req.send().await.unwrap() }
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = on_replica(b.clone()).await;
        let tier = header(&r, "x-gw-cache").to_string();
        if tier == "L2" {
            break;
        }
        assert_eq!(tier, "miss");
        assert!(Instant::now() < deadline, "the other replica never found the answer in L2");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(header(&on_replica(b.clone()).await, "x-gw-cache"), "L1", "an L2 hit fills L1");

    let small =
        Stack::start_with(StackOptions { proxy_config: "cache_l1_max_bytes = 16".into(), ..Default::default() }).await;
    let (_, key) = org(&small, json!({"l1": true, "l2": true})).await;
    let b = body("Too large for a 16-byte L1", &tag);
    assert_eq!(header(&small.chat_with(&small.proxy, &key, &b, &[]).await, "x-gw-cache"), "miss");
    until_tier(&small, &key, &b, "L2").await;
    assert_eq!(header(&small.chat_with(&small.proxy, &key, &b, &[]).await, "x-gw-cache"), "L2");
}

#[tokio::test]
async fn with_redis_stopped_l2_is_skipped_and_it_resumes_when_redis_returns() {
    let mut redis = PrivateRedis::start();
    let stack = Stack::start_with(StackOptions { redis_url: Some(redis.url()), ..Default::default() }).await;
    let (_, key) = org(&stack, json!({"l2": true})).await;
    let tag = unique_tag();
    let b = body("Through a Redis outage", &tag);
    stack.chat_with(&stack.proxy, &key, &b, &[]).await;
    until_tier(&stack, &key, &b, "L2").await;

    redis.stop_server();
    for i in 0..5 {
        let r = stack.chat_with(&stack.proxy, &key, &body(&format!("outage {i}"), &tag), &[]).await;
        assert_eq!(r.status(), 200, "a request failed while Redis was down");
        assert_eq!(header(&r, "x-gw-cache"), "miss");
    }
    redis.start_server();
    let b = body("After the outage", &tag);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = stack.chat_with(&stack.proxy, &key, &b, &[]).await;
        assert_eq!(r.status(), 200);
        if header(&r, "x-gw-cache") == "L2" {
            break;
        }
        assert!(Instant::now() < deadline, "L2 did not resume after Redis came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn expired_semantic_entries_are_never_answered_and_get_deleted() {
    use gw_shared::db::cache as db_cache;
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let mut conn = db::connect().await;
    let scope = [7u8; 32];
    let mut v = vec![0.0f32; 384];
    v[0] = 1.0;
    for (ttl, prompt) in [(Duration::ZERO, "gone"), (Duration::from_secs(60), "live")] {
        let row = db_cache::NewSemantic {
            id: Uuid::now_v7(),
            org_id: s.org_id,
            model: "m",
            scope: &scope,
            embedding: v.clone(),
            prompt,
            answer: b"x",
            ttl,
        };
        db_cache::insert_semantic(&mut conn, row).await.unwrap();
    }
    let near = db_cache::nearest(&mut conn, s.org_id, &scope, &v, 0.9, 5).await.unwrap();
    assert_eq!(near.iter().map(|n| n.prompt.as_str()).collect::<Vec<_>>(), ["live"]);
    assert!(near[0].similarity > 0.999 && near[0].ttl_secs > 50.0);
    // Another organization's vectors are never candidates.
    assert!(db_cache::nearest(&mut conn, Uuid::now_v7(), &scope, &v, 0.0, 5).await.unwrap().is_empty());
    assert!(db_cache::delete_expired(&mut conn, 1_000_000).await.unwrap() >= 1);
    assert_eq!(db_cache::purge(&mut conn, s.org_id, Some("other-model")).await.unwrap(), 0);
    assert_eq!(db_cache::purge(&mut conn, s.org_id, None).await.unwrap(), 1, "only the live entry was left");
}

/// Access is checked before the cache: a caller that may not use a model never gets its cached
/// answer, whatever tier holds it.
async fn refused_despite_a_cached_answer(stack: &Stack, cached_by: &str, restricted: &str, tag: &str) {
    let mut b = body("Which answer may a restricted key read?", tag);
    let first = stack.chat_with(&stack.proxy, cached_by, &b, &[]).await;
    assert_eq!(first.status(), 200);
    until_tier(stack, cached_by, &b, "L1").await;
    let mut errors = Vec::new();
    for stream in [false, true] {
        b["stream"] = json!(stream);
        let r = stack.chat_with(&stack.proxy, restricted, &b, &[]).await;
        assert!(r.headers().get("x-gw-cache").is_none_or(|v| v != "L1" && v != "L2"));
        errors.push(expect_openai_error(r, 404).await);
    }
    assert_eq!(errors[0], errors[1], "plain and streamed refused alike");
    // Both tests below come through here: the same snapshot, twice.
    insta::allow_duplicates! {
        insta::assert_json_snapshot!(errors[0], @r###"
        {
          "error": {
            "code": "model_not_found",
            "message": "The model 'gpt-4o-mini' does not exist or you do not have access to it.",
            "param": "model",
            "type": "invalid_request_error"
          }
        }
        "###);
    }
    assert_eq!(upstream_calls(stack, tag).await, 1, "only the first request reached the upstream");
}

#[tokio::test]
async fn a_key_limited_to_another_model_gets_404_not_the_cached_answer() {
    let stack = Stack::shared().await;
    let (s, open) = org(&stack, json!({"l1": true, "l2": true})).await;
    let r = stack.create_key(&s, json!({"name": "mock only", "models": ["mock-model"]})).await;
    assert_eq!(r.status(), 201);
    let limited = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    refused_despite_a_cached_answer(&stack, &open, &limited, &unique_tag()).await;
}

#[tokio::test]
async fn a_team_limited_to_another_model_gets_404_not_the_cached_answer() {
    let stack = Stack::shared().await;
    let (s, open) = org(&stack, json!({"l1": true, "l2": true})).await;
    let r = stack.admin_post("/teams", &s.access_token, &json!({"name": "mock only", "models": ["mock-model"]})).await;
    assert_eq!(r.status(), 201);
    let team = r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    let r = stack.create_key(&s, json!({"name": "team key", "team_id": team})).await;
    assert_eq!(r.status(), 201);
    let limited = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    refused_despite_a_cached_answer(&stack, &open, &limited, &unique_tag()).await;
}

#[tokio::test]
async fn one_organization_cannot_take_more_than_its_share_of_l2() {
    let stack = Stack::start_with(StackOptions {
        proxy_config: "audit_flush_interval_ms = 50\ncache_l2_org_max_bytes = 4000".into(),
        ..Default::default()
    })
    .await;
    let (s, key) = org(&stack, json!({"l2": true})).await;
    let tag = unique_tag();
    for i in 0..12 {
        let r = stack.chat_with(&stack.proxy, &key, &body(&format!("Distinct question {i}"), &tag), &[]).await;
        assert_eq!(r.status(), 200);
    }
    // The store queue is drained behind the answers: wait until it refused one.
    let over = "gw_cache_stores_total{outcome=\"over_budget\",tier=\"L2\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    while stack.proxy_metric(over).await < 1.0 {
        assert!(Instant::now() < deadline, "no answer was refused by the budget");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kept = l2_entries(&redis_url(), s.org_id).await.len();
    assert!((1..12).contains(&kept), "{kept} of 12 answers in L2");
    let mut conn = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let (_, h) = gw_shared::cache::l2_budget::ledger_keys(s.org_id);
    let total: u64 = redis::cmd("HGET").arg(&h).arg("_total").query_async(&mut conn).await.unwrap();
    assert!(total > 0 && total <= 4000, "the ledger counts {total} bytes");
    // Another organization has a share of its own.
    let (_, other) = org(&stack, json!({"l2": true})).await;
    let b = body("Another organization's question", &tag);
    until_tier(&stack, &other, &b, "L2").await;
}

#[tokio::test]
async fn l2_entries_live_in_the_cache_redis_when_one_is_configured() {
    let cache = PrivateRedis::start();
    let stack = Stack::start_with(StackOptions { cache_redis_url: Some(cache.url()), ..Default::default() }).await;
    let (s, key) = org(&stack, json!({"l2": true})).await;
    let tag = unique_tag();
    let b = body("Kept apart from the counters", &tag);
    stack.chat_with(&stack.proxy, &key, &b, &[]).await;
    until_tier(&stack, &key, &b, "L2").await;
    assert_eq!(l2_entries(&cache.url(), s.org_id).await.len(), 1);
    assert!(l2_entries(&redis_url(), s.org_id).await.is_empty(), "an entry reached the counters' Redis");
    // Purges reach it too.
    let r = stack.admin_post("/organizations/current/cache/purge", &s.access_token, &json!({})).await;
    assert_eq!(json_of(r, 200).await["l2_deleted"], 1);
    assert!(l2_entries(&cache.url(), s.org_id).await.is_empty());
}
