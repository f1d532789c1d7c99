//! Configuration both binaries read: `conf/gw.toml` (or `GW_CONFIG`), then environment overrides.
//! Secrets never live in the file: they come from the environment only.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

mod admin;
mod billing;
mod mail;
pub mod plans;
mod proxy;
mod redis;
mod routes;
mod telemetry;

pub use admin::{AdminConfig, SignupMode};
pub use billing::{BillingConfig, MeterConfig};
pub use mail::MailConfig;
pub use proxy::ProxyConfig;
pub use redis::{RedisConfig, RedisTlsConfig, SentinelConfig, Topology};
pub use routes::{give_id, RouteError, Routes, RoutesSource, MAX_DEPLOYMENTS, MAX_MODELS, MAX_PROVIDERS};
pub use telemetry::{shown as shown_endpoint, TelemetryConfig};

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
    pub billing: BillingConfig,
    #[serde(default)]
    pub routing: RoutingConfig,
    #[serde(default)]
    pub telemetry: TelemetryConfig,
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
    /// Each plan's display name and seats (`plans::Plans`).
    #[serde(default)]
    pub plans: plans::Plans,
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
    /// What the processes connect to (`DATABASE_URL`): the primary, or a pooler in front of it.
    pub url: String,
    /// Connections each process keeps to `url` at most (docs/scaling.md sizes them).
    pub pool_size: usize,
    /// What `url` is: the server itself (`none`), or a pooler that hands out a server
    /// connection per transaction (`transaction`: PgBouncer's transaction mode and its like).
    /// With `transaction`, statements are sent so that every exchange stands alone
    /// (`db::pooler`), and migrations need `direct_url`.
    pub pooler: Pooler,
    /// Straight to the primary (`DATABASE_DIRECT_URL`), for migrations, which hold a session-level
    /// advisory lock no transaction pooler keeps. Default: `url`.
    pub direct_url: Option<String>,
    /// A streaming replica (`DATABASE_READ_URL`), with a pool of its own: analytics reads,
    /// exports (which wait for it to have replayed what was committed when they started, else
    /// read the primary) and semantic-cache lookups. Default: everything reads `url`.
    pub read_url: Option<String>,
    /// Connections each process keeps to `read_url` at most.
    pub read_pool_size: usize,
}

/// See [`DatabaseConfig::pooler`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooler {
    #[default]
    None,
    Transaction,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "postgres://gw@127.0.0.1:15432/gw".into(),
            pool_size: 16,
            pooler: Pooler::None,
            direct_url: None,
            read_url: None,
            read_pool_size: 4,
        }
    }
}

impl DatabaseConfig {
    /// The primary at `url`, defaults otherwise.
    pub fn at(url: &str) -> Self {
        Self { url: url.to_string(), ..Default::default() }
    }

    /// Where migrations run: `direct_url`, else `url` unless that is a pooler's.
    pub fn migration_url(&self) -> Result<&str> {
        match (&self.direct_url, self.pooler) {
            (Some(u), _) => Ok(u),
            (None, Pooler::None) => Ok(&self.url),
            (None, Pooler::Transaction) => Err(Error::Config(
                "database.pooler = \"transaction\": migrations need database.direct_url (DATABASE_DIRECT_URL), \
                 straight to the primary"
                    .into(),
            )),
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
    /// `openai` providers only: the upstream serves OpenAI's Responses API
    /// (`{base_url}/responses`), so `/v1/responses` requests pass through to it rather than
    /// being translated to chat (docs/responses.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub responses_api: bool,
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
    /// Requests per minute this deployment may take, shared by every proxy replica through Redis
    /// (each replica takes its share while Redis is away); past it, it is skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    /// Tokens per minute this deployment may take, shared like `rpm`.
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
        if let Some(v) = env("DATABASE_DIRECT_URL").filter(|s| !s.is_empty()) {
            self.database.direct_url = Some(v);
        }
        if let Some(v) = env("DATABASE_READ_URL").filter(|s| !s.is_empty()) {
            self.database.read_url = Some(v);
        }
        if let Some(v) = env("DATABASE_POOLER").filter(|s| !s.is_empty()) {
            self.database.pooler = match v.as_str() {
                "none" => Pooler::None,
                "transaction" => Pooler::Transaction,
                other => {
                    return Err(Error::Config(format!("DATABASE_POOLER must be none or transaction, not {other:?}")))
                }
            };
        }
        if let Some(v) = env("REDIS_URL") {
            self.redis.url = v;
        }
        if let Some(v) = env("REDIS_CACHE_URL").filter(|s| !s.is_empty()) {
            self.redis.cache_url = Some(v);
        }
        if let Some(v) = env("REDIS_CLUSTER").filter(|s| !s.is_empty()) {
            self.redis.cluster = v.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect();
        }
        self.telemetry.apply_env(env);
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
        self.billing.secret_key = env("STRIPE_SECRET_KEY").filter(|s| !s.is_empty());
        self.billing.webhook_secrets = env("STRIPE_WEBHOOK_SECRET")
            .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
            .unwrap_or_default();
        self.billing.airgap = match env("AIRGAP_MODE").as_deref().map(str::trim) {
            None | Some("") | Some("false") | Some("0") => false,
            Some("true") | Some("1") => true,
            Some(other) => return Err(Error::Config(format!("AIRGAP_MODE must be true or false, not {other:?}"))),
        };
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
        self.redis.validate()?;
        self.telemetry.validate().map_err(Error::Config)?;
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
        self.billing.validate().map_err(Error::Config)?;
        self.plans.validate().map_err(Error::Config)?;
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
