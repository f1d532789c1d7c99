//! Access control across the whole management API, read from its own OpenAPI document:
//! - the role matrix: every operation, called by each role, is refused with 403 exactly when the
//!   role is below the operation's `x-gw-role`, and with 401 without a session or with anything
//!   that is not one (an API key, a malformed token, a token signed with another secret, an
//!   expired token): no resource module repeats these;
//! - tenant isolation: every operation has a case in which another organization's owner
//!   addresses this organization's resources and gets 404 (or a field error), learns nothing,
//!   and changes nothing. An operation added to the API without a case here fails the test.

use std::collections::BTreeMap;

use gw_tests::{db, expect_api_error, session_token, Session, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

const ROLES: [&str; 4] = ["viewer", "member", "admin", "owner"];

fn rank(role: &str) -> usize {
    // `account`: a person's own account settings, whatever their role.
    if role == "account" {
        return 0;
    }
    ROLES.iter().position(|r| *r == role).unwrap_or(usize::MAX)
}

/// Operations that end the caller's sessions: each role calls them with a session of its own.
fn ends_sessions(path: &str) -> bool {
    path.ends_with("/auth/logout") || path.ends_with("/auth/logout-all")
}

/// Every operation of the document: (method, path, x-gw-role).
async fn operations(stack: &Stack) -> Vec<(String, String, String)> {
    let doc: Value =
        stack.http.get(format!("{}/api/v1/openapi.json", stack.admin)).send().await.unwrap().json().await.unwrap();
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let role = op["x-gw-role"].as_str().unwrap_or_else(|| panic!("{method} {path} has no x-gw-role"));
            ops.push((method.to_uppercase(), path.clone(), role.to_string()));
        }
    }
    assert!(ops.len() >= 40, "the document lists only {} operations", ops.len());
    ops
}

/// `path` with each `{param}` replaced from `ids` (a fresh UUID when absent; `{version}` 1).
fn fill(path: &str, ids: &BTreeMap<&str, String>) -> String {
    let mut out = String::new();
    for seg in path.split('/') {
        if seg.is_empty() {
            continue;
        }
        out.push('/');
        match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(name) => out.push_str(ids.get(name).cloned().unwrap_or_else(|| Uuid::new_v4().to_string()).as_str()),
            None => out.push_str(seg),
        }
    }
    out
}

async fn call(stack: &Stack, method: &str, url: &str, token: Option<&str>, body: Option<&Value>) -> reqwest::Response {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = stack.http.request(m, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn the_role_matrix_holds_for_every_operation_and_role() {
    let stack = Stack::shared().await;
    let owner = stack.register().await;
    // Enterprise: no seat limit for the many members this test makes (roles, not plans, are
    // what it checks).
    db::set_plan(owner.org_id, "enterprise").await;
    let team = stack.create_team(&owner, "matrix").await;
    let mut sessions: Vec<(&str, Session)> = Vec::new();
    for role in ["viewer", "member", "admin"] {
        sessions.push((role, stack.join(&owner, role, &[team]).await));
    }
    let (_, api_key, _) = stack.org_with_key().await;
    let (forged, _) = gw_shared::jwt::issue_access_token(
        "not-the-secret-not-the-secret-xx",
        owner.user_id,
        owner.org_id,
        Uuid::new_v4(),
        "owner",
        60,
    )
    .unwrap();
    // Expired a minute ago: beyond the verifier's few seconds of leeway.
    let expired = session_token(owner.user_id, owner.org_id, Uuid::new_v4(), "owner", -60);
    let not_sessions: [(&str, Option<&str>); 5] = [
        ("no credentials", None),
        ("an API key", Some(api_key.as_str())),
        ("a malformed token", Some("eyJhbGciOiJIUzI1NiJ9.e30.bad")),
        ("a token signed with another secret", Some(forged.as_str())),
        ("an expired token", Some(expired.as_str())),
    ];
    sessions.push(("owner", owner.clone()));
    // A gateway operator (no organization role above member is needed for the catalog).
    let operator = stack.join(&owner, "member", &[team]).await;
    db::grant_operator(operator.user_id).await;
    let ops = operations(&stack).await;
    let ids = BTreeMap::from([("team_id", team.to_string()), ("version", "1".to_string())]);
    let mut checked = 0;
    for (method, path, least) in &ops {
        let url = format!("{}{}", stack.admin, fill(path, &ids));
        let body = (method != "GET" && method != "DELETE").then(|| json!({}));
        if least == "public" {
            // A public operation may refuse its own credentials (a bad refresh token, an unknown
            // SSO state) but never asks for a session.
            let r = call(&stack, method, &url, None, body.as_ref()).await;
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            assert_ne!(status, 403, "{method} {path} is public but answered 403: {text}");
            let message =
                serde_json::from_str::<Value>(&text).map(|b| b["error"]["message"].to_string()).unwrap_or_default();
            assert!(!message.contains("Authorization"), "{method} {path} is public but asked for a session: {message}");
            continue;
        }
        for (what, token) in &not_sessions {
            let r = call(&stack, method, &url, *token, body.as_ref()).await;
            let b = expect_api_error(r, 401).await;
            assert_eq!(b["error"]["code"], "unauthorized", "{method} {path} with {what}");
            if token == &Some(api_key.as_str()) {
                let message = b["error"]["message"].as_str().unwrap_or_default();
                assert!(message.contains("API keys are not accepted"), "{method} {path}: {message}");
            }
        }
        let own: Vec<(&str, Session)> = if ends_sessions(path) {
            let mut fresh = Vec::new();
            for role in ROLES {
                fresh.push((role, stack.join(&owner, role, &[team]).await));
            }
            fresh
        } else {
            sessions.clone()
        };
        for (role, s) in &own {
            let r = call(&stack, method, &url, Some(&s.access_token), body.as_ref()).await;
            let status = r.status().as_u16();
            if rank(role) < rank(least) {
                let b = expect_api_error(r, 403).await;
                assert_eq!(b["error"]["code"], "forbidden", "{role} on {method} {path}");
            } else {
                assert!(![401, 403].contains(&status), "{role} on {method} {path} (needs {least}) got {status}");
            }
            checked += 1;
        }
        if least == "operator" {
            // The shared stack's routes come from its file: reads answer, writes are refused 409.
            let r = call(&stack, method, &url, Some(&operator.access_token), body.as_ref()).await;
            let status = r.status().as_u16();
            assert!(![401, 403].contains(&status), "an operator on {method} {path} got {status}");
        }
    }
    assert!(checked >= 4 * 30, "only {checked} role checks ran");
}

/// Org A with one of each resource, and the ids to address them by.
struct Tenant {
    owner: Session,
    team: String,
    user: String,
    api_key: String,
    provider_key: String,
    invite: String,
    sso: String,
    service_account: String,
    webhook: String,
    /// A prompt template with its version 1 labelled `production`.
    template: String,
    experiment: String,
    /// A test delivery to that endpoint.
    delivery: String,
    /// A request-log entry and a reconcile run of A's, written straight to the database.
    log: String,
    run: String,
}

async fn seed_log_and_run(org_id: Uuid) -> (String, String) {
    let mut conn = db::connect().await;
    let log = db::record(org_id, chrono::Utc::now());
    gw_shared::db::audit_logs::insert_batch(&mut conn, std::slice::from_ref(&log)).await.unwrap();
    let today = chrono::Utc::now().date_naive();
    let run = gw_shared::db::reconcile_runs::Run {
        id: Uuid::now_v7(),
        org_id,
        provider: "upstream".into(),
        start_day: today,
        end_day: today,
        created_by: None,
        created_at: chrono::Utc::now(),
        logged: json!([]),
        reported: json!([]),
        discrepancies: json!([]),
    };
    gw_shared::db::reconcile_runs::insert(&mut conn, &run).await.unwrap();
    (log.id.to_string(), run.id.to_string())
}

async fn tenant(stack: &Stack) -> Tenant {
    let owner = stack.register().await;
    db::set_plan(owner.org_id, "growth").await;
    let team = stack.create_team(&owner, "isolated").await;
    let user = stack.join(&owner, "member", &[team]).await.user_id;
    let t = &owner.access_token;
    let id = |v: &Value| v["id"].as_str().expect("id").to_string();
    let r = stack.admin_post("/api-keys", t, &json!({"name": "a", "team_id": team})).await;
    assert_eq!(r.status(), 201);
    let api_key = id(&r.json().await.unwrap());
    let r = stack
        .admin_post("/provider-keys", t, &json!({"provider": "upstream", "name": "p", "secret": "sk-tenant-a"}))
        .await;
    assert_eq!(r.status(), 201);
    let provider_key = id(&r.json().await.unwrap());
    let r = stack.admin_post("/invites", t, &json!({"email": format!("i-{}@test.gw", Uuid::new_v4())})).await;
    assert_eq!(r.status(), 201);
    let invite = id(&r.json().await.unwrap());
    let domain = format!("a{}.example.com", Uuid::new_v4().simple());
    let body = json!({"name": "idp", "issuer": "https://idp.example.com", "client_id": "c", "client_secret": "s3cret-value",
                      "email_domains": [domain], "team_mapping": {"eng": [team]}});
    let r = stack.admin_post("/sso/connections", t, &body).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let sso = id(&r.json().await.unwrap());
    let r = stack.admin_post("/service-accounts", t, &json!({"name": "ci", "role": "admin"})).await;
    assert_eq!(r.status(), 201);
    let service_account = id(&r.json().await.unwrap());
    let body = json!({"url": "https://93.184.216.34/a", "event_types": ["budget.exceeded"]});
    let r = stack.admin_post("/organizations/current/webhooks", t, &body).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let webhook = id(&r.json().await.unwrap());
    let r = stack.admin_post(&format!("/organizations/current/webhooks/{webhook}/test"), t, &json!({})).await;
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap_or_default());
    let delivery = id(&r.json().await.unwrap());
    let body = json!({"name": "greeting", "messages": [{"role": "user", "content": "Hello {{ who }}"}],
                      "variables": {"who": {"type": "string"}}});
    let r = stack.admin_post("/prompt-templates", t, &body).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let template = id(&r.json().await.unwrap());
    let r =
        stack.admin_put(&format!("/prompt-templates/{template}/labels/production"), t, &json!({"version": 1})).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    let body = json!({"name": "e", "metric": "latency", "traffic": {"template_id": template, "team_id": team},
                      "variants": [{"name": "a"}, {"name": "b", "model": "gpt-4o-mini"}]});
    let r = stack.admin_post("/experiments", t, &body).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let experiment = id(&r.json().await.unwrap());
    let (log, run) = seed_log_and_run(owner.org_id).await;
    Tenant {
        experiment,
        owner,
        team: team.to_string(),
        user: user.to_string(),
        api_key,
        provider_key,
        invite,
        sso,
        service_account,
        webhook,
        template,
        delivery,
        log,
        run,
    }
}

/// What A can see of its own resources: compared before and after B's attempts.
async fn snapshot(stack: &Stack, a: &Tenant) -> Vec<Value> {
    let t = &a.owner.access_token;
    let mut out = Vec::new();
    for path in [
        "/organizations/current".to_string(),
        format!("/teams/{}", a.team),
        format!("/teams/{}/members", a.team),
        format!("/users/{}", a.user),
        format!("/api-keys/{}", a.api_key),
        format!("/provider-keys/{}", a.provider_key),
        format!("/sso/connections/{}", a.sso),
        format!("/service-accounts/{}", a.service_account),
        format!("/organizations/current/webhooks/{}", a.webhook),
        format!("/prompt-templates/{}", a.template),
        format!("/prompt-templates/{}/versions", a.template),
        format!("/experiments/{}", a.experiment),
        format!("/experiments/{}/results", a.experiment),
        "/invites".to_string(),
        "/users".to_string(),
    ] {
        let r = stack.admin_get(&path, t).await;
        assert_eq!(r.status(), 200, "A reading its own {path}");
        out.push(r.json().await.unwrap());
    }
    out
}

/// How an operation is tried across tenants.
enum Case {
    /// B addresses A's resource by id: 404, and the body names nothing of A's.
    Foreign(Option<Value>),
    /// B lists: none of A's ids appear.
    List,
    /// B creates something referring to A's resource: refused with a field error.
    ForeignReference(Value),
    /// Scoped to the caller's own organization or session by construction; no foreign id can be
    /// expressed (the request runs as B and must only touch B).
    OwnScope(Option<Value>),
    /// The caller's own account, refused for what the request lacks (a second factor, a code):
    /// a 4xx other than 401/403 that names nothing of A's.
    OwnRefused(Value),
    /// No session: sign-up, sign-in, refresh, SSO, invite acceptance, the document.
    Public,
    /// The gateway's route catalog: no organization's, and refused to B (no operator).
    Gateway,
}

fn cases(a: &Tenant) -> BTreeMap<(&'static str, &'static str), Case> {
    use Case::*;
    let foreign_team = json!({"name": "x", "team_id": a.team});
    BTreeMap::from([
        (("GET", "/api/v1/openapi.json"), Public),
        (("POST", "/api/v1/auth/register"), Public),
        (("POST", "/api/v1/billing/webhook"), Public),
        // B has no billing account, and sells no plan here: refused, whatever A has.
        (("POST", "/api/v1/billing/portal"), OwnRefused(json!({"return_url": "https://app.example.com/"}))),
        (
            ("POST", "/api/v1/billing/checkout"),
            OwnRefused(
                json!({"plan": "growth", "success_url": "https://a.example/", "cancel_url": "https://a.example/"}),
            ),
        ),
        (("POST", "/api/v1/auth/login"), Public),
        (("POST", "/api/v1/auth/verify-email"), Public),
        (("POST", "/api/v1/auth/refresh"), Public),
        (("POST", "/api/v1/auth/sso/initiate"), Public),
        (("GET", "/api/v1/auth/sso/callback"), Public),
        (("POST", "/api/v1/auth/invites/accept"), Public),
        (("POST", "/api/v1/auth/sso/link"), Public),
        (("POST", "/api/v1/auth/password-reset"), Public),
        (("POST", "/api/v1/auth/password-reset/confirm"), Public),
        (("POST", "/api/v1/auth/logout"), OwnScope(None)),
        (("POST", "/api/v1/auth/logout-all"), OwnScope(None)),
        (
            ("POST", "/api/v1/auth/password"),
            OwnScope(Some(json!({"current_password": gw_tests::PASSWORD, "new_password": gw_tests::PASSWORD}))),
        ),
        (("GET", "/api/v1/auth/totp"), OwnScope(None)),
        (("POST", "/api/v1/auth/totp/setup"), OwnScope(Some(json!({"password": gw_tests::PASSWORD})))),
        (("POST", "/api/v1/auth/totp/enable"), OwnRefused(json!({"code": "000000"}))),
        (("POST", "/api/v1/auth/totp/disable"), OwnRefused(json!({"password": gw_tests::PASSWORD}))),
        (("POST", "/api/v1/auth/totp/recovery-codes"), OwnRefused(json!({"password": gw_tests::PASSWORD}))),
        (("GET", "/api/v1/service-accounts"), List),
        (("POST", "/api/v1/service-accounts"), OwnScope(Some(json!({"name": "b-ci", "role": "viewer"})))),
        (("GET", "/api/v1/service-accounts/{account_id}"), Foreign(None)),
        (("DELETE", "/api/v1/service-accounts/{account_id}"), Foreign(None)),
        (("POST", "/api/v1/sso/connections/{connection_id}/domains/{domain}/verify"), Foreign(None)),
        (("GET", "/api/v1/auth/me"), OwnScope(None)),
        (("GET", "/api/v1/auth/me/alerts"), OwnScope(None)),
        (("PUT", "/api/v1/auth/me/alerts"), OwnScope(Some(json!({"budget": true})))),
        (("GET", "/api/v1/organizations/current"), OwnScope(None)),
        (("GET", "/api/v1/organizations/current/limits"), OwnScope(None)),
        (("GET", "/api/v1/organizations/current/routes"), List),
        (("PUT", "/api/v1/organizations/current/routes"), OwnScope(Some(json!({"providers": [], "models": []})))),
        (("GET", "/api/v1/organizations/current/policy"), List),
        (("PUT", "/api/v1/organizations/current/policy"), OwnScope(Some(json!({"defaults": []})))),
        (("PATCH", "/api/v1/organizations/current/policy"), OwnScope(Some(json!({"defaults": []})))),
        (("GET", "/api/v1/organizations/current/policy/templates"), List),
        (
            ("POST", "/api/v1/organizations/current/policy/apply-template"),
            Foreign(Some(json!({"template": "baseline", "team_id": a.team}))),
        ),
        (("GET", "/api/v1/organizations/current/policy/versions"), List),
        (
            ("POST", "/api/v1/organizations/current/policy/revert"),
            Foreign(Some(json!({"version": 1, "team_id": a.team}))),
        ),
        (("PATCH", "/api/v1/organizations/current"), OwnScope(Some(json!({"name": "B renamed"})))),
        (("GET", "/api/v1/organizations/current/cache"), List),
        (("PUT", "/api/v1/organizations/current/cache"), OwnScope(Some(json!({"l1": false})))),
        (("PATCH", "/api/v1/organizations/current/cache"), OwnScope(Some(json!({"ttl_seconds": 600})))),
        (("POST", "/api/v1/organizations/current/cache/purge"), OwnScope(Some(json!({})))),
        (("PUT", "/api/v1/teams/{team_id}/cache"), Foreign(Some(json!({"l1": true})))),
        (("PATCH", "/api/v1/teams/{team_id}/cache"), Foreign(Some(json!({"l1": true})))),
        (("DELETE", "/api/v1/teams/{team_id}/cache"), Foreign(None)),
        (("GET", "/api/v1/teams"), List),
        (("POST", "/api/v1/teams"), OwnScope(Some(json!({"name": "isolated"})))),
        (("GET", "/api/v1/teams/{team_id}"), Foreign(None)),
        (("PATCH", "/api/v1/teams/{team_id}"), Foreign(Some(json!({"name": "stolen"})))),
        (("DELETE", "/api/v1/teams/{team_id}"), Foreign(None)),
        (("GET", "/api/v1/teams/{team_id}/members"), Foreign(None)),
        (("GET", "/api/v1/teams/{team_id}/limits"), Foreign(None)),
        (("POST", "/api/v1/teams/{team_id}/members/{user_id}"), Foreign(None)),
        (("DELETE", "/api/v1/teams/{team_id}/members/{user_id}"), Foreign(None)),
        (("GET", "/api/v1/users"), List),
        (("GET", "/api/v1/users/{user_id}"), Foreign(None)),
        (("PATCH", "/api/v1/users/{user_id}"), Foreign(Some(json!({"role": "viewer"})))),
        (("DELETE", "/api/v1/users/{user_id}"), Foreign(None)),
        (("POST", "/api/v1/users/{user_id}/transfer-keys"), Foreign(Some(json!({"to_user_id": Uuid::new_v4()})))),
        (("GET", "/api/v1/invites"), List),
        (("POST", "/api/v1/invites"), ForeignReference(json!({"email": "x@test.gw", "team_ids": [a.team]}))),
        (("DELETE", "/api/v1/invites/{invite_id}"), Foreign(None)),
        (("GET", "/api/v1/api-keys"), List),
        (("POST", "/api/v1/api-keys"), ForeignReference(foreign_team)),
        (("GET", "/api/v1/api-keys/{key_id}"), Foreign(None)),
        (("GET", "/api/v1/api-keys/{key_id}/limits"), Foreign(None)),
        (("PATCH", "/api/v1/api-keys/{key_id}"), Foreign(Some(json!({"name": "stolen"})))),
        (("DELETE", "/api/v1/api-keys/{key_id}"), Foreign(None)),
        (("POST", "/api/v1/api-keys/{key_id}/regenerate"), Foreign(Some(json!({})))),
        (("GET", "/api/v1/provider-keys"), List),
        (
            ("POST", "/api/v1/provider-keys"),
            OwnScope(Some(json!({"provider": "upstream", "name": "b", "secret": "sk-b"}))),
        ),
        (("GET", "/api/v1/provider-keys/{key_id}"), Foreign(None)),
        (("PATCH", "/api/v1/provider-keys/{key_id}"), Foreign(Some(json!({"name": "stolen"})))),
        (("DELETE", "/api/v1/provider-keys/{key_id}"), Foreign(None)),
        (("POST", "/api/v1/provider-keys/{key_id}/rotate"), Foreign(Some(json!({"secret": "sk-stolen"})))),
        (("POST", "/api/v1/provider-keys/{key_id}/test"), Foreign(None)),
        (("GET", "/api/v1/sso/connections"), List),
        (
            ("POST", "/api/v1/sso/connections"),
            ForeignReference(json!({"name": "b", "issuer": "https://idp.example.com", "client_id": "c",
                "client_secret": "s3cret-value", "email_domains": [format!("b{}.example.com", Uuid::new_v4().simple())],
                "team_mapping": {"eng": [a.team]}})),
        ),
        (("GET", "/api/v1/sso/connections/{connection_id}"), Foreign(None)),
        (("PATCH", "/api/v1/sso/connections/{connection_id}"), Foreign(Some(json!({"name": "stolen"})))),
        (("DELETE", "/api/v1/sso/connections/{connection_id}"), Foreign(None)),
        (("GET", "/api/v1/audit-events"), List),
        (("GET", "/api/v1/analytics/policy"), List),
        (("GET", "/api/v1/analytics/policy/export"), List),
        (("GET", "/api/v1/analytics/cache"), List),
        (("GET", "/api/v1/analytics/overview"), List),
        (("GET", "/api/v1/analytics/logs"), List),
        (("GET", "/api/v1/analytics/logs/{log_id}"), Foreign(None)),
        (("GET", "/api/v1/analytics/compliance/export"), List),
        (("GET", "/api/v1/analytics/reconcile"), List),
        (("GET", "/api/v1/analytics/reconcile/{run_id}"), Foreign(None)),
        (("GET", "/api/v1/organizations/current/webhooks"), List),
        (
            ("POST", "/api/v1/organizations/current/webhooks"),
            OwnScope(Some(json!({"url": "https://93.184.216.34/b", "event_types": ["policy.blocked"]}))),
        ),
        (("GET", "/api/v1/organizations/current/webhooks/{webhook_id}"), Foreign(None)),
        (("PATCH", "/api/v1/organizations/current/webhooks/{webhook_id}"), Foreign(Some(json!({"enabled": false})))),
        (("DELETE", "/api/v1/organizations/current/webhooks/{webhook_id}"), Foreign(None)),
        (("POST", "/api/v1/organizations/current/webhooks/{webhook_id}/rotate-secret"), Foreign(None)),
        (("POST", "/api/v1/organizations/current/webhooks/{webhook_id}/test"), Foreign(None)),
        (("GET", "/api/v1/organizations/current/webhooks/deliveries"), List),
        (("GET", "/api/v1/prompt-templates"), List),
        (
            ("POST", "/api/v1/prompt-templates"),
            OwnScope(Some(json!({"name": "b's", "messages": [{"role": "user", "content": "hi"}]}))),
        ),
        (("GET", "/api/v1/prompt-templates/{template_id}"), Foreign(None)),
        (("DELETE", "/api/v1/prompt-templates/{template_id}"), Foreign(None)),
        (("GET", "/api/v1/prompt-templates/{template_id}/versions"), Foreign(None)),
        (
            ("POST", "/api/v1/prompt-templates/{template_id}/versions"),
            Foreign(Some(json!({"messages": [{"role": "user", "content": "taken"}]}))),
        ),
        (("GET", "/api/v1/prompt-templates/{template_id}/versions/{version}"), Foreign(None)),
        (("PUT", "/api/v1/prompt-templates/{template_id}/labels/{label}"), Foreign(Some(json!({"version": 1})))),
        (("DELETE", "/api/v1/prompt-templates/{template_id}/labels/{label}"), Foreign(None)),
        (("POST", "/api/v1/prompt-templates/{template_id}/render"), Foreign(Some(json!({"variables": {"who": "B"}})))),
        (("POST", "/api/v1/organizations/current/webhooks/deliveries/{delivery_id}/retry"), Foreign(None)),
        (("GET", "/api/v1/experiments"), List),
        (
            ("POST", "/api/v1/experiments"),
            ForeignReference(json!({"name": "b's", "metric": "cost", "traffic": {"template_id": a.template},
                "variants": [{"name": "a"}, {"name": "b", "template_version": 1}]})),
        ),
        (("GET", "/api/v1/experiments/{experiment_id}"), Foreign(None)),
        (("POST", "/api/v1/experiments/{experiment_id}/start"), Foreign(None)),
        (("POST", "/api/v1/experiments/{experiment_id}/pause"), Foreign(None)),
        (("POST", "/api/v1/experiments/{experiment_id}/stop"), Foreign(None)),
        (("GET", "/api/v1/experiments/{experiment_id}/results"), Foreign(None)),
        // Feedback is kept per organization: B's score on A's request id is B's alone.
        (("PUT", "/api/v1/requests/{request_id}/feedback"), OwnScope(Some(json!({"score": 1})))),
        (
            ("POST", "/api/v1/playground/compare"),
            ForeignReference(json!({"models": ["mock-model", "gpt-4o-mini"], "team_id": a.team,
                "messages": [{"role": "user", "content": "hi"}]})),
        ),
        (("GET", "/api/v1/gateway/routes"), Gateway),
        (("GET", "/api/v1/gateway/routes/versions"), Gateway),
        (("GET", "/api/v1/gateway/routes/versions/{version}"), Gateway),
        (("POST", "/api/v1/gateway/routes/versions/{version}/restore"), Gateway),
        (("GET", "/api/v1/gateway/providers"), Gateway),
        (("POST", "/api/v1/gateway/providers"), Gateway),
        (("GET", "/api/v1/gateway/providers/{name}"), Gateway),
        (("PATCH", "/api/v1/gateway/providers/{name}"), Gateway),
        (("DELETE", "/api/v1/gateway/providers/{name}"), Gateway),
        (("GET", "/api/v1/gateway/models"), Gateway),
        (("POST", "/api/v1/gateway/models"), Gateway),
        (("GET", "/api/v1/gateway/models/{name}"), Gateway),
        (("PATCH", "/api/v1/gateway/models/{name}"), Gateway),
        (("DELETE", "/api/v1/gateway/models/{name}"), Gateway),
        (("POST", "/api/v1/gateway/models/{name}/deployments"), Gateway),
        (("PATCH", "/api/v1/gateway/models/{name}/deployments/{deployment_id}"), Gateway),
        (("DELETE", "/api/v1/gateway/models/{name}/deployments/{deployment_id}"), Gateway),
        (("GET", "/api/v1/gateway/organizations/{org_id}/quota"), Gateway),
        (("PUT", "/api/v1/gateway/organizations/{org_id}/quota"), Gateway),
        (("DELETE", "/api/v1/gateway/organizations/{org_id}/quota"), Gateway),
        // B reconciles its own spend (no key of its own: refused without touching A's).
        (
            ("POST", "/api/v1/analytics/reconcile"),
            ForeignReference(json!({"provider": "upstream", "from": "2026-01-01"})),
        ),
    ])
}

#[tokio::test]
async fn no_operation_reaches_another_organizations_resources() {
    let stack = Stack::shared().await;
    let a = tenant(&stack).await;
    let b = stack.register().await;
    db::set_plan(b.org_id, "growth").await;
    // B's own session for the one call that ends it.
    let b_logout = stack.join(&b, "admin", &[]).await;
    let b_logout_all = stack.join(&b, "admin", &[]).await;
    let before = snapshot(&stack, &a).await;
    let cases = cases(&a);
    let ids = BTreeMap::from([
        ("team_id", a.team.clone()),
        ("user_id", a.user.clone()),
        ("invite_id", a.invite.clone()),
        ("connection_id", a.sso.clone()),
        ("log_id", a.log.clone()),
        ("run_id", a.run.clone()),
        ("account_id", a.service_account.clone()),
        ("webhook_id", a.webhook.clone()),
        ("template_id", a.template.clone()),
        ("experiment_id", a.experiment.clone()),
        ("request_id", a.log.clone()),
        ("version", "1".to_string()),
        ("label", "production".to_string()),
        ("delivery_id", a.delivery.clone()),
        ("domain", "example.com".to_string()),
        ("org_id", a.owner.org_id.to_string()),
    ]);
    let secret_ids = [
        &a.team,
        &a.user,
        &a.api_key,
        &a.provider_key,
        &a.invite,
        &a.sso,
        &a.service_account,
        &a.webhook,
        &a.template,
        &a.experiment,
        &a.delivery,
        &a.log,
        &a.run,
    ];
    let ops = operations(&stack).await;
    let mut missing = Vec::new();
    for (method, path, _) in &ops {
        let Some(case) = cases.get(&(method.as_str(), path.as_str())) else {
            missing.push(format!("{method} {path}"));
            continue;
        };
        let mut ids = ids.clone();
        let key = if path.starts_with("/api/v1/provider-keys") { &a.provider_key } else { &a.api_key };
        ids.insert("key_id", key.clone());
        let url = format!("{}{}", stack.admin, fill(path, &ids));
        match case {
            Case::Public => {}
            Case::OwnScope(body) => {
                let token = if path.ends_with("/logout") {
                    &b_logout.access_token
                } else if path.ends_with("/logout-all") {
                    &b_logout_all.access_token
                } else {
                    &b.access_token
                };
                let r = call(&stack, method, &url, Some(token), body.as_ref()).await;
                assert!(r.status().is_success(), "{method} {path} as B: {}", r.status());
                let text = r.text().await.unwrap();
                for id in secret_ids {
                    assert!(!text.contains(id.as_str()), "{method} {path} showed B an id of A's");
                }
            }
            Case::Foreign(body) => {
                let r = call(&stack, method, &url, Some(&b.access_token), body.as_ref().or(Some(&json!({})))).await;
                let status = r.status().as_u16();
                let text = r.text().await.unwrap();
                assert!(status == 404 || status == 403, "{method} {path} on A's resource as B: {status} {text}");
                for id in secret_ids {
                    assert!(!text.contains(id.as_str()), "{method} {path} told B about A's {id}");
                }
            }
            Case::List => {
                let r = call(&stack, method, &url, Some(&b.access_token), None).await;
                assert_eq!(r.status(), 200, "{method} {path}");
                let text = r.text().await.unwrap();
                for id in secret_ids {
                    assert!(!text.contains(id.as_str()), "{method} {path} listed A's {id} to B");
                }
            }
            Case::OwnRefused(body) => {
                let r = call(&stack, method, &url, Some(&b.access_token), Some(body)).await;
                let status = r.status().as_u16();
                let text = r.text().await.unwrap();
                assert!(
                    (400..500).contains(&status) && ![401, 403].contains(&status),
                    "{method} {path}: {status} {text}"
                );
                for id in secret_ids {
                    assert!(!text.contains(id.as_str()), "{method} {path} told B about A's {id}");
                }
            }
            Case::Gateway => {
                let r = call(&stack, method, &url, Some(&b.access_token), Some(&json!({}))).await;
                let b = expect_api_error(r, 403).await;
                assert_eq!(b["error"]["message"], "this action needs the gateway operator role", "{method} {path}");
            }
            Case::ForeignReference(body) => {
                let r = call(&stack, method, &url, Some(&b.access_token), Some(body)).await;
                let b = expect_api_error(r, 400).await;
                assert_eq!(b["error"]["code"], "validation_error", "{method} {path}");
            }
        }
    }
    assert!(missing.is_empty(), "operations without a tenant-isolation case: {missing:?}");
    assert_eq!(snapshot(&stack, &a).await, before, "B's attempts changed A's resources");
    // A's key still works at the proxy.
    let r = stack.admin_get(&format!("/api-keys/{}", a.api_key), &a.owner.access_token).await;
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "active");
}
