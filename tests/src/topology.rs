//! The Redis topologies gw's users scale onto, started by the tests that need them with
//! `redis-server` on loopback ports and stopped by PID: a Redis Cluster (masters, and replicas
//! that take over when a master stops), a Redis with TLS only (certificates made here with the
//! `openssl` command), and a TCP relay in front of a Redis that a test can cut or stall.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

/// `count` free loopback ports below the ephemeral range, each with its cluster bus port
/// (`port + 10000`) free too.
fn free_ports(count: usize) -> Vec<u16> {
    let seed = (std::process::id() as u16).wrapping_mul(13);
    let mut out: Vec<u16> = Vec::new();
    for i in 0..4000u16 {
        let p = 20_000 + (seed.wrapping_add(i.wrapping_mul(37))) % 12_000;
        if out.contains(&p) || out.iter().any(|o| o + 10_000 == p || p + 10_000 == *o) {
            continue;
        }
        // Tests of one binary start servers at once: a port another test was given is not free
        // for this one, even before that test's server binds it.
        if TcpListener::bind(("127.0.0.1", p)).is_ok()
            && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok()
            && crate::process::claim_port(p)
            && crate::process::claim_port(p + 10_000)
        {
            out.push(p);
            if out.len() == count {
                return out;
            }
        }
    }
    panic!("not enough free ports");
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server on {port} did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli (scripts/services.sh installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Redis Cluster of `masters` primaries with `replicas` replicas each, no persistence.
pub struct RedisCluster {
    pub ports: Vec<u16>,
    dir: PathBuf,
    children: Vec<Option<Child>>,
}

impl RedisCluster {
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        Self::start_guarded(masters, replicas, false)
    }

    /// `guarded`: each server runs under the harness's guard wrapper and stops when the test
    /// binary exits (for a cluster kept in a static, which is never dropped).
    pub fn start_guarded(masters: usize, replicas: usize, guarded: bool) -> RedisCluster {
        let n = masters * (1 + replicas);
        let dir = std::env::temp_dir().join(format!("gw-cluster-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("create the cluster directory");
        let ports = free_ports(n);
        let mut c = RedisCluster { ports: ports.clone(), dir, children: Vec::new() };
        for &p in &ports {
            let child = c.spawn(p, guarded);
            c.children.push(Some(child));
        }
        for &p in &ports {
            wait_for_port(p);
        }
        let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&nodes)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        c.wait_until_ok(&ports);
        c.wait_until_synced(&ports);
        c
    }

    /// Waits until every replica among `ports` has finished its first sync with its primary: a
    /// replica that never synced refuses to take over (its data counts as too old), so a test
    /// that stops a primary right after the cluster formed would find no failover.
    pub fn wait_until_synced(&self, ports: &[u16]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pending: Vec<u16> = ports
                .iter()
                .copied()
                .filter(|p| {
                    let info = cli(*p, &["info", "replication"]);
                    info.contains("role:slave") && !info.contains("master_link_status:up")
                })
                .collect();
            if pending.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "replicas {pending:?} never synced with their primaries");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn spawn(&self, port: u16, guarded: bool) -> Child {
        let conf = self.dir.join(format!("nodes-{port}.conf"));
        let marker = self.dir.join(format!("guard-{port}"));
        crate::process::command(std::path::Path::new("redis-server"), guarded.then_some(marker.as_path()))
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
            // A replica's first sync starts at once instead of waiting 5 s for others to join it.
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--cluster-config-file")
            .arg(&conf)
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn redis-server (scripts/services.sh installs it)")
    }

    /// Waits until every node in `ports` reports the cluster healthy and all slots served.
    pub fn wait_until_ok(&self, ports: &[u16]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = ports.iter().all(|p| {
                let info = cli(*p, &["cluster", "info"]);
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
            if ok {
                return;
            }
            if Instant::now() >= deadline {
                let nodes = ports.first().map(|p| cli(*p, &["cluster", "nodes"])).unwrap_or_default();
                panic!("the cluster did not become healthy:\n{nodes}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Seed node URLs for `[redis] cluster`.
    pub fn seeds(&self) -> Vec<String> {
        self.ports.iter().map(|p| format!("redis://127.0.0.1:{p}")).collect()
    }

    /// The `[redis]` keys pointing gw at this cluster.
    pub fn config(&self) -> String {
        let seeds: Vec<String> = self.seeds().iter().map(|s| format!("\"{s}\"")).collect();
        format!("cluster = [{}]", seeds.join(", "))
    }

    /// The port of the primary serving `key`'s slot now.
    pub fn primary_of(&self, key: &str) -> u16 {
        let slot: u16 = cli(self.live_port(), &["cluster", "keyslot", key]).trim().parse().expect("keyslot");
        let nodes = cli(self.live_port(), &["cluster", "nodes"]);
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let serves = f[8..].iter().any(|r| match r.split_once('-') {
                Some((a, b)) => a.parse::<u16>().is_ok_and(|a| a <= slot) && b.parse::<u16>().is_ok_and(|b| slot <= b),
                None => r.parse::<u16>().is_ok_and(|s| s == slot),
            });
            if serves {
                let port = f[1].split('@').next().and_then(|a| a.rsplit(':').next()).and_then(|p| p.parse().ok());
                return port.expect("node address");
            }
        }
        panic!("no primary serves slot {slot}: {nodes}");
    }

    fn live_port(&self) -> u16 {
        self.ports.iter().zip(&self.children).find(|(_, c)| c.is_some()).map(|(p, _)| *p).expect("a live node")
    }

    /// Every key on every live node matching `pattern`.
    pub fn keys_matching(&self, pattern: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (p, c) in self.ports.iter().zip(&self.children) {
            if c.is_some() {
                out.extend(cli(*p, &["--scan", "--pattern", pattern]).lines().map(str::to_string));
            }
        }
        out
    }

    /// Stops the node on `port` at once (its PID killed).
    pub fn stop(&mut self, port: u16) {
        let i = self.ports.iter().position(|p| *p == port).expect("a node of this cluster");
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The live nodes' ports.
    pub fn live(&self) -> Vec<u16> {
        self.ports.iter().zip(&self.children).filter(|(_, c)| c.is_some()).map(|(p, _)| *p).collect()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut() {
            if let Some(mut c) = c.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A primary, a replica of it and a sentinel watching them (quorum 1): the sentinel promotes
/// the replica a second after the primary stops answering.
pub struct RedisSentinel {
    pub primary: u16,
    pub replica: u16,
    pub sentinel: u16,
    dir: PathBuf,
    children: Vec<(u16, Child)>,
}

impl RedisSentinel {
    pub const MASTER: &'static str = "gw";

    pub fn start() -> RedisSentinel {
        let ports = free_ports(3);
        let (primary, replica, sentinel) = (ports[0], ports[1], ports[2]);
        let dir = std::env::temp_dir().join(format!("gw-sentinel-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("create the sentinel directory");
        let server = |port: u16, extra: &[&str]| {
            Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
                .args(extra)
                .arg("--dir")
                .arg(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn redis-server")
        };
        let mut children = vec![(primary, server(primary, &[]))];
        wait_for_port(primary);
        children.push((replica, server(replica, &["--replicaof", "127.0.0.1", &primary.to_string()])));
        wait_for_port(replica);
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {sentinel}\nbind 127.0.0.1\nsentinel monitor {m} 127.0.0.1 {primary} 1\n\
                 sentinel down-after-milliseconds {m} 1000\nsentinel failover-timeout {m} 3000\n",
                m = Self::MASTER
            ),
        )
        .expect("write sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn redis-server --sentinel");
        children.push((sentinel, child));
        wait_for_port(sentinel);
        // The replica in sync, so that a failover loses nothing acknowledged before it.
        let deadline = Instant::now() + Duration::from_secs(15);
        while !cli(replica, &["info", "replication"]).contains("master_link_status:up") {
            assert!(Instant::now() < deadline, "the replica never synced");
            std::thread::sleep(Duration::from_millis(50));
        }
        RedisSentinel { primary, replica, sentinel, dir, children }
    }

    /// The `[redis]` keys pointing gw at the primary the sentinel names.
    pub fn config(&self) -> String {
        format!("sentinel = {{ master = \"{}\", nodes = [\"redis://127.0.0.1:{}\"] }}", Self::MASTER, self.sentinel)
    }

    /// The primary's port as the sentinel sees it now.
    pub fn current_primary(&self) -> u16 {
        let out = cli(self.sentinel, &["sentinel", "get-master-addr-by-name", Self::MASTER]);
        out.lines().nth(1).and_then(|p| p.trim().parse().ok()).expect("the sentinel names a primary")
    }

    /// Stops the server on `port` at once.
    pub fn stop(&mut self, port: u16) {
        if let Some(i) = self.children.iter().position(|(p, _)| *p == port) {
            let (_, mut c) = self.children.remove(i);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        for (_, c) in self.children.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A certificate authority and a server certificate for 127.0.0.1, made with `openssl`.
pub struct TestCerts {
    pub dir: PathBuf,
}

impl TestCerts {
    pub fn make() -> TestCerts {
        let dir = std::env::temp_dir().join(format!("gw-certs-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("create the certificate directory");
        let run = |args: &str| {
            let args: Vec<&str> = args.split(' ').collect();
            let out = Command::new("openssl")
                .args(&args)
                .current_dir(&dir)
                .stdin(Stdio::null())
                .output()
                .expect("run openssl");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run("req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=gw-test-ca \
             -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign");
        // A certificate the CA signs, with the extensions in `<name>.cnf`.
        let issue = |name: &str, subject: &str, extensions: &str| {
            std::fs::write(dir.join(format!("{name}.cnf")), extensions).expect("write openssl config");
            run(&format!("req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr -subj /CN={subject}"));
            run(&format!(
                "x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out {name}.crt -days 2 \
                 -extfile {name}.cnf"
            ));
        };
        issue("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
        // For servers that ask clients for one.
        issue("client", "gw", "extendedKeyUsage=clientAuth\n");
        TestCerts { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis that speaks TLS only (its plain port closed) and asks clients for a certificate.
pub struct TlsRedis {
    pub port: u16,
    pub certs: TestCerts,
    dir: PathBuf,
    child: Option<Child>,
}

/// `redis-server` arguments serving TLS only on `port` with `certs`, and only to clients with a
/// certificate the same CA signed.
pub fn tls_server_args(port: u16, certs: &TestCerts) -> Vec<String> {
    [
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        &certs.path("server.crt"),
        "--tls-key-file",
        &certs.path("server.key"),
        "--tls-ca-cert-file",
        &certs.path("ca.crt"),
        "--tls-auth-clients",
        "yes",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

impl TlsRedis {
    pub fn start() -> TlsRedis {
        Self::start_guarded(false)
    }

    pub fn start_guarded(guarded: bool) -> TlsRedis {
        let certs = TestCerts::make();
        let port = free_ports(1)[0];
        let dir = std::env::temp_dir().join(format!("gw-tls-redis-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("create the redis directory");
        let marker = dir.join("guard");
        let child = crate::process::command(std::path::Path::new("redis-server"), guarded.then_some(marker.as_path()))
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(tls_server_args(port, &certs))
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn redis-server with TLS");
        wait_for_port(port);
        TlsRedis { port, certs, dir, child: Some(child) }
    }

    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    /// The `[redis]` table's `tls` key: this server's CA, and the client certificate it asks for.
    pub fn tls_config(&self) -> String {
        format!(
            "tls = {{ ca_file = \"{}\", cert_file = \"{}\", key_file = \"{}\" }}",
            self.certs.path("ca.crt"),
            self.certs.path("client.crt"),
            self.certs.path("client.key")
        )
    }

    pub fn ca_file(&self) -> String {
        self.certs.path("ca.crt")
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const FORWARD: u8 = 0;
const REFUSE: u8 = 1;
const STALL: u8 = 2;

/// A TCP relay to `127.0.0.1:target`: forwarding, refusing (every connection closed, new ones
/// too), or stalled (connections stay open and nothing goes through either way), as a test
/// chooses. Runs on its own thread's runtime, so it outlives any one test's.
pub struct Relay {
    pub port: u16,
    mode: Arc<AtomicU8>,
    /// Bumped to close every open connection.
    cut: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Relay {
    pub fn start(target: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().expect("relay address").port();
        listener.set_nonblocking(true).expect("nonblocking relay");
        let mode = Arc::new(AtomicU8::new(FORWARD));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let cut = Arc::new(cut);
        let (m, c) = (mode.clone(), cut.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("relay runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("relay listener");
                loop {
                    let Ok((inbound, _)) = listener.accept().await else { continue };
                    if m.load(Ordering::Acquire) == REFUSE {
                        drop(inbound);
                        continue;
                    }
                    let (m, mut cut) = (m.clone(), c.subscribe());
                    tokio::spawn(async move {
                        let Ok(outbound) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else { return };
                        let (ri, wi) = inbound.into_split();
                        let (ro, wo) = outbound.into_split();
                        tokio::select! {
                            _ = pump(m.clone(), ri, wo) => {}
                            _ = pump(m, ro, wi) => {}
                            _ = cut.changed() => {}
                        }
                    });
                }
            });
        });
        Relay { port, mode, cut }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Closes every connection and refuses new ones.
    pub fn refuse(&self) {
        self.mode.store(REFUSE, Ordering::Release);
        self.cut.send_modify(|n| *n += 1);
    }

    /// Keeps connections open but lets nothing through (new connections are accepted and stall).
    pub fn stall(&self) {
        self.mode.store(STALL, Ordering::Release);
    }

    pub fn forward(&self) {
        self.mode.store(FORWARD, Ordering::Release);
    }
}

/// Copies one direction until either side closes; holds what it read while stalled.
async fn pump(mode: Arc<AtomicU8>, mut r: tokio::net::tcp::OwnedReadHalf, mut w: tokio::net::tcp::OwnedWriteHalf) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while mode.load(Ordering::Acquire) == STALL {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if mode.load(Ordering::Acquire) == REFUSE || w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Debian's PgBouncer in transaction mode, in front of the test Postgres: each transaction (and
/// each statement outside one) may run on another server connection, as in production behind a
/// transaction pooler. Stopped by PID when dropped (or, guarded, when the test binary exits).
pub struct PgBouncer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl PgBouncer {
    /// In front of the server `direct` (a `postgres://user[:password]@host:port/db` URL) points at;
    /// every database name is passed through.
    pub fn start_guarded(direct: &str, guarded: bool) -> PgBouncer {
        let url = url::Url::parse(direct).expect("a database URL");
        let host = url.host_str().unwrap_or("127.0.0.1").to_string();
        let server_port = url.port().unwrap_or(5432);
        let user = if url.username().is_empty() { "postgres".to_string() } else { url.username().to_string() };
        let password = url.password().map(|p| format!(" password={p}")).unwrap_or_default();
        let port = free_ports(1)[0];
        let dir = std::env::temp_dir().join(format!("gw-pgbouncer-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("create the pgbouncer directory");
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n* = host={host} port={server_port} user={user}{password}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                 auth_type = any\npool_mode = transaction\nmax_client_conn = 2000\ndefault_pool_size = 40\n\
                 ignore_startup_parameters = extra_float_digits,options\nlogfile = {log}\n\
                 log_connections = 0\nlog_disconnections = 0\n",
                log = dir.join("pgbouncer.log").display()
            ),
        )
        .expect("write pgbouncer.ini");
        let exe = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .iter()
            .map(std::path::Path::new)
            .find(|p| p.exists())
            .expect("pgbouncer is not installed (scripts/services.sh installs it)");
        let marker = dir.join("guard");
        let mut cmd = crate::process::command(exe, guarded.then_some(marker.as_path()));
        // PgBouncer refuses to run as root; it switches to another user when told to.
        if nix_is_root() {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777));
            cmd.args(["-u", "postgres"]);
        }
        let child =
            cmd.arg("-q").arg(&ini).stdout(Stdio::null()).stderr(Stdio::inherit()).spawn().expect("spawn pgbouncer");
        wait_for_port(port);
        PgBouncer { port, dir, child: Some(child) }
    }

    /// `direct` with PgBouncer's address in place of the server's.
    pub fn in_front_of(&self, direct: &str) -> String {
        let mut url = url::Url::parse(direct).expect("a database URL");
        url.set_host(Some("127.0.0.1")).expect("a host");
        url.set_port(Some(self.port)).expect("a port");
        url.to_string()
    }

    /// What PgBouncer logged (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

fn nix_is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
