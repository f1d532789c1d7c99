//! Test harness: starts the real binaries (mock upstream, gw-admin, gw-proxy) on free loopback
//! ports against the real Postgres and Redis, and helpers to drive them over HTTP. Every test
//! starts its own stack and registers its own organization, so tests run in parallel.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const JWT_SECRET: &str = "gw-test-jwt-secret-0123456789abcdef0123456789";

pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://gw@127.0.0.1:55432/gw".into())
}

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:56379".into())
}

/// Directory holding the workspace's binaries: `$GW_BIN_DIR`, else the profile directory the
/// running test executable was built into (`target/<profile>/deps/..`).
fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("GW_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current exe");
    let deps = exe.parent().expect("exe dir");
    if deps.ends_with("deps") {
        deps.parent().map(PathBuf::from).unwrap_or_default()
    } else {
        deps.to_path_buf()
    }
}

pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(p.exists(), "{} is missing: run `cargo build --workspace` first", p.display());
    p
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("no free port")
}

fn migrate_once() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let status = Command::new(bin("gw-admin"))
            .arg("migrate")
            .env("DATABASE_URL", database_url())
            .env("GW_CONFIG", workspace_root().join("conf/gw.toml"))
            .env("RUST_LOG", "warn")
            .status()
            .expect("run gw-admin migrate");
        assert!(status.success(), "gw-admin migrate failed");
    });
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A child process killed when dropped.
pub struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the mock upstream with `args`; returns it and its base URL (`http://addr`).
pub fn start_mock(args: &[&str]) -> (Proc, String) {
    let mut child = Command::new(bin("mock-upstream"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn mock-upstream");
    let stdout = child.stdout.take().expect("mock stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read mock address");
    let addr = line.trim().strip_prefix("listening on ").expect("mock prints its address").to_string();
    (Proc(child), format!("http://{addr}"))
}

#[derive(Default)]
pub struct StackOptions {
    /// Extra TOML appended to the generated config (more providers, models, prices).
    pub extra_config: String,
    /// Extra keys for the `[proxy]` table.
    pub proxy_config: String,
    pub mock_args: Vec<String>,
}

pub struct Stack {
    pub proxy: String,
    pub admin: String,
    pub mock: String,
    pub proxy_metrics: String,
    pub http: reqwest::Client,
    /// Process id of gw-proxy, for signalling it.
    pub proxy_pid: u32,
    _procs: Vec<Proc>,
    config: PathBuf,
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

/// A dead address: a port that was free a moment ago and has nobody listening.
pub fn dead_url() -> String {
    format!("http://127.0.0.1:{}/v1", free_port())
}

pub fn config_text(mock: &str, ports: (u16, u16, u16), proxy_extra: &str, extra: &str) -> String {
    let (proxy_port, metrics_port, admin_port) = ports;
    format!(
        r#"
[database]
url = "{db}"
pool_size = 4
[redis]
url = "{redis}"
pool_size = 4
[proxy]
listen = "127.0.0.1:{proxy_port}"
metrics_listen = "127.0.0.1:{metrics_port}"
threads = 1
max_body_bytes = 65536
upstream_connect_timeout_ms = 1000
upstream_read_timeout_ms = 5000
{proxy_extra}
[admin]
listen = "127.0.0.1:{admin_port}"
workers = 1

[[providers]]
name = "mock"
kind = "mock"
[[providers]]
name = "upstream"
kind = "openai"
base_url = "{mock}/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
[[providers]]
name = "dead"
kind = "openai"
base_url = "{dead}"

[[models]]
name = "gpt-4o-mini"
deployments = [{{ provider = "upstream", model = "gpt-4o-mini-2024-07-18" }}]
[[models]]
name = "mock-model"
deployments = [{{ provider = "mock", model = "gpt-4o-mini" }}]
[[models]]
name = "dead-model"
deployments = [{{ provider = "dead", model = "gpt-4o-mini" }}]
[[models]]
name = "fallback-model"
deployments = [{{ provider = "dead", model = "gpt-4o-mini" }}, {{ provider = "upstream", model = "gpt-4o-mini-2024-07-18" }}]
{extra}

[pricing]
"gpt-4o-mini" = {{ input_per_mtok = "0.15", output_per_mtok = "0.60" }}
"gpt-4o-mini-2024-07-18" = {{ input_per_mtok = "0.15", output_per_mtok = "0.60" }}
"#,
        db = database_url(),
        redis = redis_url(),
        dead = dead_url(),
    )
}

impl Stack {
    pub async fn start() -> Stack {
        Self::start_with(StackOptions::default()).await
    }

    pub async fn start_with(opts: StackOptions) -> Stack {
        migrate_once();
        let mock_args: Vec<&str> = opts.mock_args.iter().map(String::as_str).collect();
        let (mock_proc, mock) = start_mock(&mock_args);
        let (proxy_port, metrics_port, admin_port) = (free_port(), free_port(), free_port());
        let config = std::env::temp_dir().join(format!("gw-test-{}.toml", uuid::Uuid::new_v4()));
        let proxy_extra =
            if opts.proxy_config.is_empty() { "audit_flush_interval_ms = 50" } else { &opts.proxy_config };
        let text = config_text(&mock, (proxy_port, metrics_port, admin_port), proxy_extra, &opts.extra_config);
        std::fs::write(&config, text).expect("write test config");
        let spawn = |name: &str| {
            Command::new(bin(name))
                .env("GW_CONFIG", &config)
                .env("GW_JWT_SECRET", JWT_SECRET)
                .env("GW_TEST_UPSTREAM_KEY", "sk-upstream-test")
                .env("RUST_LOG", std::env::var("GW_TEST_LOG").unwrap_or_else(|_| "warn".into()))
                .env_remove("DATABASE_URL")
                .env_remove("REDIS_URL")
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map(Proc)
                .expect("spawn gw binary")
        };
        let admin_proc = spawn("gw-admin");
        let proxy_proc = spawn("gw-proxy");
        let proxy_pid = proxy_proc.0.id();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("http client");
        let stack = Stack {
            proxy: format!("http://127.0.0.1:{proxy_port}"),
            admin: format!("http://127.0.0.1:{admin_port}"),
            mock,
            proxy_metrics: format!("http://127.0.0.1:{metrics_port}"),
            http,
            proxy_pid,
            _procs: vec![proxy_proc, admin_proc, mock_proc],
            config,
        };
        stack.wait_up(&format!("{}/healthz", stack.admin)).await;
        stack.wait_up(&format!("{}/v1/models", stack.proxy)).await;
        stack
    }

    async fn wait_up(&self, url: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.http.get(url).send().await.is_ok() {
                return;
            }
            assert!(Instant::now() < deadline, "{url} did not come up");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Registers a fresh organization; returns its session.
    pub async fn register(&self) -> Session {
        let email = format!("user-{}@test.gw", uuid::Uuid::new_v4());
        let resp = self
            .http
            .post(format!("{}/api/v1/auth/register", self.admin))
            .json(&json!({"email": email, "password": "correct horse battery", "name": "Test User", "org_name": "Test Org"}))
            .send()
            .await
            .expect("register");
        assert_eq!(resp.status(), 201, "register failed");
        let body: Value = resp.json().await.expect("register body");
        Session {
            email,
            access_token: body["access_token"].as_str().expect("access_token").to_string(),
            refresh_token: body["refresh_token"].as_str().expect("refresh_token").to_string(),
            org_id: body["organization"]["id"].as_str().and_then(|s| s.parse().ok()).expect("org id"),
        }
    }

    /// Creates an API key in the session's org; returns the creation response.
    pub async fn create_key(&self, s: &Session, body: Value) -> reqwest::Response {
        self.http
            .post(format!("{}/api/v1/api-keys", self.admin))
            .bearer_auth(&s.access_token)
            .json(&body)
            .send()
            .await
            .expect("create key")
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

    /// Sends SIGTERM to gw-proxy and waits (up to 30 s) until it has exited.
    pub async fn terminate_proxy(&self) {
        let pid = self.proxy_pid.to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(status.success(), "kill -TERM {pid} failed");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Command::new("kill").args(["-0", &pid]).stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
            // A zombie still answers kill -0; its state in /proc says it is gone.
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if state.split_whitespace().nth(2) == Some("Z") {
                break;
            }
            assert!(Instant::now() < deadline, "gw-proxy did not exit after SIGTERM");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET {admin}/api/v1{path}` with a session token.
    pub async fn admin_get(&self, path: &str, token: &str) -> reqwest::Response {
        self.http.get(format!("{}/api/v1{path}", self.admin)).bearer_auth(token).send().await.expect("admin GET")
    }

    /// `DELETE {admin}/api/v1{path}` with a session token.
    pub async fn admin_delete(&self, path: &str, token: &str) -> reqwest::Response {
        self.http.delete(format!("{}/api/v1{path}", self.admin)).bearer_auth(token).send().await.expect("admin DELETE")
    }

    /// One page of `GET /api/v1/api-keys{query}`, as JSON.
    pub async fn list_keys(&self, token: &str, query: &str) -> Value {
        let r = self.admin_get(&format!("/api-keys{query}"), token).await;
        assert_eq!(r.status(), 200, "listing keys failed");
        r.json().await.expect("key list JSON")
    }

    pub async fn chat(&self, key: &str, body: Value) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/chat/completions", self.proxy))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .expect("chat request")
    }

    pub async fn mock_config(&self, knobs: Value) {
        let r = self.http.post(format!("{}/_mock/config", self.mock)).json(&knobs).send().await.expect("mock config");
        assert!(r.status().is_success());
    }

    pub async fn mock_stats(&self) -> Value {
        self.http.get(format!("{}/_mock/stats", self.mock)).send().await.expect("stats").json().await.expect("json")
    }
}

#[derive(Debug, Clone)]
pub struct Session {
    pub email: String,
    pub access_token: String,
    pub refresh_token: String,
    pub org_id: uuid::Uuid,
}

pub const GW_HEADERS: [&str; 9] = [
    "x-gw-request-id",
    "x-gw-provider",
    "x-gw-model",
    "x-gw-cost-usd",
    "x-gw-latency-ms",
    "x-gw-ttft-ms",
    "x-gw-cache",
    "x-gw-policy-action",
    "x-gw-policy-reason",
];

pub fn header<'a>(resp: &'a reqwest::Response, name: &str) -> &'a str {
    resp.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_else(|| panic!("missing header {name}"))
}

/// Database access for checking what the services wrote.
pub mod db {
    use std::time::{Duration, Instant};

    use diesel_async::{AsyncConnection, AsyncPgConnection};
    use gw_shared::audit::AuditRecord;
    use uuid::Uuid;

    pub async fn connect() -> AsyncPgConnection {
        AsyncPgConnection::establish(&super::database_url()).await.expect("connect to postgres")
    }

    /// Waits (up to 5 s) for the audit row of a request, as the flusher writes behind requests.
    pub async fn audit_row(org_id: Uuid, request_id: Uuid) -> AuditRecord {
        let mut conn = connect().await;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(r) = gw_shared::db::audit_logs::find(&mut conn, org_id, request_id).await.expect("query") {
                return r;
            }
            assert!(Instant::now() < deadline, "audit row {request_id} never appeared");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}
