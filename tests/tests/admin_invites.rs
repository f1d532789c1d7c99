//! `/api/v1/invites` and `POST /api/v1/auth/invites/accept`: invite an address (the token shown
//! once, only its hash stored), list and revoke invites, and accept one, as a new account or an
//! existing one, exactly once, never after it expired or was revoked; with the ways each is
//! refused. All on the test binary's shared stack, each test with its own organization(s).

use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use gw_shared::db::schema::invites;
use gw_tests::{db, expect_api_error, expect_field_error, id_of, json_of, Session, Stack, PASSWORD};
use serde_json::{json, Value};
use uuid::Uuid;

fn new_email() -> String {
    format!("invitee-{}@test.gw", Uuid::new_v4())
}

async fn invite(stack: &Stack, s: &Session, body_json: Value) -> reqwest::Response {
    stack.admin_post("/invites", &s.access_token, &body_json).await
}

/// Creates an invite for a fresh address with `role`; returns the creation response body.
async fn invite_ok(stack: &Stack, s: &Session, role: &str) -> Value {
    json_of(invite(stack, s, json!({"email": new_email(), "role": role})).await, 201).await
}

async fn accept(stack: &Stack, body_json: Value) -> reqwest::Response {
    stack.http.post(format!("{}/api/v1/auth/invites/accept", stack.admin)).json(&body_json).send().await.unwrap()
}

fn new_account(token: &str) -> Value {
    json!({"token": token, "name": "New Person", "password": PASSWORD})
}

// ---- POST /invites ----

#[tokio::test]
async fn create_returns_the_token_once_and_stores_only_its_hash() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "crew").await;
    let email = new_email();
    let expires_at = (chrono::Utc::now() + chrono::TimeDelta::hours(24)).to_rfc3339();
    let r = invite(
        &stack,
        &s,
        json!({"email": email, "role": "admin", "team_ids": [team, team], "expires_at": expires_at}),
    )
    .await;
    let created = json_of(r, 201).await;
    let mut fields: Vec<&str> = created.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(
        fields,
        ["created_at", "delivery", "email", "expires_at", "id", "role", "status", "team_ids", "token", "warning"]
    );
    // This stack has no mail server: the token is the inviter's to pass on.
    assert_eq!(created["delivery"], "token");
    assert_eq!(created["email"], email);
    assert_eq!(created["role"], "admin");
    assert_eq!(created["status"], "pending");
    assert_eq!(created["team_ids"], json!([team.to_string()]));
    let token = created["token"].as_str().unwrap();
    assert!(token.starts_with("inv_") && token.len() == 44, "{token}");
    assert!(created["warning"].as_str().unwrap().contains("once"));
    let expires: chrono::DateTime<chrono::Utc> = created["expires_at"].as_str().unwrap().parse().unwrap();
    let hours = (expires - chrono::Utc::now()).num_minutes() as f64 / 60.0;
    assert!((23.9..=24.0).contains(&hours), "{hours}");

    let mut conn = db::connect().await;
    let stored: Vec<u8> = invites::table
        .filter(invites::id.eq(id_of(&created)))
        .select(invites::token_hash)
        .first(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, gw_shared::keys::hash_secret(token).to_vec());

    let list = json_of(stack.admin_get("/invites", &s.access_token).await, 200).await;
    assert!(!list.to_string().contains(token), "listing leaked the token");
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert_eq!(list["data"][0]["id"], created["id"]);
    assert_eq!(list["data"][0]["status"], "pending");
    assert_eq!(list["data"][0]["invited_by"], s.user_id.to_string());
}

#[tokio::test]
async fn create_with_invalid_fields_names_the_field() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let other = stack.register().await;
    let theirs = stack.create_team(&other, "theirs").await;
    let cases = [
        (json!({"email": "not-an-address"}), "email"),
        (json!({"email": new_email(), "role": "boss"}), "role"),
        (json!({"email": new_email(), "team_ids": [Uuid::now_v7()]}), "team_ids"),
        (json!({"email": new_email(), "team_ids": [theirs]}), "team_ids"),
        (json!({"email": new_email(), "expires_at": chrono::Utc::now().to_rfc3339()}), "expires_at"),
        (
            json!({"email": new_email(), "expires_at": (chrono::Utc::now() + chrono::TimeDelta::days(31)).to_rfc3339()}),
            "expires_at",
        ),
        (json!({"email": new_email(), "expires_at": "next week"}), "expires_at"),
    ];
    for (bad, field) in cases {
        expect_field_error(invite(&stack, &s, bad.clone()).await, field, &bad.to_string()).await;
    }
    let b = expect_api_error(invite(&stack, &s, json!({"email": new_email(), "colour": "blue"})).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "colour",
            "message": "is not a known field"
          }
        ],
        "message": "colour: is not a known field"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "validation_error");
    let list = json_of(stack.admin_get("/invites", &s.access_token).await, 200).await;
    assert_eq!(list["data"], json!([]));
}

#[tokio::test]
async fn inviting_a_member_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let m = stack.join(&s, "member", &[]).await;
    for email in [s.email.clone(), m.email.to_uppercase()] {
        let b = expect_api_error(invite(&stack, &s, json!({"email": email})).await, 409).await;
        assert_eq!(b["error"]["code"], "conflict");
    }
}

#[tokio::test]
async fn member_cannot_invite_or_list_invites() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let m = stack.join(&s, "member", &[]).await;
    let b = expect_api_error(invite(&stack, &m, json!({"email": new_email()})).await, 403).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "this action needs the admin role or higher; you are member"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "forbidden");
    expect_api_error(stack.admin_get("/invites", &m.access_token).await, 403).await;
}

#[tokio::test]
async fn only_an_owner_invites_owners() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let admin = stack.join(&s, "admin", &[]).await;
    let r = invite(&stack, &admin, json!({"email": new_email(), "role": "owner"})).await;
    assert_eq!(expect_api_error(r, 403).await["error"]["code"], "forbidden");
    assert_eq!(invite(&stack, &admin, json!({"email": new_email(), "role": "admin"})).await.status(), 201);
    assert_eq!(invite(&stack, &s, json!({"email": new_email(), "role": "owner"})).await.status(), 201);
}

#[tokio::test]
async fn a_new_invite_to_a_pending_address_replaces_the_old_one() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let email = new_email();
    let first = json_of(invite(&stack, &s, json!({"email": email, "role": "viewer"})).await, 201).await;
    // The same address, written differently: one pending invite per address.
    let again = json!({"email": email.to_uppercase(), "role": "admin"});
    let second = json_of(invite(&stack, &s, again).await, 201).await;
    let list = json_of(stack.admin_get("/invites", &s.access_token).await, 200).await;
    let pending: Vec<&Value> = list["data"].as_array().unwrap().iter().filter(|i| i["status"] == "pending").collect();
    assert_eq!(pending.len(), 1, "{list}");
    assert_eq!(pending[0]["id"], second["id"]);
    assert_eq!(pending[0]["role"], "admin");
    let old = list["data"].as_array().unwrap().iter().find(|i| i["id"] == first["id"]).unwrap();
    assert_eq!(old["status"], "revoked");
    // The first token no longer works; the second does.
    let r = accept(&stack, new_account(first["token"].as_str().unwrap())).await;
    expect_api_error(r, 400).await;
    let r = accept(&stack, new_account(second["token"].as_str().unwrap())).await;
    assert_eq!(r.status(), 201);
}

// ---- POST /auth/invites/accept ----

#[tokio::test]
async fn accepting_creates_the_account_and_joins_the_teams() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "crew").await;
    let gone = stack.create_team(&s, "gone").await;
    let email = new_email();
    let created =
        json_of(invite(&stack, &s, json!({"email": email, "role": "admin", "team_ids": [team, gone]})).await, 201)
            .await;
    assert_eq!(stack.admin_delete(&format!("/teams/{gone}"), &s.access_token).await.status(), 204);

    let tokens = json_of(accept(&stack, new_account(created["token"].as_str().unwrap())).await, 201).await;
    assert_eq!(tokens["role"], "admin");
    assert_eq!(tokens["organization"]["id"], s.org_id.to_string());
    assert_eq!(tokens["user"]["email"], email);
    assert_eq!(tokens["user"]["name"], "New Person");
    assert!(tokens["refresh_token"].is_string());
    let user = tokens["user"]["id"].as_str().unwrap();
    let access = tokens["access_token"].as_str().unwrap();

    // The new session works, with the invite's role and the teams still live.
    let me = json_of(stack.admin_get(&format!("/users/{user}"), access).await, 200).await;
    assert_eq!(me["role"], "admin");
    assert_eq!(me["teams"], json!([team.to_string()]));
    assert_eq!(stack.admin_get("/invites", access).await.status(), 200);

    let accepted = json_of(stack.admin_get("/invites?status=accepted", &s.access_token).await, 200).await;
    assert_eq!(accepted["data"][0]["id"], created["id"]);
    assert_eq!(accepted["data"][0]["accepted_by"], user);
    let pending = json_of(stack.admin_get("/invites?status=pending", &s.access_token).await, 200).await;
    assert_eq!(pending["data"], json!([]));

    // The new account signs in with its password.
    let r = stack
        .http
        .post(format!("{}/api/v1/auth/login", stack.admin))
        .json(&json!({"email": email, "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn an_invite_works_once() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let created = invite_ok(&stack, &s, "member").await;
    let token = created["token"].as_str().unwrap();
    assert_eq!(accept(&stack, new_account(token)).await.status(), 201);
    expect_field_error(accept(&stack, new_account(token)).await, "token", "second acceptance").await;
    let users = json_of(stack.admin_get("/users", &s.access_token).await, 200).await;
    assert_eq!(users["data"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn an_expired_invite_cannot_be_accepted() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let created = invite_ok(&stack, &s, "member").await;
    let mut conn = db::connect().await;
    let n = diesel::update(invites::table.filter(invites::id.eq(id_of(&created))))
        .set(invites::expires_at.eq(chrono::Utc::now() - chrono::Duration::hours(1)))
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 1);
    expect_field_error(accept(&stack, new_account(created["token"].as_str().unwrap())).await, "token", "expired").await;
    let expired = json_of(stack.admin_get("/invites?status=expired", &s.access_token).await, 200).await;
    assert_eq!(expired["data"][0]["id"], created["id"]);
    assert_eq!(expired["data"][0]["status"], "expired");
    let users = json_of(stack.admin_get("/users", &s.access_token).await, 200).await;
    assert_eq!(users["data"].as_array().unwrap().len(), 1, "an expired invite must not add a member");
}

#[tokio::test]
async fn a_revoked_invite_cannot_be_accepted() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let created = invite_ok(&stack, &s, "viewer").await;
    let path = format!("/invites/{}", created["id"].as_str().unwrap());
    assert_eq!(stack.admin_delete(&path, &s.access_token).await.status(), 204);
    // Revoking again is a no-op.
    assert_eq!(stack.admin_delete(&path, &s.access_token).await.status(), 204);
    expect_field_error(accept(&stack, new_account(created["token"].as_str().unwrap())).await, "token", "revoked").await;
    let revoked = json_of(stack.admin_get("/invites?status=revoked", &s.access_token).await, 200).await;
    assert_eq!(revoked["data"][0]["status"], "revoked");
}

#[tokio::test]
async fn revoking_an_accepted_invite_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let created = invite_ok(&stack, &s, "member").await;
    assert_eq!(accept(&stack, new_account(created["token"].as_str().unwrap())).await.status(), 201);
    let r = stack.admin_delete(&format!("/invites/{}", created["id"].as_str().unwrap()), &s.access_token).await;
    assert_eq!(expect_api_error(r, 409).await["error"]["code"], "conflict");
}

#[tokio::test]
async fn another_orgs_invite_is_404_like_a_missing_one() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let other = stack.register().await;
    let theirs = invite_ok(&stack, &other, "member").await;
    let mut bodies = Vec::new();
    for id in [theirs["id"].as_str().unwrap().to_string(), Uuid::now_v7().to_string()] {
        let b = expect_api_error(stack.admin_delete(&format!("/invites/{id}"), &s.access_token).await, 404).await;
        bodies.push(b["error"].clone());
    }
    assert_eq!(bodies[0], bodies[1]);
    // Their invite still works.
    let pending = json_of(stack.admin_get("/invites?status=pending", &other.access_token).await, 200).await;
    assert_eq!(pending["data"][0]["id"], theirs["id"]);
}

#[tokio::test]
async fn accept_with_invalid_fields_names_the_field() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let created = invite_ok(&stack, &s, "member").await;
    let token = created["token"].as_str().unwrap();
    let cases = [
        (json!({"token": "inv_doesnotexist"}), "token"),
        (json!({"token": ""}), "token"),
        (json!({"token": token, "password": PASSWORD}), "name"),
        (json!({"token": token, "name": "  ", "password": PASSWORD}), "name"),
        (json!({"token": token, "name": "New Person"}), "password"),
        (json!({"token": token, "name": "New Person", "password": "short"}), "password"),
    ];
    for (bad, field) in cases {
        expect_field_error(accept(&stack, bad.clone()).await, field, &bad.to_string()).await;
    }
    // None of those used the invite up.
    assert_eq!(accept(&stack, new_account(token)).await.status(), 201);
}

#[tokio::test]
async fn an_existing_account_accepts_with_its_password() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let elsewhere = stack.register().await;
    let created = json_of(invite(&stack, &s, json!({"email": elsewhere.email, "role": "viewer"})).await, 201).await;
    let token = created["token"].as_str().unwrap();

    let r = accept(&stack, json!({"token": token, "password": "not the right password"})).await;
    assert_eq!(expect_api_error(r, 401).await["error"]["code"], "unauthorized");
    let tokens = json_of(accept(&stack, json!({"token": token, "password": PASSWORD})).await, 201).await;
    assert_eq!(tokens["user"]["id"], elsewhere.user_id.to_string());
    assert_eq!(tokens["organization"]["id"], s.org_id.to_string());
    assert_eq!(tokens["role"], "viewer");
    // Still the owner of their own organization.
    let own =
        json_of(stack.admin_get(&format!("/users/{}", elsewhere.user_id), &elsewhere.access_token).await, 200).await;
    assert_eq!(own["role"], "owner");
}

// ---- the audit trail ----

#[tokio::test]
async fn invite_writes_appear_in_the_audit_trail() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let revoked = invite_ok(&stack, &s, "member").await;
    let revoked_id = revoked["id"].as_str().unwrap();
    assert_eq!(stack.admin_delete(&format!("/invites/{revoked_id}"), &s.access_token).await.status(), 204);
    let accepted = invite_ok(&stack, &s, "member").await;
    let tokens = json_of(accept(&stack, new_account(accepted["token"].as_str().unwrap())).await, 201).await;

    let page = json_of(stack.admin_get("/audit-events?resource_type=invite", &s.access_token).await, 200).await;
    let events = page["data"].as_array().unwrap();
    let actions: Vec<&str> = events.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["invite.accept", "invite.create", "invite.revoke", "invite.create"]);
    // The acceptance is the new user's own act.
    assert_eq!(events[0]["actor_user_id"], tokens["user"]["id"]);
    assert_eq!(events[0]["actor_role"], "member");
    assert_eq!(events[0]["resource_id"], accepted["id"]);
    assert_eq!(events[2]["actor_user_id"], s.user_id.to_string());
    assert_eq!(events[2]["resource_id"], revoked["id"]);
    let text = page.to_string();
    for token in [revoked["token"].as_str().unwrap(), accepted["token"].as_str().unwrap()] {
        assert!(!text.contains(token), "the trail holds an invite token");
    }

    let r = stack.admin_get("/audit-events?from=yesterday", &s.access_token).await;
    expect_field_error(r, "from", "from=yesterday").await;
    let r = stack.admin_get("/invites?status=open", &s.access_token).await;
    expect_field_error(r, "status", "status=open").await;
}

#[tokio::test]
async fn invites_die_with_their_inviters_standing() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let admin = stack.join(&owner, "admin", &[]).await;
    let made = invite_ok(&stack, &admin, "admin").await;
    let token = made["token"].as_str().unwrap().to_string();
    // The admin is demoted before the invite is used: it no longer brings anyone in.
    let r =
        stack.admin_patch(&format!("/users/{}", admin.user_id), &owner.access_token, &json!({"role": "member"})).await;
    assert_eq!(r.status(), 200);
    let r = accept(&stack, json!({"token": token, "name": "Late", "password": gw_tests::PASSWORD})).await;
    expect_field_error(r, "token", "an invite of a demoted admin").await;
}

// ---- seats ----

/// A stack whose Free plan is "Starter" with 2 seats.
async fn two_seats() -> Stack {
    let extra_config = "[plans.free]\nname = \"Starter\"\nseats = 2\n".to_string();
    Stack::start_with(gw_tests::StackOptions { extra_config, ..Default::default() }).await
}

#[tokio::test]
async fn invites_need_a_free_seat_counting_members_and_pending_invites() {
    let stack = two_seats().await;
    let s = stack.register().await;
    let terms = stack.get_ok(&s, "/organizations/current").await["plan_terms"].clone();
    assert_eq!((terms["name"].as_str(), terms["seats"].as_u64()), (Some("Starter"), Some(2)));
    let email = new_email();
    let first = json_of(invite(&stack, &s, json!({"email": email})).await, 201).await;
    // The owner and a pending invite take both seats.
    let body = expect_api_error(invite(&stack, &s, json!({"email": new_email()})).await, 402).await;
    insta::assert_json_snapshot!(body, {".error.request_id" => "[request_id]"}, @r#"
    {
      "error": {
        "code": "plan_required",
        "fields": [],
        "message": "the Starter plan has 2 seats and all are taken (1 members, 1 pending invites); remove members, revoke invites or upgrade"
      }
    }
    "#);
    // Inviting the same address again replaces its invite: no new seat.
    let again = json_of(invite(&stack, &s, json!({"email": email})).await, 201).await;
    // A revoked invite frees its seat; service accounts take none.
    let r = stack.admin_delete(&format!("/invites/{}", id_of(&again)), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let r = stack.admin_post("/service-accounts", &s.access_token, &json!({"name": "ci", "role": "member"})).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    json_of(invite(&stack, &s, json!({"email": new_email()})).await, 201).await;
    assert_ne!(id_of(&first), id_of(&again));
}

#[tokio::test]
async fn an_invite_cannot_be_accepted_into_a_plan_with_no_member_seat_left() {
    let stack = two_seats().await;
    let s = stack.register().await;
    // On Growth (100 seats) two invites go out; back on Starter (2 seats) only one fits.
    db::set_plan(s.org_id, "growth").await;
    let a = json_of(invite(&stack, &s, json!({"email": new_email()})).await, 201).await;
    let b = json_of(invite(&stack, &s, json!({"email": new_email()})).await, 201).await;
    db::set_plan(s.org_id, "free").await;
    assert_eq!(accept(&stack, new_account(a["token"].as_str().unwrap())).await.status(), 201);
    let body = expect_api_error(accept(&stack, new_account(b["token"].as_str().unwrap())).await, 402).await;
    insta::assert_json_snapshot!(body, {".error.request_id" => "[request_id]"}, @r#"
    {
      "error": {
        "code": "plan_required",
        "fields": [],
        "message": "the Starter plan has 2 seats and all are taken (2 members, 1 pending invites); remove members, revoke invites or upgrade"
      }
    }
    "#);
    // Nothing was taken: the invite is still pending, and works once a seat is free.
    let pending = stack.get_ok(&s, "/invites?status=pending").await;
    assert_eq!(pending["data"].as_array().map(Vec::len), Some(1), "{pending}");
    db::set_plan(s.org_id, "growth").await;
    assert_eq!(accept(&stack, new_account(b["token"].as_str().unwrap())).await.status(), 201);
}
