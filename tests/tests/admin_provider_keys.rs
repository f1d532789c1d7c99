//! `/api/v1/provider-keys`: an organization's own upstream credentials. Create (`POST`), list
//! (`GET`, keyset pages), get, rename (`PATCH /{id}`), rotate (`POST /{id}/rotate`) and revoke
//! (`DELETE /{id}`), never showing the secret or its ciphertext, with the secret sealed at rest;
//! each with the ways it is refused: no session, a missing role, another tenant's key, unknown
//! ids, invalid input, a second live key for a provider, a revoked key, a wrong method. Also
//! `gw-admin reencrypt` (master key rotation). All on the test binary's shared stack, each test
//! with its own organization(s), except where a configuration of their own is needed: no master
//! key (a private stack) and the master key rotation (a private database).

use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use gw_shared::crypto::{EncryptionKey, Keyring};
use gw_shared::db::provider_keys::SealedKey;
use gw_shared::db::schema::provider_keys as pk;
use gw_tests::{db, expect_api_error, header, unique_tag, Session, Stack, StackOptions, ENCRYPTION_KEY};
use serde_json::{json, Value};
use uuid::Uuid;

const FIELDS: [&str; 13] = [
    "created_at",
    "created_by",
    "id",
    "master_key_version",
    "name",
    "previous_valid_until",
    "provider",
    "revoked_at",
    "rotated_at",
    "secret_hint",
    "status",
    "updated_at",
    "version",
];

fn url(stack: &Stack, path: &str) -> String {
    format!("{}/api/v1/provider-keys{path}", stack.admin)
}

/// A `member` session in `s`'s organization (registration makes owners only).
/// A secret of its own for each call: `sk-<32 hex>-WXYZ`. Its hint is `sk-…WXYZ`; the hex middle
/// is what must never appear anywhere but in the request that sent it.
fn new_secret() -> String {
    format!("sk-{}-WXYZ", unique_tag())
}

async fn create(stack: &Stack, token: &str, body: Value) -> reqwest::Response {
    stack.admin_post("/provider-keys", token, &body).await
}

/// Creates a key for `provider`; returns the response body.
async fn add_key(stack: &Stack, s: &Session, provider: &str, secret: &str) -> Value {
    let r = create(stack, &s.access_token, json!({"provider": provider, "name": "ours", "secret": secret})).await;
    assert_eq!(r.status(), 201, "creating a {provider} key");
    r.json().await.unwrap()
}

async fn patch(stack: &Stack, path: &str, token: &str, body: &Value) -> reqwest::Response {
    stack.http.patch(url(stack, path)).bearer_auth(token).json(body).send().await.unwrap()
}

async fn rotate(stack: &Stack, id: &str, token: &str, secret: &str) -> reqwest::Response {
    stack.admin_post(&format!("/provider-keys/{id}/rotate"), token, &json!({"secret": secret})).await
}

async fn get_key(stack: &Stack, id: &str, token: &str) -> Value {
    let r = stack.admin_get(&format!("/provider-keys/{id}"), token).await;
    assert_eq!(r.status(), 200, "GET provider key {id}");
    r.json().await.unwrap()
}

async fn expect_validation_error(resp: reqwest::Response, what: &str) -> Value {
    assert_eq!(resp.status(), 400, "{what}");
    let b = expect_api_error(resp, 400).await;
    assert_eq!(b["error"]["code"], "validation_error", "{what}");
    b
}

async fn expect_not_found(resp: reqwest::Response, what: &str) -> Value {
    assert_eq!(resp.status(), 404, "{what}");
    let b = expect_api_error(resp, 404).await;
    assert_eq!(b["error"]["code"], "not_found", "{what}");
    b
}

async fn expect_forbidden(resp: reqwest::Response) {
    let b = expect_api_error(resp, 403).await;
    assert_eq!(b["error"]["code"], "forbidden");
}

async fn expect_conflict(resp: reqwest::Response, what: &str) -> Value {
    assert_eq!(resp.status(), 409, "{what}");
    let b = expect_api_error(resp, 409).await;
    assert_eq!(b["error"]["code"], "conflict", "{what}");
    b
}

fn id_of(key: &Value) -> String {
    gw_tests::id_of(key).to_string()
}

/// The sealed row of a key, straight from Postgres: (org, master key version, ciphertext).
async fn stored(id: &str) -> (Uuid, i16, Vec<u8>) {
    let mut conn = db::connect().await;
    pk::table
        .filter(pk::id.eq(Uuid::parse_str(id).unwrap()))
        .select((pk::org_id, pk::key_version, pk::secret_ciphertext))
        .first(&mut conn)
        .await
        .unwrap()
}

/// Opens a stored key with the test stacks' master key (version 1).
async fn opened(id: &str) -> String {
    let (org, version, ciphertext) = stored(id).await;
    let ring = Keyring::new(1, EncryptionKey::from_base64(ENCRYPTION_KEY).unwrap(), Default::default());
    sealed(Uuid::parse_str(id).unwrap(), version, ciphertext).open(&ring, org).unwrap()
}

/// A stored key's sealed secret, as the proxy reads it (no rotation overlap).
fn sealed(id: Uuid, key_version: i16, secret_ciphertext: Vec<u8>) -> SealedKey {
    SealedKey {
        id,
        provider: String::new(),
        key_version,
        secret_ciphertext,
        previous_ciphertext: None,
        previous_key_version: None,
        previous_expires_at: None,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}")).parse().unwrap()
}

// ---- POST /provider-keys ----

#[tokio::test]
async fn create_returns_the_key_without_its_secret_and_seals_it() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let secret = new_secret();
    let r =
        create(&stack, &s.access_token, json!({"provider": "upstream", "name": " prod key ", "secret": secret})).await;
    assert_eq!(r.status(), 201);
    let text = r.text().await.unwrap();
    assert!(!text.contains(&secret) && !text.contains(&secret[3..35]), "the response leaked the secret: {text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    let mut fields: Vec<&str> = body.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(fields, FIELDS);
    assert_eq!(body["provider"], "upstream");
    assert_eq!(body["name"], "prod key");
    assert_eq!(body["secret_hint"], "sk-…WXYZ");
    assert_eq!((&body["version"], &body["master_key_version"]), (&json!(1), &json!(1)));
    assert_eq!(body["status"], "active");
    assert_eq!(body["created_by"], s.user_id.to_string());
    assert!(body["rotated_at"].is_null() && body["revoked_at"].is_null(), "{body}");
    assert!(time(&body["updated_at"]) >= time(&body["created_at"]));
    Uuid::parse_str(body["id"].as_str().unwrap()).unwrap();

    // At rest: only the AES-GCM ciphertext, which opens to the secret with the master key.
    let id = id_of(&body);
    let (org, version, ciphertext) = stored(&id).await;
    assert_eq!((org, version), (s.org_id, 1));
    assert!(!contains(&ciphertext, secret.as_bytes()), "the ciphertext holds the secret");
    assert!(!contains(&ciphertext, &secret.as_bytes()[3..35]), "the ciphertext holds the secret's middle");
    assert_eq!(opened(&id).await, secret);
}

#[tokio::test]
async fn create_trims_a_pasted_newline_from_the_secret() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let secret = new_secret();
    let key = add_key(&stack, &s, "upstream", &format!("{secret}\n")).await;
    assert_eq!(opened(&id_of(&key)).await, secret);
}

#[tokio::test]
async fn create_as_member_is_403() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = create(
        &stack,
        &stack.member_token(&s).await,
        json!({"provider": "upstream", "name": "x", "secret": new_secret()}),
    )
    .await;
    expect_forbidden(r).await;
    let list: Value = stack.admin_get("/provider-keys", &s.access_token).await.json().await.unwrap();
    assert_eq!(list["data"], json!([]));
}

#[tokio::test]
async fn create_for_an_unknown_provider_is_400_naming_the_known_ones() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = create(&stack, &s.access_token, json!({"provider": "nope-x7", "name": "x", "secret": new_secret()})).await;
    let b = expect_validation_error(r, "unknown provider").await;
    let msg = b["error"]["message"].as_str().unwrap();
    assert!(msg.contains("nope-x7") && msg.contains("upstream") && msg.contains("anthropic"), "{msg}");
    assert!(!msg.contains("\"mock\"") && !msg.contains(" mock,"), "the in-process provider takes no key: {msg}");
}

#[tokio::test]
async fn create_for_the_in_process_provider_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = create(&stack, &s.access_token, json!({"provider": "mock", "name": "x", "secret": new_secret()})).await;
    let b = expect_validation_error(r, "mock provider").await;
    assert!(b["error"]["message"].as_str().unwrap().contains("upstream"), "{b}");
}

#[tokio::test]
async fn create_with_an_empty_secret_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for secret in ["", "   ", "\n\t"] {
        let r = create(&stack, &s.access_token, json!({"provider": "upstream", "name": "x", "secret": secret})).await;
        expect_validation_error(r, &format!("secret {secret:?}")).await;
    }
}

#[tokio::test]
async fn create_with_an_invalid_secret_is_400_without_echoing_it() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let tag = unique_tag();
    for secret in [format!("sk-{tag}\u{1}x"), format!("sk-{tag}{}", "x".repeat(4096))] {
        let r = create(&stack, &s.access_token, json!({"provider": "upstream", "name": "x", "secret": secret})).await;
        let b = expect_validation_error(r, "invalid secret").await;
        assert!(!b.to_string().contains(&tag), "the error echoed the secret: {b}");
    }
    let list: Value = stack.admin_get("/provider-keys", &s.access_token).await.json().await.unwrap();
    assert_eq!(list["data"], json!([]));
}

#[tokio::test]
async fn create_with_an_invalid_name_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for name in [String::new(), " ".into(), "x".repeat(201), "a\u{0}b".into()] {
        let r = create(&stack, &s.access_token, json!({"provider": "upstream", "name": name, "secret": new_secret()}))
            .await;
        expect_validation_error(r, &format!("name {name:?}")).await;
    }
}

#[tokio::test]
async fn create_with_a_missing_field_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for body in [
        json!({"provider": "upstream", "name": "x"}),
        json!({"provider": "upstream", "secret": new_secret()}),
        json!({"name": "x", "secret": new_secret()}),
    ] {
        expect_validation_error(create(&stack, &s.access_token, body.clone()).await, &body.to_string()).await;
    }
}

#[tokio::test]
async fn create_with_an_unknown_field_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"provider": "upstream", "name": "x", "secret": new_secret(), "colour": "blue"});
    expect_validation_error(create(&stack, &s.access_token, body).await, "colour").await;
}

#[tokio::test]
async fn create_a_second_live_key_for_a_provider_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let first = add_key(&stack, &s, "upstream", &new_secret()).await;
    let second = new_secret();
    let r = create(&stack, &s.access_token, json!({"provider": "upstream", "name": "again", "secret": second})).await;
    let b = expect_conflict(r, "second live upstream key").await;
    assert!(b["error"]["message"].as_str().unwrap().contains("upstream"), "{b}");
    assert!(!b.to_string().contains(&second));
    // Another provider is fine, and so is the same one once the first key is revoked.
    add_key(&stack, &s, "dead", &new_secret()).await;
    let r = stack.admin_delete(&format!("/provider-keys/{}", id_of(&first)), &s.access_token).await;
    assert_eq!(r.status(), 204);
    add_key(&stack, &s, "upstream", &new_secret()).await;
}

#[tokio::test]
async fn another_orgs_live_key_for_the_provider_does_not_conflict() {
    let stack = Stack::shared().await;
    let a = stack.register().await;
    let b = stack.register().await;
    add_key(&stack, &a, "anthropic", &new_secret()).await;
    add_key(&stack, &b, "anthropic", &new_secret()).await;
}

#[tokio::test]
async fn create_without_a_master_key_is_503() {
    let stack = Stack::start_with(StackOptions {
        env: vec![("GW_ENCRYPTION_KEY".into(), String::new())],
        ..Default::default()
    })
    .await;
    let s = stack.register().await;
    let r = create(&stack, &s.access_token, json!({"provider": "upstream", "name": "x", "secret": new_secret()})).await;
    let b = expect_api_error(r, 503).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "unavailable",
        "fields": [],
        "message": "provider keys need GW_ENCRYPTION_KEY"
      }
    }
    "#);
    assert!(b["error"]["message"].as_str().unwrap().contains("GW_ENCRYPTION_KEY"), "{b}");
    // Listing needs no master key.
    let list: Value = stack.admin_get("/provider-keys", &s.access_token).await.json().await.unwrap();
    assert_eq!(list["data"], json!([]));
}

// ---- GET /provider-keys, GET /provider-keys/{id} ----

#[tokio::test]
async fn list_paginates_newest_first_without_secrets() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let mut secrets = Vec::new();
    let mut ids = Vec::new();
    for provider in ["upstream", "dead", "anthropic"] {
        let secret = new_secret();
        ids.push(id_of(&add_key(&stack, &s, provider, &secret).await));
        secrets.push(secret);
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut providers = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let query = match &cursor {
            Some(c) => format!("?limit=2&cursor={c}"),
            None => "?limit=2".to_string(),
        };
        let r = stack.admin_get(&format!("/provider-keys{query}"), &s.access_token).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        for secret in &secrets {
            assert!(!text.contains(secret.as_str()) && !text.contains(&secret[3..35]), "a listing leaked a secret");
        }
        let page: Value = serde_json::from_str(&text).unwrap();
        pages += 1;
        for k in page["data"].as_array().unwrap() {
            let mut fields: Vec<&str> = k.as_object().unwrap().keys().map(String::as_str).collect();
            fields.sort();
            assert_eq!(fields, FIELDS);
            assert_eq!(k["secret_hint"], "sk-…WXYZ");
            seen.push(id_of(k));
            providers.push(k["provider"].as_str().unwrap().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 2);
    assert_eq!(seen, ids);
    assert_eq!(providers, ["anthropic", "dead", "upstream"]);
}

#[tokio::test]
async fn list_is_open_to_members() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let key = add_key(&stack, &s, "upstream", &new_secret()).await;
    let r = stack.admin_get("/provider-keys", &stack.member_token(&s).await).await;
    assert_eq!(r.status(), 200);
    let list: Value = r.json().await.unwrap();
    assert_eq!(list["data"][0]["id"], key["id"]);
    assert_eq!(get_key(&stack, &id_of(&key), &stack.member_token(&s).await).await, key);
}

#[tokio::test]
async fn list_shows_nothing_of_other_tenants() {
    let stack = Stack::shared().await;
    let a = stack.register().await;
    add_key(&stack, &a, "upstream", &new_secret()).await;
    let b = stack.register().await;
    for query in ["", "?cursor=ffffffff-ffff-7fff-bfff-ffffffffffff"] {
        let list: Value =
            stack.admin_get(&format!("/provider-keys{query}"), &b.access_token).await.json().await.unwrap();
        assert_eq!(list, json!({"data": [], "next_cursor": null}));
    }
}

#[tokio::test]
async fn list_with_an_invalid_query_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    for bad in ["limit=0", "limit=201", "cursor=nope", "colour=blue"] {
        let r = stack.admin_get(&format!("/provider-keys?{bad}"), &s.access_token).await;
        expect_validation_error(r, bad).await;
    }
}

#[tokio::test]
async fn get_returns_the_key() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let secret = new_secret();
    let key = add_key(&stack, &s, "anthropic", &secret).await;
    let r = stack.admin_get(&format!("/provider-keys/{}", id_of(&key)), &s.access_token).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(!text.contains(&secret) && !text.contains(&secret[3..35]), "GET leaked the secret");
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), key);
}

#[tokio::test]
async fn get_of_an_unknown_key_is_404() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_get(&format!("/provider-keys/{}", Uuid::now_v7()), &s.access_token).await;
    expect_not_found(r, "unknown id").await;
}

#[tokio::test]
async fn get_with_an_invalid_id_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    expect_validation_error(stack.admin_get("/provider-keys/not-a-uuid", &s.access_token).await, "not-a-uuid").await;
}

// ---- PATCH /provider-keys/{id} ----

#[tokio::test]
async fn rename_changes_only_the_name() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let secret = new_secret();
    let key = add_key(&stack, &s, "upstream", &secret).await;
    let id = id_of(&key);
    let r = patch(&stack, &format!("/{id}"), &s.access_token, &json!({"name": "  renamed  "})).await;
    assert_eq!(r.status(), 200);
    let renamed: Value = r.json().await.unwrap();
    assert_eq!(renamed["name"], "renamed");
    assert!(time(&renamed["updated_at"]) >= time(&key["updated_at"]));
    for f in [
        "id",
        "provider",
        "secret_hint",
        "version",
        "master_key_version",
        "status",
        "created_at",
        "rotated_at",
        "revoked_at",
    ] {
        assert_eq!(renamed[f], key[f], "{f}");
    }
    assert_eq!(get_key(&stack, &id, &s.access_token).await, renamed);
    assert_eq!(opened(&id).await, secret);
}

#[tokio::test]
async fn rename_as_member_is_403() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let key = add_key(&stack, &s, "upstream", &new_secret()).await;
    let id = id_of(&key);
    expect_forbidden(patch(&stack, &format!("/{id}"), &stack.member_token(&s).await, &json!({"name": "mine"})).await)
        .await;
    assert_eq!(get_key(&stack, &id, &s.access_token).await["name"], "ours");
}

#[tokio::test]
async fn rename_of_another_tenants_key_is_404() {
    let stack = Stack::shared().await;
    let a = stack.register().await;
    let key = add_key(&stack, &a, "upstream", &new_secret()).await;
    let id = id_of(&key);
    let b = stack.register().await;
    let foreign =
        expect_not_found(patch(&stack, &format!("/{id}"), &b.access_token, &json!({"name": "x"})).await, "").await;
    let path = format!("/{}", Uuid::now_v7());
    let missing = expect_not_found(patch(&stack, &path, &b.access_token, &json!({"name": "x"})).await, "").await;
    assert_eq!(foreign, missing, "another tenant's key must look exactly like a missing one");
    assert_eq!(get_key(&stack, &id, &a.access_token).await, key);
}

#[tokio::test]
async fn rename_of_a_revoked_key_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let id = id_of(&add_key(&stack, &s, "upstream", &new_secret()).await);
    assert_eq!(stack.admin_delete(&format!("/provider-keys/{id}"), &s.access_token).await.status(), 204);
    let r = patch(&stack, &format!("/{id}"), &s.access_token, &json!({"name": "late"})).await;
    let b = expect_conflict(r, "rename of a revoked key").await;
    assert!(b["error"]["message"].as_str().unwrap().contains("revoked"), "{b}");
    assert_eq!(get_key(&stack, &id, &s.access_token).await["name"], "ours");
}

#[tokio::test]
async fn rename_with_an_invalid_body_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let id = id_of(&add_key(&stack, &s, "upstream", &new_secret()).await);
    for body in [json!({}), json!({"name": ""}), json!({"name": "x".repeat(201)}), json!({"name": 7})] {
        let r = patch(&stack, &format!("/{id}"), &s.access_token, &body).await;
        expect_validation_error(r, &body.to_string()).await;
    }
}

#[tokio::test]
async fn rename_with_an_unknown_field_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let id = id_of(&add_key(&stack, &s, "upstream", &new_secret()).await);
    let body = json!({"name": "x", "secret": new_secret()});
    expect_validation_error(patch(&stack, &format!("/{id}"), &s.access_token, &body).await, "secret in PATCH").await;
}

// ---- POST /provider-keys/{id}/rotate ----

#[tokio::test]
async fn rotate_replaces_the_secret_under_the_same_id() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let old = format!("{}-ABCD", new_secret());
    let key = add_key(&stack, &s, "anthropic", &old).await;
    assert_eq!(key["secret_hint"], "sk-…ABCD");
    let id = id_of(&key);
    let new = new_secret();
    let r = rotate(&stack, &id, &s.access_token, &new).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(!text.contains(&new) && !text.contains(&new[3..35]), "rotate leaked the new secret");
    let rotated: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(rotated["id"], key["id"]);
    assert_eq!(rotated["secret_hint"], "sk-…WXYZ");
    // The key's own version counts the rotation; the master key that sealed it is the same.
    assert_eq!((&rotated["version"], &rotated["master_key_version"]), (&json!(2), &json!(1)));
    assert_eq!(rotated["status"], "active");
    assert_eq!(rotated["name"], key["name"]);
    assert_eq!(rotated["created_at"], key["created_at"]);
    let rotated_at = time(&rotated["rotated_at"]);
    assert!(rotated_at >= time(&key["created_at"]));
    assert_eq!(time(&rotated["updated_at"]), rotated_at);
    assert_eq!(get_key(&stack, &id, &s.access_token).await, rotated);

    let (_, _, ciphertext) = stored(&id).await;
    assert!(!contains(&ciphertext, new.as_bytes()) && !contains(&ciphertext, old.as_bytes()));
    assert_eq!(opened(&id).await, new);

    // The same secret again is allowed: a fresh seal, a later rotated_at.
    let r = rotate(&stack, &id, &s.access_token, &new).await;
    assert_eq!(r.status(), 200);
    let again: Value = r.json().await.unwrap();
    assert!(time(&again["rotated_at"]) >= rotated_at);
    assert_ne!(stored(&id).await.2, ciphertext, "a new nonce each seal");
    assert_eq!(opened(&id).await, new);
}

#[tokio::test]
async fn rotate_as_member_is_403() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let secret = new_secret();
    let id = id_of(&add_key(&stack, &s, "upstream", &secret).await);
    expect_forbidden(rotate(&stack, &id, &stack.member_token(&s).await, &new_secret()).await).await;
    assert_eq!(opened(&id).await, secret);
}

#[tokio::test]
async fn rotate_of_another_tenants_key_is_404() {
    let stack = Stack::shared().await;
    let a = stack.register().await;
    let secret = new_secret();
    let key = add_key(&stack, &a, "upstream", &secret).await;
    let id = id_of(&key);
    let b = stack.register().await;
    let foreign = expect_not_found(rotate(&stack, &id, &b.access_token, &new_secret()).await, "foreign").await;
    let missing = Uuid::now_v7().to_string();
    let missing = expect_not_found(rotate(&stack, &missing, &b.access_token, &new_secret()).await, "missing").await;
    assert_eq!(foreign, missing, "another tenant's key must look exactly like a missing one");
    assert_eq!(get_key(&stack, &id, &a.access_token).await, key);
    assert_eq!(opened(&id).await, secret);
}

#[tokio::test]
async fn rotate_of_a_revoked_key_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let id = id_of(&add_key(&stack, &s, "upstream", &new_secret()).await);
    assert_eq!(stack.admin_delete(&format!("/provider-keys/{id}"), &s.access_token).await.status(), 204);
    expect_conflict(rotate(&stack, &id, &s.access_token, &new_secret()).await, "rotate of a revoked key").await;
    assert!(get_key(&stack, &id, &s.access_token).await["rotated_at"].is_null());
}

#[tokio::test]
async fn rotate_with_an_empty_secret_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let secret = new_secret();
    let id = id_of(&add_key(&stack, &s, "upstream", &secret).await);
    for bad in ["", "  "] {
        expect_validation_error(rotate(&stack, &id, &s.access_token, bad).await, &format!("{bad:?}")).await;
    }
    assert_eq!(opened(&id).await, secret);
}

#[tokio::test]
async fn rotate_with_an_unknown_field_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let id = id_of(&add_key(&stack, &s, "upstream", &new_secret()).await);
    let body = json!({"secret": new_secret(), "name": "x"});
    let r = stack.admin_post(&format!("/provider-keys/{id}/rotate"), &s.access_token, &body).await;
    expect_validation_error(r, "name in rotate").await;
}

// ---- DELETE /provider-keys/{id} ----

#[tokio::test]
async fn revoke_is_204_and_idempotent() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let key = add_key(&stack, &s, "dead", &new_secret()).await;
    let id = id_of(&key);
    let r = stack.admin_delete(&format!("/provider-keys/{id}"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    assert!(r.bytes().await.unwrap().is_empty());
    let revoked = get_key(&stack, &id, &s.access_token).await;
    assert_eq!(revoked["status"], "revoked");
    let revoked_at = time(&revoked["revoked_at"]);
    assert!(revoked_at >= time(&key["created_at"]));
    // Again: still 204, and the first revocation's time stands.
    let r = stack.admin_delete(&format!("/provider-keys/{id}"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let again = get_key(&stack, &id, &s.access_token).await;
    assert_eq!(time(&again["revoked_at"]), revoked_at);
    let list: Value = stack.admin_get("/provider-keys", &s.access_token).await.json().await.unwrap();
    assert_eq!(list["data"][0]["status"], "revoked");
}

#[tokio::test]
async fn revoke_as_member_is_403() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let id = id_of(&add_key(&stack, &s, "upstream", &new_secret()).await);
    expect_forbidden(stack.admin_delete(&format!("/provider-keys/{id}"), &stack.member_token(&s).await).await).await;
    assert_eq!(get_key(&stack, &id, &s.access_token).await["status"], "active");
}

#[tokio::test]
async fn revoke_of_another_tenants_key_is_404() {
    let stack = Stack::shared().await;
    let a = stack.register().await;
    let key = add_key(&stack, &a, "upstream", &new_secret()).await;
    let id = id_of(&key);
    let b = stack.register().await;
    let foreign =
        expect_not_found(stack.admin_delete(&format!("/provider-keys/{id}"), &b.access_token).await, "").await;
    let path = format!("/provider-keys/{}", Uuid::now_v7());
    let missing = expect_not_found(stack.admin_delete(&path, &b.access_token).await, "").await;
    assert_eq!(foreign, missing, "another tenant's key must look exactly like a missing one");
    assert_eq!(get_key(&stack, &id, &a.access_token).await, key);
}

#[tokio::test]
async fn get_of_another_tenants_key_is_404() {
    let stack = Stack::shared().await;
    let a = stack.register().await;
    let id = id_of(&add_key(&stack, &a, "upstream", &new_secret()).await);
    let b = stack.register().await;
    let foreign = expect_not_found(stack.admin_get(&format!("/provider-keys/{id}"), &b.access_token).await, "").await;
    let path = format!("/provider-keys/{}", Uuid::now_v7());
    let missing = expect_not_found(stack.admin_get(&path, &b.access_token).await, "").await;
    assert_eq!(foreign, missing, "another tenant's key must look exactly like a missing one");
}

#[tokio::test]
async fn revoke_of_an_unknown_key_is_404() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_delete(&format!("/provider-keys/{}", Uuid::now_v7()), &s.access_token).await;
    expect_not_found(r, "unknown id").await;
}

// ---- methods ----

async fn expect_405(r: reqwest::Response, allow: &str) {
    assert_eq!(header(&r, "allow"), allow);
    let b = expect_api_error(r, 405).await;
    assert_eq!(b["error"]["code"], "method_not_allowed");
}

#[tokio::test]
async fn put_on_the_collection_is_405_with_allow() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.http.put(url(&stack, "")).bearer_auth(&s.access_token).json(&json!({})).send().await.unwrap();
    expect_405(r, "GET, POST").await;
}

#[tokio::test]
async fn post_on_a_key_is_405_with_allow() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let id = id_of(&add_key(&stack, &s, "upstream", &new_secret()).await);
    let r = stack.admin_post(&format!("/provider-keys/{id}"), &s.access_token, &json!({"secret": "x"})).await;
    expect_405(r, "GET, PATCH, DELETE").await;
}

#[tokio::test]
async fn get_on_rotate_is_405_with_allow() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let id = id_of(&add_key(&stack, &s, "upstream", &new_secret()).await);
    expect_405(stack.admin_get(&format!("/provider-keys/{id}/rotate"), &s.access_token).await, "POST").await;
}

// ---- gw-admin reencrypt ----

/// Master key rotation end to end on a database of its own (re-sealing the shared one would
/// pull every other test's keys out from under the shared proxy): keys sealed with version 1,
/// then `gw-admin reencrypt` with version 2 current and version 1 kept.
#[tokio::test]
async fn reencrypt_moves_every_key_to_the_new_master_key() {
    use gw_shared::db::provider_keys::{insert, NewKey};

    let pg = gw_tests::PrivatePostgres::start();
    let mut conn = {
        use diesel_async::AsyncConnection;
        diesel_async::AsyncPgConnection::establish(&pg.url()).await.unwrap()
    };
    let old_key = EncryptionKey::from_base64(ENCRYPTION_KEY).unwrap();
    let new_key = EncryptionKey::generate();
    let v1 = Keyring::new(1, old_key.clone(), Default::default());
    let mut keys = Vec::new();
    for i in 0..3 {
        let org = Uuid::now_v7();
        let name = format!("org {i}");
        gw_shared::db::orgs::insert(&mut conn, &gw_shared::db::orgs::NewOrganization { id: org, name: &name })
            .await
            .unwrap();
        for provider in ["upstream", "anthropic"] {
            let (id, secret) = (Uuid::now_v7(), new_secret());
            let new = NewKey { id, org_id: org, provider, name: "k", secret: &secret, created_by: None };
            insert(&mut conn, &v1, &new).await.unwrap();
            keys.push((org, id, secret));
        }
    }
    let run = |env: Vec<(&'static str, String)>, redis: String| {
        let mut cmd = std::process::Command::new(gw_tests::bin("gw-admin"));
        cmd.arg("reencrypt")
            .env("GW_CONFIG", gw_tests::workspace_root().join("conf/gw.toml"))
            .env("DATABASE_URL", pg.url())
            .env("REDIS_URL", redis)
            .env("RUST_LOG", "warn")
            .env_remove("GW_ENCRYPTION_KEY_V1")
            .env_remove("GW_ENCRYPTION_KEY_VERSION");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };

    // Without the old key nothing can be opened: it fails and changes nothing. (Its Redis is
    // dead: the "drop every cache" it sends on failure would reach every proxy on the shared one.)
    let no_old = vec![("GW_ENCRYPTION_KEY", new_key.to_base64()), ("GW_ENCRYPTION_KEY_VERSION", "2".into())];
    let out = run(no_old, "redis://127.0.0.1:1".into());
    assert!(!out.status.success(), "reencrypt without the old key succeeded");
    for (_, id, _) in &keys {
        assert_eq!(sealed_row(&mut conn, *id).await.0, 1);
    }

    let env = vec![
        ("GW_ENCRYPTION_KEY", new_key.to_base64()),
        ("GW_ENCRYPTION_KEY_VERSION", "2".to_string()),
        ("GW_ENCRYPTION_KEY_V1", old_key.to_base64()),
    ];
    let out = run(env.clone(), gw_tests::redis_url());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "reencrypt failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("re-sealed 6 provider key(s)"), "{stdout}");
    let only_new = Keyring::new(2, new_key.clone(), Default::default());
    for (org, id, secret) in &keys {
        let (version, ciphertext) = sealed_row(&mut conn, *id).await;
        assert_eq!(version, 2);
        assert!(!contains(&ciphertext, secret.as_bytes()));
        assert_eq!(&sealed(*id, version, ciphertext).open(&only_new, *org).unwrap(), secret);
    }

    // Again: nothing left to do.
    let out = run(env, gw_tests::redis_url());
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("re-sealed 0 provider key(s)"));
}

async fn sealed_row(conn: &mut diesel_async::AsyncPgConnection, id: Uuid) -> (i16, Vec<u8>) {
    pk::table.filter(pk::id.eq(id)).select((pk::key_version, pk::secret_ciphertext)).first(conn).await.unwrap()
}

#[test]
fn reencrypt_without_a_master_key_fails() {
    let out = std::process::Command::new(gw_tests::bin("gw-admin"))
        .arg("reencrypt")
        .env("GW_CONFIG", gw_tests::workspace_root().join("conf/gw.toml"))
        .env("GW_ENCRYPTION_KEY", "")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("GW_ENCRYPTION_KEY"));
}

// ---- POST /provider-keys/{id}/test ----

#[tokio::test]
async fn testing_a_key_reports_what_the_provider_answered_in_its_dialect() {
    // Providers of every dialect that answer 401 unless they get one credential (a knob in the
    // base URL; Bedrock's credential is the access key id the request is signed with).
    let extra = "[[providers]]\nname = \"guarded\"\nkind = \"openai\"\n\
                 base_url = \"{mock}/k/require_credential=sk-good-openai-1234/v1\"\n\
                 [[providers]]\nname = \"guarded-claude\"\nkind = \"anthropic\"\n\
                 base_url = \"{mock}/k/require_credential=sk-good-claude-1234/v1\"\n\
                 [[providers]]\nname = \"guarded-gemini\"\nkind = \"gemini\"\n\
                 base_url = \"{mock}/k/require_credential=good-gemini-1234/v1beta\"\n\
                 [[providers]]\nname = \"guarded-azure\"\nkind = \"azure\"\napi_version = \"2024-10-21\"\n\
                 base_url = \"{mock}/k/require_credential=good-azure-1234\"\n\
                 [[providers]]\nname = \"guarded-bedrock\"\nkind = \"bedrock\"\nregion = \"us-east-1\"\n\
                 base_url = \"{mock}/k/require_credential=AKIDGOODBEDROCK1\"\n\
                 [[models]]\nname = \"guarded-model\"\ndeployments = [{ provider = \"guarded\", model = \"gpt-4o-mini\" }]\n\
                 [[models]]\nname = \"guarded-claude\"\n\
                 deployments = [{ provider = \"guarded-claude\", model = \"claude-sonnet-4-5\" }]\n\
                 [[models]]\nname = \"guarded-gemini\"\n\
                 deployments = [{ provider = \"guarded-gemini\", model = \"gemini-2.5-flash\" }]\n\
                 [[models]]\nname = \"guarded-azure\"\ndeployments = [{ provider = \"guarded-azure\", model = \"my-gpt4o\" }]\n\
                 [[models]]\nname = \"guarded-bedrock\"\n\
                 deployments = [{ provider = \"guarded-bedrock\", model = \"anthropic.claude-3-haiku-20240307-v1:0\" }]\n";
    let stack = Stack::start_with(StackOptions { extra_config: extra.into(), ..Default::default() }).await;
    let s = stack.register().await;
    for (provider, good, bad) in [
        ("guarded", "sk-good-openai-1234", "sk-bad-openai-98765"),
        ("guarded-claude", "sk-good-claude-1234", "sk-bad-claude-98765"),
        ("guarded-gemini", "good-gemini-1234", "bad-gemini-98765"),
        ("guarded-azure", "good-azure-1234", "bad-azure-98765"),
        ("guarded-bedrock", "AKIDGOODBEDROCK1:bedrock-secret-1", "AKIDBADBEDROCK98:bedrock-secret-2"),
    ] {
        let key = add_key(&stack, &s, provider, good).await;
        let id = id_of(&key);
        let path = format!("/provider-keys/{id}/test");
        let r = stack.admin_post(&path, &s.access_token, &json!({})).await;
        assert_eq!(r.status(), 200);
        let ok: Value = r.json().await.unwrap();
        assert_eq!((&ok["ok"], &ok["status"], &ok["provider"]), (&json!(true), &json!(200), &json!(provider)), "{ok}");
        let r =
            stack.admin_post(&format!("/provider-keys/{id}/rotate"), &s.access_token, &json!({"secret": bad})).await;
        assert_eq!(r.status(), 200);
        let refused: Value = stack.admin_post(&path, &s.access_token, &json!({})).await.json().await.unwrap();
        assert_eq!((&refused["ok"], &refused["status"]), (&json!(false), &json!(401)), "{refused}");
        let message = refused["message"].as_str().unwrap();
        assert!(!message.is_empty() && !message.contains(bad), "{refused}");
        let trail = stack.get_ok(&s, &format!("/audit-events?resource_id={id}&action=provider_key.test")).await;
        assert_eq!(trail["data"][0]["detail"]["ok"], false);
    }
}
