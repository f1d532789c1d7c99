//! Configuration both binaries read: `conf/gw.toml` (or `GW_CONFIG`), then environment overrides.
//! Secrets never live in the file: they come from the environment only.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use rust_decimal::Decimal;
use serde::Deserialize;

use crate::crypto::EncryptionKey;
use crate::error::{Error, Result};

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
    pub providers: Vec<ProviderConfig>,
    #[serde(default)]
    pub models: Vec<ModelConfig>,
    /// Prices per upstream model name, in USD per million tokens.
    #[serde(default)]
    pub pricing: BTreeMap<String, ModelPrice>,
    #[serde(skip)]
    pub secrets: Secrets,
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
    pub key_cache_capacity: u64,
    /// Failed authentications allowed per client address per minute before gw stops looking
    /// unknown keys up (cached keys keep working).
    pub auth_failures_per_minute: u32,
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
    pub audit_channel_capacity: usize,
    pub audit_batch_size: usize,
    pub audit_flush_interval_ms: u64,
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
            request_timeout_ms: 600_000,
            key_cache_ttl_secs: 30,
            key_negative_ttl_secs: 30,
            key_cache_max_stale_secs: 3600,
            key_cache_capacity: 100_000,
            auth_failures_per_minute: 60,
            store_timeout_ms: 1_000,
            max_header_bytes: 32 * 1024,
            max_header_value_bytes: 8 * 1024,
            dns_ttl_secs: 30,
            keepalive_idle_secs: 75,
            audit_channel_capacity: 50_000,
            audit_batch_size: 32,
            audit_flush_interval_ms: 5,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    pub listen: String,
    pub workers: usize,
    pub access_token_ttl_secs: i64,
    pub refresh_token_ttl_secs: i64,
    pub max_body_bytes: usize,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8081".into(),
            workers: 2,
            access_token_ttl_secs: 15 * 60,
            refresh_token_ttl_secs: 30 * 24 * 3600,
            max_body_bytes: 256 * 1024,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub name: String,
    /// The adapter serving this provider, by its registry name: `mock` (in-process, no key, no
    /// network) or `openai` (any OpenAI-compatible HTTP API), or one registered by an embedder.
    pub kind: String,
    /// e.g. `https://api.openai.com/v1`; required for HTTP providers.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Name of the environment variable holding the provider's API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(skip)]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The name clients send as `model`.
    pub name: String,
    #[serde(default = "default_owned_by")]
    pub owned_by: String,
    /// Tried in order: the first is primary, the rest are fallbacks.
    pub deployments: Vec<DeploymentConfig>,
}

fn default_owned_by() -> String {
    "gw".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentConfig {
    pub provider: String,
    /// Model name sent upstream; defaults to the public name.
    #[serde(default)]
    pub model: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// USD per million prompt tokens.
    #[serde(with = "rust_decimal::serde::str")]
    pub input_per_mtok: Decimal,
    /// USD per million completion tokens.
    #[serde(with = "rust_decimal::serde::str")]
    pub output_per_mtok: Decimal,
}

#[derive(Clone, Default)]
pub struct Secrets {
    pub jwt_secret: Option<String>,
    pub encryption_key: Option<EncryptionKey>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("jwt_secret", &self.jwt_secret.as_ref().map(|_| "<set>"))
            .field("encryption_key", &self.encryption_key.as_ref().map(|_| "<set>"))
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
        cfg.apply_env(&env)?;
        cfg.validate()?;
        Ok(cfg)
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
        if let Some(v) = env("GW_ADMIN_LISTEN") {
            self.admin.listen = v;
        }
        self.secrets.jwt_secret = env("GW_JWT_SECRET").filter(|s| !s.is_empty());
        if let Some(k) = env("GW_ENCRYPTION_KEY").filter(|s| !s.is_empty()) {
            self.secrets.encryption_key = Some(EncryptionKey::from_base64(&k)?);
        }
        for p in &mut self.providers {
            if let Some(var) = &p.api_key_env {
                p.api_key = env(var).filter(|s| !s.is_empty());
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        let mut names = HashSet::new();
        for p in &self.providers {
            if !names.insert(p.name.as_str()) {
                return Err(Error::Config(format!("provider {:?} is defined twice", p.name)));
            }
            // Whether the kind needs a base_url is the adapter's to say (see `Router`).
            if let Some(url) = p.base_url.as_deref() {
                crate::providers::UpstreamUrl::parse(url)
                    .map_err(|e| Error::Config(format!("provider {:?}: {e}", p.name)))?;
            }
        }
        let mut models = HashSet::new();
        for m in &self.models {
            if !models.insert(m.name.as_str()) {
                return Err(Error::Config(format!("model {:?} is defined twice", m.name)));
            }
            if m.deployments.is_empty() {
                return Err(Error::Config(format!("model {:?} has no deployments", m.name)));
            }
            for d in &m.deployments {
                if !names.contains(d.provider.as_str()) {
                    return Err(Error::Config(format!("model {:?} uses unknown provider {:?}", m.name, d.provider)));
                }
                let upstream = d.model.as_deref().unwrap_or(&m.name);
                // A model without a price would be served for free and silently under-billed.
                if !self.pricing.contains_key(upstream) {
                    return Err(Error::Config(format!(
                        "model {:?}: no [pricing] entry for upstream model {upstream:?}",
                        m.name
                    )));
                }
            }
        }
        let p = &self.proxy;
        if [p.max_body_bytes, p.audit_batch_size, p.max_header_bytes, p.max_header_value_bytes].contains(&0)
            || [p.keepalive_idle_secs, p.request_timeout_ms, p.key_cache_ttl_secs, p.store_timeout_ms].contains(&0)
        {
            return Err(Error::Config("proxy limits and timeouts must be positive".into()));
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
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
[[providers]]
name = "mock"
kind = "mock"

[[providers]]
name = "up"
kind = "openai"
base_url = "http://127.0.0.1:9999/v1"
api_key_env = "UP_KEY"

[[models]]
name = "m1"
deployments = [{ provider = "up", model = "real-m1" }, { provider = "mock" }]

[pricing]
"real-m1" = { input_per_mtok = "1.5", output_per_mtok = "2" }
"m1" = { input_per_mtok = "0", output_per_mtok = "0" }
"#;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn parses_and_applies_env() {
        let cfg = Config::parse(SAMPLE, env(&[("UP_KEY", "sk-up"), ("GW_PROXY_LISTEN", "0.0.0.0:1")])).unwrap();
        assert_eq!(cfg.proxy.listen, "0.0.0.0:1");
        assert_eq!(cfg.providers[1].api_key.as_deref(), Some("sk-up"));
        assert_eq!(cfg.models[0].deployments.len(), 2);
    }

    #[test]
    fn rejects_unpriced_model() {
        let text = SAMPLE.replace("\"real-m1\" = { input_per_mtok = \"1.5\", output_per_mtok = \"2\" }", "");
        let err = Config::parse(&text, env(&[])).unwrap_err();
        assert!(err.to_string().contains("no [pricing] entry"), "{err}");
    }

    #[test]
    fn rejects_unknown_provider_and_bad_url() {
        let text = SAMPLE.replace("provider = \"up\"", "provider = \"nope\"");
        assert!(Config::parse(&text, env(&[])).is_err());
        let text = SAMPLE.replace("http://127.0.0.1:9999/v1", "ftp://x");
        assert!(Config::parse(&text, env(&[])).is_err());
    }

    #[test]
    fn shipped_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/gw.toml");
        Config::load_from(&path, |_| None).unwrap();
    }
}
