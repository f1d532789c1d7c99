//! `/api/v1/teams`: create, list, read, update and delete teams, and manage their members, each
//! with the ways it is refused: invalid fields (named), a taken name, another tenant's team or
//! user (404, as if missing), a missing role, live API keys on delete. All on the test binary's
//! shared stack, each test with its own organization(s).

use std::time::{Duration, Instant};

use gw_tests::{dec, expect_api_error, expect_field_error, json_of, mock_chat, usd, user_message, Session, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

async fn create(stack: &Stack, s: &Session, body_json: Value) -> Value {
    json_of(stack.admin_post("/teams", &s.access_token, &body_json).await, 201).await
}

/// The actions of the audit trail matching `query` (e.g. `?resource_type=team`), newest first.
async fn trail(stack: &Stack, s: &Session, query: &str) -> Vec<Value> {
    let page = json_of(stack.admin_get(&format!("/audit-events{query}"), &s.access_token).await, 200).await;
    page["data"].as_array().unwrap().clone()
}

// ---- POST /teams, GET /teams/{id} ----

#[tokio::test]
async fn create_returns_the_team_with_its_settings() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let t = create(
        &stack,
        &s,
        json!({
            "name": "Platform",
            "description": "the infrastructure team",
            "metadata": {"cost_center": "42"},
            "default_policies": ["pii_redact", "pii_redact"],
            "mandatory_policies": ["prompt_injection"],
            "budget": {"amount_usd": 500.0, "period": "month"},
            "rate_limits": {"rpm": 600},
            "models": ["mock-model", "claude", "mock-model"],
        }),
    )
    .await;
    let mut fields: Vec<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "budget",
            "created_at",
            "default_policies",
            "description",
            "id",
            "mandatory_policies",
            "member_count",
            "metadata",
            "models",
            "name",
            "rate_limits",
            "spend",
            "updated_at"
        ]
    );
    assert_eq!(t["name"], "Platform");
    assert_eq!(t["description"], "the infrastructure team");
    assert_eq!(t["metadata"], json!({"cost_center": "42"}));
    assert_eq!(t["default_policies"], json!(["pii_redact"]));
    assert_eq!(t["mandatory_policies"], json!(["prompt_injection"]));
    assert_eq!(
        t["budget"],
        json!({"amount_usd": "500", "period": "month", "alert_thresholds": [50, 80, 95, 100], "hard_limit": true})
    );
    assert_eq!(t["rate_limits"], json!({"rpm": 600, "tpm": null, "max_concurrent": null}));
    assert_eq!(t["models"], json!(["mock-model", "claude"]));
    assert_eq!(t["member_count"], 0);

    let id = t["id"].as_str().unwrap();
    let got = json_of(stack.admin_get(&format!("/teams/{id}"), &s.access_token).await, 200).await;
    assert_eq!(got, t);
}

#[tokio::test]
async fn create_with_defaults_allows_every_model() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let t = create(&stack, &s, json!({"name": "Plain"})).await;
    assert_eq!(t["description"], "");
    assert_eq!(t["metadata"], json!({}));
    assert_eq!(t["default_policies"], json!([]));
    assert_eq!(t["budget"], Value::Null);
    assert_eq!(t["rate_limits"], Value::Null);
    assert_eq!(t["models"], Value::Null);
}

#[tokio::test]
async fn create_with_invalid_fields_names_the_field() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let budget = |extra: Value| {
        let mut b = json!({"amount_usd": 10.0, "period": "month"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        json!({"name": "x", "budget": b})
    };
    let cases = [
        (json!({"name": ""}), "name"),
        (json!({"name": "x".repeat(201)}), "name"),
        (json!({"name": "x", "description": "d".repeat(2001)}), "description"),
        (json!({"name": "x", "metadata": [1, 2]}), "metadata"),
        (json!({"name": "x", "default_policies": ["no_such_policy"]}), "default_policies"),
        (budget(json!({"amount_usd": 0.0})), "budget.amount_usd"),
        (budget(json!({"amount_usd": 2e9})), "budget.amount_usd"),
        (budget(json!({"period": "year"})), "budget.period"),
        (budget(json!({"alert_thresholds": [0, 50]})), "budget.alert_thresholds"),
        (budget(json!({"alert_thresholds": [80, 50]})), "budget.alert_thresholds"),
        (budget(json!({"alert_thresholds": [50, 50]})), "budget.alert_thresholds"),
        (json!({"name": "x", "rate_limits": {"rpm": 0}}), "rate_limits.rpm"),
        (json!({"name": "x", "rate_limits": {"rpm": 10, "max_concurrent": 0}}), "rate_limits.max_concurrent"),
        (json!({"name": "x", "rate_limits": {}}), "rate_limits"),
        (json!({"name": "x", "models": ["no-such-model"]}), "models"),
    ];
    for (bad, field) in cases {
        let r = stack.admin_post("/teams", &s.access_token, &bad).await;
        expect_field_error(r, field, &bad.to_string()).await;
    }
    let list = json_of(stack.admin_get("/teams", &s.access_token).await, 200).await;
    assert_eq!(list["data"], json!([]), "an invalid create left a team behind");
    // A budget that names no period is monthly.
    let team = json_of(
        stack.admin_post("/teams", &s.access_token, &json!({"name": "monthly", "budget": {"amount_usd": 5}})).await,
        201,
    )
    .await;
    assert_eq!(team["budget"]["period"], "month");
}

#[tokio::test]
async fn a_body_with_several_faults_names_each_field() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let bad = json!({"name": 5, "colour": "blue", "budget": {"amount_usd": "lots", "period": "month"}});
    let b = expect_api_error(stack.admin_post("/teams", &s.access_token, &bad).await, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "validation_error",
        "fields": [
          {
            "field": "budget.amount_usd",
            "message": "must be a decimal amount of US dollars, like \"12.50\""
          },
          {
            "field": "colour",
            "message": "is not a known field"
          },
          {
            "field": "name",
            "message": "must be a string, not integer"
          }
        ],
        "message": "budget.amount_usd: must be a decimal amount of US dollars, like \"12.50\"; colour: is not a known field; name: must be a string, not integer"
      }
    }
    "#);
}

#[tokio::test]
async fn create_with_an_unknown_field_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_post("/teams", &s.access_token, &json!({"name": "x", "colour": "blue"})).await;
    let b = expect_api_error(r, 400).await;
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
}

#[tokio::test]
async fn create_with_a_taken_name_is_409_whatever_the_case() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    stack.create_team(&s, "Ops").await;
    let r = stack.admin_post("/teams", &s.access_token, &json!({"name": "ops"})).await;
    let b = expect_api_error(r, 409).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "conflict",
        "fields": [],
        "message": "a team of this organization already has this name"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "conflict");
    // Another organization may use the name.
    let other = stack.register().await;
    stack.create_team(&other, "ops").await;
}

// ---- GET /teams ----

#[tokio::test]
async fn list_filters_by_name_and_paginates_newest_first() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let a1 = stack.create_team(&s, "alpha one").await;
    let a2 = stack.create_team(&s, "Alpha two").await;
    let b = stack.create_team(&s, "beta").await;

    let page = json_of(stack.admin_get("/teams?name=ALPHA", &s.access_token).await, 200).await;
    let ids: Vec<&str> = page["data"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [a2.to_string(), a1.to_string()]);
    // Wildcards are literal.
    let page = json_of(stack.admin_get("/teams?name=%25", &s.access_token).await, 200).await;
    assert_eq!(page["data"], json!([]));

    let first = json_of(stack.admin_get("/teams?limit=2", &s.access_token).await, 200).await;
    let ids: Vec<&str> = first["data"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [b.to_string(), a2.to_string()]);
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = json_of(stack.admin_get(&format!("/teams?limit=2&cursor={cursor}"), &s.access_token).await, 200).await;
    assert_eq!(second["data"][0]["id"], a1.to_string());
    assert_eq!(second["data"].as_array().unwrap().len(), 1);
    assert_eq!(second["next_cursor"], Value::Null);

    let r = stack.admin_get("/teams?limit=0", &s.access_token).await;
    expect_field_error(r, "limit", "limit=0").await;
    let r = stack.admin_get("/teams?colour=blue", &s.access_token).await;
    expect_api_error(r, 400).await;
}

// ---- PATCH /teams/{id} ----

#[tokio::test]
async fn update_changes_settings_and_null_clears_them() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let t = create(
        &stack,
        &s,
        json!({"name": "Research", "budget": {"amount_usd": 50.0, "period": "day"}, "models": ["mock-model"]}),
    )
    .await;
    let id = t["id"].as_str().unwrap();
    let r = stack
        .admin_patch(
            &format!("/teams/{id}"),
            &s.access_token,
            &json!({"name": "Research & Development", "budget": null, "models": null, "rate_limits": {"tpm": 1000}}),
        )
        .await;
    let u = json_of(r, 200).await;
    assert_eq!(u["name"], "Research & Development");
    assert_eq!(u["budget"], Value::Null);
    assert_eq!(u["models"], Value::Null);
    assert_eq!(u["rate_limits"]["tpm"], 1000);
    assert_eq!(u["created_at"], t["created_at"]);
    assert_ne!(u["updated_at"], t["updated_at"]);

    // Fields not sent stay as they are.
    let r = stack.admin_patch(&format!("/teams/{id}"), &s.access_token, &json!({"description": "papers"})).await;
    let u2 = json_of(r, 200).await;
    assert_eq!(u2["name"], "Research & Development");
    assert_eq!(u2["rate_limits"], u["rate_limits"]);
    assert_eq!(u2["description"], "papers");

    let got = json_of(stack.admin_get(&format!("/teams/{id}"), &s.access_token).await, 200).await;
    assert_eq!(got, u2);
    // What GET answers goes back through PATCH as it is.
    let back = json_of(stack.admin_patch(&format!("/teams/{id}"), &s.access_token, &got).await, 200).await;
    for field in ["id", "name", "description", "metadata", "default_policies", "budget", "rate_limits", "models"] {
        assert_eq!(back[field], got[field], "{field}");
    }
    let mut moved = got.clone();
    moved["id"] = json!(Uuid::now_v7());
    expect_field_error(stack.admin_patch(&format!("/teams/{id}"), &s.access_token, &moved).await, "id", "").await;
}

#[tokio::test]
async fn teams_and_keys_show_their_spend_without_a_budget() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "spenders").await;
    let created = json_of(stack.create_key(&s, json!({"name": "spending key", "team_id": team})).await, 201).await;
    let (key, key_id) = (created["key"].as_str().unwrap(), created["id"].as_str().unwrap());
    // Nothing yet, in the calendar month: no budget names another period.
    assert_eq!(created["spend"]["spend_usd"], "0");
    assert_eq!(created["spend"]["period"], "month");
    let body = json!({"model": "gpt-4o-mini", "messages": user_message("what does this cost")});
    let r = stack.chat(key, body).await;
    assert_eq!(r.status(), 200);
    let cost = dec(gw_tests::header(&r, "x-gw-cost-usd"));
    assert!(cost > dec("0"), "a priced model costs something: {cost}");
    stack.log_entry(&s, gw_tests::request_id(&r)).await;
    let t = json_of(stack.admin_get(&format!("/teams/{team}"), &s.access_token).await, 200).await;
    assert_eq!(t["budget"], Value::Null);
    assert_eq!(usd(&t["spend"]["spend_usd"]), cost, "{t}");
    let month_start = t["spend"]["period_start"].as_str().unwrap();
    assert!(month_start.ends_with("-01T00:00:00Z"), "{month_start}");
    let listed = json_of(stack.admin_get("/teams", &s.access_token).await, 200).await;
    assert_eq!(listed["data"][0]["spend"], t["spend"]);
    let k = json_of(stack.admin_get(&format!("/api-keys/{key_id}"), &s.access_token).await, 200).await;
    assert_eq!(usd(&k["spend"]["spend_usd"]), cost);
    let keys = stack.list_keys(&s.access_token, "").await;
    assert_eq!(keys["data"][0]["spend"], k["spend"]);
    let limits = json_of(stack.admin_get(&format!("/teams/{team}/limits"), &s.access_token).await, 200).await;
    assert_eq!((&limits["budget"], &limits["spend"]), (&Value::Null, &t["spend"]));
    let org = json_of(stack.admin_get("/organizations/current/limits", &s.access_token).await, 200).await;
    assert_eq!(usd(&org["spend"]["spend_usd"]), cost);
    // A daily budget puts the spend in its day.
    let r = stack
        .admin_patch(
            &format!("/teams/{team}"),
            &s.access_token,
            &json!({"budget": {"amount_usd": "1", "period": "day"}}),
        )
        .await;
    let t = json_of(r, 200).await;
    assert_eq!((&t["spend"]["period"], &t["budget"]["amount_usd"]), (&json!("day"), &json!("1")));
    assert_eq!(usd(&t["spend"]["spend_usd"]), cost);
}

#[tokio::test]
async fn update_with_nothing_or_invalid_fields_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let id = stack.create_team(&s, "t").await;
    let path = format!("/teams/{id}");
    let b = expect_api_error(stack.admin_patch(&path, &s.access_token, &json!({})).await, 400).await;
    assert_eq!(b["error"]["code"], "validation_error");
    let bad = json!({"budget": {"amount_usd": 1.0, "period": "week", "alert_thresholds": [90, 10]}});
    expect_field_error(stack.admin_patch(&path, &s.access_token, &bad).await, "budget.alert_thresholds", "thresholds")
        .await;
    let bad = json!({"default_policies": ["nope"]});
    expect_field_error(stack.admin_patch(&path, &s.access_token, &bad).await, "default_policies", "policies").await;
    let bad = json!({"name": ""});
    expect_field_error(stack.admin_patch(&path, &s.access_token, &bad).await, "name", "empty name").await;
}

#[tokio::test]
async fn update_to_a_taken_name_is_409() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    stack.create_team(&s, "first").await;
    let second = stack.create_team(&s, "second").await;
    let r = stack.admin_patch(&format!("/teams/{second}"), &s.access_token, &json!({"name": "FIRST"})).await;
    assert_eq!(expect_api_error(r, 409).await["error"]["code"], "conflict");
}

// ---- tenancy and roles ----

#[tokio::test]
async fn another_orgs_team_is_404_like_a_missing_one() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let other = stack.register().await;
    let theirs = stack.create_team(&other, "theirs").await;
    let missing = Uuid::now_v7();
    let mut bodies = Vec::new();
    for team in [theirs, missing] {
        let tok = &s.access_token;
        let b = expect_api_error(stack.admin_get(&format!("/teams/{team}"), tok).await, 404).await;
        bodies.push(b["error"].clone());
        expect_api_error(stack.admin_patch(&format!("/teams/{team}"), tok, &json!({"name": "mine"})).await, 404).await;
        expect_api_error(stack.admin_delete(&format!("/teams/{team}"), tok).await, 404).await;
        expect_api_error(stack.admin_get(&format!("/teams/{team}/members"), tok).await, 404).await;
        let member = format!("/teams/{team}/members/{}", s.user_id);
        expect_api_error(stack.admin_post(&member, tok, &json!({})).await, 404).await;
        expect_api_error(stack.admin_delete(&member, tok).await, 404).await;
    }
    assert_eq!(bodies[0], bodies[1], "another org's team must look exactly like a missing one");
    // Their team is untouched.
    let t = json_of(stack.admin_get(&format!("/teams/{theirs}"), &other.access_token).await, 200).await;
    assert_eq!(t["name"], "theirs");
    let list = json_of(stack.admin_get("/teams", &s.access_token).await, 200).await;
    assert_eq!(list["data"], json!([]));
}

#[tokio::test]
async fn viewer_reads_teams_but_cannot_change_them() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "visible").await;
    let viewer = stack.join(&s, "viewer", &[]).await;
    let tok = &viewer.access_token;
    assert_eq!(stack.admin_get("/teams", tok).await.status(), 200);
    assert_eq!(stack.admin_get(&format!("/teams/{team}"), tok).await.status(), 200);
    assert_eq!(stack.admin_get(&format!("/teams/{team}/members"), tok).await.status(), 200);
    for r in [
        stack.admin_post("/teams", tok, &json!({"name": "nope"})).await,
        stack.admin_patch(&format!("/teams/{team}"), tok, &json!({"name": "nope"})).await,
        stack.admin_delete(&format!("/teams/{team}"), tok).await,
        stack.admin_post(&format!("/teams/{team}/members/{}", viewer.user_id), tok, &json!({})).await,
        stack.admin_delete(&format!("/teams/{team}/members/{}", s.user_id), tok).await,
    ] {
        assert_eq!(expect_api_error(r, 403).await["error"]["code"], "forbidden");
    }
    let t = json_of(stack.admin_get(&format!("/teams/{team}"), &s.access_token).await, 200).await;
    assert_eq!(t["name"], "visible");
}

#[tokio::test]
async fn member_cannot_create_or_delete_teams() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "mine").await;
    let member = stack.join(&s, "member", &[team]).await;
    let r = stack.admin_post("/teams", &member.access_token, &json!({"name": "another"})).await;
    assert_eq!(expect_api_error(r, 403).await["error"]["code"], "forbidden");
    let r = stack.admin_delete(&format!("/teams/{team}"), &member.access_token).await;
    assert_eq!(expect_api_error(r, 403).await["error"]["code"], "forbidden");
}

// ---- DELETE /teams/{id} ----

#[tokio::test]
async fn delete_with_live_keys_is_409_until_revoke_keys_revokes_them() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "keyed").await;
    let created = json_of(stack.create_key(&s, json!({"name": "team key", "team_id": team})).await, 201).await;
    let key = created["key"].as_str().unwrap().to_string();
    // Warm the proxy's key cache: from here only the invalidation message can end the key fast.
    assert_eq!(stack.chat(&key, mock_chat("hi")).await.status(), 200);

    let b = expect_api_error(stack.admin_delete(&format!("/teams/{team}"), &s.access_token).await, 409).await;
    assert_eq!(b["error"]["code"], "conflict");
    assert!(b["error"]["message"].as_str().unwrap().contains("1 live API key"), "{b}");
    assert_eq!(stack.admin_get(&format!("/teams/{team}"), &s.access_token).await.status(), 200);
    assert_eq!(stack.chat(&key, mock_chat("hi")).await.status(), 200, "a refused delete must not touch the keys");

    let r = stack.admin_delete(&format!("/teams/{team}?revoke_keys=true"), &s.access_token).await;
    assert_eq!(r.status(), 204);
    let deleted_at = Instant::now();
    loop {
        let r = stack.chat(&key, mock_chat("hi")).await;
        if r.status() == 401 {
            break;
        }
        assert!(deleted_at.elapsed() < Duration::from_secs(1), "the deleted team's key still works after 1 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    expect_api_error(stack.admin_get(&format!("/teams/{team}"), &s.access_token).await, 404).await;
    let keys = stack.list_keys(&s.access_token, "").await;
    assert_eq!(keys["data"][0]["status"], "revoked");
    // The name is free again.
    stack.create_team(&s, "keyed").await;

    let events =
        trail(&stack, &s, &format!("?resource_type=api_key&resource_id={}", created["id"].as_str().unwrap())).await;
    assert!(events.iter().any(|e| e["action"] == "api_key.revoke" && e["detail"]["reason"] == "team.delete"));
}

#[tokio::test]
async fn delete_removes_the_members_and_then_the_team_is_gone() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "short-lived").await;
    let member = stack.join(&s, "member", &[team]).await;
    let u = json_of(stack.admin_get(&format!("/users/{}", member.user_id), &s.access_token).await, 200).await;
    assert_eq!(u["teams"], json!([team.to_string()]));

    assert_eq!(stack.admin_delete(&format!("/teams/{team}"), &s.access_token).await.status(), 204);
    expect_api_error(stack.admin_get(&format!("/teams/{team}"), &s.access_token).await, 404).await;
    expect_api_error(stack.admin_delete(&format!("/teams/{team}"), &s.access_token).await, 404).await;
    let u = json_of(stack.admin_get(&format!("/users/{}", member.user_id), &s.access_token).await, 200).await;
    assert_eq!(u["teams"], json!([]));
    let list = json_of(stack.admin_get("/teams", &s.access_token).await, 200).await;
    assert_eq!(list["data"], json!([]));
}

// ---- members ----

#[tokio::test]
async fn members_are_added_listed_and_removed() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "crew").await;
    let m = stack.join(&s, "member", &[]).await;
    let path = format!("/teams/{team}/members/{}", m.user_id);

    let added = json_of(stack.admin_post(&path, &s.access_token, &json!({"role": "lead"})).await, 201).await;
    let mut fields: Vec<&str> = added.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(fields, ["added_at", "email", "name", "org_role", "role", "user_id"]);
    assert_eq!(added["user_id"], m.user_id.to_string());
    assert_eq!(added["email"], m.email);
    assert_eq!(added["role"], "lead");
    assert_eq!(added["org_role"], "member");

    let t = json_of(stack.admin_get(&format!("/teams/{team}"), &s.access_token).await, 200).await;
    assert_eq!(t["member_count"], 1);
    let list = json_of(stack.admin_get(&format!("/teams/{team}/members"), &s.access_token).await, 200).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert_eq!(list["data"][0]["role"], "lead");
    assert_eq!(list["next_cursor"], Value::Null);

    // Without a body: the default role, set on the member already there.
    let r = stack.http.post(format!("{}/api/v1{path}", stack.admin)).bearer_auth(&s.access_token).send().await.unwrap();
    let again = json_of(r, 201).await;
    assert_eq!(again["role"], "member");
    let list = json_of(stack.admin_get(&format!("/teams/{team}/members"), &s.access_token).await, 200).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1);

    assert_eq!(stack.admin_delete(&path, &s.access_token).await.status(), 204);
    expect_api_error(stack.admin_delete(&path, &s.access_token).await, 404).await;
    let list = json_of(stack.admin_get(&format!("/teams/{team}/members"), &s.access_token).await, 200).await;
    assert_eq!(list["data"], json!([]));
    // Still a member of the organization.
    assert_eq!(stack.admin_get(&format!("/users/{}", m.user_id), &s.access_token).await.status(), 200);
}

#[tokio::test]
async fn add_member_with_an_invalid_role_or_body_is_400() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "crew").await;
    let path = format!("/teams/{team}/members/{}", s.user_id);
    expect_field_error(stack.admin_post(&path, &s.access_token, &json!({"role": "boss"})).await, "role", "boss").await;
    let b = expect_api_error(stack.admin_post(&path, &s.access_token, &json!({"rank": "lead"})).await, 400).await;
    assert_eq!(b["error"]["code"], "validation_error");
    let list = json_of(stack.admin_get(&format!("/teams/{team}/members"), &s.access_token).await, 200).await;
    assert_eq!(list["data"], json!([]));
}

#[tokio::test]
async fn add_member_of_another_org_is_404() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let other = stack.register().await;
    let team = stack.create_team(&s, "crew").await;
    for user in [other.user_id, Uuid::now_v7()] {
        let r = stack.admin_post(&format!("/teams/{team}/members/{user}"), &s.access_token, &json!({})).await;
        let b = expect_api_error(r, 404).await;
        assert_eq!(b["error"]["code"], "not_found");
    }
    let list = json_of(stack.admin_get(&format!("/teams/{team}/members"), &s.access_token).await, 200).await;
    assert_eq!(list["data"], json!([]));
}

// ---- the audit trail ----

#[tokio::test]
async fn team_writes_appear_in_the_audit_trail() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "audited").await;
    let path = format!("/teams/{team}");
    assert_eq!(stack.admin_patch(&path, &s.access_token, &json!({"description": "x"})).await.status(), 200);
    let member = format!("{path}/members/{}", s.user_id);
    assert_eq!(stack.admin_post(&member, &s.access_token, &json!({"role": "lead"})).await.status(), 201);
    assert_eq!(stack.admin_delete(&member, &s.access_token).await.status(), 204);
    assert_eq!(stack.admin_delete(&path, &s.access_token).await.status(), 204);

    let events = trail(&stack, &s, &format!("?resource_type=team&resource_id={team}")).await;
    let actions: Vec<&str> = events.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["team.delete", "team.member_remove", "team.member_add", "team.update", "team.create"]);
    for e in &events {
        assert_eq!(e["actor_user_id"], s.user_id.to_string());
        assert_eq!(e["actor_role"], "owner");
        assert!(e["request_id"].is_string(), "{e}");
    }
    assert_eq!(events[3]["detail"]["changed"], json!(["description"]));
    assert_eq!(events[2]["detail"]["role"], "lead");
    let only_creates = trail(&stack, &s, "?action=team.create").await;
    assert_eq!(only_creates.len(), 1);
}

#[tokio::test]
async fn a_json_array_body_is_400_not_read_by_position() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack.admin_post("/teams", &s.access_token, &json!(["array team"])).await;
    let b = expect_api_error(r, 400).await;
    assert_eq!(b["error"]["code"], "validation_error");
    let r = stack.admin_get("/teams", &s.access_token).await;
    assert_eq!(r.json::<Value>().await.unwrap()["data"], json!([]));
}

#[tokio::test]
async fn nul_characters_are_400_naming_the_field() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let body = json!({"name": "nul", "metadata": {"note": "a\u{0}b"}});
    let b = expect_api_error(stack.admin_post("/teams", &s.access_token, &body).await, 400).await;
    assert_eq!(b["error"]["fields"][0]["field"], "metadata.note");
    for path in ["/teams?name=%00", "/audit-events?action=a%00b", "/invites?status=%00"] {
        expect_api_error(stack.admin_get(path, &s.access_token).await, 400).await;
    }
}

#[tokio::test]
async fn the_spec_spelling_with_a_trailing_slash_works() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let r = stack
        .admin_post("/invites/", &s.access_token, &json!({"email": format!("slash-{}@test.gw", Uuid::new_v4())}))
        .await;
    assert_eq!(r.status(), 201);
    let r = stack.admin_get("/teams/", &s.access_token).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_teams_model_allow_list_reaches_the_proxy_at_once() {
    let stack = Stack::shared().await;
    let s = stack.register().await;
    let team = stack.create_team(&s, "narrowed").await;
    let r = stack.create_key(&s, json!({"name": "k", "team_id": team})).await;
    let key = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_string();
    let chat = json!({"model": "mock-model", "messages": user_message("hi")});
    assert_eq!(stack.chat(&key, chat.clone()).await.status(), 200);
    let r = stack.admin_patch(&format!("/teams/{team}"), &s.access_token, &json!({"models": ["gpt-4o-mini"]})).await;
    assert_eq!(r.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let r = stack.chat(&key, chat.clone()).await;
        if r.status() == 404 {
            assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "model_not_found");
            break;
        }
        assert!(Instant::now() < deadline, "the proxy still serves a model the team no longer allows");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
