//! `GET /v1/models`: the list of routed models, and how the endpoint refuses bad requests. All on
//! the test binary's shared stack, each test with its own organization.

use gw_tests::{expect_openai_error, header, Stack, GW_HEADERS};
use serde_json::Value;

fn models_url(stack: &Stack) -> String {
    format!("{}/v1/models", stack.proxy)
}

async fn get_models(stack: &Stack, key: &str) -> reqwest::Response {
    stack.http.get(models_url(stack)).bearer_auth(key).send().await.unwrap()
}

#[tokio::test]
async fn models_are_listed() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = get_models(&stack, &key).await;
    assert_eq!(resp.status(), 200);
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h}");
    }
    assert_eq!(header(&resp, "x-gw-provider"), "gw");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "gpt-4o-mini",
            "mock-model",
            "dead-model",
            "fallback-model",
            "claude-test",
            "gemini-test",
            "azure-test",
            "bedrock-test",
            "text-embedding-3-small",
            "mock-embedding",
            "gemini-embedding",
            "azure-embedding"
        ]
    );
    assert!(body["data"].as_array().unwrap().iter().all(|m| m["object"] == "model"));
    insta::assert_json_snapshot!("model_list", &body, {
        ".data[].created" => "[created]",
    });
}

#[tokio::test]
async fn without_credentials_is_401_invalid_api_key() {
    let stack = Stack::shared().await;
    let r = stack.http.get(models_url(&stack)).send().await.unwrap();
    let b = expect_openai_error(r, 401).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "invalid_api_key",
        "message": "You didn't provide an API key. Send it as 'Authorization: Bearer <API_KEY>'.",
        "param": null,
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "invalid_api_key");
}

#[tokio::test]
async fn malformed_authorization_is_401() {
    let stack = Stack::shared().await;
    let r = stack.http.get(models_url(&stack)).header("authorization", "Basic dXNlcjpwYXNz").send().await.unwrap();
    let b = expect_openai_error(r, 401).await;
    assert_eq!(b["error"]["code"], "invalid_api_key");
}

#[tokio::test]
async fn unknown_key_is_401() {
    let stack = Stack::shared().await;
    let b = expect_openai_error(get_models(&stack, "sk_live_notARealKey000000000000000000000000000").await, 401).await;
    assert_eq!(b["error"]["code"], "invalid_api_key");
}

#[tokio::test]
async fn session_token_instead_of_api_key_is_401() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let b = expect_openai_error(get_models(&stack, &s.access_token).await, 401).await;
    assert!(b["error"]["message"]
        .as_str()
        .unwrap()
        .contains("(session and service-account tokens) are not accepted on /v1"));
}

#[tokio::test]
async fn revoked_key_is_401_revoked_api_key() {
    let stack = Stack::shared().await;
    let (s, key, id) = stack.org_with_key().await;
    assert_eq!(stack.admin_delete(&format!("/api-keys/{id}"), &s.access_token).await.status(), 204);
    let b = expect_openai_error(get_models(&stack, &key).await, 401).await;
    assert_eq!(b["error"]["code"], "revoked_api_key");
}

#[tokio::test]
async fn team_header_not_a_uuid_is_400_invalid_team() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let r =
        stack.http.get(models_url(&stack)).bearer_auth(&key).header("x-gw-team", "not-a-uuid").send().await.unwrap();
    let b = expect_openai_error(r, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "invalid_team",
        "message": "x-gw-team must be a team id (UUID).",
        "param": "x-gw-team",
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "invalid_team");
}

#[tokio::test]
async fn wrong_method_is_405_with_allow() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let r = stack.http.post(models_url(&stack)).bearer_auth(&key).send().await.unwrap();
    assert_eq!(header(&r, "allow"), "GET");
    insta::assert_json_snapshot!(expect_openai_error(r, 405).await, @r#"
    {
      "error": {
        "code": "method_not_allowed",
        "message": "Method POST is not allowed on /v1/models; use GET.",
        "param": null,
        "type": "invalid_request_error"
      }
    }
    "#);
}
