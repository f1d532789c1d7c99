//! `/api/v1/api-keys`: create (`POST`, the secret shown once), list (`GET`, never the secret),
//! revoke (`DELETE /{id}`, effective on the proxy within a second), each with the ways it is
//! refused: no credentials, the wrong kind of credential, a missing role, another tenant's key,
//! unknown ids, invalid input, a wrong method. All on the test binary's shared stack, each test
//! with its own organization(s).

use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use gw_shared::db::schema::api_keys;
use gw_tests::{db, expect_api_error, expect_field_error, expect_openai_error, header, json_of, mock_chat, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

fn keys_url(stack: &Stack) -> String {
    format!("{}/api/v1/api-keys", stack.admin)
}

/// A `member` session in `s`'s organization (registration makes owners only).
async fn expect_validation_error(resp: reqwest::Response, what: &str) {
    assert_eq!(resp.status(), 400, "{what}");
    let b = expect_api_error(resp, 400).await;
    assert_eq!(b["error"]["code"], "validation_error", "{what}");
}

// ---- PATCH /api-keys/{id} with what GET answered ----

#[tokio::test]
async fn what_get_answers_can_be_patched_back() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"name": "round trip", "models": ["mock-model"], "budget": {"amount_usd": 3, "period": "day"}});
    let created = json_of(stack.create_key(&s, body).await, 201).await;
    let id = created["id"].as_str().unwrap();
    let got = json_of(stack.admin_get(&format!("/api-keys/{id}"), &s.access_token).await, 200).await;
    let back = json_of(stack.admin_patch(&format!("/api-keys/{id}"), &s.access_token, &got).await, 200).await;
    for field in ["id", "name", "key_prefix", "models", "budget", "rate_limits", "expires_at", "permissions", "team_id"]
    {
        assert_eq!(back[field], got[field], "{field}");
    }
    let mut changed = got.clone();
    changed["key_prefix"] = json!("sk_live_other");
    let r = stack.admin_patch(&format!("/api-keys/{id}"), &s.access_token, &changed).await;
    expect_field_error(r, "key_prefix", "").await;
}

// ---- POST /api-keys ----

#[tokio::test]
async fn create_returns_the_secret_once_and_stores_only_its_hash() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let resp = stack.create_key(&s, json!({"name": "ci key", "permissions": ["proxy:llm"]})).await;
    assert_eq!(resp.status(), 201);
    let body: Value = resp.json().await.unwrap();
    let mut fields: Vec<&str> = body.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort();
    // Every field GET answers, plus the secret and its warning.
    let id = body["id"].as_str().unwrap();
    let mut got: Value = stack.admin_get(&format!("/api-keys/{id}"), &s.access_token).await.json().await.unwrap();
    let mut created = body.clone();
    for k in ["key", "warning"] {
        created.as_object_mut().unwrap().remove(k);
    }
    // `last_used_at` may have moved on between the two; nothing used the key.
    got.as_object_mut().unwrap().remove("last_used_at");
    created.as_object_mut().unwrap().remove("last_used_at");
    assert_eq!(created, got);
    assert!(fields.contains(&"key") && fields.contains(&"warning") && fields.contains(&"status"), "{fields:?}");
    let key = body["key"].as_str().unwrap();
    assert!(key.starts_with("sk_live_") && key.len() >= 8 + 22, "{key}");
    assert!(key.starts_with(body["key_prefix"].as_str().unwrap()));
    assert_eq!(body["permissions"], json!(["proxy:llm"]));
    assert!(body["warning"].as_str().unwrap().contains("once"));
    insta::assert_json_snapshot!("api_key_created", &body, {
        ".id" => "[uuid]",
        ".key" => "[secret]",
        ".key_prefix" => "[prefix]",
        ".created_at" => "[timestamp]",
        ".created_by" => "[uuid]",
        ".spend.period_start" => "[timestamp]",
    });

    let id = Uuid::parse_str(body["id"].as_str().unwrap()).unwrap();
    let mut conn = db::connect().await;
    let (hash, prefix): (Vec<u8>, String) = api_keys::table
        .filter(api_keys::id.eq(id))
        .select((api_keys::key_hash, api_keys::key_prefix))
        .first(&mut conn)
        .await
        .unwrap();
    assert_eq!(hash, gw_shared::keys::hash_secret(key).to_vec());
    assert!(prefix.len() < key.len() / 2);

    let list = stack.list_keys(&s.access_token, "").await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert!(!list.to_string().contains(key), "listing leaked the secret");
    assert_eq!(list["data"][0]["status"], "active");
}

#[tokio::test]
async fn create_as_member_without_a_team_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_post("/api-keys", &stack.member_token(&s).await, &json!({"name": "x"})).await;
    let b = expect_api_error(r, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "team_id");
    assert_eq!(stack.list_keys(&s.access_token, "").await["data"], json!([]));
}

#[tokio::test]
async fn create_as_member_for_another_team_is_403() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let theirs = stack.create_team(&s, "theirs").await;
    let other = stack.create_team(&s, "other").await;
    let member = stack.join(&s, "member", &[theirs]).await;
    let r = stack.admin_post("/api-keys", &member.access_token, &json!({"name": "x", "team_id": other})).await;
    let b = expect_api_error(r, 403).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "members act only on the teams they belong to"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "forbidden");
    assert_eq!(stack.list_keys(&s.access_token, "").await["data"], json!([]));
    // For their own team it works, and they may revoke it; an admin's team-less key they may not.
    let r = stack.admin_post("/api-keys", &member.access_token, &json!({"name": "x", "team_id": theirs})).await;
    assert_eq!(r.status(), 201);
    let id = r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    let admin_key: Value = stack.create_key(&s, json!({"name": "org key"})).await.json().await.unwrap();
    let admin_key = admin_key["id"].as_str().unwrap().to_string();
    expect_api_error(stack.admin_delete(&format!("/api-keys/{admin_key}"), &member.access_token).await, 403).await;
    assert_eq!(stack.admin_delete(&format!("/api-keys/{id}"), &member.access_token).await.status(), 204);
}

#[tokio::test]
async fn create_with_invalid_fields_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for bad in [
        json!({"name": ""}),
        json!({"name": "x", "permissions": []}),
        json!({"name": "x", "permissions": ["admin:everything"]}),
        json!({"name": "x", "team_id": "not-a-uuid"}),
    ] {
        expect_validation_error(stack.create_key(&s, bad.clone()).await, &bad.to_string()).await;
    }
}

#[tokio::test]
async fn create_with_an_unknown_field_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    expect_validation_error(stack.create_key(&s, json!({"name": "x", "colour": "blue"})).await, "colour").await;
}

#[tokio::test]
async fn create_with_a_past_expiry_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.create_key(&s, json!({"name": "x", "expires_at": "2001-01-01T00:00:00Z"})).await;
    expect_validation_error(r, "expires_at in the past").await;
}

#[tokio::test]
async fn create_with_a_team_of_another_org_or_none_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let other = stack.register().await;
    let foreign_team = Uuid::now_v7();
    let mut conn = db::connect().await;
    gw_shared::db::teams::insert(&mut conn, other.org_id, foreign_team, "theirs").await.unwrap();
    // Another org's team looks exactly like a team that does not exist.
    for team in [foreign_team, Uuid::now_v7()] {
        let r = stack.create_key(&s, json!({"name": "x", "team_id": team})).await;
        expect_validation_error(r, &team.to_string()).await;
    }
}

#[tokio::test]
async fn create_with_malformed_json_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack
        .http
        .post(keys_url(&stack))
        .bearer_auth(&s.access_token)
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    expect_validation_error(r, "malformed JSON").await;
}

// ---- GET /api-keys ----

#[tokio::test]
async fn list_shows_keys_without_their_secret() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let created: Value = stack.create_key(&s, json!({"name": "listed"})).await.json().await.unwrap();
    let list = stack.list_keys(&s.access_token, "").await;
    assert!(!list.to_string().contains(created["key"].as_str().unwrap()), "listing leaked the secret");
    assert_eq!(list["data"][0]["id"], created["id"]);
    assert_eq!(list["data"][0]["created_by"], s.user_id.to_string());
    insta::assert_json_snapshot!("api_key_list", &list, {
        ".data[].id" => "[uuid]",
        ".data[].key_prefix" => "[prefix]",
        ".data[].created_by" => "[uuid]",
        ".data[].created_at" => "[timestamp]",
        ".data[].spend.period_start" => "[timestamp]",
    });
}

#[tokio::test]
async fn list_paginates_newest_first() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let body: Value = stack.create_key(&s, json!({"name": format!("k{i}")})).await.json().await.unwrap();
        ids.push(body["id"].as_str().unwrap().to_string());
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("?limit=2&cursor={c}"),
            None => "?limit=2".to_string(),
        };
        let page = stack.list_keys(&s.access_token, &query).await;
        seen.extend(page["data"].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap().to_string()));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, ids);
}

#[tokio::test]
async fn list_marks_expired_keys() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let expires = chrono::Utc::now() + chrono::Duration::seconds(2);
    let r = stack.create_key(&s, json!({"name": "short-lived", "expires_at": expires})).await;
    assert_eq!(r.status(), 201);
    assert_eq!(stack.list_keys(&s.access_token, "").await["data"][0]["status"], "active");
    let left = (expires - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(200)).await;
    assert_eq!(stack.list_keys(&s.access_token, "").await["data"][0]["status"], "expired");
}

#[tokio::test]
async fn list_with_an_invalid_query_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for bad in ["limit=0", "limit=1000", "cursor=nope"] {
        let r = stack.admin_get(&format!("/api-keys?{bad}"), &s.access_token).await;
        expect_validation_error(r, bad).await;
    }
}

#[tokio::test]
async fn list_is_open_to_members() {
    let stack = Stack::shared().await;
    let (s, _, id) = stack.org_with_key().await;
    let list = stack.list_keys(&stack.member_token(&s).await, "").await;
    assert_eq!(list["data"][0]["id"], id);
}

#[tokio::test]
async fn list_shows_nothing_of_other_tenants() {
    let stack = Stack::shared().await;
    let _ = stack.org_with_key().await;
    let b = stack.register().await;
    let list = stack.list_keys(&b.access_token, "").await;
    assert_eq!(list["data"], json!([]));
    let list = stack.list_keys(&b.access_token, "?cursor=ffffffff-ffff-7fff-bfff-ffffffffffff").await;
    assert_eq!(list["data"], json!([]));
}

// ---- DELETE /api-keys/{id} ----

#[tokio::test]
async fn revoked_key_stops_working_within_a_second() {
    let stack = Stack::shared().await;
    let (s, key, id) = stack.org_with_key().await;
    // Warm the proxy's key cache: from here only the invalidation message can end the key fast.
    assert_eq!(stack.chat(&key, mock_chat("hi")).await.status(), 200);
    let r = stack.admin_delete(&format!("/api-keys/{id}"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let revoked_at = Instant::now();
    loop {
        let r = stack.chat(&key, mock_chat("hi")).await;
        if r.status() == 401 {
            let b: Value = r.json().await.unwrap();
            assert_eq!(b["error"]["code"], "revoked_api_key");
            break;
        }
        assert!(revoked_at.elapsed() < Duration::from_secs(1), "revoked key still accepted after 1 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Revoking again is a no-op; the listing shows it revoked.
    let r = stack.admin_delete(&format!("/api-keys/{id}"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let list = stack.list_keys(&s.access_token, "").await;
    assert_eq!(list["data"][0]["status"], "revoked");
}

#[tokio::test]
async fn revoke_as_member_is_403() {
    let stack = Stack::shared().await;
    let (s, key, id) = stack.org_with_key().await;
    let b = expect_api_error(stack.admin_delete(&format!("/api-keys/{id}"), &stack.member_token(&s).await).await, 403)
        .await;
    assert_eq!(b["error"]["code"], "forbidden");
    assert_eq!(stack.chat(&key, mock_chat("hi")).await.status(), 200);
}

#[tokio::test]
async fn revoke_of_another_tenants_key_is_404() {
    let stack = Stack::shared().await;
    let (_, key_a, id_a) = stack.org_with_key().await;
    let b = stack.register().await;
    let r = stack.admin_delete(&format!("/api-keys/{id_a}"), &b.access_token).await;
    let body = expect_api_error(r, 404).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "not_found",
        "fields": [],
        "message": "api key not found"
      }
    }
    "#);
    assert_eq!(body["error"]["code"], "not_found");
    // A's key still works.
    assert_eq!(stack.chat(&key_a, mock_chat("hi")).await.status(), 200);
}

#[tokio::test]
async fn revoke_of_an_unknown_key_is_404() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_delete(&format!("/api-keys/{}", Uuid::now_v7()), &s.access_token).await;
    let b = expect_api_error(r, 404).await;
    assert_eq!(b["error"]["code"], "not_found");
}

#[tokio::test]
async fn revoke_with_an_invalid_id_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    expect_validation_error(stack.admin_delete("/api-keys/not-a-uuid", &s.access_token).await, "not-a-uuid").await;
}

// ---- methods ----

#[tokio::test]
async fn put_on_the_collection_is_405_with_allow() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r =
        stack.http.put(keys_url(&stack)).bearer_auth(&s.access_token).json(&json!({"name": "x"})).send().await.unwrap();
    let allow = header(&r, "allow").to_string();
    assert!(allow.contains("GET") && allow.contains("POST"), "Allow: {allow}");
    let b = expect_api_error(r, 405).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "method_not_allowed",
        "fields": [],
        "message": "method not allowed on this path; allowed: GET, POST"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "method_not_allowed");
}

#[tokio::test]
async fn put_on_a_key_is_405_with_allow() {
    let stack = Stack::shared().await;
    let (s, _, id) = stack.org_with_key().await;
    let r = stack.http.put(format!("{}/{id}", keys_url(&stack))).bearer_auth(&s.access_token).send().await.unwrap();
    assert_eq!(header(&r, "allow"), "GET, PATCH, DELETE");
    let b = expect_api_error(r, 405).await;
    assert_eq!(b["error"]["code"], "method_not_allowed");
}

// ---- model allow-lists ----

#[tokio::test]
async fn models_round_trip_through_create_and_list() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    // Names and aliases are both accepted; duplicates are dropped, the caller's order kept.
    let models = json!(["mock-model", "claude", "gpt-4o-mini", "mock-model"]);
    let r = stack.create_key(&s, json!({"name": "limited", "models": models})).await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    assert_eq!(created["models"], json!(["mock-model", "claude", "gpt-4o-mini"]));
    let r = stack.create_key(&s, json!({"name": "none", "models": []})).await;
    assert_eq!(r.status(), 201);
    let none: Value = r.json().await.unwrap();
    assert_eq!(none["models"], json!([]));
    let r = stack.create_key(&s, json!({"name": "every", "models": null})).await;
    assert_eq!(r.status(), 201);
    let every: Value = r.json().await.unwrap();
    assert!(every.as_object().unwrap().contains_key("models") && every["models"].is_null(), "{every}");
    let r = stack.create_key(&s, json!({"name": "omitted"})).await;
    let omitted: Value = r.json().await.unwrap();
    assert!(omitted.as_object().unwrap().contains_key("models") && omitted["models"].is_null(), "{omitted}");

    let list = stack.list_keys(&s.access_token, "").await;
    let by_id = |id: &Value| list["data"].as_array().unwrap().iter().find(|k| &k["id"] == id).cloned().unwrap();
    assert_eq!(by_id(&created["id"])["models"], json!(["mock-model", "claude", "gpt-4o-mini"]));
    assert_eq!(by_id(&none["id"])["models"], json!([]));
    let every = by_id(&every["id"]);
    assert!(every.as_object().unwrap().contains_key("models") && every["models"].is_null(), "{every}");
    assert!(by_id(&omitted["id"])["models"].is_null());

    let mut conn = db::connect().await;
    let id = Uuid::parse_str(created["id"].as_str().unwrap()).unwrap();
    let stored: Option<Vec<String>> =
        api_keys::table.filter(api_keys::id.eq(id)).select(api_keys::allowed_models).first(&mut conn).await.unwrap();
    assert_eq!(stored, Some(vec!["mock-model".to_string(), "claude".to_string(), "gpt-4o-mini".to_string()]));
}

#[tokio::test]
async fn create_with_an_unknown_model_is_400_naming_it() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.create_key(&s, json!({"name": "x", "models": ["mock-model", "no-such-model-x9"]})).await;
    let b = expect_api_error(r, 400).await;
    assert_eq!(b["error"]["code"], "validation_error");
    assert!(b["error"]["message"].as_str().unwrap().contains("no-such-model-x9"), "{b}");
    assert_eq!(stack.list_keys(&s.access_token, "").await["data"], json!([]));
}

#[tokio::test]
async fn create_with_more_than_100_models_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let models = vec!["mock-model"; 101];
    let r = stack.create_key(&s, json!({"name": "x", "models": models})).await;
    expect_validation_error(r, "101 models").await;
}

#[tokio::test]
async fn create_with_models_not_a_list_of_strings_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for bad in [json!({"name": "x", "models": "mock-model"}), json!({"name": "x", "models": [1]})] {
        expect_validation_error(stack.create_key(&s, bad.clone()).await, &bad.to_string()).await;
    }
}

// ---- lifecycle: scopes, get, update, filters ----

async fn embeddings(stack: &Stack, key: &str) -> reqwest::Response {
    let body = json!({"model": "mock-embedding", "input": "hi"});
    stack.http.post(format!("{}/v1/embeddings", stack.proxy)).bearer_auth(key).json(&body).send().await.unwrap()
}

async fn models(stack: &Stack, key: &str) -> reqwest::Response {
    stack.http.get(format!("{}/v1/models", stack.proxy)).bearer_auth(key).send().await.unwrap()
}

#[tokio::test]
async fn scoped_keys_reach_only_their_endpoints() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (chat_only, _) = stack.key_with(&s, json!({"name": "chat", "permissions": ["proxy:chat"]})).await;
    assert_eq!(stack.chat(&chat_only, mock_chat("hi")).await.status(), 200);
    for r in [embeddings(&stack, &chat_only).await, models(&stack, &chat_only).await] {
        let b = r.json::<Value>().await.unwrap();
        assert_eq!(b["error"]["code"], "insufficient_permissions", "{b}");
    }
    let (read, _) =
        stack.key_with(&s, json!({"name": "read", "permissions": ["proxy:models", "proxy:embeddings"]})).await;
    assert_eq!(models(&stack, &read).await.status(), 200);
    assert_eq!(embeddings(&stack, &read).await.status(), 200);
    assert_eq!(stack.chat(&read, mock_chat("hi")).await.status(), 403);
    let (all, _) = stack.key_with(&s, json!({"name": "all"})).await;
    assert_eq!(models(&stack, &all).await.status(), 200);
    assert_eq!(embeddings(&stack, &all).await.status(), 200);
}

#[tokio::test]
async fn get_one_shows_the_key_without_its_secret() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (secret, id) = stack.key_with(&s, json!({"name": "one"})).await;
    let r = stack.admin_get(&format!("/api-keys/{id}"), &s.access_token).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(!text.contains(&secret[12..]), "the secret must never come back");
    let b: Value = serde_json::from_str(&text).unwrap();
    assert_eq!((b["id"].as_str(), b["status"].as_str()), (Some(id.as_str()), Some("active")));
    let r = stack.admin_get(&format!("/api-keys/{}", Uuid::new_v4()), &s.access_token).await;
    expect_api_error(r, 404).await;
}

#[tokio::test]
async fn narrowing_a_keys_models_reaches_the_proxy_at_once() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (key, id) = stack.key_with(&s, json!({"name": "narrow"})).await;
    assert_eq!(stack.chat(&key, mock_chat("hi")).await.status(), 200);
    let r = stack.admin_patch(&format!("/api-keys/{id}"), &s.access_token, &json!({"models": ["gpt-4o-mini"]})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["models"], json!(["gpt-4o-mini"]));
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let r = stack.chat(&key, mock_chat("hi")).await;
        if r.status() == 404 {
            break;
        }
        assert!(Instant::now() < deadline, "the proxy still serves a model the key no longer has");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Null widens it again.
    let r = stack.admin_patch(&format!("/api-keys/{id}"), &s.access_token, &json!({"models": null})).await;
    assert_eq!(r.json::<Value>().await.unwrap()["models"], Value::Null);
}

#[tokio::test]
async fn an_expiry_set_later_is_enforced_by_the_proxy() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (key, id) = stack.key_with(&s, json!({"name": "expiring"})).await;
    assert_eq!(stack.chat(&key, mock_chat("hi")).await.status(), 200);
    let soon = chrono::Utc::now() + chrono::Duration::seconds(2);
    let r = stack.admin_patch(&format!("/api-keys/{id}"), &s.access_token, &json!({"expires_at": soon})).await;
    assert_eq!(r.status(), 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = stack.chat(&key, mock_chat("hi")).await;
    assert_eq!(r.status(), 401);
    let b: Value = r.json().await.unwrap();
    assert!(b["error"]["message"].as_str().unwrap().contains("expired"), "{b}");
    let list = stack.list_keys(&s.access_token, "?status=expired").await;
    assert_eq!(list["data"][0]["id"], id);
}

#[tokio::test]
async fn update_refuses_bad_changes() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (_, id) = stack.key_with(&s, json!({"name": "u"})).await;
    let path = format!("/api-keys/{id}");
    let t = &s.access_token;
    expect_api_error(stack.admin_patch(&path, t, &json!({})).await, 400).await;
    let b =
        expect_api_error(stack.admin_patch(&path, t, &json!({"expires_at": "2000-01-01T00:00:00Z"})).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "expires_at");
    let b = expect_api_error(stack.admin_patch(&path, t, &json!({"models": ["no-such-model"]})).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "models");
    let b = expect_api_error(stack.admin_patch(&path, t, &json!({"name": " "})).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "name");
    expect_api_error(stack.admin_patch(&path, t, &json!({"secret": "x"})).await, 400).await;
    assert_eq!(stack.admin_delete(&path, t).await.status(), 204);
    let b = expect_api_error(stack.admin_patch(&path, t, &json!({"name": "late"})).await, 409).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "api key is revoked"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "conflict");
}

#[tokio::test]
async fn lists_filter_by_team_status_and_name() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "filters").await;
    let (_, in_team) = stack.key_with(&s, json!({"name": "Team Key", "team_id": team})).await;
    let (_, revoked) = stack.key_with(&s, json!({"name": "gone"})).await;
    let (_, active) = stack.key_with(&s, json!({"name": "plain"})).await;
    assert_eq!(stack.admin_delete(&format!("/api-keys/{revoked}"), &s.access_token).await.status(), 204);
    let ids = |v: Value| -> Vec<String> {
        v["data"].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ids(stack.list_keys(&s.access_token, &format!("?team_id={team}")).await), vec![in_team.clone()]);
    assert_eq!(ids(stack.list_keys(&s.access_token, "?status=revoked").await), vec![revoked]);
    assert_eq!(ids(stack.list_keys(&s.access_token, "?status=active").await), vec![active, in_team.clone()]);
    assert_eq!(ids(stack.list_keys(&s.access_token, "?name=team%20k").await), vec![in_team]);
    let r = stack.admin_get("/api-keys?status=sleeping", &s.access_token).await;
    let b = expect_api_error(r, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "status");
}

// ---- POST /api-keys/{id}/regenerate, permissions ----

/// Sends chats with `key` until one is answered with `status` (proxies drop cached keys
/// asynchronously, within milliseconds of the change): panics after 20 s.
async fn until_chat_status(stack: &Stack, key: &str, status: u16) -> reqwest::Response {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let r = stack.chat(key, mock_chat("still me?")).await;
        if r.status() == status {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "the key never got {status} (last {})", r.status());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn regenerate_gives_a_new_secret_under_the_same_id_and_the_old_one_stops() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (old, id) =
        stack.key_with(&s, json!({"name": "rotated", "budget": {"amount_usd": "5"}, "models": ["mock-model"]})).await;
    let before = stack.chat_request_id(&old, "before").await;
    let r = stack.admin_post(&format!("/api-keys/{id}/regenerate"), &s.access_token, &json!({})).await;
    let b = json_of(r, 200).await;
    let new = b["key"].as_str().unwrap();
    assert_ne!(new, old);
    assert_eq!(
        (b["id"].as_str(), &b["name"], &b["models"]),
        (Some(id.as_str()), &json!("rotated"), &json!(["mock-model"]))
    );
    assert_eq!(b["budget"]["amount_usd"], "5");
    assert!(new.starts_with(b["key_prefix"].as_str().unwrap()) && !old.starts_with(b["key_prefix"].as_str().unwrap()));
    assert_eq!(b["previous_key_expires_at"], Value::Null);
    let refused = expect_openai_error(until_chat_status(&stack, &old, 401).await, 401).await;
    assert_eq!(refused["error"]["code"], "invalid_api_key");
    let after = stack.chat_request_id(new, "after").await;
    // The history is the key's: both requests are logged under the same id.
    for request in [before, after] {
        assert_eq!(stack.log_entry(&s, request).await["key_id"], id.as_str());
    }
    let trail = stack.get_ok(&s, &format!("/audit-events?resource_id={id}&action=api_key.regenerate")).await;
    assert_eq!(trail["data"][0]["detail"]["grace_seconds"], 0);
}

#[tokio::test]
async fn regenerate_with_a_grace_keeps_the_old_secret_until_it_ends() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (old, id) = stack.key_with(&s, json!({})).await;
    let r =
        stack.admin_post(&format!("/api-keys/{id}/regenerate"), &s.access_token, &json!({"grace_seconds": 3})).await;
    let b = json_of(r, 200).await;
    assert!(b["previous_key_expires_at"].is_string(), "{b}");
    // Right after: both secrets work (the grace has three seconds to run).
    assert_eq!(stack.chat(&old, mock_chat("old")).await.status(), 200);
    assert_eq!(stack.chat(b["key"].as_str().unwrap(), mock_chat("new")).await.status(), 200);
    // Once it ends, the old secret is refused as an expired key.
    let refused = expect_openai_error(until_chat_status(&stack, &old, 401).await, 401).await;
    assert_eq!(refused["error"]["code"], "expired_api_key");
    assert_eq!(stack.chat(b["key"].as_str().unwrap(), mock_chat("new")).await.status(), 200);
    // Revoking the key ends every secret of it.
    let (other_old, other) = stack.key_with(&s, json!({})).await;
    let r = stack
        .admin_post(&format!("/api-keys/{other}/regenerate"), &s.access_token, &json!({"grace_seconds": 600}))
        .await;
    let fresh = json_of(r, 200).await["key"].as_str().unwrap().to_string();
    assert_eq!(stack.admin_delete(&format!("/api-keys/{other}"), &s.access_token).await.status(), 204);
    until_chat_status(&stack, &other_old, 401).await;
    until_chat_status(&stack, &fresh, 401).await;
}

#[tokio::test]
async fn regenerate_with_a_bad_grace_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (_, id) = stack.key_with(&s, json!({})).await;
    let path = format!("/api-keys/{id}/regenerate");
    let b =
        expect_api_error(stack.admin_post(&path, &s.access_token, &json!({"grace_seconds": 86401})).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "grace_seconds",
            "message": "must be between 0 and 86400"
          }
        ],
        "message": "grace_seconds: must be between 0 and 86400"
      }
    }
    "#);
    expect_field_error(
        stack.admin_post(&path, &s.access_token, &json!({"grace_seconds": -1})).await,
        "grace_seconds",
        "",
    )
    .await;
    expect_field_error(stack.admin_post(&path, &s.access_token, &json!({"grace": 5})).await, "grace", "").await;
}

#[tokio::test]
async fn regenerate_of_a_revoked_key_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (_, id) = stack.key_with(&s, json!({})).await;
    assert_eq!(stack.admin_delete(&format!("/api-keys/{id}"), &s.access_token).await.status(), 204);
    let r = stack.admin_post(&format!("/api-keys/{id}/regenerate"), &s.access_token, &json!({})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 409).await, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "api key is revoked"
      }
    }
    "#);
}

#[tokio::test]
async fn permissions_change_what_the_key_may_call() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let (key, id) = stack.key_with(&s, json!({})).await;
    let r = stack
        .admin_patch(&format!("/api-keys/{id}"), &s.access_token, &json!({"permissions": ["proxy:embeddings"]}))
        .await;
    assert_eq!(json_of(r, 200).await["permissions"], json!(["proxy:embeddings"]));
    let refused = expect_openai_error(until_chat_status(&stack, &key, 403).await, 403).await;
    assert_eq!(refused["error"]["code"], "insufficient_permissions");
    assert_eq!(embeddings(&stack, &key).await.status(), 200);
    let r =
        stack.admin_patch(&format!("/api-keys/{id}"), &s.access_token, &json!({"permissions": ["proxy:fly"]})).await;
    expect_field_error(r, "permissions", "").await;
}

#[tokio::test]
async fn members_cannot_change_permissions() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let team = stack.create_team(&owner, "perm team").await;
    let member = stack.join(&owner, "member", &[team]).await;
    let (_, id) = stack.key_with(&member, json!({"team_id": team})).await;
    let path = format!("/api-keys/{id}");
    let r = stack.admin_patch(&path, &member.access_token, &json!({"permissions": ["proxy:chat"]})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 403).await, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "changing a key's permissions needs the admin role or higher"
      }
    }
    "#);
    // Their other settings they may change, and the permissions as they are.
    let r =
        stack.admin_patch(&path, &member.access_token, &json!({"name": "renamed", "permissions": ["proxy:llm"]})).await;
    assert_eq!(json_of(r, 200).await["name"], "renamed");
}

// ---- restrictions: members tighten, only admins loosen ----

#[tokio::test]
async fn a_member_cannot_lift_an_admins_model_restriction() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let team = stack.create_team(&owner, "restricted").await;
    let member = stack.join(&owner, "member", &[team]).await;
    let r = stack
        .admin_post(
            "/api-keys",
            &owner.access_token,
            &json!({"name": "one model", "team_id": team, "models": ["gpt-4o-mini"]}),
        )
        .await;
    let key = json_of(r, 201).await;
    let id = key["id"].as_str().unwrap();
    let secret = key["key"].as_str().unwrap().to_string();

    let r = stack.admin_patch(&format!("/api-keys/{id}"), &member.access_token, &json!({"models": null})).await;
    let b = expect_api_error(r, 403).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "members may tighten a key's restrictions, not loosen them: loosening models needs the admin role or higher"
      }
    }
    "#);
    let r = stack
        .admin_patch(
            &format!("/api-keys/{id}"),
            &member.access_token,
            &json!({"models": ["gpt-4o-mini", "mock-model"]}),
        )
        .await;
    expect_api_error(r, 403).await;
    // Still restricted, at the proxy too.
    let got = json_of(stack.admin_get(&format!("/api-keys/{id}"), &owner.access_token).await, 200).await;
    assert_eq!(got["models"], json!(["gpt-4o-mini"]));
    let other = json!({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]});
    assert_ne!(stack.chat(&secret, other).await.status(), 200);
    // Tightening stays open to the member; an admin may loosen.
    let r =
        stack.admin_patch(&format!("/api-keys/{id}"), &member.access_token, &json!({"rate_limits": {"rpm": 10}})).await;
    assert_eq!(r.status(), 200);
    let r =
        stack.admin_patch(&format!("/api-keys/{id}"), &member.access_token, &json!({"rate_limits": {"rpm": 20}})).await;
    expect_api_error(r, 403).await;
    let r = stack.admin_patch(&format!("/api-keys/{id}"), &owner.access_token, &json!({"models": null})).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_member_cannot_lift_a_budget_or_an_expiry() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let team = stack.create_team(&owner, "budgeted").await;
    let member = stack.join(&owner, "member", &[team]).await;
    let expires = (chrono::Utc::now() + chrono::TimeDelta::days(2)).to_rfc3339();
    let body =
        json!({"name": "k", "team_id": team, "budget": {"amount_usd": "5", "period": "month"}, "expires_at": expires});
    let key = json_of(stack.admin_post("/api-keys", &owner.access_token, &body).await, 201).await;
    let id = key["id"].as_str().unwrap();
    for change in [
        json!({"budget": null}),
        json!({"budget": {"amount_usd": "50", "period": "month"}}),
        json!({"expires_at": null}),
        json!({"expires_at": (chrono::Utc::now() + chrono::TimeDelta::days(30)).to_rfc3339()}),
    ] {
        let r = stack.admin_patch(&format!("/api-keys/{id}"), &member.access_token, &change).await;
        let b = expect_api_error(r, 403).await;
        assert!(b["error"]["message"].as_str().unwrap().contains("loosening"), "{change}: {b}");
    }
    let r = stack
        .admin_patch(
            &format!("/api-keys/{id}"),
            &member.access_token,
            &json!({"budget": {"amount_usd": "1", "period": "month"}}),
        )
        .await;
    assert_eq!(r.status(), 200);
}
