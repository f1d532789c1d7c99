//! `/api/v1/organizations/current/webhooks`: an organization's webhook endpoints. Register
//! (`POST`, the signing secret answered once), list (keyset pages), get, change (`PATCH`), delete
//! and rotate the secret, never showing a stored secret; with the ways a registration is refused:
//! plain HTTP, loopback, link-local (metadata), private and credentials-carrying URLs, a name that
//! resolves to loopback, unknown event types. Roles and tenant isolation are in `admin_access.rs`.

use gw_tests::{expect_api_error, json_of, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

const PATH: &str = "/organizations/current/webhooks";
/// A public address literal: registering needs no DNS (this machine has no Internet).
const PUBLIC: &str = "https://93.184.216.34/hooks/gw";

async fn create(stack: &Stack, token: &str, body: Value) -> reqwest::Response {
    stack.admin_post(PATH, token, &body).await
}

#[tokio::test]
async fn the_secret_is_answered_once_and_never_again() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"url": PUBLIC, "description": "alerts", "event_types": ["budget.exceeded", "policy.blocked", "budget.exceeded"]});
    let made = json_of(create(&stack, &s.access_token, body).await, 201).await;
    let secret = made["secret"].as_str().unwrap_or_default();
    assert!(secret.starts_with("whsec_") && secret.len() > 40, "{secret}");
    assert_eq!(made["event_types"], json!(["budget.exceeded", "policy.blocked"]));
    assert_eq!((made["enabled"].as_bool(), made["description"].as_str()), (Some(true), Some("alerts")));
    let id = made["id"].as_str().unwrap_or_default().to_string();
    let got = json_of(stack.admin_get(&format!("{PATH}/{id}"), &s.access_token).await, 200).await;
    let mut fields: Vec<&str> = got.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
    fields.sort();
    assert_eq!(
        fields,
        [
            "created_at",
            "created_by",
            "description",
            "enabled",
            "event_types",
            "id",
            "previous_secret_valid_until",
            "updated_at",
            "url"
        ]
    );
    let page = json_of(stack.admin_get(&format!("{PATH}?limit=1"), &s.access_token).await, 200).await;
    assert_eq!(page["data"][0]["id"], id.as_str());
    assert!(!page.to_string().contains(secret), "a list showed the secret");
}

#[tokio::test]
async fn change_rotate_and_delete() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let made =
        json_of(create(&stack, &s.access_token, json!({"url": PUBLIC, "event_types": ["webhook.test"]})).await, 201)
            .await;
    let id = made["id"].as_str().unwrap_or_default().to_string();
    let path = format!("{PATH}/{id}");
    let body = json!({"enabled": false, "event_types": ["member.added", "member.removed"]});
    let changed = json_of(stack.admin_patch(&path, &s.access_token, &body).await, 200).await;
    assert_eq!(
        (changed["enabled"].as_bool(), &changed["event_types"]),
        (Some(false), &json!(["member.added", "member.removed"]))
    );
    assert_eq!(changed["url"], PUBLIC);
    let rotated =
        json_of(stack.admin_post(&format!("{path}/rotate-secret"), &s.access_token, &json!({})).await, 200).await;
    assert_ne!(rotated["secret"], made["secret"]);
    assert!(rotated["previous_secret_valid_until"].is_string(), "the old secret signs on for a while");
    let r = stack.admin_delete(&path, &s.access_token).await;
    assert_eq!(r.status(), 204);
    let b = expect_api_error(stack.admin_get(&path, &s.access_token).await, 404).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "not_found",
        "fields": [],
        "message": "webhook not found"
      }
    }
    "#);
    let b = expect_api_error(stack.admin_patch(&path, &s.access_token, &json!({})).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [],
        "message": "nothing to update: send url, description, event_types or enabled"
      }
    }
    "#);
}

#[tokio::test]
async fn destinations_that_are_not_public_https_are_refused() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let refused = |url: &str| {
        let body = json!({"url": url, "event_types": ["webhook.test"]});
        let (stack, token) = (&stack, s.access_token.clone());
        async move { expect_api_error(create(stack, &token, body).await, 400).await }
    };
    insta::assert_json_snapshot!(refused("https://127.0.0.1/").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "url",
            "message": "names 127.0.0.1, which is not a public address"
          }
        ],
        "message": "url: names 127.0.0.1, which is not a public address"
      }
    }
    "#);
    insta::assert_json_snapshot!(refused("https://169.254.169.254/latest/meta-data/").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "url",
            "message": "names 169.254.169.254, which is not a public address"
          }
        ],
        "message": "url: names 169.254.169.254, which is not a public address"
      }
    }
    "#);
    insta::assert_json_snapshot!(refused("https://localhost/").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "url",
            "message": "names localhost, which resolves to 127.0.0.1, not a public address"
          }
        ],
        "message": "url: names localhost, which resolves to 127.0.0.1, not a public address"
      }
    }
    "#);
    insta::assert_json_snapshot!(refused("https://10.1.2.3/hook").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "url",
            "message": "names 10.1.2.3, which is not a public address"
          }
        ],
        "message": "url: names 10.1.2.3, which is not a public address"
      }
    }
    "#);
    insta::assert_json_snapshot!(refused("https://[::1]/hook").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "url",
            "message": "names ::1, which is not a public address"
          }
        ],
        "message": "url: names ::1, which is not a public address"
      }
    }
    "#);
    insta::assert_json_snapshot!(refused("http://93.184.216.34/hook").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "url",
            "message": "must be an https:// URL"
          }
        ],
        "message": "url: must be an https:// URL"
      }
    }
    "#);
    insta::assert_json_snapshot!(refused("https://user:pw@93.184.216.34/hook").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "url",
            "message": "must not carry credentials"
          }
        ],
        "message": "url: must not carry credentials"
      }
    }
    "#);
    insta::assert_json_snapshot!(refused("not a url").await, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "url",
            "message": "is not a URL (relative URL without a base)"
          }
        ],
        "message": "url: is not a URL (relative URL without a base)"
      }
    }
    "#);
    let b = refused("https://localhost/").await;
    assert_eq!(b["error"]["fields"][0]["field"], "url");
}

#[tokio::test]
async fn event_types_must_be_known_and_at_least_one() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let b = expect_api_error(
        create(&stack, &s.access_token, json!({"url": PUBLIC, "event_types": ["budget.spent"]})).await,
        400,
    )
    .await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "event_types",
            "message": "unknown event type \"budget.spent\"; known: budget.threshold_crossed, budget.exceeded, policy.blocked, api_key.created, api_key.revoked, api_key.expired, provider_key.rotated, provider_key.revoked, member.added, member.removed, reconcile.discrepancy, audit.chain_broken, billing.subscription_updated, usage.sync_failed, experiment.completed, webhook.test"
          }
        ],
        "message": "event_types: unknown event type \"budget.spent\"; known: budget.threshold_crossed, budget.exceeded, policy.blocked, api_key.created, api_key.revoked, api_key.expired, provider_key.rotated, provider_key.revoked, member.added, member.removed, reconcile.discrepancy, audit.chain_broken, billing.subscription_updated, usage.sync_failed, experiment.completed, webhook.test"
      }
    }
    "#);
    let b =
        expect_api_error(create(&stack, &s.access_token, json!({"url": PUBLIC, "event_types": []})).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "event_types",
            "message": "must name at least one event type"
          }
        ],
        "message": "event_types: must name at least one event type"
      }
    }
    "#);
    let missing = format!("{PATH}/{}", Uuid::new_v4());
    expect_api_error(stack.admin_post(&format!("{missing}/rotate-secret"), &s.access_token, &json!({})).await, 404)
        .await;
}
