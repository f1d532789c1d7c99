//! `/api/v1/users`: list and read the organization's members, change their roles and remove
//! them, with the rules around owners (only owners touch the owner role; the organization keeps
//! one), the roles that may not manage members, another tenant's users (404, as if missing), and
//! removal ending the removed member's access at once. All on the test binary's shared stack,
//! each test with its own organization(s).

use gw_tests::{expect_api_error, expect_field_error, expect_unauthorized, json_of, Session, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

async fn set_role(stack: &Stack, actor: &Session, user: Uuid, role: &str) -> reqwest::Response {
    stack.admin_patch(&format!("/users/{user}"), &actor.access_token, &json!({"role": role})).await
}

async fn refresh(stack: &Stack, s: &Session) -> reqwest::Response {
    stack
        .http
        .post(format!("{}/api/v1/auth/refresh", stack.admin))
        .json(&json!({"refresh_token": s.refresh_token}))
        .send()
        .await
        .unwrap()
}

// ---- GET /users, GET /users/{id} ----

#[tokio::test]
async fn members_are_listed_filtered_and_read_with_their_teams() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "crew").await;
    let m = stack.join(&s, "member", &[team]).await;

    let list = json_of(stack.admin_get("/users", &s.access_token).await, 200).await;
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    // Newest accounts first.
    assert_eq!(data[0]["id"], m.user_id.to_string());
    assert_eq!(data[1]["id"], s.user_id.to_string());
    assert_eq!(data[1]["role"], "owner");
    let mut fields: Vec<&str> = data[0].as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(fields, ["email", "id", "joined_at", "name", "role"]);

    let members = json_of(stack.admin_get("/users?role=member", &s.access_token).await, 200).await;
    assert_eq!(members["data"].as_array().unwrap().len(), 1);
    assert_eq!(members["data"][0]["email"], m.email);
    let page = json_of(stack.admin_get("/users?limit=1", &s.access_token).await, 200).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    let cursor = page["next_cursor"].as_str().unwrap();
    let page = json_of(stack.admin_get(&format!("/users?limit=1&cursor={cursor}"), &s.access_token).await, 200).await;
    assert_eq!(page["data"][0]["id"], s.user_id.to_string());
    assert_eq!(page["next_cursor"], Value::Null);

    let one = json_of(stack.admin_get(&format!("/users/{}", m.user_id), &s.access_token).await, 200).await;
    assert_eq!(one["role"], "member");
    assert_eq!(one["email"], m.email);
    assert_eq!(one["teams"], json!([team.to_string()]));
    // Every role may read the members.
    let me = json_of(stack.admin_get(&format!("/users/{}", s.user_id), &m.access_token).await, 200).await;
    assert_eq!(me["teams"], json!([]));
}

#[tokio::test]
async fn list_with_an_unknown_role_is_400_naming_role() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    expect_field_error(stack.admin_get("/users?role=boss", &s.access_token).await, "role", "role=boss").await;
}

#[tokio::test]
async fn another_orgs_user_is_404_like_a_missing_one() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let other = stack.register().await;
    let mut bodies = Vec::new();
    for user in [other.user_id, Uuid::now_v7()] {
        let b = expect_api_error(stack.admin_get(&format!("/users/{user}"), &s.access_token).await, 404).await;
        bodies.push(b["error"].clone());
        expect_api_error(set_role(&stack, &s, user, "viewer").await, 404).await;
        expect_api_error(stack.admin_delete(&format!("/users/{user}"), &s.access_token).await, 404).await;
    }
    assert_eq!(bodies[0], bodies[1], "another org's user must look exactly like a missing one");
    // The other organization's owner is untouched.
    let me = json_of(stack.admin_get(&format!("/users/{}", other.user_id), &other.access_token).await, 200).await;
    assert_eq!(me["role"], "owner");
}

// ---- PATCH /users/{id} ----

#[tokio::test]
async fn admin_changes_a_members_role_and_a_demotion_ends_their_sessions() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let admin = stack.join(&s, "admin", &[]).await;
    let m = stack.join(&s, "member", &[]).await;

    let u = json_of(set_role(&stack, &admin, m.user_id, "admin").await, 200).await;
    assert_eq!(u["role"], "admin");
    assert_eq!(u["id"], m.user_id.to_string());
    // A promotion keeps the session.
    assert_eq!(stack.admin_get("/users", &m.access_token).await.status(), 200);

    let u = json_of(set_role(&stack, &admin, m.user_id, "viewer").await, 200).await;
    assert_eq!(u["role"], "viewer");
    expect_unauthorized(stack.admin_get("/users", &m.access_token).await).await;
    expect_unauthorized(refresh(&stack, &m).await).await;

    let events = json_of(
        stack.admin_get(&format!("/audit-events?resource_type=user&resource_id={}", m.user_id), &s.access_token).await,
        200,
    )
    .await;
    let updates: Vec<&Value> =
        events["data"].as_array().unwrap().iter().filter(|e| e["action"] == "user.update").collect();
    assert_eq!(updates.len(), 2);
    assert_eq!(updates[0]["detail"], json!({"from": "admin", "to": "viewer"}));
    assert_eq!(updates[0]["actor_user_id"], admin.user_id.to_string());
    assert_eq!(updates[0]["actor_role"], "admin");
}

#[tokio::test]
async fn only_owners_grant_change_or_remove_the_owner_role() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let admin = stack.join(&s, "admin", &[]).await;
    let m = stack.join(&s, "member", &[]).await;

    let b = expect_api_error(set_role(&stack, &admin, m.user_id, "owner").await, 403).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "only an owner may grant the owner role or change or remove an owner"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "forbidden");
    expect_api_error(set_role(&stack, &admin, s.user_id, "member").await, 403).await;
    expect_api_error(stack.admin_delete(&format!("/users/{}", s.user_id), &admin.access_token).await, 403).await;

    let u = json_of(set_role(&stack, &s, m.user_id, "owner").await, 200).await;
    assert_eq!(u["role"], "owner");
    expect_api_error(set_role(&stack, &admin, m.user_id, "member").await, 403).await;
    expect_api_error(stack.admin_delete(&format!("/users/{}", m.user_id), &admin.access_token).await, 403).await;
    // An owner may demote another owner.
    let u = json_of(set_role(&stack, &s, m.user_id, "admin").await, 200).await;
    assert_eq!(u["role"], "admin");
}

#[tokio::test]
async fn nobody_changes_their_own_role() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let admin = stack.join(&s, "admin", &[]).await;
    expect_api_error(set_role(&stack, &s, s.user_id, "admin").await, 403).await;
    expect_api_error(set_role(&stack, &admin, admin.user_id, "member").await, 403).await;
    let me = json_of(stack.admin_get(&format!("/users/{}", s.user_id), &s.access_token).await, 200).await;
    assert_eq!(me["role"], "owner");
}

#[tokio::test]
async fn update_with_an_unknown_role_is_400_naming_role() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let m = stack.join(&s, "member", &[]).await;
    expect_field_error(set_role(&stack, &s, m.user_id, "boss").await, "role", "boss").await;
    let r = stack.admin_patch(&format!("/users/{}", m.user_id), &s.access_token, &json!({})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 400).await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "role",
            "message": "is required"
          }
        ],
        "message": "role: is required"
      }
    }
    "#);
}

#[tokio::test]
async fn member_and_viewer_cannot_manage_users() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let m = stack.join(&s, "member", &[]).await;
    let viewer = stack.join(&s, "viewer", &[]).await;
    for actor in [&m, &viewer] {
        let target = if actor.user_id == m.user_id { viewer.user_id } else { m.user_id };
        let b = expect_api_error(set_role(&stack, actor, target, "viewer").await, 403).await;
        assert_eq!(b["error"]["code"], "forbidden");
        let r = stack.admin_delete(&format!("/users/{target}"), &actor.access_token).await;
        expect_api_error(r, 403).await;
    }
    let list = json_of(stack.admin_get("/users", &s.access_token).await, 200).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 3);
}

// ---- DELETE /users/{id} ----

#[tokio::test]
async fn the_last_owner_cannot_leave() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let b = expect_api_error(stack.admin_delete(&format!("/users/{}", s.user_id), &s.access_token).await, 409).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "the organization must keep at least one owner: make another member owner first"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "conflict");
    assert!(b["error"]["message"].as_str().unwrap().contains("owner"), "{b}");

    // With a second owner, the first may go; then the second is the last.
    let second = stack.join(&s, "owner", &[]).await;
    assert_eq!(stack.admin_delete(&format!("/users/{}", s.user_id), &second.access_token).await.status(), 204);
    let r = stack.admin_delete(&format!("/users/{}", second.user_id), &second.access_token).await;
    assert_eq!(expect_api_error(r, 409).await["error"]["code"], "conflict");
    let owners = json_of(stack.admin_get("/users?role=owner", &second.access_token).await, 200).await;
    assert_eq!(owners["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_removed_users_access_stops_at_once() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "crew").await;
    let m = stack.join(&s, "member", &[team]).await;
    assert_eq!(stack.admin_get("/teams", &m.access_token).await.status(), 200);

    assert_eq!(stack.admin_delete(&format!("/users/{}", m.user_id), &s.access_token).await.status(), 204);
    // The access token has not expired, but its member is gone.
    expect_unauthorized(stack.admin_get("/teams", &m.access_token).await).await;
    expect_unauthorized(refresh(&stack, &m).await).await;
    expect_api_error(stack.admin_get(&format!("/users/{}", m.user_id), &s.access_token).await, 404).await;
    let members = json_of(stack.admin_get(&format!("/teams/{team}/members"), &s.access_token).await, 200).await;
    assert_eq!(members["data"], json!([]));
    expect_api_error(stack.admin_delete(&format!("/users/{}", m.user_id), &s.access_token).await, 404).await;

    let events = json_of(
        stack.admin_get(&format!("/audit-events?action=user.remove&resource_id={}", m.user_id), &s.access_token).await,
        200,
    )
    .await;
    assert_eq!(events["data"].as_array().unwrap().len(), 1);
    assert_eq!(events["data"][0]["detail"]["role"], "member");
    assert_eq!(events["data"][0]["actor_user_id"], s.user_id.to_string());
}

// ---- the keys of a removed member ----

async fn member_key(stack: &Stack, member: &Session, team: Uuid) -> (String, String) {
    let r = stack.admin_post("/api-keys", &member.access_token, &json!({"name": "mine", "team_id": team})).await;
    assert_eq!(r.status(), 201);
    let b: serde_json::Value = r.json().await.unwrap();
    (b["id"].as_str().unwrap().to_string(), b["key"].as_str().unwrap().to_string())
}

async fn refused_soon(stack: &Stack, key: &str) -> bool {
    // The revocation reaches the proxies by message; allow it a few round trips.
    for _ in 0..50 {
        if stack.chat(key, gw_tests::mock_chat("hi")).await.status() == 401 {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn a_removed_members_keys_are_refused_by_the_proxy() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let team = stack.create_team(&owner, "leavers").await;
    let member = stack.join(&owner, "member", &[team]).await;
    let (id, key) = member_key(&stack, &member, team).await;
    // Warm the proxy's cache: only the invalidation can end the key fast.
    assert_eq!(stack.chat(&key, gw_tests::mock_chat("hi")).await.status(), 200);
    assert_eq!(stack.admin_delete(&format!("/users/{}", member.user_id), &owner.access_token).await.status(), 204);
    assert!(refused_soon(&stack, &key).await, "the removed member's key still works");
    let got: serde_json::Value =
        stack.admin_get(&format!("/api-keys/{id}"), &owner.access_token).await.json().await.unwrap();
    assert_eq!(got["status"], "revoked");
}

#[tokio::test]
async fn keys_transferred_before_the_removal_keep_working() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let team = stack.create_team(&owner, "handover").await;
    let member = stack.join(&owner, "member", &[team]).await;
    let (id, key) = member_key(&stack, &member, team).await;
    let body = json!({"to_user_id": owner.user_id});
    let r = stack.admin_post(&format!("/users/{}/transfer-keys", member.user_id), &owner.access_token, &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["transferred"], 1);
    assert_eq!(stack.admin_delete(&format!("/users/{}", member.user_id), &owner.access_token).await.status(), 204);
    assert_eq!(stack.chat(&key, gw_tests::mock_chat("hi")).await.status(), 200);
    let got: serde_json::Value =
        stack.admin_get(&format!("/api-keys/{id}"), &owner.access_token).await.json().await.unwrap();
    assert_eq!(got["created_by"], owner.user_id.to_string());
    // Transferring to someone outside the organization is refused naming the field.
    let r = stack
        .admin_post(
            &format!("/users/{}/transfer-keys", owner.user_id),
            &owner.access_token,
            &json!({"to_user_id": Uuid::new_v4()}),
        )
        .await;
    let b = expect_api_error(r, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "to_user_id");
}
