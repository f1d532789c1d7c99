//! Prompt templates on `/v1/chat/completions`: a request's `"prompt": {"id", "version",
//! "variables"}` renders the version (by number, label or the latest) before the request's own
//! messages, the upstream receives the rendered messages, and the response headers and the
//! audit row name the template and version. Moving a label reaches the proxy within the
//! invalidation bound (a second; the tests allow five, polling, never timing it); missing
//! variables, unknown templates, labels and versions, deleted templates and other
//! organizations' templates are refused like OpenAI refuses. On the shared stack, each test with
//! its own organization.

use gw_tests::{db, expect_openai_error, header, json_of, unique_tag, Session, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

/// A template with two versions; `production` labels version 1. Returns its id.
async fn template(stack: &Stack, s: &Session) -> String {
    let body = json!({
        "name": format!("support-{}", unique_tag()),
        "messages": [{"role": "system", "content": "v1: You help {{ customer }} in {{ language }}."}],
        "variables": {"customer": {"type": "string"}, "language": {"type": "string", "default": "English"}}
    });
    let t = json_of(stack.admin_post("/prompt-templates", &s.access_token, &body).await, 201).await;
    let id = t["id"].as_str().unwrap().to_string();
    let v2 = json!({
        "messages": [{"role": "system", "content": "v2: {{ customer }} is a valued customer."}],
        "variables": {"customer": {"type": "string"}}
    });
    json_of(stack.admin_post(&format!("/prompt-templates/{id}/versions"), &s.access_token, &v2).await, 201).await;
    label(stack, s, &id, "production", 1).await;
    id
}

async fn label(stack: &Stack, s: &Session, id: &str, label: &str, version: i64) {
    let path = format!("/prompt-templates/{id}/labels/{label}");
    json_of(stack.admin_put(&path, &s.access_token, &json!({"version": version})).await, 200).await;
}

/// Sends `body` until `done` holds of the answer, for at most five seconds (a change reaches the
/// proxies through an invalidation, documented as within a second); the last answer.
async fn until(stack: &Stack, key: &str, body: &Value, done: impl Fn(&reqwest::Response) -> bool) -> reqwest::Response {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let r = stack.chat(key, body.clone()).await;
        if done(&r) || std::time::Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn request(prompt: Value, tag: &str) -> Value {
    json!({"model": "gpt-4o-mini", "prompt": prompt,
           "messages": [{"role": "user", "content": "Where is my order?"}], "mock": {"tag": tag}})
}

#[tokio::test]
async fn a_label_renders_its_version_before_the_requests_messages_and_the_audit_row_says_which() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let id = template(&stack, &s).await;
    let tag = unique_tag();
    let prompt = json!({"id": id, "version": "production", "variables": {"customer": "Ada <\"x\">"}});
    let resp = stack.chat(&key, request(prompt, &tag)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-prompt-template"), id);
    assert_eq!(header(&resp, "x-gw-prompt-template-version"), "1");
    let request_id: Uuid = header(&resp, "x-gw-request-id").parse().unwrap();
    // The upstream got the rendered version first (no escaping: the text as sent), then the
    // request's own message, and no `prompt` member.
    let seen = stack.mock_stats_for(&tag).await;
    assert_eq!(
        seen["last_body"]["messages"],
        json!([{"role": "system", "content": "v1: You help Ada <\"x\"> in English."},
               {"role": "user", "content": "Where is my order?"}])
    );
    assert!(seen["last_body"].get("prompt").is_none(), "{seen}");
    let row = db::audit_row(s.org_id, request_id).await;
    assert_eq!((row.template_id.map(|t| t.to_string()), row.template_version), (Some(id.clone()), Some(1)));
    let logged = stack.log_entry(&s, request_id).await;
    assert_eq!(logged["template"], json!({"id": id, "version": 1}));

    // A number (OpenAI's `version` is a string; an integer works too), and the latest.
    for (version, expected) in [(json!("2"), 2), (json!(1), 1), (Value::Null, 2)] {
        let prompt = json!({"id": id, "version": version, "variables": {"customer": "Bo"}});
        let resp = stack.chat(&key, request(prompt, &tag)).await;
        assert_eq!(resp.status(), 200, "{version}");
        assert_eq!(header(&resp, "x-gw-prompt-template-version"), expected.to_string());
    }
}

#[tokio::test]
async fn moving_a_label_reaches_the_proxy() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let id = template(&stack, &s).await;
    let tag = unique_tag();
    let prompt = json!({"id": id, "version": "production", "variables": {"customer": "Cy"}});
    let first = stack.chat(&key, request(prompt.clone(), &tag)).await;
    assert_eq!(header(&first, "x-gw-prompt-template-version"), "1");
    label(&stack, &s, &id, "production", 2).await;
    let moved = until(&stack, &key, &request(prompt, &tag), |r| header(r, "x-gw-prompt-template-version") == "2").await;
    assert_eq!(header(&moved, "x-gw-prompt-template-version"), "2");
    let seen = stack.mock_stats_for(&tag).await;
    assert_eq!(seen["last_body"]["messages"][0]["content"], "v2: Cy is a valued customer.");
}

#[tokio::test]
async fn a_template_alone_is_a_whole_request() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let id = template(&stack, &s).await;
    let body = json!({"model": "mock-model", "prompt": {"id": id, "variables": {"customer": "Di"}}});
    let resp = stack.chat(&key, body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-prompt-template-version"), "2");
}

#[tokio::test]
async fn a_missing_variable_is_a_400_naming_it() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let id = template(&stack, &s).await;
    let resp = stack.chat(&key, request(json!({"id": id, "version": "production"}), &unique_tag())).await;
    let b = expect_openai_error(resp, 400).await;
    let message = b["error"]["message"].as_str().unwrap().replace(&id, "<id>");
    assert_eq!(message, "Invalid 'prompt.variables.customer': is required (prompt template '<id>', version 1).");
    assert_eq!(b["error"]["param"], "prompt.variables.customer");
    assert_eq!(b["error"]["code"], "invalid_request");
    let resp =
        stack.chat(&key, request(json!({"id": id, "version": 1, "variables": {"customer": 5}}), &unique_tag())).await;
    let b = expect_openai_error(resp, 400).await;
    assert_eq!(b["error"]["param"], "prompt.variables.customer");
    assert!(b["error"]["message"].as_str().unwrap().contains("must be a string"), "{b}");
}

#[tokio::test]
async fn a_malformed_reference_is_a_400_naming_the_parameter() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "mock-model", "prompt": {"id": "nope"}})).await;
    let b = expect_openai_error(resp, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "invalid_request",
        "message": "Invalid 'prompt.id': must be a prompt template's id (a UUID).",
        "param": "prompt.id",
        "type": "invalid_request_error"
      }
    }
    "#);
    // Without a template, messages stay required.
    let resp = stack.chat(&key, json!({"model": "mock-model"})).await;
    let b = expect_openai_error(resp, 400).await;
    assert_eq!(b["error"]["param"], "messages");
}

#[tokio::test]
async fn unknown_templates_labels_and_versions_are_404_prompt_not_found() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let id = template(&stack, &s).await;
    let missing = Uuid::now_v7();
    let resp = stack.chat(&key, request(json!({"id": missing, "variables": {"customer": "x"}}), "t")).await;
    let b = expect_openai_error(resp, 404).await;
    let b = serde_json::to_string(&b).unwrap().replace(&missing.to_string(), "<id>");
    insta::assert_snapshot!(b, @r#"{"error":{"code":"prompt_not_found","message":"No prompt template '<id>' exists.","param":"prompt","type":"invalid_request_error"}}"#);
    let resp =
        stack.chat(&key, request(json!({"id": id, "version": "staging", "variables": {"customer": "x"}}), "t")).await;
    let b = expect_openai_error(resp, 404).await;
    assert_eq!(b["error"]["message"], format!("Prompt template '{id}' has no label 'staging'."));
    let resp = stack.chat(&key, request(json!({"id": id, "version": 3, "variables": {"customer": "x"}}), "t")).await;
    let b = expect_openai_error(resp, 404).await;
    assert_eq!(b["error"]["message"], format!("Prompt template '{id}' has no version 3."));
}

#[tokio::test]
async fn a_deleted_template_and_another_organizations_template_do_not_render() {
    let stack = Stack::shared().await;
    let (s, key, _) = stack.org_with_key().await;
    let id = template(&stack, &s).await;
    let prompt = json!({"id": id, "variables": {"customer": "x"}});
    assert_eq!(stack.chat(&key, request(prompt.clone(), "t")).await.status(), 200);
    // Another organization's key cannot use it.
    let (_, other_key, _) = stack.org_with_key().await;
    expect_openai_error(stack.chat(&other_key, request(prompt.clone(), "t")).await, 404).await;
    // Deleted: gone at once for the proxy too; its versions stay readable.
    let r = stack.admin_delete(&format!("/prompt-templates/{id}"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let gone = until(&stack, &key, &request(prompt, "t"), |r| r.status() == 404).await;
    expect_openai_error(gone, 404).await;
    stack.get_ok(&s, &format!("/prompt-templates/{id}/versions/1")).await;
}
