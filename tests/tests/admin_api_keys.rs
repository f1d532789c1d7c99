//! API key lifecycle: create (shown once), list (never the secret), revoke (effective on the
//! proxy within a second), tenant isolation.

use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use gw_shared::db::schema::api_keys;
use gw_tests::{db, header, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

fn chat_body() -> Value {
    json!({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn create_returns_the_secret_once_and_stores_only_its_hash() {
    let stack = Stack::start().await;
    let s = stack.register().await;
    let resp = stack.create_key(&s, json!({"name": "ci key", "permissions": ["proxy:llm"]})).await;
    assert_eq!(resp.status(), 201);
    let body: Value = resp.json().await.unwrap();
    let mut fields: Vec<&str> = body.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(
        fields,
        ["created_at", "expires_at", "id", "key", "key_prefix", "name", "permissions", "team_id", "warning"]
    );
    let key = body["key"].as_str().unwrap();
    assert!(key.starts_with("sk_live_") && key.len() >= 8 + 22, "{key}");
    assert!(key.starts_with(body["key_prefix"].as_str().unwrap()));
    assert_eq!(body["permissions"], json!(["proxy:llm"]));
    assert!(body["warning"].as_str().unwrap().contains("once"));

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
async fn create_validates_input() {
    let stack = Stack::start().await;
    let s = stack.register().await;
    let other = stack.register().await;
    let foreign_team = Uuid::now_v7();
    let mut conn = db::connect().await;
    gw_shared::db::teams::insert(&mut conn, other.org_id, foreign_team, "theirs").await.unwrap();
    for bad in [
        json!({"name": ""}),
        json!({"name": "x", "permissions": []}),
        json!({"name": "x", "permissions": ["admin:everything"]}),
        json!({"name": "x", "team_id": "not-a-uuid"}),
        json!({"name": "x", "team_id": Uuid::now_v7()}),
        json!({"name": "x", "team_id": foreign_team}),
        json!({"name": "x", "expires_at": "2001-01-01T00:00:00Z"}),
        json!({"name": "x", "colour": "blue"}),
    ] {
        let r = stack.create_key(&s, bad.clone()).await;
        assert_eq!(r.status(), 400, "{bad}");
    }
}

#[tokio::test]
async fn list_paginates_newest_first() {
    let stack = Stack::start().await;
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
    for bad in ["limit=0", "limit=1000", "cursor=nope"] {
        let r = stack.admin_get(&format!("/api-keys?{bad}"), &s.access_token).await;
        assert_eq!(r.status(), 400, "{bad}");
    }
}

#[tokio::test]
async fn revoked_key_stops_working_within_a_second() {
    let stack = Stack::start().await;
    let (s, key, id) = stack.org_with_key().await;
    // Warm the proxy's key cache: from here only the invalidation message can end the key fast.
    assert_eq!(stack.chat(&key, chat_body()).await.status(), 200);
    let r = stack.admin_delete(&format!("/api-keys/{id}"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let revoked_at = Instant::now();
    loop {
        let r = stack.chat(&key, chat_body()).await;
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
async fn other_tenants_cannot_see_or_revoke_keys() {
    let stack = Stack::start().await;
    let (_, key_a, id_a) = stack.org_with_key().await;
    let b = stack.register().await;
    let r = stack.admin_delete(&format!("/api-keys/{id_a}"), &b.access_token).await;
    assert_eq!(r.status(), 404);
    let list = stack.list_keys(&b.access_token, "").await;
    assert_eq!(list["data"], json!([]));
    let list = stack.list_keys(&b.access_token, "?cursor=ffffffff-ffff-7fff-bfff-ffffffffffff").await;
    assert_eq!(list["data"], json!([]));
    // A's key still works.
    assert_eq!(stack.chat(&key_a, chat_body()).await.status(), 200);
}

#[tokio::test]
async fn team_attribution_from_key_or_header_stays_in_the_org() {
    let stack = Stack::start().await;
    let (s, key, _) = stack.org_with_key().await;
    let other = stack.register().await;
    let (mine, theirs) = (Uuid::now_v7(), Uuid::now_v7());
    let mut conn = db::connect().await;
    gw_shared::db::teams::insert(&mut conn, s.org_id, mine, "mine").await.unwrap();
    gw_shared::db::teams::insert(&mut conn, other.org_id, theirs, "theirs").await.unwrap();

    let send = |team: Option<String>| {
        let mut req =
            stack.http.post(format!("{}/v1/chat/completions", stack.proxy)).bearer_auth(&key).json(&chat_body());
        if let Some(t) = team {
            req = req.header("x-gw-team", t);
        }
        req.send()
    };
    let r = send(Some(mine.to_string())).await.unwrap();
    assert_eq!(r.status(), 200);
    let rid = Uuid::parse_str(header(&r, "x-gw-request-id")).unwrap();
    assert_eq!(db::audit_row(s.org_id, rid).await.team_id, Some(mine));

    assert_eq!(send(Some(theirs.to_string())).await.unwrap().status(), 400);
    assert_eq!(send(Some("not-a-uuid".into())).await.unwrap().status(), 400);

    // A key bound to a team attributes to it without the header, and the header cannot override.
    let body: Value = stack.create_key(&s, json!({"name": "team key", "team_id": mine})).await.json().await.unwrap();
    assert_eq!(body["team_id"], mine.to_string());
    let team_key = body["key"].as_str().unwrap().to_string();
    let r = stack.chat(&team_key, chat_body()).await;
    let rid = Uuid::parse_str(header(&r, "x-gw-request-id")).unwrap();
    assert_eq!(db::audit_row(s.org_id, rid).await.team_id, Some(mine));
    let r = stack
        .http
        .post(format!("{}/v1/chat/completions", stack.proxy))
        .bearer_auth(&team_key)
        .header("x-gw-team", Uuid::now_v7().to_string())
        .json(&chat_body())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}
