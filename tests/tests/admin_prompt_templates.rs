//! `/api/v1/prompt-templates`: templates of chat messages over typed variables, where every edit
//! is a new immutable version, labels point at versions, rendering names a missing or ill-typed
//! variable, and a deleted template keeps its versions readable. On the test binary's shared
//! stack, each test with its own organization.

use gw_tests::{db, expect_api_error, json_of, Session, Stack};
use serde_json::{json, Value};

fn greeting(name: &str) -> Value {
    json!({
        "name": name,
        "description": "says hello",
        "messages": [
            {"role": "system", "content": "Answer in {{ language }}."},
            {"role": "user", "content": "Hello, I am {{ who }}{% if age is defined %}, {{ age }} years old{% endif %}."}
        ],
        "variables": {
            "language": {"type": "string", "default": "English"},
            "who": {"type": "string", "description": "the caller's name"},
            "age": {"type": "integer", "required": false}
        },
        "message": "first draft"
    })
}

async fn create(stack: &Stack, s: &Session, body: &Value) -> Value {
    json_of(stack.admin_post("/prompt-templates", &s.access_token, body).await, 201).await
}

async fn new_version(stack: &Stack, s: &Session, id: &str, text: &str) -> reqwest::Response {
    let body = json!({"messages": [{"role": "user", "content": text}], "message": "edit"});
    stack.admin_post(&format!("/prompt-templates/{id}/versions"), &s.access_token, &body).await
}

#[tokio::test]
async fn a_template_is_created_with_its_first_version_and_renders() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let t = create(&stack, &s, &greeting("greeting")).await;
    let id = t["id"].as_str().unwrap();
    assert_eq!((t["latest_version"].as_i64(), t["latest"]["version"].as_i64()), (Some(1), Some(1)));
    assert_eq!(t["latest"]["message"], "first draft");
    assert_eq!(t["latest"]["author_id"], s.user_id.to_string());
    assert_eq!(t["latest"]["content_hash"].as_str().map(str::len), Some(64));
    assert_eq!(t["labels"], json!({}));
    let got = stack.get_ok(&s, &format!("/prompt-templates/{id}")).await;
    assert_eq!(got["latest"], t["latest"]);
    let list = stack.get_ok(&s, "/prompt-templates").await;
    assert_eq!(list["data"].as_array().map(|d| d.len()), Some(1));
    let r = stack
        .admin_post(
            &format!("/prompt-templates/{id}/render"),
            &s.access_token,
            &json!({"variables": {"who": "Ada", "age": 36}}),
        )
        .await;
    let rendered = json_of(r, 200).await;
    assert_eq!(
        rendered["messages"],
        json!([{"role": "system", "content": "Answer in English."},
               {"role": "user", "content": "Hello, I am Ada, 36 years old."}])
    );
}

#[tokio::test]
async fn twenty_concurrent_edits_make_twenty_versions_and_none_changes() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let t = create(&stack, &s, &greeting("busy")).await;
    let id = t["id"].as_str().unwrap().to_string();
    let first = t["latest"].clone();
    let edits = (0..20).map(|i| {
        let (stack, s, id) = (&stack, &s, id.clone());
        async move { json_of(new_version(stack, s, &id, &format!("edit {i}")).await, 201).await }
    });
    let made = futures::future::join_all(edits).await;
    let mut numbers: Vec<i64> = made.iter().map(|v| v["version"].as_i64().unwrap()).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (2..=21).collect::<Vec<_>>(), "20 distinct versions after the first");
    for v in &made {
        let n = v["version"].as_i64().unwrap();
        let got = stack.get_ok(&s, &format!("/prompt-templates/{id}/versions/{n}")).await;
        assert_eq!(&got, v, "version {n} reads as it was saved");
    }
    assert_eq!(stack.get_ok(&s, &format!("/prompt-templates/{id}/versions/1")).await, first, "version 1 unchanged");
    // Nor can anything change a version behind the API's back: the database refuses.
    let refused = db::try_execute(&format!(
        "UPDATE prompt_template_versions SET messages = '[]'::jsonb WHERE template_id = '{id}' AND version = 1"
    ))
    .await
    .expect_err("a version's content was changed");
    assert!(refused.contains("prompt template versions are immutable"), "{refused}");
    assert_eq!(stack.get_ok(&s, &format!("/prompt-templates/{id}/versions/1")).await, first, "version 1 unchanged");
    // Newest first, two pages.
    let page = stack.get_ok(&s, &format!("/prompt-templates/{id}/versions?limit=15")).await;
    assert_eq!(page["data"][0]["version"], 21);
    let cursor = page["next_cursor"].as_str().unwrap().to_string();
    let rest = stack.get_ok(&s, &format!("/prompt-templates/{id}/versions?limit=15&cursor={cursor}")).await;
    assert_eq!(rest["data"].as_array().map(|d| d.len()), Some(6));
    assert_eq!(rest["next_cursor"], Value::Null);
}

#[tokio::test]
async fn labels_point_at_versions_and_render_what_they_name() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let t = create(&stack, &s, &greeting("labelled")).await;
    let id = t["id"].as_str().unwrap();
    json_of(new_version(&stack, &s, id, "version two").await, 201).await;
    let put = |label: &str, version: i64| {
        let path = format!("/prompt-templates/{id}/labels/{label}");
        let token = s.access_token.clone();
        let stack = &stack;
        async move { stack.admin_put(&path, &token, &json!({"version": version})).await }
    };
    let labelled = json_of(put("production", 1).await, 200).await;
    assert_eq!(labelled["labels"], json!({"production": 1}));
    json_of(put("staging", 2).await, 200).await;
    let render = |label: &str| {
        let body = json!({"label": label, "variables": {"who": "Bo"}});
        let path = format!("/prompt-templates/{id}/render");
        let token = s.access_token.clone();
        let stack = &stack;
        async move { json_of(stack.admin_post(&path, &token, &body).await, 200).await }
    };
    assert_eq!(render("production").await["version"], 1);
    assert_eq!(render("staging").await["messages"][0]["content"], "version two");
    // Moving a label; a version that does not exist; a label that cannot be one.
    assert_eq!(json_of(put("production", 2).await, 200).await["labels"]["production"], 2);
    let b = expect_api_error(put("production", 9).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "version",
            "message": "the template has no version 9"
          }
        ],
        "message": "version: the template has no version 9"
      }
    }
    "#);
    let b = expect_api_error(put("Prod", 1).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "label",
            "message": "1 to 64 lowercase letters, digits, - _ . (not a number)"
          }
        ],
        "message": "label: 1 to 64 lowercase letters, digits, - _ . (not a number)"
      }
    }
    "#);
    let r = stack.admin_delete(&format!("/prompt-templates/{id}/labels/staging"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let r = stack.admin_delete(&format!("/prompt-templates/{id}/labels/staging"), &s.access_token).await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn a_missing_variable_is_a_400_naming_it() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let t = create(&stack, &s, &greeting("strict")).await;
    let path = format!("/prompt-templates/{}/render", t["id"].as_str().unwrap());
    let b = expect_api_error(stack.admin_post(&path, &s.access_token, &json!({"variables": {}})).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "variables.who",
            "message": "is required"
          }
        ],
        "message": "variables.who: is required"
      }
    }
    "#);
}

#[tokio::test]
async fn an_ill_typed_variable_is_a_400_naming_it() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let t = create(&stack, &s, &greeting("typed")).await;
    let path = format!("/prompt-templates/{}/render", t["id"].as_str().unwrap());
    let body = json!({"variables": {"who": "Cy", "age": "forty"}});
    let b = expect_api_error(stack.admin_post(&path, &s.access_token, &body).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "variables.age",
            "message": "must be an integer"
          }
        ],
        "message": "variables.age: must be an integer"
      }
    }
    "#);
}

#[tokio::test]
async fn a_template_using_an_undeclared_variable_is_refused() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"name": "loose", "messages": [{"role": "user", "content": "Hi {{ nobody }}"}]});
    let b = expect_api_error(stack.admin_post("/prompt-templates", &s.access_token, &body).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "messages[0].content",
            "message": "uses \"nobody\", which is not a declared variable"
          }
        ],
        "message": "messages[0].content: uses \"nobody\", which is not a declared variable"
      }
    }
    "#);
}

#[tokio::test]
async fn a_template_that_does_not_compile_is_refused() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"name": "broken", "messages": [{"role": "user", "content": "{% if %}"}]});
    let b = expect_api_error(stack.admin_post("/prompt-templates", &s.access_token, &body).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "messages[0].content", "{b}");
}

#[tokio::test]
async fn a_second_live_template_with_a_name_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    create(&stack, &s, &greeting("twice")).await;
    let b =
        expect_api_error(stack.admin_post("/prompt-templates", &s.access_token, &greeting("twice")).await, 409).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "a template named \"twice\" exists"
      }
    }
    "#);
}

#[tokio::test]
async fn a_deleted_template_keeps_its_versions_readable() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let t = create(&stack, &s, &greeting("retired")).await;
    let id = t["id"].as_str().unwrap();
    let r = stack.admin_delete(&format!("/prompt-templates/{id}"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let got = stack.get_ok(&s, &format!("/prompt-templates/{id}")).await;
    assert!(got["deleted_at"].is_string());
    assert_eq!(stack.get_ok(&s, &format!("/prompt-templates/{id}/versions/1")).await, t["latest"]);
    assert_eq!(stack.get_ok(&s, "/prompt-templates").await["data"], json!([]));
    assert_eq!(new_version(&stack, &s, id, "too late").await.status(), 404);
    let r = stack.admin_post(&format!("/prompt-templates/{id}/render"), &s.access_token, &json!({})).await;
    assert_eq!(r.status(), 404);
    // Its name is free again.
    create(&stack, &s, &greeting("retired")).await;
}
