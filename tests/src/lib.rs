//! Test harness: starts the real binaries (mock upstream, gw-admin, gw-proxy) on free loopback
//! ports against the real Postgres and Redis, and helpers to drive them over HTTP.
//!
//! Most tests use [`Stack::shared`]: one stack per test binary, started on first use and stopped
//! when the binary exits. Tests stay apart by owning their data: each registers its own
//! organization, and steers the shared mock upstream per request (a `"mock": {...}` object in the
//! request body, with a unique `tag` when it reads `GET /_mock/stats`), never globally. A test
//! that needs its own configuration, or to stop or signal a process, starts a private stack with
//! [`Stack::start_with`], whose processes die with the handle.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uuid::Uuid;

pub const JWT_SECRET: &str = "gw-test-jwt-secret-0123456789abcdef0123456789";
/// The master key every test stack seals provider keys with (32 bytes, base64).
pub const ENCRYPTION_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// Bedrock credentials of the test stacks (`ACCESS_KEY_ID:SECRET`): the mock checks the
/// signature's shape, not its value.
pub const AWS_TEST_CREDENTIALS: &str = "AKIDGWTEST:gw-test-aws-secret";

/// The password [`Stack::register`] gives every user.
pub const PASSWORD: &str = "correct horse battery";

pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://gw@127.0.0.1:15432/gw".into())
}

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:16379".into())
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
        let status = Command::new(self::bin("gw-admin"))
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

/// The local embedding model's folder (`scripts/services.sh start` puts it there).
pub fn embedding_model_dir() -> PathBuf {
    std::env::var("GW_EMBEDDING_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join(".gw/models/all-minilm-l6-v2"))
}

/// Runs `"$0" "$@"` in the background and stops it (SIGTERM, then waits) once its standard input
/// reaches end of file, i.e. once the test process holding the pipe's other end has exited,
/// however it exited. Then removes `$GW_TEST_REMOVE` if set (the shared stack's config file).
/// A non-interactive shell gives background jobs `/dev/null` as stdin, so only `cat` reads the
/// pipe. Ctrl-C is ignored here (and by `cat`), so the wrapper outlives the test process and
/// still stops its child instead of orphaning it.
const GUARD_SCRIPT: &str = r#"trap '' INT QUIT
"$0" "$@" &
pid=$!
cat >/dev/null
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ -n "${GW_TEST_REMOVE:-}" ]; then rm -f -- "$GW_TEST_REMOVE"; fi"#;

/// A command running `program`: directly (stdin `/dev/null`), or, with `guard` (a file to
/// remove at the end), under [`GUARD_SCRIPT`] with a stdin pipe from this process.
fn command(program: &Path, guard: Option<&Path>) -> Command {
    match guard {
        None => {
            let mut c = Command::new(program);
            c.stdin(Stdio::null());
            c
        }
        Some(remove) => {
            let mut c = Command::new("sh");
            c.arg("-c").arg(GUARD_SCRIPT).arg(program).env("GW_TEST_REMOVE", remove).stdin(Stdio::piped());
            c
        }
    }
}

/// A child process stopped when dropped: killed, or, when it runs under the guard wrapper (it
/// has a stdin pipe), told to stop by closing that pipe. Killing the wrapper instead would orphan
/// the process it runs.
pub struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(pipe) = self.0.stdin.take() {
            drop(pipe);
            return;
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns the mock upstream; returns it and its base URL (`http://addr`).
fn spawn_mock(args: &[String], guard: Option<&Path>) -> (Proc, String) {
    let child = command(&bin("mock-upstream"), guard)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn mock-upstream");
    let mut mock = Proc(child);
    let stdout = mock.0.stdout.take().expect("mock stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read mock address");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("mock-upstream did not print its address: {line:?}"))
        .to_string();
    (mock, format!("http://{addr}"))
}

/// Starts the mock upstream with `args`; returns it and its base URL (`http://addr`).
pub fn start_mock(args: &[&str]) -> (Proc, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    spawn_mock(&args, None)
}

#[derive(Default, Clone)]
pub struct StackOptions {
    /// Extra TOML appended to the generated config (more providers, models, prices).
    pub extra_config: String,
    /// Extra keys for the `[proxy]` table.
    pub proxy_config: String,
    /// Keys for the `[routing]` table, replacing the shared stack's (which keeps circuits closed).
    pub routing_config: Option<String>,
    pub mock_args: Vec<String>,
    /// Postgres URL written into this stack's config instead of [`database_url`]. The harness
    /// migrates only the default database; one named here is used as it is.
    pub database_url: Option<String>,
    /// Extra keys for the `[admin]` table (replacing the shared stack's where they repeat one).
    pub admin_config: String,
    /// Extra environment variables for gw-proxy and gw-admin, set after the harness's own (so
    /// they can override them).
    pub env: Vec<(String, String)>,
    /// Redis URL written into this stack's config instead of [`redis_url`] (a [`PrivateRedis`]).
    pub redis_url: Option<String>,
}

/// A handle to a running stack. From [`Stack::start`]/[`Stack::start_with`] it owns its
/// processes (dropping it kills them); from [`Stack::shared`] it only points at the test
/// binary's shared stack, which lives until the binary exits.
pub struct Stack {
    pub proxy: String,
    pub admin: String,
    pub mock: String,
    pub proxy_metrics: String,
    /// A client of this handle's own, built in the runtime of the test that made the handle.
    pub http: reqwest::Client,
    /// Process id of gw-proxy, for signalling it; `None` on the shared stack, which no test may
    /// stop.
    pub proxy_pid: Option<u32>,
    shared: bool,
    _procs: Vec<Proc>,
    /// The generated config file, removed with a private stack.
    config: Option<PathBuf>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(config) = &self.config {
            let _ = std::fs::remove_file(config);
        }
    }
}

/// A dead address: nobody listens on port 1 of the loopback interface (a privileged port no
/// test can take), so connecting is refused at once, however long the stack lives.
pub fn dead_url() -> String {
    "http://127.0.0.1:1/v1".to_string()
}

pub fn config_text(mock: &str, db: &str, ports: (u16, u16, u16), proxy_extra: &str, extra: &str) -> String {
    config_text_with_routing(mock, db, ports, proxy_extra, extra, SHARED_ROUTING)
}

/// Many tests use dead deployments on purpose; on the shared stack their circuits must not open
/// and health checks must not route around them. Breaker and health-check tests start stacks of
/// their own with `StackOptions::routing_config`.
const SHARED_ROUTING: &str = "circuit_failures = 1000000\nhealth_check_interval_ms = 0";

/// [`config_text`] with the `[routing]` table's keys given. `{mock}` in `extra` stands for the
/// mock upstream's URL (so extra providers can point at it, with `/k/<knobs>/` fault prefixes).
pub fn config_text_with_routing(
    mock: &str,
    db: &str,
    ports: (u16, u16, u16),
    proxy_extra: &str,
    extra: &str,
    routing: &str,
) -> String {
    let (proxy_port, metrics_port, admin_port) = ports;
    let extra = extra.replace("{mock}", mock);
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
audit_spool_dir = "{spool}"
{proxy_extra}
[admin]
listen = "127.0.0.1:{admin_port}"
workers = 1
# Every test signs up and in from 127.0.0.1: per-address throttling is tested on a stack of its
# own (admin_auth.rs), with addresses taken from X-Forwarded-For.
ip_attempts = 1000000
max_concurrent_hashes = 4
# Tests read overviews over hours the rollup job has just aggregated, and seed rows years old
# (retention is tested on a database of its own).
rollup_interval_secs = 1
audit_retention_months = 0
# admin-extra

[routing]
{routing}

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
[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "{mock}/v1"
api_key_env = "GW_TEST_UPSTREAM_KEY"
[[providers]]
name = "gemini"
kind = "gemini"
base_url = "{mock}/v1beta"
api_key_env = "GW_TEST_UPSTREAM_KEY"
[[providers]]
name = "azure"
kind = "azure"
base_url = "{mock}"
api_key_env = "GW_TEST_UPSTREAM_KEY"
api_version = "2024-10-21"
[[providers]]
name = "bedrock"
kind = "bedrock"
base_url = "{mock}"
region = "us-east-1"
api_key_env = "GW_TEST_AWS_CREDENTIALS"

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
[[models]]
name = "claude-test"
aliases = ["claude"]
deployments = [{{ provider = "anthropic", model = "claude-sonnet-4-5" }}]
[[models]]
name = "gemini-test"
deployments = [{{ provider = "gemini", model = "gemini-2.5-flash" }}]
[[models]]
name = "azure-test"
deployments = [{{ provider = "azure", model = "my-gpt4o" }}]
[[models]]
name = "bedrock-test"
deployments = [{{ provider = "bedrock", model = "anthropic.claude-3-haiku-20240307-v1:0" }}]
[[models]]
name = "text-embedding-3-small"
mode = "embedding"
deployments = [{{ provider = "upstream", model = "text-embedding-3-small" }}]
[[models]]
name = "mock-embedding"
mode = "embedding"
deployments = [{{ provider = "mock", model = "text-embedding-3-small" }}]
[[models]]
name = "gemini-embedding"
mode = "embedding"
deployments = [{{ provider = "gemini", model = "gemini-embedding-001" }}]
[[models]]
name = "azure-embedding"
mode = "embedding"
deployments = [{{ provider = "azure", model = "my-embedding" }}]
{extra}

[pricing]
"gpt-4o-mini" = {{ input_per_mtok = "0.15", output_per_mtok = "0.60" }}
"gpt-4o-mini-2024-07-18" = {{ input_per_mtok = "0.15", output_per_mtok = "0.60" }}
"claude-sonnet-4-5" = {{ input_per_mtok = "3", output_per_mtok = "15", cached_input_per_mtok = "0.3", cache_write_per_mtok = "3.75" }}
"gemini-2.5-flash" = {{ input_per_mtok = "0.3", output_per_mtok = "2.5", cached_input_per_mtok = "0.03" }}
"my-gpt4o" = {{ input_per_mtok = "2.5", output_per_mtok = "10" }}
"anthropic.claude-3-haiku-20240307-v1:0" = {{ input_per_mtok = "0.25", output_per_mtok = "1.25" }}
"text-embedding-3-small" = {{ input_per_mtok = "0.02", output_per_mtok = "0" }}
"gemini-embedding-001" = {{ input_per_mtok = "0.15", output_per_mtok = "0" }}
"my-embedding" = {{ input_per_mtok = "0.02", output_per_mtok = "0" }}
"#,
        redis = redis_url(),
        dead = dead_url(),
        spool = std::env::temp_dir().join(format!("gw-spool-{proxy_port}")).display(),
    )
}

/// `config` with the `[admin]` keys of `extra` added, replacing those it repeats.
fn with_admin_keys(config: &str, extra: &str) -> String {
    let keys: Vec<&str> = extra.lines().filter_map(|l| l.split_once('=')).map(|(k, _)| k.trim()).collect();
    let mut out = String::with_capacity(config.len() + extra.len());
    let mut in_admin = false;
    for line in config.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            in_admin = t == "[admin]";
        }
        let repeated = in_admin && t.split_once('=').is_some_and(|(k, _)| keys.contains(&k.trim()));
        if !repeated {
            out.push_str(line);
            out.push('\n');
        }
        if t == "# admin-extra" {
            out.push_str(extra);
            out.push('\n');
        }
    }
    out
}

/// The processes of a stack just spawned (not yet known to be up).
struct Launched {
    proxy: String,
    admin: String,
    mock: String,
    proxy_metrics: String,
    /// The pid of gw-proxy itself, or of its guard wrapper when `guarded`.
    proxy_pid: u32,
    procs: Vec<Proc>,
    config: PathBuf,
}

/// Spawns one of gw's binaries with a stack's config and the harness's environment.
fn spawn_bin(name: &str, config: &Path, guard: Option<&Path>, env: &[(String, String)]) -> Proc {
    let mut cmd = command(&bin(name), guard);
    cmd.env("GW_CONFIG", config)
        .env("GW_JWT_SECRET", JWT_SECRET)
        .env("GW_TEST_UPSTREAM_KEY", "sk-upstream-test")
        .env("GW_TEST_AWS_CREDENTIALS", AWS_TEST_CREDENTIALS)
        .env("GW_ENCRYPTION_KEY", ENCRYPTION_KEY)
        .env("GW_EMBEDDING_MODEL_DIR", embedding_model_dir())
        .env("RUST_LOG", std::env::var("GW_TEST_LOG").unwrap_or_else(|_| "warn".into()))
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::inherit());
    Proc(cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}")))
}

/// Spawns mock-upstream, gw-admin and gw-proxy for `opts`. `guarded`: under the guard wrapper
/// (see [`GUARD_SCRIPT`]), so they stop when this process exits even if nothing drops them.
fn launch(opts: &StackOptions, guarded: bool) -> Launched {
    let config = std::env::temp_dir().join(format!("gw-test-{}.toml", Uuid::new_v4()));
    let guard = if guarded { Some(config.clone()) } else { None };
    let (mock_proc, mock) = spawn_mock(&opts.mock_args, guard.as_deref());
    let (proxy_port, metrics_port, admin_port) = (free_port(), free_port(), free_port());
    let proxy_extra =
        if opts.proxy_config.is_empty() { "audit_flush_interval_ms = 50" } else { opts.proxy_config.as_str() };
    let db = opts.database_url.clone().unwrap_or_else(database_url);
    let routing = opts.routing_config.as_deref().unwrap_or(SHARED_ROUTING);
    let text = config_text_with_routing(
        &mock,
        &db,
        (proxy_port, metrics_port, admin_port),
        proxy_extra,
        &opts.extra_config,
        routing,
    );
    let mut text = with_admin_keys(&text, &opts.admin_config);
    if let Some(url) = &opts.redis_url {
        text = text.replace(&format!("url = \"{}\"", redis_url()), &format!("url = \"{url}\""));
    }
    std::fs::write(&config, text).expect("write test config");
    let spawn = |name: &str| spawn_bin(name, &config, guard.as_deref(), &opts.env);
    let admin_proc = spawn("gw-admin");
    let proxy_proc = spawn("gw-proxy");
    let proxy_pid = proxy_proc.0.id();
    Launched {
        proxy: format!("http://127.0.0.1:{proxy_port}"),
        admin: format!("http://127.0.0.1:{admin_port}"),
        mock,
        proxy_metrics: format!("http://127.0.0.1:{metrics_port}"),
        proxy_pid,
        procs: vec![proxy_proc, admin_proc, mock_proc],
        config,
    }
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("http client")
}

/// Waits (up to 20 s) until `url` answers at all.
pub async fn wait_up(http: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if http.get(url).send().await.is_ok() {
            return;
        }
        assert!(Instant::now() < deadline, "{url} did not come up");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The test binary's shared stack. Statics are never dropped: its processes run under the guard
/// wrapper and stop when the binary exits and the pipes held here close.
struct SharedStack {
    proxy: String,
    admin: String,
    mock: String,
    proxy_metrics: String,
    _procs: Mutex<Vec<Proc>>,
}

static SHARED: OnceLock<Result<SharedStack, String>> = OnceLock::new();

/// Starts the shared stack on a thread and runtime of its own, so it depends on no test's
/// runtime. A failure is kept, so every test reports it instead of each starting another stack.
fn start_shared() -> Result<SharedStack, String> {
    let thread = std::thread::Builder::new()
        .name("gw-shared-stack".into())
        .spawn(|| {
            migrate_once();
            let launched = launch(&StackOptions::default(), true);
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
            rt.block_on(async {
                let http = http_client();
                wait_up(&http, &format!("{}/healthz", launched.admin)).await;
                wait_up(&http, &format!("{}/v1/models", launched.proxy)).await;
            });
            SharedStack {
                proxy: launched.proxy,
                admin: launched.admin,
                mock: launched.mock,
                proxy_metrics: launched.proxy_metrics,
                _procs: Mutex::new(launched.procs),
            }
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    thread.join().map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "it panicked while starting".into())
    })
}

impl Stack {
    /// A private stack with the default configuration.
    pub async fn start() -> Stack {
        Self::start_with(StackOptions::default()).await
    }

    /// A private stack: its own processes and config, killed when the handle is dropped.
    pub async fn start_with(opts: StackOptions) -> Stack {
        if opts.database_url.is_none() {
            migrate_once();
        }
        let l = launch(&opts, false);
        let stack = Stack {
            proxy: l.proxy,
            admin: l.admin,
            mock: l.mock,
            proxy_metrics: l.proxy_metrics,
            http: http_client(),
            proxy_pid: Some(l.proxy_pid),
            shared: false,
            _procs: l.procs,
            config: Some(l.config),
        };
        wait_up(&stack.http, &format!("{}/healthz", stack.admin)).await;
        wait_up(&stack.http, &format!("{}/v1/models", stack.proxy)).await;
        stack
    }

    /// A handle to the test binary's shared stack (default configuration), started by the first
    /// caller. Dropping the handle leaves the stack running for the other tests.
    pub async fn shared() -> Stack {
        let s = match SHARED.get_or_init(start_shared) {
            Ok(s) => s,
            Err(e) => panic!("the shared test stack did not start: {e}"),
        };
        Stack {
            proxy: s.proxy.clone(),
            admin: s.admin.clone(),
            mock: s.mock.clone(),
            proxy_metrics: s.proxy_metrics.clone(),
            http: http_client(),
            proxy_pid: None,
            shared: true,
            _procs: Vec::new(),
            config: None,
        }
    }

    /// Another gw-proxy on this private stack's config (same Postgres, Redis and mock), on ports
    /// of its own: a replica. Returns it (stopped when dropped) and its base URL, once it answers.
    pub async fn proxy_replica(&self) -> (Proc, String) {
        let config = self.config.as_ref().expect("replicas need a private stack (Stack::start_with)");
        let text = std::fs::read_to_string(config).expect("read the stack's config");
        let port = free_port();
        let mut out = String::new();
        for line in text.lines() {
            if line.starts_with("listen = ") && out.contains("[proxy]") && !out.contains("[admin]") {
                out.push_str(&format!("listen = \"127.0.0.1:{port}\"\n"));
            } else if line.starts_with("metrics_listen = ") {
                out.push_str(&format!("metrics_listen = \"127.0.0.1:{}\"\n", free_port()));
            } else if line.starts_with("audit_spool_dir = ") {
                // One proxy per spool folder.
                let dir = std::env::temp_dir().join(format!("gw-spool-{port}"));
                out.push_str(&format!("audit_spool_dir = \"{}\"\n", dir.display()));
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        let path = std::env::temp_dir().join(format!("gw-test-replica-{}.toml", Uuid::new_v4()));
        std::fs::write(&path, out).expect("write the replica's config");
        let proc = spawn_bin("gw-proxy", &path, None, &[]);
        let url = format!("http://127.0.0.1:{port}");
        wait_up(&self.http, &format!("{url}/v1/models")).await;
        let _ = std::fs::remove_file(&path);
        (proc, url)
    }

    /// Whether this handle points at the shared stack.
    pub fn is_shared(&self) -> bool {
        self.shared
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

    /// Sends SIGTERM to gw-proxy and waits (up to 30 s) until it has exited. Private stacks only.
    pub async fn terminate_proxy(&self) {
        let pid = self.proxy_pid.expect("the shared stack's proxy cannot be stopped: use Stack::start_with");
        let pid = pid.to_string();
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
}

#[derive(Debug, Clone)]
pub struct Session {
    pub email: String,
    pub access_token: String,
    pub refresh_token: String,
    pub org_id: Uuid,
    pub user_id: Uuid,
}

impl Session {
    /// The session a token response (sign-up, sign-in, invite acceptance) describes.
    pub fn from_tokens(email: String, body: &Value) -> Session {
        Session {
            email,
            access_token: body["access_token"].as_str().expect("access_token").to_string(),
            refresh_token: body["refresh_token"].as_str().expect("refresh_token").to_string(),
            org_id: body["organization"]["id"].as_str().and_then(|s| s.parse().ok()).expect("org id"),
            user_id: body["user"]["id"].as_str().and_then(|s| s.parse().ok()).expect("user id"),
        }
    }
}

/// A unique tag for per-request mock knobs (`"mock": {"tag": ...}`) and [`Stack::mock_stats_for`].
pub fn unique_tag() -> String {
    Uuid::new_v4().simple().to_string()
}

/// A session access token signed with the test stacks' secret, for roles or lifetimes that
/// registration does not hand out (e.g. `member`, or an already expired token).
/// Only the signature and lifetime are checked before the session itself, so a token naming no
/// live session is refused as "session ended".
pub fn session_token(user: Uuid, org: Uuid, sid: Uuid, role: &str, ttl_secs: i64) -> String {
    gw_shared::jwt::issue_access_token(JWT_SECRET, user, org, sid, role, ttl_secs).expect("issue access token").0
}

/// A chat request body for the built-in `mock-model` with one user message.
pub fn mock_chat(text: &str) -> Value {
    json!({"model": "mock-model", "messages": user_message(text)})
}

/// `[{"role": "user", "content": text}]`.
pub fn user_message(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n").filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_string)).collect()
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

/// Asserts a `/v1` error: `status`, every `x-gw-*` header, and OpenAI's error object with
/// `message` (not empty), `type`, `param` and `code`. Returns the body.
pub async fn expect_openai_error(resp: reqwest::Response, status: u16) -> Value {
    assert_eq!(resp.status(), status);
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h} on a {status}");
    }
    let body: Value = resp.json().await.expect("error body is JSON");
    let err = body["error"].as_object().unwrap_or_else(|| panic!("no error object: {body}"));
    for f in ["message", "type", "param", "code"] {
        assert!(err.contains_key(f), "error lacks {f}: {body}");
    }
    assert!(!err["message"].as_str().expect("message is a string").is_empty());
    body
}

/// Asserts an `/api/v1` error: `status`, an `x-request-id` header, and
/// `{"error":{"code","message"}}` with both strings. Returns the body.
pub async fn expect_api_error(resp: reqwest::Response, status: u16) -> Value {
    assert_eq!(resp.status(), status);
    assert!(resp.headers().contains_key("x-request-id"), "no x-request-id on a {status}");
    let body: Value = resp.json().await.expect("error body is JSON");
    assert!(body["error"]["code"].is_string() && body["error"]["message"].is_string(), "{body}");
    body
}

/// 401 `unauthorized` with `WWW-Authenticate: Bearer`, on `/api/v1`.
pub async fn expect_unauthorized(resp: reqwest::Response) -> Value {
    assert_eq!(header(&resp, "www-authenticate"), "Bearer");
    let b = expect_api_error(resp, 401).await;
    assert_eq!(b["error"]["code"], "unauthorized");
    b
}

/// `POST /v1/chat/completions` with `key`, naming `policy` in `x-gw-policy` if given.
pub async fn post_chat(stack: &Stack, key: &str, policy: Option<&str>, body: &Value) -> reqwest::Response {
    let mut req = stack.http.post(format!("{}/v1/chat/completions", stack.proxy)).bearer_auth(key).json(body);
    if let Some(p) = policy {
        req = req.header("x-gw-policy", p);
    }
    req.send().await.expect("chat request")
}

/// The response's JSON body, after asserting its status.
pub async fn json_of(resp: reqwest::Response, status: u16) -> Value {
    let got = resp.status();
    let text = resp.text().await.expect("body");
    assert_eq!(got, status, "{text}");
    serde_json::from_str(&text).expect("JSON body")
}

/// Asserts an `/api/v1` 400 `validation_error` whose first field error names `field` (`what`
/// says which case failed). Returns the body.
pub async fn expect_field_error(resp: reqwest::Response, field: &str, what: &str) -> Value {
    let b = expect_api_error(resp, 400).await;
    assert_eq!(b["error"]["code"], "validation_error", "{what}: {b}");
    assert_eq!(b["error"]["fields"][0]["field"], field, "{what}: {b}");
    b
}

/// The request id gw gave a `/v1` answer (`x-gw-request-id`).
pub fn request_id(resp: &reqwest::Response) -> Uuid {
    header(resp, "x-gw-request-id").parse().expect("request id")
}

/// A time as a query parameter takes it: RFC 3339 with microseconds, `+` escaped.
/// A decimal from its text.
pub fn dec(s: &str) -> rust_decimal::Decimal {
    s.parse().unwrap_or_else(|e| panic!("{s:?} is not a decimal: {e}"))
}

/// A money field of an answer: a decimal string (`/api/v1` never answers money as a float).
pub fn usd(v: &Value) -> rust_decimal::Decimal {
    dec(v.as_str().unwrap_or_else(|| panic!("money must be a decimal string, got {v}")))
}

/// The exact cost of `tokens` at `price` US dollars per million.
pub fn per_million(tokens: u64, price: &str) -> rust_decimal::Decimal {
    rust_decimal::Decimal::from(tokens) * dec(price) / rust_decimal::Decimal::from(1_000_000)
}

pub fn query_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true).replace('+', "%2B")
}

impl Stack {
    /// Sends a chat request for `mock-model` with `text`; asserts 200 and returns its request id.
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

/// Database access for checking what the services wrote.
pub mod db {
    use std::time::{Duration, Instant};

    use diesel_async::{AsyncConnection, AsyncPgConnection};
    use gw_shared::audit::AuditRecord;
    use uuid::Uuid;

    pub async fn connect() -> AsyncPgConnection {
        AsyncPgConnection::establish(&super::database_url()).await.expect("connect to postgres")
    }

    /// Sets an organization's plan (billing's job in production; SSO needs growth or higher).
    pub async fn set_plan(org_id: Uuid, plan: &str) {
        use diesel::prelude::*;
        use diesel_async::RunQueryDsl;
        use gw_shared::db::schema::organizations;
        let mut conn = connect().await;
        diesel::update(organizations::table.filter(organizations::id.eq(org_id)))
            .set(organizations::plan.eq(plan))
            .execute(&mut conn)
            .await
            .expect("set plan");
    }

    /// Waits (up to 5 s) for the audit row of a request, as the flusher writes behind requests.
    pub async fn audit_row(org_id: Uuid, request_id: Uuid) -> AuditRecord {
        audit_row_within(org_id, request_id, Duration::from_secs(5)).await
    }

    /// Waits up to `wait` for the audit row of a request (a stream read on after its client
    /// left is written when the upstream has finished).
    pub async fn audit_row_within(org_id: Uuid, request_id: Uuid, wait: Duration) -> AuditRecord {
        let mut conn = connect().await;
        let deadline = Instant::now() + wait;
        loop {
            if let Some(r) = gw_shared::db::audit_logs::find(&mut conn, org_id, request_id).await.expect("query") {
                return r;
            }
            assert!(Instant::now() < deadline, "audit row {request_id} never appeared");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// A PostgreSQL server of the test's own (same binaries as `scripts/services.sh`, `$GW_PG_BIN`),
/// for tests that stop and restart the database under load. Its port is below Linux's ephemeral
/// range, as gw's defaults are, so a restart can always bind it again.
pub struct PrivatePostgres {
    pub port: u16,
    bin: PathBuf,
    dir: PathBuf,
}

impl PrivatePostgres {
    fn run(&self, program: &str, args: &[&str]) -> std::process::ExitStatus {
        let exe = self.bin.join(program);
        let as_root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"));
        let mut cmd = if as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        cmd.args(args).stdout(Stdio::null()).stderr(Stdio::inherit()).status().expect("run a PostgreSQL binary")
    }

    /// Creates, starts and migrates a fresh server with a `gw` database.
    pub fn start() -> PrivatePostgres {
        let bin = PathBuf::from(std::env::var("GW_PG_BIN").expect(
            "GW_PG_BIN must name PostgreSQL's bin directory (scripts/test exports it from scripts/services.sh env)",
        ));
        let dir = std::env::temp_dir().join(format!("gw-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("create the data directory");
        let as_root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"));
        if as_root {
            let ok = Command::new("chown").arg("postgres:").arg(&dir).status().is_ok_and(|s| s.success());
            assert!(ok, "chown of the data directory failed");
        }
        // A free port in 20000..32000, below the ephemeral range.
        let port = (0..200)
            .map(|i| 20_000 + ((std::process::id() as u16).wrapping_mul(7).wrapping_add(i * 53)) % 12_000)
            .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
            .expect("no free port below 32000");
        let pg = PrivatePostgres { port, bin, dir };
        let data = pg.data();
        assert!(pg
            .run("initdb", &["-D", &data, "-U", "gw", "--auth=trust", "--encoding=UTF8", "--locale=C"])
            .success());
        pg.start_server();
        let port_s = port.to_string();
        assert!(pg.run("createdb", &["-h", "127.0.0.1", "-p", &port_s, "-U", "gw", "gw"]).success());
        let status = Command::new(self::bin("gw-admin"))
            .arg("migrate")
            .env("DATABASE_URL", pg.url())
            .env("GW_CONFIG", workspace_root().join("conf/gw.toml"))
            .env("RUST_LOG", "warn")
            .status()
            .expect("run gw-admin migrate");
        assert!(status.success(), "migrating the private database failed");
        pg
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    pub fn url(&self) -> String {
        format!("postgres://gw@127.0.0.1:{}/gw", self.port)
    }

    /// Starts the server and waits until it accepts connections; false if it did not start.
    pub fn start_server(&self) -> bool {
        let opts = format!("-p {} -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off", self.port);
        let log = self.dir.join("server.log").to_string_lossy().into_owned();
        self.run("pg_ctl", &["-D", &self.data(), "-l", &log, "-w", "-t", "30", "-o", &opts, "start"]).success()
    }

    pub fn stop_server(&self) {
        assert!(self.run("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]).success(), "pg_ctl stop failed");
    }

    /// The server's log, for assertion messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.run("pg_ctl", &["-D", &self.data(), "-m", "immediate", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis server of the test's own, for tests that stop and restart it under load.
pub struct PrivateRedis {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl PrivateRedis {
    pub fn start() -> PrivateRedis {
        let dir = std::env::temp_dir().join(format!("gw-redis-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("create the redis directory");
        // Below the ephemeral range, so a restart can bind the port again.
        let port = (0..200)
            .map(|i| 20_000 + ((std::process::id() as u16).wrapping_mul(11).wrapping_add(7000 + i * 61)) % 12_000)
            .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
            .expect("no free port below 32000");
        let mut r = PrivateRedis { port, dir, child: None };
        r.start_server();
        r
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again) and waits until it answers.
    pub fn start_server(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn redis-server (scripts/services.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server at once (its data is gone: it keeps none on disk).
    pub fn stop_server(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop_server();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
