//! An organization's own provider keys on the request path: they take precedence over the
//! deployment's configured key for that organization only, and a rotation under load fails no
//! request while the upstream sees the old secret stop and the new one start. Also the model
//! allow-lists of keys and teams, enforced on every endpoint.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gw_tests::{db, expect_openai_error, header, user_message, Stack, StackOptions};
use serde_json::{json, Value};

/// Credential → requests the mock saw with it.
async fn credentials(stack: &Stack) -> HashMap<String, u64> {
    let v: Value =
        stack.http.get(format!("{}/_mock/credentials", stack.mock)).send().await.unwrap().json().await.unwrap();
    v["credentials"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v["count"].as_u64().unwrap_or(0))).collect())
        .unwrap_or_default()
}

async fn reset_credentials(stack: &Stack) {
    let r = stack.http.post(format!("{}/_mock/credentials/reset", stack.mock)).send().await.unwrap();
    assert!(r.status().is_success());
}

async fn add_provider_key(stack: &Stack, token: &str, provider: &str, secret: &str) -> String {
    let r = stack
        .admin_post("/provider-keys", token, &json!({"provider": provider, "name": "ours", "secret": secret}))
        .await;
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    v["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn an_organizations_key_takes_precedence_for_its_requests_only() {
    let stack = Stack::start_with(StackOptions::default()).await;
    let (mine, my_key, _) = stack.org_with_key().await;
    let (theirs, their_key, _) = stack.org_with_key().await;
    add_provider_key(&stack, &mine.access_token, "upstream", "sk-org-own-secret-1").await;
    reset_credentials(&stack).await;

    let r = stack.chat(&my_key, json!({"model": "gpt-4o-mini", "messages": user_message("hi")})).await;
    assert_eq!(r.status(), 200);
    let id: uuid::Uuid = header(&r, "x-gw-request-id").parse().unwrap();
    assert_eq!(credentials(&stack).await.get("sk-org-own-secret-1"), Some(&1));
    let row = db::audit_row(mine.org_id, id).await;
    assert_eq!(row.routing[0]["credential"], "organization");

    let r = stack.chat(&their_key, json!({"model": "gpt-4o-mini", "messages": user_message("hi")})).await;
    assert_eq!(r.status(), 200);
    let id: uuid::Uuid = header(&r, "x-gw-request-id").parse().unwrap();
    let seen = credentials(&stack).await;
    assert_eq!(seen.get("sk-upstream-test"), Some(&1), "another org uses gw's configured key: {seen:?}");
    assert_eq!(seen.get("sk-org-own-secret-1"), Some(&1));
    assert_eq!(db::audit_row(theirs.org_id, id).await.routing[0]["credential"], "gateway");

    // Revoked: the organization is back on gw's key.
    let list: Value = stack.admin_get("/provider-keys", &mine.access_token).await.json().await.unwrap();
    let key_id = list["data"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(stack.admin_delete(&format!("/provider-keys/{key_id}"), &mine.access_token).await.status(), 204);
    // The revocation reaches the proxies through an invalidation (within a second).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        reset_credentials(&stack).await;
        let r = stack.chat(&my_key, json!({"model": "gpt-4o-mini", "messages": user_message("hi")})).await;
        assert_eq!(r.status(), 200);
        if credentials(&stack).await.get("sk-upstream-test") == Some(&1) {
            break;
        }
        assert!(Instant::now() < deadline, "the revoked organization key is still used");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn rotation_under_load_fails_no_request() {
    let stack = Stack::start_with(StackOptions::default()).await;
    let (session, key, _) = stack.org_with_key().await;
    let key_id = add_provider_key(&stack, &session.access_token, "upstream", "sk-old-secret-aaaa").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    reset_credentials(&stack).await;

    // About 200 requests a second for 6 seconds, from 20 workers.
    let stop_at = Instant::now() + Duration::from_secs(6);
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for w in 0..20 {
        let (http, url, key, ok, failed) = (
            stack.http.clone(),
            format!("{}/v1/chat/completions", stack.proxy),
            key.clone(),
            ok.clone(),
            failed.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let mut i = 0u64;
            while Instant::now() < stop_at {
                tick.tick().await;
                i += 1;
                let body = json!({"model": "gpt-4o-mini", "messages": user_message(&format!("load {w} {i}"))});
                match http.post(&url).bearer_auth(&key).json(&body).send().await {
                    Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = credentials(&stack).await;
    assert!(before.get("sk-old-secret-aaaa").is_some_and(|n| *n > 100), "{before:?}");
    assert!(!before.contains_key("sk-new-secret-bbbb"));

    let r = stack
        .admin_post(
            &format!("/provider-keys/{key_id}/rotate"),
            &session.access_token,
            &json!({"secret": "sk-new-secret-bbbb"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    // The invalidation crosses Redis; requests already holding the old secret finish with it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    reset_credentials(&stack).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = credentials(&stack).await;
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "{} ok", ok.load(Ordering::Relaxed));
    assert!(ok.load(Ordering::Relaxed) > 800, "{} requests", ok.load(Ordering::Relaxed));
    assert!(after.get("sk-new-secret-bbbb").is_some_and(|n| *n > 100), "{after:?}");
    assert!(!after.contains_key("sk-old-secret-aaaa"), "the old secret is still used: {after:?}");
    assert!(!after.contains_key("sk-upstream-test"), "{after:?}");
}

/// The provider takes only the old secret (the new one is not active there yet): during the
/// rotation's overlap every request still succeeds, a refused new secret retried with the old;
/// once the overlap ends gw never sends the old secret again.
#[tokio::test]
async fn an_overlap_keeps_traffic_flowing_and_the_old_secret_stops_after_it() {
    let stack = Stack::start_with(StackOptions::default()).await;
    let (session, key, _) = stack.org_with_key().await;
    let old = format!("sk-overlap-old-{}", uuid::Uuid::new_v4().simple());
    let new = format!("sk-overlap-new-{}", uuid::Uuid::new_v4().simple());
    let key_id = add_provider_key(&stack, &session.access_token, "upstream", &old).await;
    let body = json!({"model": "gpt-4o-mini", "messages": user_message("hi"), "mock": {"require_credential": old}});
    assert_eq!(stack.chat(&key, body.clone()).await.status(), 200);

    let r = stack
        .admin_post(
            &format!("/provider-keys/{key_id}/rotate"),
            &session.access_token,
            &json!({"secret": new, "overlap_seconds": 3}),
        )
        .await;
    let rotated: Value = r.json().await.unwrap();
    let until: chrono::DateTime<chrono::Utc> = rotated["previous_valid_until"].as_str().unwrap().parse().unwrap();
    assert_eq!(rotated["version"], 2);

    // Load while the overlap lasts: 10 workers, a request every 100 ms each.
    let stop_at = until - chrono::Duration::milliseconds(500);
    let mut workers = Vec::new();
    for _ in 0..10 {
        let (stack_http, url, key, body) =
            (stack.http.clone(), format!("{}/v1/chat/completions", stack.proxy), key.clone(), body.clone());
        workers.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u64, 0u64);
            while chrono::Utc::now() < stop_at {
                match stack_http.post(&url).bearer_auth(&key).json(&body).send().await {
                    Ok(r) if r.status() == 200 => ok += 1,
                    _ => failed += 1,
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (ok, failed)
        }));
    }
    let (mut ok, mut failed) = (0, 0);
    for w in workers {
        let (o, f) = w.await.unwrap();
        ok += o;
        failed += f;
    }
    assert_eq!(failed, 0, "{ok} ok");
    assert!(ok >= 10, "{ok} requests");
    let during = credentials(&stack).await;
    // Requests that began before the rotation reached the proxy sent the old secret alone; every
    // later one tried the new secret first. Each was answered with the old one, once.
    let new_tries = during.get(&new).copied().unwrap_or(0);
    assert!(new_tries > 0 && new_tries <= ok, "the new secret is tried first: {during:?}");
    let old_during = during.get(&old).copied().unwrap_or(0);
    assert_eq!(old_during, ok + 1, "the old one answered every request (and the first): {during:?}");

    // The overlap is over: the old secret is never sent again, so this provider refuses gw.
    while chrono::Utc::now() <= until + chrono::Duration::milliseconds(100) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = expect_openai_error(stack.chat(&key, body.clone()).await, 502).await;
    assert_eq!(body["error"]["code"], "upstream_unavailable", "{body}");
    let after = credentials(&stack).await;
    assert_eq!(after.get(&old).copied().unwrap_or(0), old_during, "the old secret was sent after the overlap");
    let shown: Value =
        stack.admin_get(&format!("/provider-keys/{key_id}"), &session.access_token).await.json().await.unwrap();
    assert_eq!(shown["previous_valid_until"], Value::Null);
}

/// A second rotation ends the first one's overlap at once.
#[tokio::test]
async fn a_second_rotation_ends_the_first_ones_overlap() {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let first = format!("sk-first-{}", uuid::Uuid::new_v4().simple());
    let key_id = add_provider_key(&stack, &session.access_token, "upstream", &first).await;
    let body = json!({"model": "gpt-4o-mini", "messages": user_message("hi"), "mock": {"require_credential": first}});
    let rotate = |secret: String, overlap: u64| {
        let path = format!("/provider-keys/{key_id}/rotate");
        let token = session.access_token.clone();
        let stack = &stack;
        async move {
            let r = stack.admin_post(&path, &token, &json!({"secret": secret, "overlap_seconds": overlap})).await;
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let second = rotate(format!("sk-second-{}", uuid::Uuid::new_v4().simple()), 600).await;
    assert!(second["previous_valid_until"].is_string(), "{second}");
    // The provider only knows the first secret: the overlap carries the request.
    let wait_until = Instant::now() + Duration::from_secs(5);
    while stack.chat(&key, body.clone()).await.status() != 200 {
        assert!(Instant::now() < wait_until, "the overlap did not carry the request");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let third = rotate(format!("sk-third-{}", uuid::Uuid::new_v4().simple()), 600).await;
    assert_eq!(third["version"], 3);
    // The previous secret is now the second one; the first is gone for good.
    let wait_until = Instant::now() + Duration::from_secs(5);
    loop {
        let r = stack.chat(&key, body.clone()).await;
        if r.status() == 502 {
            break;
        }
        assert!(Instant::now() < wait_until, "the first secret is still sent after a second rotation");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let bad = stack
        .admin_post(
            &format!("/provider-keys/{key_id}/rotate"),
            &session.access_token,
            &json!({"secret": "sk-x", "overlap_seconds": 86401}),
        )
        .await;
    let bad = gw_tests::expect_api_error(bad, 400).await;
    insta::assert_json_snapshot!(bad, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "overlap_seconds",
            "message": "must be between 0 and 86400"
          }
        ],
        "message": "overlap_seconds: must be between 0 and 86400"
      }
    }
    "#);
}

async fn key_with_models(stack: &Stack, token: &str, models: Value) -> String {
    let r = stack.admin_post("/api-keys", token, &json!({"name": "limited", "models": models})).await;
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    v["key"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_keys_model_allow_list_holds_on_every_endpoint() {
    let stack = Stack::shared().await;
    let session = stack.register().await;
    let key = key_with_models(&stack, &session.access_token, json!(["mock-model", "mock-embedding"])).await;
    let r = stack.http.get(format!("{}/v1/models", stack.proxy)).bearer_auth(&key).send().await.unwrap();
    let v: Value = r.json().await.unwrap();
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["mock-model", "mock-embedding"]);
    let r = stack.chat(&key, json!({"model": "mock-model", "messages": user_message("hi")})).await;
    assert_eq!(r.status(), 200);
    let r = stack
        .http
        .post(format!("{}/v1/embeddings", stack.proxy))
        .bearer_auth(&key)
        .json(&json!({"model": "mock-embedding", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_model_outside_the_keys_allow_list_looks_like_a_missing_one() {
    let stack = Stack::shared().await;
    let session = stack.register().await;
    let key = key_with_models(&stack, &session.access_token, json!(["mock-model"])).await;
    let r = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": user_message("hi")})).await;
    let e = expect_openai_error(r, 404).await;
    insta::assert_json_snapshot!(e, @r#"
    {
      "error": {
        "code": "model_not_found",
        "message": "The model 'gpt-4o-mini' does not exist or you do not have access to it.",
        "param": "model",
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(e["error"]["code"], "model_not_found");
    let r = stack
        .http
        .post(format!("{}/v1/embeddings", stack.proxy))
        .bearer_auth(&key)
        .json(&json!({"model": "mock-embedding", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(expect_openai_error(r, 404).await["error"]["code"], "model_not_found");
}

#[tokio::test]
async fn a_teams_allow_list_narrows_its_keys() {
    let stack = Stack::shared().await;
    let session = stack.register().await;
    let team = uuid::Uuid::now_v7();
    let mut conn = db::connect().await;
    gw_shared::db::teams::insert(&mut conn, session.org_id, team, "limited team").await.unwrap();
    let only = vec!["mock-model".to_string()];
    assert!(gw_shared::db::teams::set_allowed_models(&mut conn, session.org_id, team, Some(&only)).await.unwrap());
    let r = stack.admin_post("/api-keys", &session.access_token, &json!({"name": "team key", "team_id": team})).await;
    assert_eq!(r.status(), 201);
    let key = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    let r = stack.chat(&key, json!({"model": "mock-model", "messages": user_message("hi")})).await;
    assert_eq!(r.status(), 200);
    let r = stack.chat(&key, json!({"model": "gpt-4o-mini", "messages": user_message("hi")})).await;
    assert_eq!(expect_openai_error(r, 404).await["error"]["code"], "model_not_found");
    let r = stack.http.get(format!("{}/v1/models", stack.proxy)).bearer_auth(&key).send().await.unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
}
