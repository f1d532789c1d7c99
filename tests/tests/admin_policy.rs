//! The organization's policy through the management API: reading it, replacing it (validated,
//! versioned), templates applied to the organization and to a team, the history and reverting,
//! and who may change it.

use gw_tests::*;
use serde_json::{json, Value};

async fn put(stack: &Stack, token: &str, doc: &Value) -> reqwest::Response {
    stack
        .http
        .put(format!("{}/api/v1/organizations/current/policy", stack.admin))
        .bearer_auth(token)
        .json(doc)
        .send()
        .await
        .expect("put policy")
}

async fn get(stack: &Stack, token: &str) -> Value {
    let r = stack.admin_get("/organizations/current/policy", token).await;
    assert_eq!(r.status(), 200);
    r.json().await.expect("policy")
}

#[tokio::test]
async fn a_new_organization_has_the_builtins_and_version_zero() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let p = get(&stack, &s.access_token).await;
    assert_eq!(p["version"], 0);
    assert_eq!(p["document"], json!({"defaults": [], "mandatory": [], "policies": []}));
    for name in ["pii_redact", "topic_guard", "prompt_injection"] {
        assert_eq!(p["available"][name]["builtin"], true, "{name}");
    }
    assert_eq!(p["available"]["pii_redact"]["guardrails"][0]["type"], "pii_redact");
}

#[tokio::test]
async fn replacing_the_policy_makes_a_version() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let doc = json!({"mandatory": ["cards"], "defaults": ["prompt_injection"], "policies": [
        {"name": "cards", "description": "no cards", "guardrails": [{"type": "pii_redact", "entities": ["credit_card"]}]}]});
    let r = put(&stack, &s.access_token, &doc).await;
    assert_eq!(r.status(), 200);
    let p: Value = r.json().await.expect("body");
    assert_eq!(p["version"], 1);
    assert_eq!(p["available"]["cards"]["mandatory"], true);
    assert_eq!(p["available"]["cards"]["builtin"], false);
    assert_eq!(p["available"]["prompt_injection"]["default"], true);
    let r = put(&stack, &s.access_token, &json!({})).await;
    assert_eq!(r.json::<Value>().await.expect("body")["version"], 2);
}

#[tokio::test]
async fn the_get_body_goes_back_through_put_and_patch_merges() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let doc = json!({"mandatory": ["cards"], "policies": [
        {"name": "cards", "guardrails": [{"type": "pii_redact", "entities": ["credit_card"]}]}]});
    assert_eq!(put(&stack, &s.access_token, &doc).await.status(), 200);
    let read = get(&stack, &s.access_token).await;
    // The body GET answered, sent back: the same document, a new version.
    let again = json_of(put(&stack, &s.access_token, &read).await, 200).await;
    assert_eq!((&again["version"], &again["document"]), (&json!(2), &read["document"]));
    // Sent back once more, it names a version that is no longer current: the change in between
    // is not overwritten.
    let b = expect_api_error(put(&stack, &s.access_token, &read).await, 409).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "the policy changed since version 1 was read (it is at version 2); read it again"
      }
    }
    "#);
    assert!(b["error"]["message"].as_str().unwrap().contains("version 1"), "{b}");
    // PATCH changes the fields it names and keeps the rest.
    let r = stack
        .admin_patch("/organizations/current/policy", &s.access_token, &json!({"defaults": ["prompt_injection"]}))
        .await;
    let patched = json_of(r, 200).await;
    assert_eq!(patched["document"]["defaults"], json!(["prompt_injection"]));
    assert_eq!(patched["document"]["mandatory"], json!(["cards"]));
    assert_eq!(patched["document"]["policies"], read["document"]["policies"]);
    let r = stack.admin_patch("/organizations/current/policy", &s.access_token, &json!({"mandatory": null})).await;
    assert_eq!(json_of(r, 200).await["document"]["mandatory"], json!([]));
    let r = stack.admin_patch("/organizations/current/policy", &s.access_token, &json!({"defaults": ["nope"]})).await;
    expect_field_error(r, "defaults", "").await;
}

#[tokio::test]
async fn an_invalid_document_names_the_field() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let cases = [
        (json!({"defaults": ["nope"]}), "defaults"),
        (json!({"policies": [{"name": "Bad", "guardrails": [{"type": "prompt_injection"}]}]}), "policies[0].name"),
        (
            json!({"policies": [{"name": "r", "guardrails": [{"type": "regex", "rules": [{"name": "x", "pattern": "(a)\\1", "action": "block"}]}]}]}),
            "policies[0].guardrails[0].rules[0].pattern",
        ),
    ];
    for (doc, field) in cases {
        let r = put(&stack, &s.access_token, &doc).await;
        let e = expect_api_error(r, 400).await;
        assert_eq!(e["error"]["fields"][0]["field"], field, "{e}");
    }
    // Unknown fields and guardrail types.
    for doc in [json!({"default": []}), json!({"policies": [{"name": "a", "guardrails": [{"type": "nope"}]}]})] {
        let r = put(&stack, &s.access_token, &doc).await;
        expect_api_error(r, 400).await;
    }
    assert_eq!(get(&stack, &s.access_token).await["version"], 0, "a refused document was stored");
}

#[tokio::test]
async fn a_policy_a_team_uses_cannot_be_dropped() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let doc = json!({"policies": [{"name": "mine", "guardrails": [{"type": "prompt_injection"}]}]});
    assert_eq!(put(&stack, &s.access_token, &doc).await.status(), 200);
    let team = stack.create_team(&s, "uses mine").await;
    let r = stack.admin_patch(&format!("/teams/{team}"), &s.access_token, &json!({"default_policies": ["mine"]})).await;
    assert_eq!(r.status(), 200);
    let r = put(&stack, &s.access_token, &json!({})).await;
    let e = expect_api_error(r, 409).await;
    assert!(e["error"]["message"].as_str().unwrap_or_default().contains("mine"));
}

#[tokio::test]
async fn templates_apply_to_the_organization_and_revert() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_get("/organizations/current/policy/templates", &s.access_token).await;
    let t: Value = r.json().await.expect("templates");
    let names: Vec<&str> = t["data"].as_array().expect("data").iter().filter_map(|x| x["name"].as_str()).collect();
    assert_eq!(names, ["baseline", "strict_pii", "pci", "healthcare"]);

    let r = stack
        .admin_post("/organizations/current/policy/apply-template", &s.access_token, &json!({"template": "pci"}))
        .await;
    assert_eq!(r.status(), 200);
    let p: Value = r.json().await.expect("policy");
    assert_eq!(p["version"], 1);
    assert_eq!(p["document"]["mandatory"], json!(["pci"]));

    let r = stack
        .admin_post("/organizations/current/policy/apply-template", &s.access_token, &json!({"template": "nope"}))
        .await;
    let e = expect_api_error(r, 400).await;
    assert_eq!(e["error"]["fields"][0]["field"], "template");

    let r = stack.admin_post("/organizations/current/policy/revert", &s.access_token, &json!({"version": 1})).await;
    assert_eq!(r.status(), 200);
    let r = stack.admin_get("/organizations/current/policy/versions?limit=1", &s.access_token).await;
    let v: Value = r.json().await.expect("versions");
    assert_eq!(v["data"][0]["version"], 2);
    assert_eq!(v["data"][0]["source"], "revert:1");
    assert_eq!(v["has_more"], true);
    let r = stack.admin_get("/organizations/current/policy/versions?before=2", &s.access_token).await;
    let v: Value = r.json().await.expect("versions");
    assert_eq!(v["data"][0]["source"], "template:pci");
    assert_eq!(v["has_more"], false);

    let r = stack.admin_post("/organizations/current/policy/revert", &s.access_token, &json!({"version": 99})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 404).await, @r#"
    {
      "error": {
        "code": "not_found",
        "fields": [],
        "message": "policy version not found"
      }
    }
    "#);
    let r = stack.admin_get("/organizations/current/policy/versions?limit=0", &s.access_token).await;
    expect_api_error(r, 400).await;
}

#[tokio::test]
async fn a_template_applied_to_a_team_sets_its_defaults_reversibly() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "health").await;
    let body = json!({"template": "healthcare", "team_id": team});
    let r = stack.admin_post("/organizations/current/policy/apply-template", &s.access_token, &body).await;
    assert_eq!(r.status(), 200);
    let p: Value = r.json().await.expect("policy");
    assert_eq!(p["document"]["mandatory"], json!([]), "a team's template leaves the organization's lists");
    assert!(p["available"]["healthcare"].is_object());
    let t: Value = stack.admin_get(&format!("/teams/{team}"), &s.access_token).await.json().await.expect("team");
    assert_eq!(t["default_policies"], json!(["healthcare"]));

    let body = json!({"template": "baseline", "team_id": team});
    stack.admin_post("/organizations/current/policy/apply-template", &s.access_token, &body).await;
    let r = stack
        .admin_post("/organizations/current/policy/revert", &s.access_token, &json!({"version": 1, "team_id": team}))
        .await;
    assert_eq!(r.status(), 200);
    let t: Value = stack.admin_get(&format!("/teams/{team}"), &s.access_token).await.json().await.expect("team");
    assert_eq!(t["default_policies"], json!(["healthcare"]));

    let r = stack.admin_get(&format!("/organizations/current/policy/versions?team_id={team}"), &s.access_token).await;
    let v: Value = r.json().await.expect("versions");
    assert_eq!(v["data"].as_array().map(Vec::len), Some(3));

    let other = uuid::Uuid::now_v7();
    let body = json!({"template": "baseline", "team_id": other});
    let r = stack.admin_post("/organizations/current/policy/apply-template", &s.access_token, &body).await;
    expect_api_error(r, 404).await;
}

#[tokio::test]
async fn members_read_but_do_not_change_the_policy() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    let member = stack.join(&owner, "member", &[]).await;
    assert_eq!(get(&stack, &member.access_token).await["version"], 0);
    let r = put(&stack, &member.access_token, &json!({})).await;
    insta::assert_json_snapshot!(expect_api_error(r, 403).await, @r#"
    {
      "error": {
        "code": "forbidden",
        "fields": [],
        "message": "this action needs the admin role or higher; you are member"
      }
    }
    "#);
    let r = stack
        .admin_post("/organizations/current/policy/apply-template", &member.access_token, &json!({"template": "pci"}))
        .await;
    expect_api_error(r, 403).await;
}

#[tokio::test]
async fn a_document_over_the_rule_cap_is_refused() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    // Five policies of 50 rules each: every guardrail is within its own cap, the whole is not.
    let policies: Vec<Value> = (0..5)
        .map(|p| {
            let rules: Vec<Value> = (0..50)
                .map(|r| json!({"name": format!("r{r}"), "pattern": format!("secret-{p}-{r}"), "action": "block"}))
                .collect();
            json!({"name": format!("rules-{p}"), "guardrails": [{"type": "regex", "rules": rules}]})
        })
        .collect();
    let r = stack.admin_put("/organizations/current/policy", &s.access_token, &json!({"policies": policies})).await;
    let b = expect_api_error(r, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "policies",
            "message": "at most 200 regex rules in the whole document (this one has 250)"
          }
        ],
        "message": "policies: at most 200 regex rules in the whole document (this one has 250)"
      }
    }
    "#);
}
