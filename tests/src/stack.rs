//! Stacks: the test binary's shared stack and private ones, their lifecycle (start, replicas,
//! termination), and the sessions tests sign in with.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use uuid::Uuid;

use crate::config::{
    config_text_with_routing, database_url, redis_mode, redis_topology_config, redis_url, with_admin_keys, RedisMode,
    SHARED_ROUTING,
};
use crate::process::{free_port, free_ports, http_client, migrate_once, spawn_bin, spawn_mock, wait_up, Proc};
use crate::JWT_SECRET;

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
    /// A Redis for the response cache's L2 entries (`[redis] cache_url`); unset: the main one.
    pub cache_redis_url: Option<String>,
    /// Extra environment variables for gw-admin alone (after `env`): `REDIS_URL` here gives
    /// the admin another way to Redis than the proxies (a [`crate::topology::Relay`]).
    pub admin_env: Vec<(String, String)>,
    /// Extra keys for the `[redis]` table (a cluster's seeds, TLS settings).
    pub redis_config: String,
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
    pub(crate) shared: bool,
    _procs: Vec<Proc>,
    /// The generated config file, removed with a private stack.
    config: Option<PathBuf>,
    /// The environment this private stack's processes were given (a restarted one gets it too).
    env: Vec<(String, String)>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(config) = &self.config {
            let _ = std::fs::remove_file(config);
        }
    }
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

/// Spawns mock-upstream, gw-admin and gw-proxy for `opts`. `guarded`: under the guard wrapper
/// (see [`GUARD_SCRIPT`]), so they stop when this process exits even if nothing drops them.
fn launch(opts: &StackOptions, guarded: bool) -> Launched {
    let config = std::env::temp_dir().join(format!("gw-test-{}.toml", Uuid::new_v4()));
    let guard = if guarded { Some(config.clone()) } else { None };
    let (mock_proc, mock) = spawn_mock(&opts.mock_args, guard.as_deref());
    let [proxy_port, metrics_port, admin_port] = free_ports::<3>();
    // Every test stack shares one Redis, and replicas add their failed authentications up there:
    // one test's invalid keys from 127.0.0.1 must not throttle another stack's. Tests of the
    // throttle set their own limit (and a Redis of their own).
    let proxy_extra = if opts.proxy_config.is_empty() {
        "audit_flush_interval_ms = 50\nauth_failures_per_minute = 1000000"
    } else {
        opts.proxy_config.as_str()
    };
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
        // A Redis of the test's own replaces the binary's cluster too.
        if redis_mode() == RedisMode::Cluster {
            text = text.replace(&redis_topology_config(), "");
        }
    }
    if !opts.redis_config.is_empty() {
        text = text.replacen("[redis]\n", &format!("[redis]\n{}\n", opts.redis_config), 1);
    }
    if let Some(url) = &opts.cache_redis_url {
        text = text.replacen("[redis]\n", &format!("[redis]\ncache_url = \"{url}\"\n"), 1);
    }
    // The proxy's spool folder is named for its port: one an earlier run left on this port holds
    // another stack's rows, which this stack's database must never receive.
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("gw-spool-{proxy_port}")));
    std::fs::write(&config, text).expect("write test config");
    let spawn = |name: &str| spawn_bin(name, &config, guard.as_deref(), &opts.env);
    let admin_env: Vec<(String, String)> = opts.env.iter().chain(&opts.admin_env).cloned().collect();
    let admin_proc = spawn_bin("gw-admin", &config, guard.as_deref(), &admin_env);
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

/// The test binary's shared stack. Statics are never dropped: its processes run under the guard
/// wrapper and stop when the binary exits and the pipes held here close.
pub struct SharedStack {
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
    start_shared_with(StackOptions::default())
}

/// A stack shared by one test binary's tests, with `opts`: for tests that need a configuration of
/// their own (models with fixed latencies, say) and may share it. Keep it in a
/// `static OnceLock<Result<SharedStack, String>>` and view it with [`Stack::view`].
pub fn start_shared_with(opts: StackOptions) -> Result<SharedStack, String> {
    let thread = std::thread::Builder::new()
        .name("gw-shared-stack".into())
        .spawn(move || {
            migrate_once();
            let launched = launch(&opts, true);
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
            env: opts.env.clone(),
        };
        wait_up(&stack.http, &format!("{}/healthz", stack.admin)).await;
        wait_up(&stack.http, &format!("{}/v1/models", stack.proxy)).await;
        stack
    }

    /// A handle to the test binary's shared stack (default configuration), started by the first
    /// caller. Dropping the handle leaves the stack running for the other tests.
    pub async fn shared() -> Stack {
        Self::view(SHARED.get_or_init(start_shared))
    }

    /// A handle on a stack started by [`start_shared_with`], for this test's runtime.
    pub fn view(started: &Result<SharedStack, String>) -> Stack {
        let s = match started {
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
            env: Vec::new(),
        }
    }

    /// Another gw-proxy on this private stack's config (same Postgres, Redis and mock), on ports
    /// of its own: a replica. Returns it (stopped when dropped) and its base URL, once it answers.
    pub async fn proxy_replica(&self) -> (Proc, String) {
        let (proc, url, _) = self.proxy_replica_with_metrics().await;
        (proc, url)
    }

    /// [`Self::proxy_replica`], with the replica's metrics address (`http://addr`) too.
    pub async fn proxy_replica_with_metrics(&self) -> (Proc, String, String) {
        self.replica(false).await
    }

    /// [`Self::proxy_replica`] spooling under the stack's own spool folder, as processes sharing
    /// one disk do: each claims an instance folder there, and adopts what a dead one left.
    pub async fn proxy_replica_sharing_spool(&self) -> (Proc, String) {
        let (proc, url, _) = self.replica(true).await;
        (proc, url)
    }

    async fn replica(&self, share_spool: bool) -> (Proc, String, String) {
        let config = self.config.as_ref().expect("replicas need a private stack (Stack::start_with)");
        let text = std::fs::read_to_string(config).expect("read the stack's config");
        let port = free_port();
        let metrics_port = free_port();
        let mut out = String::new();
        for line in text.lines() {
            if line.starts_with("listen = ") && out.contains("[proxy]") && !out.contains("[admin]") {
                out.push_str(&format!("listen = \"127.0.0.1:{port}\"\n"));
            } else if line.starts_with("metrics_listen = ") {
                out.push_str(&format!("metrics_listen = \"127.0.0.1:{metrics_port}\"\n"));
            } else if line.starts_with("audit_spool_dir = ") && !share_spool {
                // One proxy per spool folder, never one an earlier run left on this port.
                let dir = std::env::temp_dir().join(format!("gw-spool-{port}"));
                let _ = std::fs::remove_dir_all(&dir);
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
        (proc, url, format!("http://127.0.0.1:{metrics_port}"))
    }

    /// A new gw-proxy on this private stack's config, started with `--upgrade`: it waits for the
    /// stack's proxy (told with SIGQUIT) to hand its listening sockets over, then serves on the
    /// stack's addresses. Stopped when dropped.
    pub fn proxy_upgrade(&self) -> Proc {
        let config = self.config.as_ref().expect("upgrades need a private stack (Stack::start_with)");
        crate::process::spawn_bin_args("gw-proxy", &["--upgrade"], config, None, &self.env)
    }

    /// The generated config file of a private stack (rewrite it and send SIGHUP to reload).
    pub fn config_path(&self) -> &std::path::Path {
        self.config.as_deref().expect("the shared stack's config is not for tests to change")
    }

    /// Runs `gw-admin <args>` on this private stack's config and environment; panics unless it
    /// succeeds.
    pub fn admin_command(&self, args: &[&str]) {
        let status = Command::new(crate::process::bin("gw-admin"))
            .args(args)
            .env("GW_CONFIG", self.config_path())
            .env("GW_JWT_SECRET", JWT_SECRET)
            .env("RUST_LOG", "warn")
            .env_remove("DATABASE_URL")
            .env_remove("REDIS_URL")
            .env_remove("REDIS_CACHE_URL")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .status()
            .expect("run gw-admin");
        assert!(status.success(), "gw-admin {args:?} failed");
    }

    /// A new organization's owner who is also a gateway operator (`gw-admin operator grant`).
    pub async fn operator(&self) -> Session {
        let s = self.register().await;
        self.admin_command(&["operator", "grant", &s.email]);
        s
    }

    /// An owner made the way an operator makes one where sign-up is not open: `gw-admin
    /// bootstrap` (a fresh address), then a password sign-in.
    pub async fn bootstrap_owner(&self) -> Session {
        let email = format!("bootstrap-{}@test.gw", Uuid::new_v4());
        let out = std::env::temp_dir().join(format!("gw-bootstrap-{}.json", Uuid::new_v4()));
        let out_text = out.display().to_string();
        self.admin_command(&["bootstrap", "--email", &email, "--out", &out_text]);
        let creds: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).expect("bootstrap credentials")).expect("json");
        let _ = std::fs::remove_file(&out);
        let r = self
            .http
            .post(format!("{}/api/v1/auth/login", self.admin))
            .json(&serde_json::json!({"email": email, "password": creds["password"]}))
            .send()
            .await
            .expect("login");
        assert_eq!(r.status(), 200, "the bootstrap login failed");
        let body: serde_json::Value = r.json().await.expect("login body");
        Session::from_tokens(email, &body)
    }

    /// Kills gw-admin with SIGKILL (a crash: nothing finishes) and starts a new one on the same
    /// config and environment, once the old one is gone; returns when it answers. Private stacks
    /// only.
    pub async fn crash_and_restart_admin(&mut self) {
        let config = self.config.clone().expect("only a private stack's admin can crash");
        let admin = self._procs.iter_mut().position(|p| p.is_bin("gw-admin")).expect("the stack's gw-admin");
        let mut old = self._procs.remove(admin);
        old.0.kill().expect("SIGKILL gw-admin");
        old.0.wait().expect("reap gw-admin");
        self._procs.push(spawn_bin("gw-admin", &config, None, &self.env));
        wait_up(&self.http, &format!("{}/healthz", self.admin)).await;
    }

    /// Whether this handle points at the shared stack.
    pub fn is_shared(&self) -> bool {
        self.shared
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
