//! HTTP helpers: the management API and the proxy as tests call them.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uuid::Uuid;

use crate::assert::request_id;
use crate::stack::{Session, Stack};
use crate::PASSWORD;

impl Stack {
    /// `POST {base}/v1/chat/completions` with `key` and extra headers (`base`: this stack's
    /// proxy or another replica).
    pub async fn chat_with(&self, base: &str, key: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self.http.post(format!("{base}/v1/chat/completions")).bearer_auth(key).json(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.expect("chat request")
    }

    /// `POST {admin}/api/v1{path}` without credentials (sign-up, sign-in, refresh).
    pub async fn public_post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http.post(format!("{}/api/v1{path}", self.admin)).json(body).send().await.expect("admin POST")
    }

    /// A member (no team) of `owner`'s organization, signed in: their access token.
    pub async fn member_token(&self, owner: &Session) -> String {
        self.join(owner, "member", &[]).await.access_token
    }

    /// A key of `s`'s organization made with `body` (named `test key` unless it names one):
    /// (secret, id).
    pub async fn key_with(&self, s: &Session, body: Value) -> (String, String) {
        let mut body = body;
        if body.get("name").is_none() {
            body["name"] = json!("test key");
        }
        let r = self.create_key(s, body).await;
        assert_eq!(r.status(), 201, "creating a key failed");
        let b: Value = r.json().await.expect("key body");
        (b["key"].as_str().expect("key").to_string(), b["id"].as_str().expect("id").to_string())
    }

    /// The value of one series (`name{labels}` as written) on the proxy's `/metrics`; 0 when
    /// absent.
    pub async fn proxy_metric(&self, series: &str) -> f64 {
        let url = format!("{}/metrics", self.proxy_metrics);
        let text = self.http.get(url).send().await.expect("metrics").text().await.expect("metrics text");
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok())).unwrap_or(0.0)
    }

    /// Registers a fresh organization; returns its session.
    pub async fn register(&self) -> Session {
        let email = format!("user-{}@test.gw", Uuid::new_v4());
        let resp = self
            .http
            .post(format!("{}/api/v1/auth/register", self.admin))
            .json(&json!({"email": email, "password": PASSWORD, "name": "Test User", "org_name": "Test Org"}))
            .send()
            .await
            .expect("register");
        assert_eq!(resp.status(), 201, "register failed");
        let body: Value = resp.json().await.expect("register body");
        Session::from_tokens(email, &body)
    }

    /// Creates an API key in the session's org; returns the creation response.
    pub async fn create_key(&self, s: &Session, body: Value) -> reqwest::Response {
        self.admin_post("/api-keys", &s.access_token, &body).await
    }

    /// A new org with a `proxy:llm` key: (session, key secret, key id).
    pub async fn org_with_key(&self) -> (Session, String, String) {
        let s = self.register().await;
        let resp = self.create_key(&s, json!({"name": "test key"})).await;
        assert_eq!(resp.status(), 201);
        let body: Value = resp.json().await.expect("key body");
        let key = body["key"].as_str().expect("key").to_string();
        let id = body["id"].as_str().expect("id").to_string();
        (s, key, id)
    }

    /// `GET {admin}/api/v1{path}` with a session token.
    pub async fn admin_get(&self, path: &str, token: &str) -> reqwest::Response {
        self.http.get(format!("{}/api/v1{path}", self.admin)).bearer_auth(token).send().await.expect("admin GET")
    }

    /// `POST {admin}/api/v1{path}` with a session token and a JSON body.
    pub async fn admin_post(&self, path: &str, token: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("{}/api/v1{path}", self.admin))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("admin POST")
    }

    /// `PUT {admin}/api/v1{path}` with a session token and a JSON body.
    pub async fn admin_put(&self, path: &str, token: &str, body: &Value) -> reqwest::Response {
        self.http
            .put(format!("{}/api/v1{path}", self.admin))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("admin PUT")
    }

    /// `PATCH {admin}/api/v1{path}` with a session token and a JSON body.
    pub async fn admin_patch(&self, path: &str, token: &str, body: &Value) -> reqwest::Response {
        self.http
            .patch(format!("{}/api/v1{path}", self.admin))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("admin PATCH")
    }

    /// `DELETE {admin}/api/v1{path}` with a session token.
    pub async fn admin_delete(&self, path: &str, token: &str) -> reqwest::Response {
        self.http.delete(format!("{}/api/v1{path}", self.admin)).bearer_auth(token).send().await.expect("admin DELETE")
    }

    /// Invites a new user into `owner`'s organization with `role` (owner, admin, member,
    /// viewer) and the given teams, accepts the invite, and returns the new user's session.
    pub async fn join(&self, owner: &Session, role: &str, team_ids: &[Uuid]) -> Session {
        let email = format!("{role}-{}@test.gw", Uuid::new_v4());
        let r = self
            .admin_post("/invites", &owner.access_token, &json!({"email": email, "role": role, "team_ids": team_ids}))
            .await;
        assert_eq!(r.status(), 201, "invite failed");
        let invite: Value = r.json().await.expect("invite body");
        let token = invite["token"].as_str().expect("invite token").to_string();
        let r = self
            .http
            .post(format!("{}/api/v1/auth/invites/accept", self.admin))
            .json(&json!({"token": token, "name": format!("Test {role}"), "password": PASSWORD}))
            .send()
            .await
            .expect("accept invite");
        assert_eq!(r.status(), 201, "accepting the invite failed");
        let body: Value = r.json().await.expect("accept body");
        Session::from_tokens(email, &body)
    }

    /// Creates a team in `s`'s organization; returns its id.
    pub async fn create_team(&self, s: &Session, name: &str) -> Uuid {
        let r = self.admin_post("/teams", &s.access_token, &json!({"name": name})).await;
        assert_eq!(r.status(), 201, "creating team {name:?} failed");
        let body: Value = r.json().await.expect("team body");
        body["id"].as_str().and_then(|s| s.parse().ok()).expect("team id")
    }

    /// One page of `GET /api/v1/api-keys{query}`, as JSON.
    pub async fn list_keys(&self, token: &str, query: &str) -> Value {
        let r = self.admin_get(&format!("/api-keys{query}"), token).await;
        assert_eq!(r.status(), 200, "listing keys failed");
        r.json().await.expect("key list JSON")
    }

    pub async fn chat(&self, key: &str, body: Value) -> reqwest::Response {
        self.chat_with(&self.proxy, key, &body, &[]).await
    }

    /// Sets the mock upstream's global knobs. Private stacks only: on the shared stack they would
    /// reach every other test; send a `"mock": {...}` object in the request body instead.
    pub async fn mock_config(&self, knobs: Value) {
        assert!(!self.shared, "mock_config on the shared stack leaks into other tests: use per-request \"mock\" knobs");
        let r = self.http.post(format!("{}/_mock/config", self.mock)).json(&knobs).send().await.expect("mock config");
        assert!(r.status().is_success());
    }

    /// The mock upstream's global numbers. Private stacks only: on the shared stack other tests'
    /// requests are counted too; use [`Stack::mock_stats_for`] with a tag.
    pub async fn mock_stats(&self) -> Value {
        assert!(!self.shared, "global mock stats on the shared stack count other tests: use mock_stats_for(tag)");
        self.http.get(format!("{}/_mock/stats", self.mock)).send().await.expect("stats").json().await.expect("json")
    }

    /// What the mock upstream saw of the chat requests whose `"mock"` knobs carry `tag`:
    /// `{"requests": n, "last_body": ...}`.
    pub async fn mock_stats_for(&self, tag: &str) -> Value {
        self.http
            .get(format!("{}/_mock/stats", self.mock))
            .query(&[("tag", tag)])
            .send()
            .await
            .expect("stats")
            .json()
            .await
            .expect("json")
    }

    pub async fn chat_request_id(&self, key: &str, text: &str) -> Uuid {
        let r = self.chat(key, json!({"model": "mock-model", "messages": user_message(text)})).await;
        assert_eq!(r.status(), 200);
        request_id(&r)
    }

    /// `GET /analytics/logs/{id}`, waiting (up to 2 s) for the row the proxy writes behind.
    pub async fn log_entry(&self, s: &Session, id: Uuid) -> Value {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let r = self.admin_get(&format!("/analytics/logs/{id}"), &s.access_token).await;
            if r.status() == 200 {
                return r.json().await.expect("log entry JSON");
            }
            assert_eq!(r.status(), 404);
            assert!(Instant::now() < deadline, "log {id} not readable within 2 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `GET {admin}/api/v1{path}` as `s`, asserting 200; the JSON body.
    pub async fn get_ok(&self, s: &Session, path: &str) -> Value {
        let r = self.admin_get(path, &s.access_token).await;
        let status = r.status();
        let text = r.text().await.expect("body");
        assert_eq!(status, 200, "{path}: {text}");
        serde_json::from_str(&text).expect("JSON body")
    }
}

/// A chat request body for the built-in `mock-model` with one user message.
pub fn mock_chat(text: &str) -> Value {
    json!({"model": "mock-model", "messages": user_message(text)})
}

/// `[{"role": "user", "content": text}]`.
pub fn user_message(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// `POST /v1/chat/completions` with `key`, naming `policy` in `x-gw-policy` if given.
pub async fn post_chat(stack: &Stack, key: &str, policy: Option<&str>, body: &Value) -> reqwest::Response {
    let headers: Vec<(&str, &str)> = policy.map(|p| ("x-gw-policy", p)).into_iter().collect();
    stack.chat_with(&stack.proxy, key, body, &headers).await
}

/// A chat of `gpt-4o-mini` whose mock answer is counted under `tag`.
pub fn tagged_chat(text: &str, tag: &str) -> Value {
    json!({"model": "gpt-4o-mini", "messages": user_message(text), "mock": {"tag": tag}})
}
