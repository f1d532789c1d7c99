//! `/api/v1/service-accounts`: credentials for automation, held to their role and scopes,
//! refused on `/v1`, stopped at once when revoked.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use gw_tests::{expect_api_error, Session, Stack};
use serde_json::{json, Value};

async fn create(stack: &Stack, owner: &Session, body: Value) -> Value {
    let r = stack.admin_post("/service-accounts", &owner.access_token, &body).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    r.json().await.unwrap()
}

fn token(created: &Value) -> String {
    created["token"].as_str().expect("the token, once").to_string()
}

#[tokio::test]
async fn a_token_does_what_its_scopes_allow_and_nothing_else() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let created = create(
        &stack,
        &owner,
        json!({"name": "terraform", "role": "admin", "scopes": ["teams:read", "api-keys:write"]}),
    )
    .await;
    let t = token(&created);
    assert!(t.starts_with("gw_sa_"));
    assert!(t.starts_with(created["token_prefix"].as_str().unwrap()));
    assert_eq!(created["status"], "active");

    assert_eq!(stack.admin_get("/teams", &t).await.status(), 200);
    assert_eq!(stack.admin_get("/api-keys", &t).await.status(), 200, "write includes read");
    let r = stack.admin_post("/api-keys", &t, &json!({"name": "from ci"})).await;
    assert_eq!(r.status(), 201);
    let b = expect_api_error(stack.admin_post("/teams", &t, &json!({"name": "nope"})).await, 403).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "this service account's scopes do not include teams:write"
      }
    }
    "#);
    expect_api_error(stack.admin_get("/users", &t).await, 403).await;
    expect_api_error(stack.admin_get("/organizations/current", &t).await, 403).await;
    // Never: other service accounts, account settings, the operator's routes.
    let b = expect_api_error(stack.admin_get("/service-accounts", &t).await, 403).await;
    assert_eq!(b["error"]["message"], "service accounts cannot manage service accounts");
    let b = expect_api_error(stack.admin_post("/auth/logout-all", &t, &json!({})).await, 403).await;
    assert_eq!(b["error"]["message"], "service accounts cannot use this operation");
    expect_api_error(stack.admin_get("/gateway/routes", &t).await, 403).await;

    // Listed with its last use; never its token.
    let list = stack.admin_get("/service-accounts", &owner.access_token).await.json::<Value>().await.unwrap();
    let row = list["data"].as_array().unwrap().iter().find(|a| a["id"] == created["id"]).unwrap().clone();
    assert!(row["last_used_at"].is_string(), "{row}");
    assert!(row.get("token").is_none() && !list.to_string().contains(&t));
    // It is no member in the users list.
    let users = stack.admin_get("/users", &owner.access_token).await.json::<Value>().await.unwrap();
    assert!(!users.to_string().contains(created["id"].as_str().unwrap()));
}

#[tokio::test]
async fn without_scopes_the_role_decides() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let t = token(&create(&stack, &owner, json!({"name": "dashboards", "role": "viewer"})).await);
    assert_eq!(stack.admin_get("/teams", &t).await.status(), 200);
    assert_eq!(stack.admin_get("/organizations/current", &t).await.status(), 200);
    let b = expect_api_error(stack.admin_post("/teams", &t, &json!({"name": "x"})).await, 403).await;
    assert_eq!(b["error"]["message"], "this action needs the admin role or higher; you are viewer");
}

#[tokio::test]
async fn scopes_never_widen_the_role() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    // A viewer given a write scope still writes nothing; `*:write` reaches every resource, as far as
    // the role goes.
    let viewer = token(
        &create(&stack, &owner, json!({"name": "read-only", "role": "viewer", "scopes": ["teams:write", "*:write"]}))
            .await,
    );
    assert_eq!(stack.admin_get("/teams", &viewer).await.status(), 200);
    assert_eq!(stack.admin_get("/api-keys", &viewer).await.status(), 200);
    let b = expect_api_error(stack.admin_post("/teams", &viewer, &json!({"name": "x"})).await, 403).await;
    assert_eq!(b["error"]["message"], "this action needs the admin role or higher; you are viewer");
    // `*:write` on an admin: everything an admin may do, and still never the owner-only operations.
    let admin = token(&create(&stack, &owner, json!({"name": "iac", "role": "admin", "scopes": ["*:write"]})).await);
    assert_eq!(stack.admin_post("/teams", &admin, &json!({"name": "made by iac"})).await.status(), 201);
    assert_eq!(stack.admin_get("/users", &admin).await.status(), 200);
    let b = expect_api_error(
        stack
            .admin_post(
                "/sso/connections",
                &admin,
                &json!({"name": "idp", "issuer": "https://idp.example",
            "client_id": "c", "client_secret": "s3cret-client-secret", "email_domains": ["iac.example"]}),
            )
            .await,
        403,
    )
    .await;
    assert_eq!(b["error"]["message"], "this action needs the owner role or higher; you are admin");
    expect_api_error(stack.admin_get("/service-accounts", &admin).await, 403).await;
}

#[tokio::test]
async fn a_service_account_token_is_refused_on_v1() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let t = token(&create(&stack, &owner, json!({"name": "ci", "role": "admin"})).await);
    let r = stack.chat(&t, json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(r.status(), 401);
    let b: Value = r.json().await.unwrap();
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "invalid_api_key",
        "message": "Management credentials (session and service-account tokens) are not accepted on /v1: use an API key (sk_live_...).",
        "param": null,
        "type": "invalid_request_error"
      }
    }
    "#);
}

#[tokio::test]
async fn a_revoked_token_stops_at_once() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let created = create(&stack, &owner, json!({"name": "ci", "role": "member"})).await;
    let t = token(&created);
    assert_eq!(stack.admin_get("/teams", &t).await.status(), 200);
    let id = created["id"].as_str().unwrap();
    assert_eq!(stack.admin_delete(&format!("/service-accounts/{id}"), &owner.access_token).await.status(), 204);
    let b = expect_api_error(stack.admin_get("/teams", &t).await, 401).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "unauthorized",
        "fields": [],
        "message": "invalid, expired or revoked service account token"
      }
    }
    "#);
    let got =
        stack.admin_get(&format!("/service-accounts/{id}"), &owner.access_token).await.json::<Value>().await.unwrap();
    assert_eq!(got["status"], "revoked");
    // Revoking twice: it is no longer live.
    expect_api_error(stack.admin_delete(&format!("/service-accounts/{id}"), &owner.access_token).await, 404).await;
}

#[tokio::test]
async fn an_expired_token_is_refused() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let created = create(&stack, &owner, json!({"name": "ci", "role": "member", "expires_in_days": 1})).await;
    let t = token(&created);
    assert_eq!(stack.admin_get("/teams", &t).await.status(), 200);
    {
        use gw_shared::db::schema::service_accounts as s;
        let id: uuid::Uuid = created["id"].as_str().unwrap().parse().unwrap();
        let mut conn = gw_tests::db::connect().await;
        diesel::update(s::table.filter(s::id.eq(id)))
            .set(s::expires_at.eq(chrono::Utc::now() - chrono::Duration::seconds(1)))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    expect_api_error(stack.admin_get("/teams", &t).await, 401).await;
}

#[tokio::test]
async fn an_owner_role_is_refused() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let r = stack.admin_post("/service-accounts", &owner.access_token, &json!({"name": "root", "role": "owner"})).await;
    let b = expect_api_error(r, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "role",
            "message": "must be admin, member or viewer"
          }
        ],
        "message": "role: must be admin, member or viewer"
      }
    }
    "#);
}

#[tokio::test]
async fn an_unknown_scope_is_refused() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let body = json!({"name": "ci", "role": "admin", "scopes": ["everything:read"]});
    let b = expect_api_error(stack.admin_post("/service-accounts", &owner.access_token, &body).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "scopes");
    let message = b["error"]["fields"][0]["message"].as_str().unwrap();
    assert!(message.contains("api-keys") && message.contains("teams"), "{message}");
}

#[tokio::test]
async fn a_lifetime_out_of_bounds_is_refused() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let body = json!({"name": "ci", "role": "admin", "expires_in_days": 0});
    let b = expect_api_error(stack.admin_post("/service-accounts", &owner.access_token, &body).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "expires_in_days");
}
