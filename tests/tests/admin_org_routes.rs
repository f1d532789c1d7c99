//! Organizations' own routes (`/organizations/current/routes`): a deployment of an allowed kind,
//! on the organization's own provider key, served to that organization alone; base URLs held to
//! public addresses; nothing of the kind unless the operator allows it.

use std::time::{Duration, Instant};

use gw_tests::{db, expect_api_error, header, json_of, user_message, Session, Stack, StackOptions};
use serde_json::{json, Value};

const ALLOWED: &str = "org_provider_kinds = [\"openai\"]\norg_private_base_urls = true\ncircuit_failures = 1000000\nhealth_check_interval_ms = 0";

async fn add_key(stack: &Stack, s: &Session, provider: &str, secret: &str) -> String {
    let body = json!({"provider": provider, "name": "own", "secret": secret});
    let v = json_of(stack.admin_post("/provider-keys", &s.access_token, &body).await, 201).await;
    v["id"].as_str().unwrap().to_string()
}

fn own_routes(base_url: &str, key_id: &str, model: &str) -> Value {
    json!({
        "providers": [{"name": "my-openai", "kind": "openai", "base_url": base_url, "provider_key_id": key_id}],
        "models": [{"name": model, "deployments": [{"provider": "my-openai", "model": "gpt-4o-mini"}]}]
    })
}

async fn until_status(stack: &Stack, key: &str, model: &str, want: u16) -> reqwest::Response {
    let started = Instant::now();
    loop {
        let r = stack.chat(key, json!({"model": model, "messages": user_message("hi")})).await;
        if r.status() == want {
            return r;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{model} still answers {}, not {want}", r.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn credential_count(stack: &Stack, secret: &str) -> u64 {
    let v: Value =
        stack.http.get(format!("{}/_mock/credentials", stack.mock)).send().await.unwrap().json().await.unwrap();
    v["credentials"][secret]["count"].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn an_organizations_own_deployment_serves_it_alone() {
    let stack = Stack::start_with(StackOptions { routing_config: Some(ALLOWED.into()), ..Default::default() }).await;
    let (a, a_key, _) = stack.org_with_key().await;
    let (b, b_key, _) = stack.org_with_key().await;
    let secret = format!("sk-own-{}", uuid::Uuid::new_v4().simple());
    let key_id = add_key(&stack, &a, "openai", &secret).await;
    let model = "a-private-model";
    let saved = json_of(
        stack
            .admin_put(
                "/organizations/current/routes",
                &a.access_token,
                &own_routes(&format!("{}/v1", stack.mock), &key_id, model),
            )
            .await,
        200,
    )
    .await;
    assert_eq!(saved["version"], 1);
    assert!(saved["models"][0]["deployments"][0]["id"].is_string(), "{saved}");

    let r = until_status(&stack, &a_key, model, 200).await;
    let id: uuid::Uuid = header(&r, "x-gw-request-id").parse().unwrap();
    assert_eq!(credential_count(&stack, &secret).await, 1, "the organization's own key authenticated it");
    let row = db::audit_row(a.org_id, id).await;
    assert_eq!(row.routing[0]["credential"], "organization");
    assert_eq!(row.routing[0]["provider"], "my-openai");
    let listed =
        json_of(stack.http.get(format!("{}/v1/models", stack.proxy)).bearer_auth(&a_key).send().await.unwrap(), 200)
            .await;
    assert!(listed.to_string().contains(model), "{listed}");

    // Another organization: the model does not exist for it, and nothing of A's shows.
    let body = gw_tests::expect_openai_error(
        stack.chat(&b_key, json!({"model": model, "messages": user_message("hi")})).await,
        404,
    )
    .await;
    assert_eq!(body["error"]["code"], "model_not_found");
    let listed =
        json_of(stack.http.get(format!("{}/v1/models", stack.proxy)).bearer_auth(&b_key).send().await.unwrap(), 200)
            .await;
    assert!(!listed.to_string().contains(model), "{listed}");
    let theirs = json_of(stack.admin_get("/organizations/current/routes", &b.access_token).await, 200).await;
    assert_eq!(theirs, json!({"version": 0, "providers": [], "models": [], "actor_user_id": null, "updated_at": null}));
    // B cannot borrow A's key for a provider of its own.
    let borrowed = own_routes(&format!("{}/v1", stack.mock), &key_id, "b-model");
    let body =
        expect_api_error(stack.admin_put("/organizations/current/routes", &b.access_token, &borrowed).await, 400).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "providers[0].provider_key_id",
            "message": "is not a live provider key of this organization"
          }
        ],
        "message": "providers[0].provider_key_id: is not a live provider key of this organization"
      }
    }
    "#);
    assert_eq!(credential_count(&stack, &secret).await, 1, "B's attempt sent nothing");

    // Testing A's key calls A's own provider.
    let tested =
        json_of(stack.admin_post(&format!("/provider-keys/{key_id}/test"), &a.access_token, &json!({})).await, 200)
            .await;
    assert_eq!((&tested["ok"], &tested["provider"]), (&json!(true), &json!("my-openai")), "{tested}");
    assert_eq!(credential_count(&stack, &secret).await, 2);

    // A stale save is refused; A's revoked key stops its provider, never falling back on gw's.
    let mut stale = own_routes(&format!("{}/v1", stack.mock), &key_id, model);
    stale["version"] = json!(0);
    let body =
        expect_api_error(stack.admin_put("/organizations/current/routes", &a.access_token, &stale).await, 409).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "the organization's routes are at version 1, not 0: read them again and retry"
      }
    }
    "#);
    assert_eq!(stack.admin_delete(&format!("/provider-keys/{key_id}"), &a.access_token).await.status(), 204);
    let r = until_status(&stack, &a_key, model, 502).await;
    let body: Value = r.json().await.unwrap();
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "upstream_unavailable",
        "message": "gw could not connect to upstream provider 'my-openai' (the organization's provider key for it is revoked).",
        "param": null,
        "type": "api_error"
      }
    }
    "#);
    assert_eq!(credential_count(&stack, "sk-upstream-test").await, 0, "gw's own key was never sent to it");
}

#[tokio::test]
async fn organizations_base_urls_must_be_public() {
    let stack = Stack::start_with(StackOptions {
        routing_config: Some("org_provider_kinds = [\"openai\"]\nhealth_check_interval_ms = 0".into()),
        ..Default::default()
    })
    .await;
    let a = stack.register().await;
    let key_id = add_key(&stack, &a, "openai", "sk-public-only").await;
    let cases = [
        ("http://api.example.com/v1", "must be an https URL"),
        ("https://127.0.0.1/v1", "127.0.0.1 is not a public address"),
        ("https://169.254.169.254/latest", "169.254.169.254 is not a public address"),
        ("https://[::1]/v1", "::1 is not a public address"),
        ("https://10.0.0.8/v1", "10.0.0.8 is not a public address"),
    ];
    for (url, why) in cases {
        let r = stack.admin_put("/organizations/current/routes", &a.access_token, &own_routes(url, &key_id, "m")).await;
        let body = expect_api_error(r, 400).await;
        assert_eq!(body["error"]["fields"][0]["field"], "providers[0].base_url", "{url}: {body}");
        assert_eq!(body["error"]["fields"][0]["message"], why, "{url}");
    }
    let wrong_kind = json!({
        "providers": [{"name": "p", "kind": "azure", "base_url": "https://8.8.8.8/v1", "provider_key_id": key_id}],
        "models": []
    });
    let body =
        expect_api_error(stack.admin_put("/organizations/current/routes", &a.access_token, &wrong_kind).await, 400)
            .await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "providers[0].kind",
            "message": "organizations may deploy these kinds: openai"
          }
        ],
        "message": "providers[0].kind: organizations may deploy these kinds: openai"
      }
    }
    "#);
    let shadow = json!({
        "providers": [{"name": "p", "kind": "openai", "base_url": "https://8.8.8.8/v1", "provider_key_id": key_id}],
        "models": [{"name": "gpt-4o-mini", "deployments": [{"provider": "p"}]}]
    });
    let body =
        expect_api_error(stack.admin_put("/organizations/current/routes", &a.access_token, &shadow).await, 400).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "models[0].name",
            "message": "\"gpt-4o-mini\" is a model of the gateway's"
          }
        ],
        "message": "models[0].name: \"gpt-4o-mini\" is a model of the gateway's"
      }
    }
    "#);
}

#[tokio::test]
async fn organizations_have_no_providers_of_their_own_unless_the_operator_allows() {
    let stack = Stack::shared().await;
    let a = stack.register().await;
    let routes = own_routes("https://8.8.8.8/v1", &uuid::Uuid::new_v4().to_string(), "m");
    let body =
        expect_api_error(stack.admin_put("/organizations/current/routes", &a.access_token, &routes).await, 403).await;
    insta::assert_json_snapshot!(body, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "this gateway does not let organizations add providers of their own (routing.org_provider_kinds)"
      }
    }
    "#);
    let body = json!({"providers": [], "models": []});
    let saved = json_of(stack.admin_put("/organizations/current/routes", &a.access_token, &body).await, 200).await;
    assert_eq!(saved["version"], 1);
}
