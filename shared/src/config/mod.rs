//! Configuration both binaries read: `conf/gw.toml` (or `GW_CONFIG`), then environment overrides.
//! Secrets never live in the file: they come from the environment only.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

mod admin;
mod mail;
mod routes;

pub use admin::{AdminConfig, SignupMode};
pub use mail::MailConfig;
pub use routes::{give_id, RouteError, Routes, RoutesSource, MAX_DEPLOYMENTS, MAX_MODELS, MAX_PROVIDERS};

use crate::catalog::Catalog;
use crate::catalog::ModelMode;
use crate::crypto::{EncryptionKey, Keyring};
use crate::error::{Error, Result};
use crate::pricing::ModelPrice;

pub const DEFAULT_CONFIG_PATH: &str = "conf/gw.toml";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub database: DatabaseConfig,
    #[serde(default)]
    pub redis: RedisConfig,
    #[serde(default)]
    pub proxy: ProxyConfig,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub mail: MailConfig,
    #[serde(default)]
    pub routing: RoutingConfig,
    #[serde(default)]
    pub providers: Vec<ProviderConfig>,
    #[serde(default)]
    pub models: Vec<ModelConfig>,
    /// Price overrides per upstream model name, in USD per million tokens; the catalog
    /// (`conf/catalog.json`, built in) prices everything else.
    #[serde(default)]
    pub pricing: BTreeMap<String, ModelPrice>,
    /// A catalog file replacing the built-in one (same format as `conf/catalog.json`).
    #[serde(default)]
    pub catalog: Option<String>,
    /// Per plan (`free`, `growth`, `enterprise`): the budget and rate limits an organization may
    /// spend on the gateway's own provider credentials (requests its own provider keys serve are
    /// not counted). A plan without an entry has no such quota.
    #[serde(default)]
    pub gateway_quota: BTreeMap<String, crate::limits::settings::ScopeLimits>,
    #[serde(skip)]
    pub models_catalog: Arc<Catalog>,
    #[serde(skip)]
    pub secrets: Secrets,
}

/// How deployments are chosen and protected.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingConfig {
    /// Consecutive failures that open a deployment's circuit.
    pub circuit_failures: u32,
    /// How long an open circuit keeps a deployment out before one trial request.
    pub circuit_cooldown_ms: u64,
    /// Active health checks (TCP connect to each HTTP provider) every this many ms; 0 disables.
    pub health_check_interval_ms: u64,
    /// Weight of the newest sample in the latency average (lowest-latency strategy).
    pub latency_ewma_alpha: f64,
    /// Where providers and models come from: `file` (this file's `[[providers]]` and
    /// `[[models]]`, reloaded on SIGHUP) or `database` (managed through `/api/v1/gateway`, seeded
    /// from this file once; see `docs/catalog-routes.md`).
    pub routes: RoutesSource,
    /// With `routes = "database"`: how often a proxy checks the catalog's version when no change
    /// message arrived (messages are lost while Redis is unreachable).
    pub routes_poll_ms: u64,
    /// Provider kinds organizations may deploy with their own keys and base URLs (their own
    /// Azure resource, say: `["azure", "openai"]`); empty: organizations have no routes of their
    /// own.
    pub org_provider_kinds: Vec<String>,
    /// Whether organizations' base URLs may point at private addresses (loopback, private
    /// ranges, link-local): only for a gateway whose tenants all share its private network.
    pub org_private_base_urls: bool,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        Self {
            circuit_failures: 5,
            circuit_cooldown_ms: 30_000,
            health_check_interval_ms: 10_000,
            latency_ewma_alpha: 0.3,
            routes: RoutesSource::File,
            routes_poll_ms: 5_000,
            org_provider_kinds: Vec::new(),
            org_private_base_urls: false,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    pub url: String,
    pub pool_size: usize,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self { url: "postgres://gw@127.0.0.1:15432/gw".into(), pool_size: 16 }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    pub url: String,
    pub pool_size: usize,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self { url: "redis://127.0.0.1:16379".into(), pool_size: 16 }
    }
}

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
    /// A batch waits this long for a free writer before it spills to the spool.
    pub audit_spill_after_ms: u64,
    /// Longest body (request or response) kept in the audit row when an organization logs
    /// bodies; longer ones are cut (and marked).
    pub audit_max_body_bytes: usize,
    /// Longest wait for Redis when admitting a request against rate limits and budgets; past it
    /// the replica limits on its own until Redis answers again.
    pub limits_timeout_ms: u64,
    /// Proxy replicas expected to share the limits: while Redis is unreachable each replica
    /// enforces this share of every limit.
    pub limits_replicas: u64,
    /// Completion tokens a request without `max_tokens` (or `max_completion_tokens`) is assumed
    /// to use at most, for tokens-per-minute limits and budget reservations.
    pub limits_default_max_tokens: u64,
    /// Bytes of answers the in-process cache tier (L1) holds at most.
    pub cache_l1_max_bytes: u64,
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
            audit_spill_after_ms: 2_000,
            audit_max_body_bytes: 64 * 1024,
            limits_timeout_ms: 250,
            limits_replicas: 1,
            limits_default_max_tokens: 4096,
            cache_l1_max_bytes: 256 * 1024 * 1024,
            cache_l2_timeout_ms: 50,
            cache_l3_timeout_ms: 250,
            cache_embedding_model_dir: ".gw/models/all-minilm-l6-v2".into(),
            cache_store_queue: 4096,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub name: String,
    /// The adapter serving this provider, by its registry name: `mock` (in-process, no key, no
    /// network), `openai` (any OpenAI-compatible HTTP API), `azure`, `anthropic`, `gemini`,
    /// `bedrock`, or one registered by an embedder (`gw_proxy::run`).
    pub kind: String,
    /// e.g. `https://api.openai.com/v1`; required for HTTP providers.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Name of the environment variable holding the provider's API key (the credential
    /// reference: the catalog never holds a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    #[serde(skip)]
    pub api_key: Option<String>,
    /// Azure OpenAI `api-version`; Anthropic `anthropic-version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// AWS region (Bedrock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// An organization's own provider only: the id of its provider key that authenticates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_key_id: Option<Uuid>,
    /// Defaults for this provider's deployments.
    #[serde(default, flatten)]
    pub timeouts: TimeoutConfig,
    /// Whether gw checks this provider's reachability in the background.
    #[serde(default = "yes")]
    pub health_check: bool,
}

fn yes() -> bool {
    true
}

/// Per-attempt timeouts; unset ones fall back to the provider's, then to `[proxy]`'s.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TimeoutConfig {
    /// Establishing the connection (TCP and TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    /// From sending the request to the response header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_timeout_ms: Option<u64>,
    /// The whole attempt, body or stream included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl TimeoutConfig {
    /// `self`, with unset values taken from `fallback`.
    pub fn or(self, fallback: TimeoutConfig) -> TimeoutConfig {
        TimeoutConfig {
            connect_timeout_ms: self.connect_timeout_ms.or(fallback.connect_timeout_ms),
            first_byte_timeout_ms: self.first_byte_timeout_ms.or(fallback.first_byte_timeout_ms),
            timeout_ms: self.timeout_ms.or(fallback.timeout_ms),
        }
    }
}

/// How one model's deployments are ordered for a request.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// As listed: the first is primary, the rest fallbacks.
    #[default]
    Ordered,
    /// Random, in proportion to `weight`.
    Weighted,
    RoundRobin,
    LeastInflight,
    /// Lowest moving average of response-header latency.
    LowestLatency,
    /// Lowest price for the request's prompt (input price, then output).
    LowestCost,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The name clients send as `model`.
    pub name: String,
    #[serde(default = "default_owned_by")]
    pub owned_by: String,
    /// Other names clients may use for this model.
    #[serde(default)]
    pub aliases: Vec<String>,
    #[serde(default)]
    pub mode: ModelMode,
    #[serde(default)]
    pub strategy: Strategy,
    /// Models tried, in order, once every deployment of this one failed.
    #[serde(default)]
    pub fallbacks: Vec<String>,
    /// Extra rounds over this model's deployments before its fallbacks, with backoff.
    #[serde(default)]
    pub retries: u32,
    /// Who may call it: `public` (default: every key whose allow-lists admit it, keys without
    /// one included) or `allow_list` (only keys or teams whose allow-list names it).
    #[serde(default, skip_serializing_if = "Visibility::is_public")]
    pub visibility: Visibility,
    #[serde(default = "default_backoff")]
    pub retry_backoff_ms: u64,
    pub deployments: Vec<DeploymentConfig>,
}

/// Who may call a model.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    #[default]
    Public,
    /// Only keys or teams whose model allow-list names it (an opt-in model: a costly one, a
    /// preview).
    AllowList,
}

impl Visibility {
    pub fn is_public(&self) -> bool {
        *self == Visibility::Public
    }
}

fn default_backoff() -> u64 {
    100
}

fn default_owned_by() -> String {
    "gw".into()
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeploymentConfig {
    /// Stable within its model: given when the deployment is added through the API (the file's
    /// deployments get one when the catalog is seeded from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Uuid>,
    pub provider: String,
    /// Model name sent upstream; defaults to the public name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Share of traffic under the `weighted` strategy.
    #[serde(default = "one")]
    pub weight: u32,
    /// Requests per minute this deployment may take (per proxy replica); past it, it is skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    /// Tokens per minute this deployment may take (per proxy replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    /// Where the deployment runs (reported in the audit row's routing detail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// A key for this deployment only, instead of the provider's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The upstream model's price, when neither `[pricing]` nor the built-in catalog knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<ModelPrice>,
    #[serde(skip)]
    pub api_key: Option<String>,
    #[serde(default, flatten)]
    pub timeouts: TimeoutConfig,
}

fn one() -> u32 {
    1
}

#[derive(Clone, Default)]
pub struct Secrets {
    pub jwt_secret: Option<String>,
    /// Encrypts provider keys: the current master key and any older ones still needed to read.
    pub keyring: Option<Keyring>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("jwt_secret", &self.jwt_secret.as_ref().map(|_| "<set>"))
            .field("keyring", &self.keyring.as_ref().map(|k| k.current_version()))
            .finish()
    }
}

impl Config {
    /// Reads the file named by `GW_CONFIG` (default `conf/gw.toml`), applies environment
    /// overrides and validates the result.
    pub fn load() -> Result<Self> {
        let path = std::env::var("GW_CONFIG").unwrap_or_else(|_| DEFAULT_CONFIG_PATH.into());
        Self::load_from(Path::new(&path), |k| std::env::var(k).ok())
    }

    pub fn load_from(path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
        Self::parse(&text, env)
    }

    pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| Error::Config(format!("invalid config: {e}")))?;
        cfg.models_catalog = match &cfg.catalog {
            Some(path) => Arc::new(Catalog::load(Path::new(path))?),
            None => Catalog::builtin()?,
        };
        cfg.apply_env(&env)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The price of an upstream model on a provider of `kind`: the `[pricing]` override, else the
    /// catalog's entry.
    pub fn price_of(&self, kind: &str, upstream_model: &str) -> Option<ModelPrice> {
        self.pricing.get(upstream_model).cloned().or_else(|| self.models_catalog.price(kind, upstream_model))
    }

    /// The most completion tokens an upstream model answers with, from the catalog.
    pub fn max_output_of(&self, kind: &str, upstream_model: &str) -> Option<u64> {
        self.models_catalog.max_output(kind, upstream_model)
    }

    fn apply_env(&mut self, env: &impl Fn(&str) -> Option<String>) -> Result<()> {
        if let Some(v) = env("DATABASE_URL") {
            self.database.url = v;
        }
        if let Some(v) = env("REDIS_URL") {
            self.redis.url = v;
        }
        if let Some(v) = env("GW_PROXY_LISTEN") {
            self.proxy.listen = v;
        }
        if let Some(v) = env("GW_PROXY_METRICS_LISTEN") {
            self.proxy.metrics_listen = v;
        }
        if let Some(v) = env("GW_EMBEDDING_MODEL_DIR").filter(|s| !s.is_empty()) {
            self.proxy.cache_embedding_model_dir = v;
        }
        if let Some(v) = env("GW_ADMIN_LISTEN") {
            self.admin.listen = v;
        }
        if let Some(v) = env("GW_SMTP_URL").filter(|s| !s.is_empty()) {
            self.mail.smtp_url = Some(v);
        }
        self.secrets.jwt_secret = env("GW_JWT_SECRET").filter(|s| !s.is_empty());
        if let Some(k) = env("GW_ENCRYPTION_KEY").filter(|s| !s.is_empty()) {
            let version = match env("GW_ENCRYPTION_KEY_VERSION") {
                Some(v) => v
                    .parse::<i16>()
                    .ok()
                    .filter(|v| *v > 0)
                    .ok_or_else(|| Error::Config("GW_ENCRYPTION_KEY_VERSION must be a positive integer".into()))?,
                None => 1,
            };
            let mut older = HashMap::new();
            for v in 1..version {
                if let Some(old) = env(&format!("GW_ENCRYPTION_KEY_V{v}")).filter(|s| !s.is_empty()) {
                    older.insert(v, EncryptionKey::from_base64(&old)?);
                }
            }
            self.secrets.keyring = Some(Keyring::new(version, EncryptionKey::from_base64(&k)?, older));
        }
        for p in &mut self.providers {
            if let Some(var) = &p.api_key_env {
                p.api_key = env(var).filter(|s| !s.is_empty());
            }
        }
        for m in &mut self.models {
            for d in &mut m.deployments {
                if let Some(var) = &d.api_key_env {
                    d.api_key = env(var).filter(|s| !s.is_empty());
                }
            }
        }
        Ok(())
    }

    /// The providers and models of this file, as a route catalog.
    pub fn routes(&self) -> Routes {
        Routes { providers: self.providers.clone(), models: self.models.clone() }
    }

    /// The price of a deployment's upstream model: its own `price`, else [`Config::price_of`].
    pub fn deployment_price(&self, kind: &str, d: &DeploymentConfig, model: &str) -> Option<ModelPrice> {
        d.price.clone().or_else(|| self.price_of(kind, d.model.as_deref().unwrap_or(model)))
    }

    fn validate(&self) -> Result<()> {
        for (plan, q) in &self.gateway_quota {
            let at = format!("gateway_quota.{plan}");
            if let Some(b) = &q.budget {
                b.validate(&format!("{at}.budget"))
                    .map_err(|p| Error::Config(format!("{}: {}", p.field, p.message)))?;
            }
            if let Some(r) = &q.rate_limits {
                r.validate(&format!("{at}.rate_limits"))
                    .map_err(|p| Error::Config(format!("{}: {}", p.field, p.message)))?;
            }
        }
        let routes = self.routes();
        routes.validate(self).and_then(|()| routes.validate_gateway()).map_err(|e| Error::Config(e.to_string()))?;
        let r = &self.routing;
        if r.circuit_failures == 0 || !(r.latency_ewma_alpha > 0.0 && r.latency_ewma_alpha <= 1.0) {
            return Err(Error::Config(
                "routing.circuit_failures must be positive and latency_ewma_alpha in (0, 1]".into(),
            ));
        }
        let p = &self.proxy;
        if [p.max_body_bytes, p.audit_batch_size, p.max_header_bytes, p.max_header_value_bytes].contains(&0)
            || [p.keepalive_idle_secs, p.request_timeout_ms, p.key_cache_ttl_secs, p.store_timeout_ms].contains(&0)
        {
            return Err(Error::Config("proxy limits and timeouts must be positive".into()));
        }
        if p.client_read_buffer_bytes < 1024 {
            return Err(Error::Config("proxy.client_read_buffer_bytes must be at least 1024".into()));
        }
        if p.auth_failures_per_minute == 0 {
            return Err(Error::Config("proxy.auth_failures_per_minute must be at least 1".into()));
        }
        if p.key_cache_max_stale_secs < p.key_cache_ttl_secs {
            return Err(Error::Config("proxy.key_cache_max_stale_secs must be at least key_cache_ttl_secs".into()));
        }
        if p.audit_batch_size > 10_000 {
            return Err(Error::Config("proxy.audit_batch_size must be at most 10000".into()));
        }
        Ok(())
    }

    /// The JWT signing secret; required by the admin process.
    pub fn jwt_secret(&self) -> Result<&str> {
        self.secrets.jwt_secret.as_deref().ok_or_else(|| Error::Config("GW_JWT_SECRET is not set".into()))
    }
}

#[cfg(test)]
mod tests;
