//! `/api/v1/auth`: register, login, refresh-token rotation, each with the ways it is refused. All
//! on the test binary's shared stack, each test with its own organization.

use gw_tests::db::outbox;
use gw_tests::{expect_api_error, header, Stack, StackOptions, PASSWORD};
use serde_json::{json, Value};

// ---- POST /auth/register ----

#[tokio::test]
async fn register_creates_an_org_and_returns_tokens() {
    let stack = Stack::shared().await;
    let email = format!("reg-{}@test.gw", uuid::Uuid::new_v4());
    let r = stack
        .public_post(
            "/auth/register",
            &json!({"email": email, "password": PASSWORD, "name": "New Owner", "org_name": "New Org"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["user"]["email"], email);
    assert_eq!(body["role"], "owner");
    insta::assert_json_snapshot!("register_response", &body, {
        ".access_token" => "[jwt]",
        ".refresh_token" => "[refresh token]",
        ".user.id" => "[uuid]",
        ".user.email" => "[email]",
        ".organization.id" => "[uuid]",
        ".session_expires_at" => "[time]",
    });
}

#[tokio::test]
async fn register_with_a_taken_email_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    // E-mail addresses compare case-insensitively.
    let dup = stack
        .public_post(
            "/auth/register",
            &json!({"email": s.email.to_uppercase(), "password": "another password", "name": "X", "org_name": "Y"}),
        )
        .await;
    let b = expect_api_error(dup, 409).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "this e-mail address cannot be registered; sign in instead"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "conflict");
}

#[tokio::test]
async fn register_with_invalid_fields_is_400() {
    let stack = Stack::shared().await;
    for bad in [
        json!({"email": "not-an-email", "password": "long enough pw", "name": "X", "org_name": "Y"}),
        json!({"email": "a@b.co", "password": "short", "name": "X", "org_name": "Y"}),
        json!({"email": "a@b.co", "password": "long enough pw", "name": " ", "org_name": "Y"}),
        json!({"email": "a@b.co", "password": "long enough pw", "name": "X"}),
        json!({"email": "a@b.co", "password": "long enough pw", "name": "X", "org_name": "Y", "plan": "enterprise"}),
    ] {
        let r = stack.public_post("/auth/register", &bad.clone()).await;
        assert_eq!(r.status(), 400, "{bad}");
        let b = expect_api_error(r, 400).await;
        assert_eq!(b["error"]["code"], "validation_error", "{bad}");
    }
}

#[tokio::test]
async fn register_with_malformed_json_is_400() {
    let stack = Stack::shared().await;
    let r = stack
        .http
        .post(format!("{}/api/v1/auth/register", stack.admin))
        .body("{oops")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    expect_api_error(r, 400).await;
}

#[tokio::test]
async fn register_with_a_wrong_method_is_405_with_allow() {
    let stack = Stack::shared().await;
    let r = stack.http.get(format!("{}/api/v1/auth/register", stack.admin)).send().await.unwrap();
    assert_eq!(header(&r, "allow"), "POST");
    let b = expect_api_error(r, 405).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "method_not_allowed",
        "fields": [],
        "message": "method not allowed on this path; allowed: POST"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "method_not_allowed");
}

// ---- POST /auth/login ----

#[tokio::test]
async fn login_returns_tokens_for_the_users_org() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let ok = stack.public_post("/auth/login", &json!({"email": s.email, "password": PASSWORD})).await;
    assert_eq!(ok.status(), 200);
    let tokens: Value = ok.json().await.unwrap();
    assert_eq!(tokens["token_type"], "Bearer");
    assert_eq!(tokens["role"], "owner");
    assert!(tokens["expires_in"].as_i64().unwrap() > 0);

    // The access token acts in the user's organization.
    let r = stack.admin_get("/organizations/current", tokens["access_token"].as_str().unwrap()).await;
    assert_eq!(r.status(), 200);
    let org: Value = r.json().await.unwrap();
    assert_eq!(org["id"], s.org_id.to_string());
    assert_eq!(org["name"], "Test Org");
    assert_eq!(org["plan"], "free");
    assert!(org["data_residency"]["region"].is_string());
    assert!(org["metadata"].is_object());
}

#[tokio::test]
async fn login_with_a_wrong_password_is_401() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.public_post("/auth/login", &json!({"email": s.email, "password": "wrong password!"})).await;
    let b = expect_api_error(r, 401).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "unauthorized",
        "fields": [],
        "message": "invalid email or password"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "unauthorized");
}

#[tokio::test]
async fn login_with_an_unknown_email_is_401() {
    let stack = Stack::shared().await;
    let r = stack
        .public_post(
            "/auth/login",
            &json!({"email": format!("nobody-{}@test.gw", uuid::Uuid::new_v4()), "password": "whatever123"}),
        )
        .await;
    let b = expect_api_error(r, 401).await;
    assert_eq!(b["error"]["code"], "unauthorized");
}

// ---- POST /auth/refresh ----

#[tokio::test]
async fn refresh_rotates_the_refresh_token() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r1 = stack.public_post("/auth/refresh", &json!({"refresh_token": s.refresh_token})).await;
    assert_eq!(r1.status(), 200);
    let t1: Value = r1.json().await.unwrap();
    let next = t1["refresh_token"].as_str().unwrap().to_string();
    assert_ne!(next, s.refresh_token);
    assert!(t1["access_token"].is_string());
    // The new one works in turn.
    let r2 = stack.public_post("/auth/refresh", &json!({"refresh_token": next})).await;
    assert_eq!(r2.status(), 200);
}

#[tokio::test]
async fn refresh_token_reuse_revokes_the_family() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r1 = stack.public_post("/auth/refresh", &json!({"refresh_token": s.refresh_token})).await;
    assert_eq!(r1.status(), 200);
    let next = r1.json::<Value>().await.unwrap()["refresh_token"].as_str().unwrap().to_string();
    let r2 = stack.public_post("/auth/refresh", &json!({"refresh_token": next})).await;
    assert_eq!(r2.status(), 200);
    let r2: Value = r2.json().await.unwrap();
    let (latest, access) = (r2["refresh_token"].as_str().unwrap(), r2["access_token"].as_str().unwrap());
    assert_eq!(stack.admin_get("/organizations/current", access).await.status(), 200);
    // The first token again, after its successor was itself used: a stolen copy. The whole
    // session dies: its newest refresh token and its live access token with it.
    let b = expect_api_error(stack.public_post("/auth/refresh", &json!({"refresh_token": s.refresh_token})).await, 401)
        .await;
    assert!(b["error"]["message"].as_str().unwrap().contains("revoked"), "{b}");
    expect_api_error(stack.public_post("/auth/refresh", &json!({"refresh_token": latest})).await, 401).await;
    expect_api_error(stack.admin_get("/organizations/current", access).await, 401).await;
    // The owner's other sign-ins are untouched.
    let other = stack.public_post("/auth/login", &json!({"email": s.email, "password": PASSWORD})).await;
    let other: Value = other.json().await.unwrap();
    let token = other["access_token"].as_str().unwrap();
    assert_eq!(stack.admin_get("/organizations/current", token).await.status(), 200);
}

#[tokio::test]
async fn concurrent_refreshes_of_one_token_get_the_same_successor() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"refresh_token": s.refresh_token});
    let (a, b) = tokio::join!(stack.public_post("/auth/refresh", &body), stack.public_post("/auth/refresh", &body));
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    let (a, b): (Value, Value) = (a.json().await.unwrap(), b.json().await.unwrap());
    assert_eq!(a["refresh_token"], b["refresh_token"], "both tabs continue the same session");
    // Both access tokens work and the successor still refreshes: nobody was signed out.
    for t in [&a, &b] {
        let r = stack.admin_get("/organizations/current", t["access_token"].as_str().unwrap()).await;
        assert_eq!(r.status(), 200);
    }
    let r = stack.public_post("/auth/refresh", &json!({"refresh_token": a["refresh_token"]})).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn logout_ends_the_session_at_once() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_post("/auth/logout", &s.access_token, &json!({})).await;
    assert_eq!(r.status(), 204);
    expect_api_error(stack.admin_get("/organizations/current", &s.access_token).await, 401).await;
    expect_api_error(stack.public_post("/auth/refresh", &json!({"refresh_token": s.refresh_token})).await, 401).await;
    // Its access token can no longer create keys either.
    expect_api_error(stack.create_key(&s, json!({"name": "late"})).await, 401).await;
}

#[tokio::test]
async fn refresh_with_an_unknown_token_is_401() {
    let stack = Stack::shared().await;
    expect_api_error(stack.public_post("/auth/refresh", &json!({"refresh_token": "rt_garbage"})).await, 401).await;
}

// ---- session security ----

#[tokio::test]
async fn failed_logins_lock_the_account_for_a_while() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    // The shared stack allows 10 failures per account and address per 15 minutes (the owner
    // elsewhere is not kept out: admin_accounts.rs).
    for _ in 0..10 {
        let r = stack.public_post("/auth/login", &json!({"email": s.email, "password": "wrong password!!"})).await;
        assert_eq!(r.status(), 401);
    }
    // Now even the right password waits, so guessing cannot go on.
    let r = stack.public_post("/auth/login", &json!({"email": s.email, "password": PASSWORD})).await;
    let retry: u64 = header(&r, "retry-after").parse().unwrap();
    assert!(retry > 0 && retry <= 900, "{retry}");
    let b = expect_api_error(r, 429).await;
    assert_eq!(b["error"]["message"], format!("too many attempts; retry in {retry} seconds"));
    insta::assert_json_snapshot!(b, {".error.message" => "[message]"}, @r#"
    {
      "error": {
        "code": "rate_limited",
        "fields": [],
        "message": "[message]"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "rate_limited");
    // Upper-case and full-width spellings are the same account: no way around the lock.
    let r = stack.public_post("/auth/login", &json!({"email": s.email.to_uppercase(), "password": PASSWORD})).await;
    assert_eq!(r.status(), 429);
    // Other accounts are not affected.
    let other = stack.register().await;
    let r = stack.public_post("/auth/login", &json!({"email": other.email, "password": PASSWORD})).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn attempts_from_one_address_are_throttled() {
    let stack = Stack::start_with(StackOptions {
        admin_config: "ip_attempts = 5\nip_window_secs = 60\ntrust_forwarded_for = true".into(),
        ..Default::default()
    })
    .await;
    let random_ip = || format!("10.{}.{}.{}", rand_octet(), rand_octet(), rand_octet());
    let ip = random_ip();
    let login = |ip: String| {
        let stack = &stack;
        async move {
            stack
                .http
                .post(format!("{}/api/v1/auth/login", stack.admin))
                .header("x-forwarded-for", ip)
                .json(&json!({"email": format!("nobody-{}@test.gw", uuid::Uuid::new_v4()), "password": "whatever whatever"}))
                .send()
                .await
                .unwrap()
        }
    };
    for _ in 0..5 {
        assert_eq!(login(ip.clone()).await.status(), 401);
    }
    let r = login(ip.clone()).await;
    assert_eq!(r.status(), 429);
    assert!(!header(&r, "retry-after").is_empty());
    // Another address still gets an answer.
    let other = std::iter::repeat_with(random_ip).find(|o| *o != ip).unwrap();
    assert_eq!(login(other).await.status(), 401);
}

fn rand_octet() -> u8 {
    (uuid::Uuid::new_v4().as_bytes()[0] % 250) + 1
}

#[tokio::test]
async fn a_login_flood_waits_for_hashing_slots_instead_of_growing() {
    let stack = Stack::start_with(StackOptions {
        admin_config: "max_concurrent_hashes = 1\nhash_wait_ms = 1".into(),
        ..Default::default()
    })
    .await;
    let logins = (0..8).map(|i| {
        let stack = &stack;
        async move {
            let body = json!({"email": format!("flood-{i}-{}@test.gw", uuid::Uuid::new_v4()), "password": "whatever whatever"});
            stack.public_post("/auth/login", &body).await
        }
    });
    let statuses: Vec<u16> = futures::future::join_all(logins).await.iter().map(|r| r.status().as_u16()).collect();
    // One slot: the first login hashes; those that cannot get the slot within 1 ms are told to
    // retry (503) instead of queueing memory-hungry hashes.
    assert!(statuses.contains(&401), "{statuses:?}");
    assert!(statuses.contains(&503), "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 401 || *s == 503), "{statuses:?}");
    let metrics = stack.http.get(format!("{}/metrics", stack.admin)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l.starts_with("gw_admin_hash_busy_total ") && !l.ends_with(" 0")), "{metrics}");
}

#[tokio::test]
async fn unicode_capitals_are_one_account() {
    let stack = Stack::shared().await;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let upper = format!("ÄRGER-{id}@TEST.GW");
    let r = stack
        .public_post("/auth/register", &json!({"email": upper, "password": PASSWORD, "name": "Ä", "org_name": "Ö"}))
        .await;
    assert_eq!(r.status(), 201);
    // Signing in with the lower-case spelling finds the account.
    let lower = format!("ärger-{id}@test.gw");
    let r = stack.public_post("/auth/login", &json!({"email": lower, "password": PASSWORD})).await;
    assert_eq!(r.status(), 200);
    // The lower-case twin cannot be registered beside it.
    let r = stack
        .public_post("/auth/register", &json!({"email": lower, "password": PASSWORD, "name": "Twin", "org_name": "T"}))
        .await;
    assert_eq!(r.status(), 409);
    // Nor the decomposed spelling (A + combining diaeresis).
    let decomposed = format!("A\u{308}RGER-{id}@test.gw");
    let r = stack
        .public_post(
            "/auth/register",
            &json!({"email": decomposed, "password": PASSWORD, "name": "T", "org_name": "T"}),
        )
        .await;
    assert_eq!(r.status(), 409);
}

#[tokio::test]
async fn control_characters_in_the_login_email_are_400() {
    let stack = Stack::shared().await;
    for email in ["a\u{0}@test.gw", "a@test.gw\u{7}"] {
        let r = stack.public_post("/auth/login", &json!({"email": email, "password": PASSWORD})).await;
        let b = expect_api_error(r, 400).await;
        assert_eq!(b["error"]["fields"][0]["field"], "email");
    }
}

#[tokio::test]
async fn weak_passwords_are_refused_naming_the_field() {
    let stack = Stack::shared().await;
    for pw in ["short", "aaaaaaaaaaaaaaaa", "Password1234", "reg-weak-password"] {
        let email = "reg-weak@test.gw";
        let r = stack
            .public_post("/auth/register", &json!({"email": email, "password": pw, "name": "W", "org_name": "W"}))
            .await;
        let b = expect_api_error(r, 400).await;
        assert_eq!(b["error"]["fields"][0]["field"], "password", "{pw}");
        assert!(!b.to_string().contains(pw), "the message must not echo the password");
    }
}

// ---- sign-up with e-mail verification ----

async fn verifying_stack() -> Stack {
    Stack::start_with(StackOptions { admin_config: "email_verification = true".into(), ..Default::default() }).await
}

fn token_in(body: &str) -> String {
    let start = body.find("ver_").expect("a token in the mail");
    body[start..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

#[tokio::test]
async fn sign_up_does_not_tell_registered_addresses_apart() {
    let stack = verifying_stack().await;
    let taken = format!("taken-{}@test.gw", uuid::Uuid::new_v4());
    let fresh = format!("fresh-{}@test.gw", uuid::Uuid::new_v4());
    let sign_up = |email: String| {
        let stack = &stack;
        async move {
            stack
                .public_post(
                    "/auth/register",
                    &json!({"email": email, "password": PASSWORD, "name": "N", "org_name": "O"}),
                )
                .await
        }
    };
    // The first sign-up of `taken`, completed through its link.
    assert_eq!(sign_up(taken.clone()).await.status(), 202);
    let token = token_in(&outbox(&taken, "verify_email").await.0);
    let r = stack.public_post("/auth/verify-email", &json!({"token": token, "password": PASSWORD})).await;
    assert_eq!(r.status(), 201);
    // Now a sign-up of the registered address and one of a new address look the same.
    let (a, b) = (sign_up(taken.clone()).await, sign_up(fresh.clone()).await);
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (202, 202));
    let (a, b): (Value, Value) = (a.json().await.unwrap(), b.json().await.unwrap());
    assert_eq!(a, b);
    // Only the new address got a link; the registered one got a notice without a token.
    let (notice, _) = outbox(&taken, "registration_attempt").await;
    assert!(!notice.is_empty() && !notice.contains("ver_"), "{notice}");
    assert_eq!(outbox(&taken, "verify_email").await.1, 1);
    assert_eq!(outbox(&fresh, "verify_email").await.1, 1);
    // Before its link comes back, the new address has no account to sign in to.
    let r = stack.public_post("/auth/login", &json!({"email": fresh, "password": PASSWORD})).await;
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn a_confirmation_link_works_once() {
    let stack = verifying_stack().await;
    let email = format!("once-{}@test.gw", uuid::Uuid::new_v4());
    let r = stack
        .public_post("/auth/register", &json!({"email": email, "password": PASSWORD, "name": "N", "org_name": "O"}))
        .await;
    assert_eq!(r.status(), 202);
    let token = token_in(&outbox(&email, "verify_email").await.0);
    // The link alone is not enough: whoever signed the address up chose the password.
    let b = expect_api_error(
        stack.public_post("/auth/verify-email", &json!({"token": token, "password": "another password!"})).await,
        400,
    )
    .await;
    assert_eq!(b["error"]["fields"][0]["field"], "password");
    let r = stack.public_post("/auth/verify-email", &json!({"token": token, "password": PASSWORD})).await;
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["role"], "owner");
    assert_eq!(stack.public_post("/auth/login", &json!({"email": email, "password": PASSWORD})).await.status(), 200);
    let b = expect_api_error(
        stack.public_post("/auth/verify-email", &json!({"token": token, "password": PASSWORD})).await,
        400,
    )
    .await;
    assert_eq!(b["error"]["fields"][0]["field"], "token");
    let b = expect_api_error(
        stack.public_post("/auth/verify-email", &json!({"token": "ver_forged", "password": PASSWORD})).await,
        400,
    )
    .await;
    assert_eq!(b["error"]["fields"][0]["field"], "token");
}

#[tokio::test]
async fn ended_sessions_and_their_refresh_tokens_are_pruned() {
    use diesel::prelude::*;
    use diesel_async::RunQueryDsl;
    use gw_shared::db::schema::{refresh_tokens as rt, sessions as se};
    let shared = Stack::shared().await;
    let s = shared.register().await;
    let mut conn = gw_tests::db::connect().await;
    // A sign-in that ended two days ago, with its refresh token.
    let (old, token) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let ended = chrono::Utc::now() - chrono::Duration::days(2);
    diesel::insert_into(se::table)
        .values((se::id.eq(old), se::user_id.eq(s.user_id), se::org_id.eq(s.org_id), se::expires_at.eq(ended)))
        .execute(&mut conn)
        .await
        .unwrap();
    diesel::insert_into(rt::table)
        .values((
            rt::id.eq(token),
            rt::user_id.eq(s.user_id),
            rt::org_id.eq(s.org_id),
            rt::family_id.eq(old),
            rt::token_hash.eq(gw_shared::keys::hash_secret(&token.to_string()).to_vec()),
            rt::expires_at.eq(ended),
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    // An admin process prunes when it starts (then hourly).
    let _stack = Stack::start_with(StackOptions::default()).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: i64 = se::table.filter(se::id.eq(old)).count().get_result(&mut conn).await.unwrap();
        let tokens: i64 = rt::table.filter(rt::id.eq(token)).count().get_result(&mut conn).await.unwrap();
        if left == 0 && tokens == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the ended session was not pruned");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The live session of the same user is untouched.
    assert_eq!(shared.admin_get("/organizations/current", &s.access_token).await.status(), 200);
}

// ---- GET /auth/me ----

#[tokio::test]
async fn me_says_who_the_session_is() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let team = stack.create_team(&owner, "me team").await;
    let member = stack.join(&owner, "member", &[team]).await;
    let r = stack.admin_get("/auth/me", &member.access_token).await;
    assert_eq!(r.status(), 200);
    let me: Value = r.json().await.unwrap();
    assert_eq!(me["user"]["id"], member.user_id.to_string());
    assert_eq!(me["user"]["email"], member.email.as_str());
    assert_eq!(me["organization"]["id"], owner.org_id.to_string());
    assert_eq!(me["role"], "member");
    assert_eq!(me["team_ids"], serde_json::json!([team]));
    insta::assert_json_snapshot!(me, {
        ".user.id" => "[id]", ".user.email" => "[email]", ".user.name" => "[name]",
        ".organization.id" => "[id]", ".organization.name" => "[name]", ".team_ids[]" => "[id]",
        ".session_id" => "[id]"
    }, @r#"
    {
      "organization": {
        "id": "[id]",
        "name": "[name]",
        "plan": "free"
      },
      "role": "member",
      "session_id": "[id]",
      "team_ids": [
        "[id]"
      ],
      "user": {
        "email": "[email]",
        "id": "[id]",
        "name": "[name]"
      }
    }
    "#);
}

#[tokio::test]
async fn a_path_id_that_is_not_a_uuid_is_400_without_the_parsers_words() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let b = expect_api_error(stack.admin_get("/users/me", &s.access_token).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [],
        "message": "invalid path parameter: expected an id (a UUID)"
      }
    }
    "#);
}

// ---- sign-up modes (admin.signup) ----

#[tokio::test]
async fn with_sign_up_closed_nobody_registers_and_invites_admit_existing_accounts_only() {
    let stack =
        Stack::start_with(StackOptions { admin_config: "signup = \"closed\"".into(), ..Default::default() }).await;
    let body = json!({"email": format!("c-{}@test.gw", uuid::Uuid::new_v4()), "password": PASSWORD, "name": "N", "org_name": "O"});
    let b = expect_api_error(stack.public_post("/auth/register", &body).await, 403).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "sign-up is closed on this gateway"
      }
    }
    "#);
    let owner = stack.bootstrap_owner().await;
    let email = format!("new-{}@test.gw", uuid::Uuid::new_v4());
    let invite: Value =
        stack.admin_post("/invites", &owner.access_token, &json!({"email": email})).await.json().await.unwrap();
    let accept = json!({"token": invite["token"], "name": "New", "password": PASSWORD});
    let b = expect_api_error(stack.public_post("/auth/invites/accept", &accept).await, 403).await;
    assert_eq!(
        b["error"]["message"],
        "new accounts are closed on this gateway: only an existing account accepts an invite"
    );
}

#[tokio::test]
async fn with_sign_up_by_invitation_only_an_invite_admits() {
    let stack =
        Stack::start_with(StackOptions { admin_config: "signup = \"invite_only\"".into(), ..Default::default() }).await;
    let email = format!("i-{}@test.gw", uuid::Uuid::new_v4());
    let body = json!({"email": email, "password": PASSWORD, "name": "N", "org_name": "O"});
    let b = expect_api_error(stack.public_post("/auth/register", &body).await, 403).await;
    assert_eq!(
        b["error"]["message"],
        "sign-up is by invitation only on this gateway: ask an organization for an invite"
    );
    let owner = stack.bootstrap_owner().await;
    let invite: Value =
        stack.admin_post("/invites", &owner.access_token, &json!({"email": email})).await.json().await.unwrap();
    let accept = json!({"token": invite["token"], "name": "New", "password": PASSWORD});
    let r = stack.public_post("/auth/invites/accept", &accept).await;
    assert_eq!(r.status(), 201);
}
