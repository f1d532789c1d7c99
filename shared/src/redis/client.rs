//! Connections to whatever Redis gw is given: one server, a Redis Cluster, or a primary found
//! through Sentinel, each with or without TLS. Every caller holds a [`Pool`] and asks it for a
//! [`Conn`]; commands, pipelines and scripts run on a `Conn` the same way whatever the topology.
//!
//! A `Pool` keeps a few multiplexed connections (a command on one does not wait for another's
//! answer, so no checkout round trip is needed) and replaces one that failed in a way only a new
//! connection fixes: the socket is gone, or the server stopped being the writable primary
//! (`READONLY` after a failover, `MASTERDOWN`, `LOADING` after a restart). The replacement is
//! made on the next use, from the topology, so it finds the new primary. Cluster connections
//! follow `MOVED`/`ASK` and refresh their slot map themselves.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, ClientTlsConfig, Cmd, ErrorKind, IntoConnectionInfo, Pipeline, RedisError, RedisFuture,
    RedisResult, ServerErrorKind, TlsCertificates, Value,
};

use crate::config::{RedisConfig, RedisTlsConfig, Topology};
use crate::error::{Error, Result};

/// How long connecting and answering may take, and how many connections to keep.
#[derive(Debug, Clone, Copy)]
pub struct ConnOptions {
    pub connections: usize,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
}

impl Default for ConnOptions {
    fn default() -> Self {
        Self { connections: 4, connect_timeout: Duration::from_secs(2), response_timeout: Duration::from_secs(2) }
    }
}

/// After a failed connection attempt, callers are told at once that Redis is unreachable for
/// this long instead of each trying again.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// Keepalive and unacknowledged-data bounds on every socket, so that a peer that vanished
/// (a host gone, a cable pulled) is noticed in seconds, not at the kernel's two-hour default.
fn tcp_settings() -> TcpSettings {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(5))
        .with_interval(Duration::from_secs(1))
        .with_retries(3);
    TcpSettings::default().set_nodelay(true).set_keepalive(keepalive).set_user_timeout(Duration::from_secs(10))
}

enum Connector {
    Standalone(redis::Client),
    Cluster(redis::cluster::ClusterClient),
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

#[derive(Clone)]
enum Link {
    /// With the flag its driver raises when the socket closes, so that the next `get` makes a
    /// new connection instead of handing out a dead one.
    Single(MultiplexedConnection, Arc<AtomicBool>),
    Cluster(ClusterConnection),
}

impl Link {
    fn alive(&self) -> bool {
        match self {
            Link::Single(_, closed) => !closed.load(Ordering::Acquire),
            Link::Cluster(_) => true,
        }
    }
}

#[derive(Default)]
struct Slot {
    link: Option<(Link, u64)>,
    generation: u64,
    failed_at: Option<Instant>,
}

struct Inner {
    topology: Topology,
    connector: Connector,
    opts: ConnOptions,
    tls: Option<TlsCertificates>,
    slots: Vec<(Mutex<Slot>, Arc<tokio::sync::Mutex<()>>)>,
    next: AtomicUsize,
}

/// A handle on one Redis deployment; cheap to clone.
#[derive(Clone)]
pub struct Pool(Arc<Inner>);

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("topology", &self.0.topology.name()).finish()
    }
}

fn tls_certificates(tls: &RedisTlsConfig) -> Result<Option<TlsCertificates>> {
    let read = |what: &str, path: &str| {
        std::fs::read(path).map_err(|e| Error::Config(format!("redis.tls.{what} {path:?}: {e}")))
    };
    let root_cert = tls.ca_file.as_deref().map(|p| read("ca_file", p)).transpose()?;
    let client_tls = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            Some(ClientTlsConfig { client_cert: read("cert_file", cert)?, client_key: read("key_file", key)? })
        }
        (None, None) => None,
        _ => return Err(Error::Config("redis.tls.cert_file and redis.tls.key_file go together".into())),
    };
    Ok((root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates { client_tls, root_cert }))
}

fn bad_config(what: &str, e: RedisError) -> Error {
    Error::Config(format!("{what}: {e}"))
}

/// A client for one server. Commands go over RESP3, so that a connection can say when it closed
/// (a push RESP2 has no room for); subscriptions over RESP2, which `redis::aio::PubSub` speaks.
fn standalone_client(
    url: &str,
    tls: &Option<TlsCertificates>,
    protocol: redis::ProtocolVersion,
) -> Result<redis::Client> {
    let info = url.into_connection_info().map_err(|e| bad_config("redis url", e))?.set_tcp_settings(tcp_settings());
    let settings = info.redis_settings().clone().set_protocol(protocol);
    let info = info.set_redis_settings(settings);
    match tls {
        Some(certs) if url.starts_with("rediss://") => {
            redis::Client::build_with_tls(info, certs.clone()).map_err(|e| bad_config("redis tls", e))
        }
        _ => redis::Client::open(info).map_err(|e| bad_config("redis url", e)),
    }
}

impl Pool {
    pub fn new(topology: Topology, tls: &RedisTlsConfig, opts: ConnOptions) -> Result<Self> {
        let certs = tls_certificates(tls)?;
        let connector = match &topology {
            Topology::Standalone(url) => {
                Connector::Standalone(standalone_client(url, &certs, redis::ProtocolVersion::RESP3)?)
            }
            Topology::Cluster(nodes) => {
                if nodes.is_empty() {
                    return Err(Error::Config("redis.cluster needs at least one seed node".into()));
                }
                let mut b = redis::cluster::ClusterClientBuilder::new(nodes.clone())
                    .connection_timeout(opts.connect_timeout)
                    .response_timeout(opts.response_timeout)
                    .tcp_settings(tcp_settings())
                    .retries(3)
                    .max_retry_wait(200)
                    .min_retry_wait(20);
                if let Some(c) = &certs {
                    b = b.certs(c.clone());
                }
                Connector::Cluster(b.build().map_err(|e| bad_config("redis.cluster", e))?)
            }
            Topology::Sentinel { master, sentinels, url } => {
                let info = url.as_str().into_connection_info().map_err(|e| bad_config("redis url", e))?;
                let mut addrs = Vec::new();
                let mut sentinel_auth = None;
                for s in sentinels {
                    let si = s.as_str().into_connection_info().map_err(|e| bad_config("redis.sentinel.nodes", e))?;
                    if sentinel_auth.is_none() && si.redis_settings().password().is_some() {
                        sentinel_auth = Some(si.redis_settings().clone());
                    }
                    addrs.push(si.addr().clone());
                }
                if addrs.is_empty() {
                    return Err(Error::Config("redis.sentinel.nodes needs at least one sentinel".into()));
                }
                let rs = info.redis_settings();
                let mut b = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master)
                    .map_err(|e| bad_config("redis.sentinel", e))?
                    .set_client_to_redis_db(rs.db())
                    .set_client_to_redis_protocol(redis::ProtocolVersion::RESP3)
                    .set_client_to_redis_tcp_settings(tcp_settings())
                    .set_client_to_sentinel_tcp_settings(tcp_settings());
                if let Some(user) = rs.username() {
                    b = b.set_client_to_redis_username(user);
                }
                if let Some(pass) = rs.password() {
                    b = b.set_client_to_redis_password(pass);
                }
                if let Some(auth) = &sentinel_auth {
                    if let Some(user) = auth.username() {
                        b = b.set_client_to_sentinel_username(user);
                    }
                    if let Some(pass) = auth.password() {
                        b = b.set_client_to_sentinel_password(pass);
                    }
                }
                if url.starts_with("rediss://") {
                    b = b.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
                    if let Some(c) = &certs {
                        b = b.set_client_to_redis_certificates(c.clone());
                    }
                }
                if sentinels.iter().any(|s| s.starts_with("rediss://")) {
                    b = b.set_client_to_sentinel_tls_mode(redis::TlsMode::Secure);
                    if let Some(c) = &certs {
                        b = b.set_client_to_sentinel_certificates(c.clone());
                    }
                }
                Connector::Sentinel(tokio::sync::Mutex::new(b.build().map_err(|e| bad_config("redis.sentinel", e))?))
            }
        };
        // A cluster connection already keeps one socket per node.
        let n = if matches!(topology, Topology::Cluster(_)) { 1 } else { opts.connections.max(1) };
        let slots = (0..n).map(|_| (Mutex::new(Slot::default()), Arc::new(tokio::sync::Mutex::new(())))).collect();
        Ok(Pool(Arc::new(Inner { topology, connector, opts, tls: certs, slots, next: AtomicUsize::new(0) })))
    }

    /// The main Redis of a configuration: counters, cached lookups, invalidations.
    pub fn from_config(cfg: &RedisConfig, opts: ConnOptions) -> Result<Self> {
        Self::new(cfg.topology(), &cfg.tls, opts)
    }

    /// Where L2 response-cache entries live (`cache_url`, else the main Redis).
    pub fn cache_from_config(cfg: &RedisConfig, opts: ConnOptions) -> Result<Self> {
        Self::new(cfg.cache_topology(), &cfg.tls, opts)
    }

    pub fn topology(&self) -> &Topology {
        &self.0.topology
    }

    fn slot(&self, i: usize) -> std::sync::MutexGuard<'_, Slot> {
        self.0.slots[i].0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection; made (or remade) here when none is up. Fails fast while Redis is
    /// unreachable. The connecting runs in a task of its own on the caller's runtime (where the
    /// connection's driver then lives), so a caller that gives up early does not leave the next
    /// one to start over.
    pub async fn get(&self) -> Result<Conn> {
        let i = self.0.next.fetch_add(1, Ordering::Relaxed) % self.0.slots.len();
        if let Some(conn) = self.current(i) {
            return Ok(conn);
        }
        let connecting = self.0.slots[i].1.clone().lock_owned().await;
        if let Some(conn) = self.current(i) {
            return Ok(conn);
        }
        if self.slot(i).failed_at.is_some_and(|t| t.elapsed() < RETRY_AFTER) {
            return Err(Error::Redis("Redis is unreachable".into()));
        }
        let pool = self.clone();
        let task = tokio::spawn(async move {
            let _connecting = connecting;
            let made = tokio::time::timeout(pool.0.opts.connect_timeout * 2, pool.connect()).await;
            let mut s = pool.slot(i);
            match made {
                Ok(Ok(link)) => {
                    s.generation += 1;
                    s.failed_at = None;
                    s.link = Some((link, s.generation));
                    Ok(())
                }
                Ok(Err(e)) => {
                    s.failed_at = Some(Instant::now());
                    Err(Error::from(e))
                }
                Err(_) => {
                    s.failed_at = Some(Instant::now());
                    Err(Error::Redis("connecting to Redis timed out".into()))
                }
            }
        });
        task.await.map_err(|e| Error::Redis(format!("connecting to Redis: {e}")))??;
        self.current(i).ok_or_else(|| Error::Redis("Redis connection lost".into()))
    }

    fn current(&self, i: usize) -> Option<Conn> {
        let mut s = self.slot(i);
        let (link, generation) = s.link.clone()?;
        if !link.alive() {
            s.link = None;
            return None;
        }
        Some(Conn { link, generation, slot: i, pool: self.clone() })
    }

    async fn connect(&self) -> RedisResult<Link> {
        let closed = Arc::new(AtomicBool::new(false));
        let flag = closed.clone();
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.0.opts.connect_timeout))
            .set_response_timeout(Some(self.0.opts.response_timeout))
            .set_push_sender(move |push: redis::PushInfo| {
                if push.kind == redis::PushKind::Disconnection {
                    flag.store(true, Ordering::Release);
                }
                Ok::<(), std::convert::Infallible>(())
            });
        match &self.0.connector {
            Connector::Standalone(c) => {
                Ok(Link::Single(c.get_multiplexed_async_connection_with_config(&cfg).await?, closed))
            }
            Connector::Cluster(c) => Ok(Link::Cluster(c.get_async_connection().await?)),
            Connector::Sentinel(s) => {
                let conn = s.lock().await.get_async_connection_with_config(&cfg).await?;
                Ok(Link::Single(conn, closed))
            }
        }
    }

    /// Forgets connection `generation` of slot `i` if it is still the current one.
    fn discard(&self, i: usize, generation: u64) {
        let mut s = self.slot(i);
        if s.link.as_ref().is_some_and(|(_, g)| *g == generation) {
            s.link = None;
        }
    }

    /// A client for one node able to take a subscription: the standalone server, a cluster node
    /// (plain pub/sub messages reach every node of a cluster), or the primary the sentinels name.
    /// Tried in order until one answers.
    pub async fn pubsub(&self) -> RedisResult<redis::aio::PubSub> {
        match &self.0.connector {
            Connector::Standalone(c) => resp2(c)?.get_async_pubsub().await,
            Connector::Sentinel(s) => {
                let client = s.lock().await.async_get_client().await?;
                resp2(&client)?.get_async_pubsub().await
            }
            Connector::Cluster(_) => {
                let Topology::Cluster(nodes) = &self.0.topology else {
                    return Err(RedisError::from((ErrorKind::Client, "not a cluster")));
                };
                let mut last = RedisError::from((ErrorKind::Client, "no cluster node answered"));
                for node in nodes {
                    let client = match standalone_client(node, &self.0.tls, redis::ProtocolVersion::RESP2) {
                        Ok(c) => c,
                        Err(e) => return Err(RedisError::from((ErrorKind::Client, "bad node", e.to_string()))),
                    };
                    match client.get_async_pubsub().await {
                        Ok(p) => return Ok(p),
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
        }
    }

    /// Whether this is a Redis Cluster (commands touching several keys must keep to one slot).
    pub fn is_cluster(&self) -> bool {
        matches!(self.0.topology, Topology::Cluster(_))
    }
}

/// The same server spoken to over RESP2.
fn resp2(client: &redis::Client) -> RedisResult<redis::Client> {
    let info = client.get_connection_info().clone();
    let settings = info.redis_settings().clone().set_protocol(redis::ProtocolVersion::RESP2);
    redis::Client::open(info.set_redis_settings(settings))
}

/// Errors after which this connection is no use: a new one (to the current primary) is needed.
pub fn needs_new_connection(e: &RedisError) -> bool {
    e.is_connection_dropped()
        || e.is_io_error()
        || e.is_unrecoverable_error()
        || matches!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown | ServerErrorKind::BusyLoading)
        )
}

/// One connection of a [`Pool`], for any number of commands.
#[derive(Clone)]
pub struct Conn {
    link: Link,
    generation: u64,
    slot: usize,
    pool: Pool,
}

impl Conn {
    /// Runs a keyless command (`SCAN`, say) on the primary owning `key`'s hash slot: on a
    /// cluster, where all of one organization's keys live; elsewhere, on the one server.
    pub async fn query_on_node_of<T: redis::FromRedisValue>(&mut self, key: &str, cmd: Cmd) -> RedisResult<T> {
        let r = match &mut self.link {
            Link::Single(c, _) => cmd.query_async(c).await,
            Link::Cluster(c) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let route = Route::new(key_slot(key.as_bytes()), SlotAddr::Master);
                match c.route_command(cmd, RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route))).await {
                    Ok(v) => redis::from_redis_value(v).map_err(RedisError::from),
                    Err(e) => Err(e),
                }
            }
        };
        self.after(&r);
        r
    }

    fn after(&self, r: &RedisResult<impl Sized>) {
        if let (Err(e), Link::Single(..)) = (r, &self.link) {
            if needs_new_connection(e) {
                self.pool.discard(self.slot, self.generation);
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let r = match &mut self.link {
                Link::Single(c, _) => c.req_packed_command(cmd).await,
                Link::Cluster(c) => c.req_packed_command(cmd).await,
            };
            self.after(&r);
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let r = match &mut self.link {
                Link::Single(c, _) => c.req_packed_commands(pipeline, offset, count).await,
                Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count).await,
            };
            self.after(&r);
            r
        })
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(c, _) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

/// The hash slot of a key (Redis Cluster's CRC16 of its `{tag}`, or of the whole key).
pub fn key_slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter().position(|&b| b == b'}').filter(|&close| close > 0).map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag) % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_hash_tags() {
        // Values from the Redis Cluster specification's examples (CLUSTER KEYSLOT).
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    }

    #[test]
    fn connection_errors_that_call_for_a_new_connection() {
        let readonly = RedisError::from((ErrorKind::Server(ServerErrorKind::ReadOnly), "READONLY"));
        assert!(needs_new_connection(&readonly));
        let loading = RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "LOADING"));
        assert!(needs_new_connection(&loading));
        let script = RedisError::from((ErrorKind::Server(ServerErrorKind::NoScript), "NOSCRIPT"));
        assert!(!needs_new_connection(&script));
    }
}
