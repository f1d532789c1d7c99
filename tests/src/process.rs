//! Processes: where the binaries are, free ports, spawning them under a guard that stops them
//! with the test binary, and waiting until they answer.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::config::{database_url, workspace_root};
use crate::{AWS_TEST_CREDENTIALS, ENCRYPTION_KEY, JWT_SECRET};

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

/// Ports this test process has handed out: tests start stacks concurrently, and a port freed
/// by one pick is free for the next pick too until a server binds it, so two stacks could be
/// given the same port (one server then fails to bind, and its stack talks to the other's).
static HANDED_OUT: OnceLock<std::sync::Mutex<std::collections::HashSet<u16>>> = OnceLock::new();

/// Takes `port` for a server of this process's own choosing: false if it was handed out before.
pub(crate) fn claim_port(port: u16) -> bool {
    HANDED_OUT.get_or_init(Default::default).lock().map(|mut h| h.insert(port)).unwrap_or(false)
}

/// A free port on 127.0.0.1 that this process has not handed out before.
pub fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` distinct free ports that this process has not handed out before.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let handed = HANDED_OUT.get_or_init(Default::default);
    // Every listener is held until all are picked, so the kernel cannot give one port twice.
    let mut held: Vec<TcpListener> = Vec::new();
    let mut ports: Vec<u16> = Vec::with_capacity(N);
    while ports.len() < N {
        let l = TcpListener::bind("127.0.0.1:0").expect("no free port");
        let port = l.local_addr().map(|a| a.port()).expect("no free port");
        if handed.lock().map(|mut h| h.insert(port)).unwrap_or(false) {
            ports.push(port);
        }
        held.push(l);
    }
    std::array::from_fn(|i| ports[i])
}

pub(crate) fn migrate_once() {
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
pub(crate) fn command(program: &Path, guard: Option<&Path>) -> Command {
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
pub struct Proc(pub(crate) Child, pub(crate) &'static str);

impl Proc {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Whether it runs `name` (one of gw's binaries, or `mock-upstream`).
    pub(crate) fn is_bin(&self, name: &str) -> bool {
        self.1 == name
    }
}

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
pub(crate) fn spawn_mock(args: &[String], guard: Option<&Path>) -> (Proc, String) {
    let child = command(&bin("mock-upstream"), guard)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn mock-upstream");
    let mut mock = Proc(child, "mock-upstream");
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

/// Spawns one of gw's binaries with a stack's config and the harness's environment.
pub(crate) fn spawn_bin(name: &str, config: &Path, guard: Option<&Path>, env: &[(String, String)]) -> Proc {
    spawn_bin_args(name, &[], config, guard, env)
}

/// [`spawn_bin`] with command-line arguments.
pub(crate) fn spawn_bin_args(
    name: &str,
    args: &[&str],
    config: &Path,
    guard: Option<&Path>,
    env: &[(String, String)],
) -> Proc {
    let mut cmd = command(&bin(name), guard);
    cmd.args(args);
    cmd.env("GW_CONFIG", config)
        .env("GW_JWT_SECRET", JWT_SECRET)
        .env("GW_TEST_UPSTREAM_KEY", "sk-upstream-test")
        .env("GW_TEST_AWS_CREDENTIALS", AWS_TEST_CREDENTIALS)
        .env("GW_ENCRYPTION_KEY", ENCRYPTION_KEY)
        .env("GW_EMBEDDING_MODEL_DIR", embedding_model_dir())
        .env("RUST_LOG", std::env::var("GW_TEST_LOG").unwrap_or_else(|_| "warn".into()))
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URL")
        .env_remove("REDIS_CACHE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::inherit());
    let bin: &'static str = match name {
        "gw-admin" => "gw-admin",
        "gw-proxy" => "gw-proxy",
        _ => "other",
    };
    Proc(cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}")), bin)
}

pub(crate) fn http_client() -> reqwest::Client {
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
