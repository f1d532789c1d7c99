//! A person's own account on `/api/v1/auth`: password change, reset by mail (read from the
//! outbox: this stack has no SMTP server; delivery is tested in tests/python/test_mail.py),
//! sign out everywhere, and a lockout that one address cannot turn against the owner.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use gw_tests::db::outbox;
use gw_tests::{expect_api_error, Session, Stack, PASSWORD};
use serde_json::{json, Value};

const NEW_PASSWORD: &str = "a brand new passphrase";

async fn login(stack: &Stack, email: &str, password: &str) -> reqwest::Response {
    stack.public_post("/auth/login", &json!({"email": email, "password": password})).await
}

fn reset_token(body: &str) -> String {
    let start = body.find("pwr_").expect("a reset token in the mail");
    body[start..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

async fn second_session(stack: &Stack, s: &Session) -> Value {
    let r = login(stack, &s.email, PASSWORD).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_password_change_needs_the_current_password_and_ends_the_other_sessions() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let other = second_session(&stack, &s).await;
    let other_token = other["access_token"].as_str().unwrap();

    let wrong = json!({"current_password": "not my password at all", "new_password": NEW_PASSWORD});
    let b = expect_api_error(stack.admin_post("/auth/password", &s.access_token, &wrong).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "current_password",
            "message": "is not your current password"
          }
        ],
        "message": "current_password: is not your current password"
      }
    }
    "#);
    // Nothing changed: the other session still works.
    assert_eq!(stack.admin_get("/auth/me", other_token).await.status(), 200);

    let ok = json!({"current_password": PASSWORD, "new_password": NEW_PASSWORD});
    assert_eq!(stack.admin_post("/auth/password", &s.access_token, &ok).await.status(), 204);
    // This session goes on; the other one ended, and so did its refresh token.
    assert_eq!(stack.admin_get("/auth/me", &s.access_token).await.status(), 200);
    expect_api_error(stack.admin_get("/auth/me", other_token).await, 401).await;
    let refresh = json!({"refresh_token": other["refresh_token"]});
    expect_api_error(stack.public_post("/auth/refresh", &refresh).await, 401).await;
    expect_api_error(login(&stack, &s.email, PASSWORD).await, 401).await;
    assert_eq!(login(&stack, &s.email, NEW_PASSWORD).await.status(), 200);
}

#[tokio::test]
async fn a_weak_new_password_is_refused_naming_the_field() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"current_password": PASSWORD, "new_password": "short"});
    let b = expect_api_error(stack.admin_post("/auth/password", &s.access_token, &body).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "new_password",
            "message": "must be 12 to 1024 characters, at least 5 different, not a well-known password, not your address"
          }
        ],
        "message": "new_password: must be 12 to 1024 characters, at least 5 different, not a well-known password, not your address"
      }
    }
    "#);
}

#[tokio::test]
async fn a_reset_link_works_once_and_the_request_does_not_tell_accounts_apart() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let open = second_session(&stack, &s).await;

    let nobody = format!("nobody-{}@test.gw", uuid::Uuid::new_v4());
    let r = stack.public_post("/auth/password-reset", &json!({"email": nobody})).await;
    assert_eq!(r.status(), 202);
    let unknown: Value = r.json().await.unwrap();
    let r = stack.public_post("/auth/password-reset", &json!({"email": s.email.to_uppercase()})).await;
    assert_eq!(r.status(), 202);
    let known: Value = r.json().await.unwrap();
    assert_eq!(unknown, known, "the same answer for an address with and without an account");
    assert_eq!(outbox(&nobody, "password_reset").await.1, 0);
    let (mail, n) = outbox(&s.email, "password_reset").await;
    assert_eq!(n, 1);
    let token = reset_token(&mail);
    assert!(mail.contains("/reset-password#token=pwr_"), "{mail}");

    // A weak password spends nothing.
    let weak = json!({"token": token, "new_password": "short"});
    let b = expect_api_error(stack.public_post("/auth/password-reset/confirm", &weak).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "new_password");
    let good = json!({"token": token, "new_password": NEW_PASSWORD});
    assert_eq!(stack.public_post("/auth/password-reset/confirm", &good).await.status(), 204);
    // Every session ended; the new password signs in, the old one does not.
    expect_api_error(stack.admin_get("/auth/me", &s.access_token).await, 401).await;
    expect_api_error(stack.admin_get("/auth/me", open["access_token"].as_str().unwrap()).await, 401).await;
    assert_eq!(login(&stack, &s.email, NEW_PASSWORD).await.status(), 200);
    expect_api_error(login(&stack, &s.email, PASSWORD).await, 401).await;

    // Once only.
    let again = json!({"token": token, "new_password": "yet another passphrase"});
    let b = expect_api_error(stack.public_post("/auth/password-reset/confirm", &again).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "token",
            "message": "this reset link is invalid, expired or already used"
          }
        ],
        "message": "token: this reset link is invalid, expired or already used"
      }
    }
    "#);
}

#[tokio::test]
async fn an_expired_reset_link_is_refused() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    assert_eq!(stack.public_post("/auth/password-reset", &json!({"email": s.email})).await.status(), 202);
    let token = reset_token(&outbox(&s.email, "password_reset").await.0);
    {
        use gw_shared::db::schema::password_resets as p;
        let mut conn = gw_tests::db::connect().await;
        diesel::update(p::table.filter(p::user_id.eq(s.user_id)))
            .set(p::expires_at.eq(chrono::Utc::now() - chrono::Duration::seconds(1)))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let body = json!({"token": token, "new_password": NEW_PASSWORD});
    let b = expect_api_error(stack.public_post("/auth/password-reset/confirm", &body).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "token");
    assert_eq!(login(&stack, &s.email, PASSWORD).await.status(), 200);
}

#[tokio::test]
async fn sign_out_everywhere_ends_every_session_in_every_organization() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    // The same person, a member of a second organization too.
    let other_org = stack.register().await;
    let r =
        stack.admin_post("/invites", &other_org.access_token, &json!({"email": owner.email, "role": "member"})).await;
    let token = r.json::<Value>().await.unwrap()["token"].as_str().unwrap().to_string();
    let r = stack.public_post("/auth/invites/accept", &json!({"token": token, "password": PASSWORD})).await;
    assert_eq!(r.status(), 201);
    let in_other: Value = r.json().await.unwrap();
    let in_other = in_other["access_token"].as_str().unwrap().to_string();
    let second = second_session(&stack, &owner).await;

    assert_eq!(stack.admin_post("/auth/logout-all", &owner.access_token, &json!({})).await.status(), 204);
    for token in [owner.access_token.as_str(), in_other.as_str(), second["access_token"].as_str().unwrap()] {
        expect_api_error(stack.admin_get("/auth/me", token).await, 401).await;
    }
    // The other organization's own owner is untouched.
    assert_eq!(stack.admin_get("/auth/me", &other_org.access_token).await.status(), 200);
}

/// A client whose requests come from another loopback address.
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder().local_address(ip.parse::<std::net::IpAddr>().unwrap()).build().unwrap()
}

#[tokio::test]
async fn wrong_passwords_from_one_address_do_not_keep_the_owner_out_from_another() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let attacker = client_from("127.0.0.3");
    let url = format!("{}/api/v1/auth/login", stack.admin);
    // The shared stack allows 10 failures per account and address per 15 minutes.
    for _ in 0..10 {
        let r =
            attacker.post(&url).json(&json!({"email": s.email, "password": "wrong password!!"})).send().await.unwrap();
        assert_eq!(r.status(), 401);
    }
    let r = attacker.post(&url).json(&json!({"email": s.email, "password": PASSWORD})).send().await.unwrap();
    assert_eq!(r.status(), 429, "guessing from that address stops");
    let owner = client_from("127.0.0.4");
    let r = owner.post(&url).json(&json!({"email": s.email, "password": PASSWORD})).send().await.unwrap();
    assert_eq!(r.status(), 200, "the owner, elsewhere, signs in");
}

/// An outbox row's delivery state: attempts, last error, sent at, next attempt at.
type OutboxRow = (i32, Option<String>, Option<chrono::DateTime<chrono::Utc>>, chrono::DateTime<chrono::Utc>);

#[tokio::test]
async fn mail_the_smtp_server_refuses_is_kept_and_retried_later() {
    // Nothing listens on port 1: every delivery attempt fails.
    let stack = gw_tests::Stack::start_with(gw_tests::StackOptions {
        env: vec![("GW_SMTP_URL".into(), "smtp://127.0.0.1:1".into())],
        ..Default::default()
    })
    .await;
    let s = stack.register().await;
    assert_eq!(stack.public_post("/auth/password-reset", &json!({"email": s.email})).await.status(), 202);
    use gw_shared::db::schema::email_outbox as o;
    let mut conn = gw_tests::db::connect().await;
    let mut row = None;
    for _ in 0..300 {
        let found: Option<OutboxRow> = o::table
            .filter(o::to_address.eq(&s.email))
            .filter(o::kind.eq("password_reset"))
            .select((o::attempts, o::last_error, o::sent_at, o::next_attempt_at))
            .first(&mut conn)
            .await
            .optional()
            .unwrap();
        if found.as_ref().is_some_and(|(attempts, _, _, _)| *attempts > 0) {
            row = found;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (attempts, last_error, sent_at, next_attempt_at) = row.expect("the relay tried the message");
    assert_eq!(attempts, 1);
    assert!(sent_at.is_none());
    assert!(last_error.is_some_and(|e| !e.is_empty()));
    assert!(next_attempt_at > chrono::Utc::now(), "the next attempt waits (backoff)");
    let metrics = stack.http.get(format!("{}/metrics", stack.admin)).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.lines().any(|l| l.starts_with("gw_admin_mail_total{kind=\"password_reset\",outcome=\"retry\"}")),
        "{metrics}"
    );
}
