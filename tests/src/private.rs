//! Private services for tests that must stop, break or reconfigure them: a Postgres cluster and a
//! Redis server of their own, stopped by PID when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::config::workspace_root;

/// A PostgreSQL server of the test's own (same binaries as `scripts/services.sh`, `$GW_PG_BIN`),
/// for tests that stop and restart the database under load. Its port is below Linux's ephemeral
/// range, as gw's defaults are, so a restart can always bind it again.
pub struct PrivatePostgres {
    pub port: u16,
    bin: PathBuf,
    dir: PathBuf,
}

/// A data directory (owned by `postgres` when running as root: PostgreSQL refuses root) and a
/// free port in 20000..32000, below the ephemeral range, that no other test of this binary was
/// given (tests start servers at once). `mul`, `offset` and `step` spread the picks.
fn server_place(prefix: &str, mul: u16, offset: u16, step: u16) -> (PathBuf, u16) {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("create the data directory");
    let as_root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"));
    if as_root {
        let ok = Command::new("chown").arg("postgres:").arg(&dir).status().is_ok_and(|s| s.success());
        assert!(ok, "chown of the data directory failed");
    }
    let port = (0..200)
        .map(|i| 20_000 + ((std::process::id() as u16).wrapping_mul(mul).wrapping_add(offset + i * step)) % 12_000)
        .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok() && crate::process::claim_port(*p))
        .expect("no free port below 32000");
    (dir, port)
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
        let (dir, port) = server_place("gw-pg", 7, 0, 53);
        let pg = PrivatePostgres { port, bin, dir };
        let data = pg.data();
        assert!(pg
            .run("initdb", &["-D", &data, "-U", "gw", "--auth=trust", "--encoding=UTF8", "--locale=C"])
            .success());
        pg.start_server();
        let port_s = port.to_string();
        assert!(pg.run("createdb", &["-h", "127.0.0.1", "-p", &port_s, "-U", "gw", "gw"]).success());
        let status = Command::new(crate::process::bin("gw-admin"))
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

    /// A streaming replica of this server, made with `pg_basebackup -R` from the same binaries
    /// and started: a hot standby replaying the primary's WAL as it streams in (pause it with
    /// `pg_wal_replay_pause()` to make it lag).
    pub fn replica(&self) -> PrivatePostgres {
        let (dir, port) = server_place("gw-pg-replica", 13, 3000, 59);
        let replica = PrivatePostgres { port, bin: self.bin.clone(), dir };
        let primary_port = self.port.to_string();
        assert!(
            self.run(
                "pg_basebackup",
                &[
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &primary_port,
                    "-U",
                    "gw",
                    "-D",
                    &replica.data(),
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast"
                ]
            )
            .success(),
            "pg_basebackup failed"
        );
        assert!(replica.start_server(), "the replica did not start: {}", replica.log());
        replica
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
            // Two tests of one binary starting servers at once must not pick the same port.
            .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok() && crate::process::claim_port(*p))
            .expect("no free port below 32000");
        let mut r = PrivateRedis { port, dir, child: None };
        r.start_server();
        r
    }

    /// `rediss://` when the binary runs against TLS Redis (`GW_TEST_REDIS=tls`): then this one
    /// speaks TLS too, with the same certificate authority.
    pub fn url(&self) -> String {
        match crate::config::redis_mode() {
            crate::config::RedisMode::Tls => format!("rediss://127.0.0.1:{}", self.port),
            _ => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// Starts the server (again) and waits until it answers.
    pub fn start_server(&mut self) {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
        match crate::config::redis_mode() {
            crate::config::RedisMode::Tls => {
                cmd.args(crate::topology::tls_server_args(self.port, &crate::config::shared_tls_redis().certs))
            }
            _ => cmd.args(["--port", &self.port.to_string()]),
        };
        let child = cmd
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
