//! The `[proxy]` table: the data plane's listeners, limits on what it accepts, caches, audit
//! spooling and the upstream connection pool.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    pub listen: String,
    pub metrics_listen: String,
    /// Worker threads of the Pingora service.
    pub threads: usize,
    /// Largest request body accepted on `/v1`; larger ones get 413.
    pub max_body_bytes: usize,
    pub upstream_connect_timeout_ms: u64,
    /// Longest wait for any single read from an upstream (header or a body chunk).
    pub upstream_read_timeout_ms: u64,
    /// Largest upstream response body we buffer (non-streaming).
    pub max_upstream_body_bytes: usize,
    /// Most bytes gw reads from an upstream stream after nobody receives it any more (the client
    /// left, or an output guardrail stopped it), to learn the usage the upstream bills; past it
    /// the attempt is billed at an estimate.
    pub stream_drain_max_bytes: usize,
    /// Longest a request may take, fallbacks included; past it the client gets 504.
    pub request_timeout_ms: u64,
    /// How long a looked-up key (or team) is used without a re-read. Revocations arrive sooner,
    /// through Redis; this bounds staleness if such a message is ever lost.
    pub key_cache_ttl_secs: u64,
    /// How long an unknown key (or team) is remembered as unknown.
    pub key_negative_ttl_secs: u64,
    /// While Postgres is unreachable, a key or team already known keeps being served from its
    /// last good read for at most this long.
    pub key_cache_max_stale_secs: u64,
    /// Bytes each in-process lookup cache (keys, teams, organizations, policy documents, provider
    /// keys, cache settings) may hold, entries weighed by their serialized size.
    pub lookup_cache_max_bytes: u64,
    /// Bytes the cache of compiled policy sets may hold (weighed by [`crate::policy::engine::PolicySet::weight`]).
    pub policy_cache_max_bytes: u64,
    /// Guardrail work (bytes of text times passes: [`crate::policy::engine::scan_work`]) a request
    /// may run on the request's worker thread; more goes to the scan pool.
    pub policy_inline_scan_work: u64,
    /// Guardrail work one request may cost at all; more is refused (413 `policy_scan_too_large`).
    pub policy_max_scan_work: u64,
    /// Threads of the scan pool, which run at the lowest CPU priority: heavy scans yield the core
    /// to other tenants' requests.
    pub policy_scan_threads: usize,
    /// Heavy scans waiting for a pool thread, at most; past it requests get 503
    /// `policy_scan_busy`.
    pub policy_scan_queue: usize,
    /// Heavy scans of one organization in the pool at once; its further ones wait their turn
    /// (within the request's deadline).
    pub policy_scan_per_org: usize,
    /// Failed authentications allowed per client address per minute before gw stops looking
    /// unknown keys up (cached keys keep working).
    pub auth_failures_per_minute: u32,
    /// The operator's proxies in front of gw-proxy (load balancers, ingress), as CIDRs: a
    /// request from one of them is attributed to the client its `X-Forwarded-For` names
    /// (`gw_shared::client_addr`), for throttling and the audit log. Empty: the peer is the
    /// client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Longest wait for Postgres or Redis on the request path before falling back.
    pub store_timeout_ms: u64,
    /// Largest request header block (all names and values), and largest single header value;
    /// larger ones get 431.
    pub max_header_bytes: usize,
    pub max_header_value_bytes: usize,
    /// How long a resolved upstream host name is reused.
    pub dns_ttl_secs: u64,
    /// An idle keep-alive connection from a client is closed after this many seconds.
    pub keepalive_idle_secs: u64,
    /// Idle upstream connections kept for reuse, across all upstreams. Past it, a finished
    /// exchange closes its connection and the next one connects again.
    pub upstream_keepalive_pool_size: usize,
    /// Bytes read from a client connection at once. Pingora's default (64 KiB) is held by every
    /// open connection; requests are mostly a few KiB.
    pub client_read_buffer_bytes: usize,
    pub audit_channel_capacity: usize,
    pub audit_batch_size: usize,
    pub audit_flush_interval_ms: u64,
    /// Where audit batches spill while Postgres is slow or down (replayed in order once it is
    /// back). One proxy process per folder: the proxy locks it. Default `.gw/spool/proxy-<port>`.
    pub audit_spool_dir: Option<String>,
    /// Bytes the spool holds at most; past it records are dropped (counted and logged).
    pub audit_spool_max_bytes: u64,
    /// Every answered request's audit row is appended to a journal file in the process's spool
    /// folder before the answer's last bytes go out, so a process killed (SIGKILL, OOM) loses
    /// no row of a request it answered: the next process on the folder, or a sibling sharing
    /// the disk, replays it. Off, a crash loses the rows still queued for Postgres.
    pub audit_journal: bool,
    /// A batch waits this long for a free writer before it spills to the spool.
    pub audit_spill_after_ms: u64,
    /// How long a stopping proxy (SIGTERM, or SIGQUIT after handing its listening sockets to a
    /// new process) lets in-flight requests and streams finish, at most; it ends as soon as they
    /// have and their audit rows are written or spooled.
    pub shutdown_grace_secs: u64,
    /// The Unix socket a graceful upgrade hands the listening sockets over
    /// (`gw-proxy --upgrade`, then SIGQUIT to the old process). Default:
    /// `<audit_spool_dir>/upgrade.sock`.
    pub upgrade_sock: Option<String>,
    /// Longest body (request or response) kept in the audit row when an organization logs
    /// bodies; longer ones are cut (and marked).
    pub audit_max_body_bytes: usize,
    /// Longest wait for Redis when admitting a request against rate limits and budgets; past it
    /// the replica limits on its own until Redis answers again.
    pub limits_timeout_ms: u64,
    /// Proxy replicas assumed to share the limits until the first heartbeat: the replicas' live
    /// number (their heartbeats in Redis, every second) replaces it, and while Redis is
    /// unreachable each replica enforces its share of every limit by the last number seen.
    pub limits_replicas: u64,
    /// Completion tokens a request without `max_tokens` (or `max_completion_tokens`) is assumed
    /// to use at most, for tokens-per-minute limits and budget reservations.
    pub limits_default_max_tokens: u64,
    /// Bytes of answers the in-process cache tier (L1) holds at most.
    pub cache_l1_max_bytes: u64,
    /// Bytes of live L2 entries one organization may hold (`gw_shared::cache::l2_budget`); an
    /// answer past it is not stored in L2. 0: no bound.
    pub cache_l2_org_max_bytes: u64,
    /// Longest wait for Redis on a cache lookup (L2); past it the request goes on as a miss.
    pub cache_l2_timeout_ms: u64,
    /// Longest a semantic lookup (L3: embedding plus query) may take before the request goes on
    /// as a miss.
    pub cache_l3_timeout_ms: u64,
    /// Folder holding the local embedding model (`config.json`, `tokenizer.json`,
    /// `model.safetensors`); `GW_EMBEDDING_MODEL_DIR` overrides it.
    pub cache_embedding_model_dir: String,
    /// Answers waiting to be written to Redis and PostgreSQL, at most; past it new ones are
    /// dropped (counted), never queued without bound.
    pub cache_store_queue: usize,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            metrics_listen: "127.0.0.1:9080".into(),
            threads: 2,
            max_body_bytes: 4 * 1024 * 1024,
            upstream_connect_timeout_ms: 5_000,
            upstream_read_timeout_ms: 120_000,
            max_upstream_body_bytes: 16 * 1024 * 1024,
            stream_drain_max_bytes: 4 * 1024 * 1024,
            request_timeout_ms: 600_000,
            key_cache_ttl_secs: 30,
            key_negative_ttl_secs: 30,
            key_cache_max_stale_secs: 3600,
            lookup_cache_max_bytes: 64 * 1024 * 1024,
            policy_cache_max_bytes: 128 * 1024 * 1024,
            policy_inline_scan_work: 256 * 1024,
            policy_max_scan_work: 256 * 1024 * 1024,
            policy_scan_threads: 1,
            policy_scan_queue: 64,
            policy_scan_per_org: 2,
            auth_failures_per_minute: 60,
            trusted_proxies: Vec::new(),
            store_timeout_ms: 1_000,
            max_header_bytes: 32 * 1024,
            max_header_value_bytes: 8 * 1024,
            dns_ttl_secs: 30,
            keepalive_idle_secs: 75,
            upstream_keepalive_pool_size: 4096,
            client_read_buffer_bytes: 16 * 1024,
            audit_channel_capacity: 50_000,
            audit_batch_size: 512,
            // Each batch is a transaction with a fixed cost (chain heads locked and moved): at 5 ms
            // the one-core cell spent more on those than on COPY (docs/benchmarks.md).
            audit_flush_interval_ms: 50,
            audit_spool_dir: None,
            audit_spool_max_bytes: 1024 * 1024 * 1024,
            audit_journal: true,
            audit_spill_after_ms: 2_000,
            shutdown_grace_secs: 30,
            upgrade_sock: None,
            audit_max_body_bytes: 64 * 1024,
            limits_timeout_ms: 250,
            limits_replicas: 1,
            limits_default_max_tokens: 4096,
            cache_l1_max_bytes: 256 * 1024 * 1024,
            cache_l2_org_max_bytes: 64 * 1024 * 1024,
            cache_l2_timeout_ms: 50,
            cache_l3_timeout_ms: 250,
            cache_embedding_model_dir: ".gw/models/all-minilm-l6-v2".into(),
            cache_store_queue: 4096,
        }
    }
}
