//! `[redis]`: the Redis deployment (one server, a cluster or a Sentinel-found primary, TCP or
//! TLS) and the separate one L2 entries may have (`docs/redis.md`).

use serde::Deserialize;

use crate::error::{Error, Result};

/// Where a Redis is and how to reach it.
#[derive(Debug, Clone, PartialEq)]
pub enum Topology {
    /// One server (`redis://` or `rediss://`).
    Standalone(String),
    /// A Redis Cluster, found from any of its seed nodes.
    Cluster(Vec<String>),
    /// The primary the sentinels name `master`; `url` carries the primary's credentials, database
    /// and scheme (`rediss://` for TLS), its host being ignored.
    Sentinel { master: String, sentinels: Vec<String>, url: String },
}

impl Topology {
    pub fn name(&self) -> &'static str {
        match self {
            Topology::Standalone(_) => "standalone",
            Topology::Cluster(_) => "cluster",
            Topology::Sentinel { .. } => "sentinel",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// Rate-limit and budget counters, cached lookups, invalidations, sessions: what must never be
    /// evicted (run it with `maxmemory-policy noeviction` and persistence). One server
    /// (`redis://`, or `rediss://` for TLS) unless `cluster` or `sentinel` is set; with
    /// `sentinel`, its credentials, database and scheme apply to the primary the sentinels name.
    pub url: String,
    /// A Redis Cluster's seed nodes (`redis://host:port` or `rediss://`); any one that answers
    /// is enough to find the rest. `REDIS_CLUSTER` (comma-separated) overrides it.
    pub cluster: Vec<String>,
    /// A primary found through Sentinel.
    pub sentinel: Option<SentinelConfig>,
    /// Certificates for `rediss://` connections (the system's roots are trusted otherwise).
    pub tls: RedisTlsConfig,
    /// The response cache's L2 entries, when set: a Redis of their own, run with a `maxmemory`
    /// and `allkeys-lru`, so cache entries are evicted and never a counter. Unset: the main
    /// Redis. `REDIS_CACHE_URL` overrides it.
    pub cache_url: Option<String>,
    /// Multiplexed connections each process keeps to a standalone or Sentinel-found Redis (a
    /// cluster connection keeps one per node).
    pub pool_size: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// The name the sentinels monitor the primary under.
    pub master: String,
    /// The sentinels (`redis://host:26379`; a password in the URL authenticates to them).
    pub nodes: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisTlsConfig {
    /// PEM file of the certificate authorities trusted for the servers (instead of the system's).
    pub ca_file: Option<String>,
    /// PEM client certificate and key, for servers that ask for one (`tls-auth-clients yes`).
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:16379".into(),
            cluster: Vec::new(),
            sentinel: None,
            tls: RedisTlsConfig::default(),
            cache_url: None,
            pool_size: 4,
        }
    }
}

impl RedisConfig {
    /// Where L2 entries live.
    pub fn cache_url(&self) -> &str {
        self.cache_url.as_deref().filter(|u| !u.is_empty()).unwrap_or(&self.url)
    }

    /// The main Redis.
    pub fn topology(&self) -> Topology {
        if !self.cluster.is_empty() {
            Topology::Cluster(self.cluster.clone())
        } else if let Some(s) = &self.sentinel {
            Topology::Sentinel { master: s.master.clone(), sentinels: s.nodes.clone(), url: self.url.clone() }
        } else {
            Topology::Standalone(self.url.clone())
        }
    }

    /// The Redis holding L2 response-cache entries.
    pub fn cache_topology(&self) -> Topology {
        match self.cache_url.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => Topology::Standalone(url.to_string()),
            None => self.topology(),
        }
    }

    pub(super) fn validate(&self) -> Result<()> {
        if !self.cluster.is_empty() && self.sentinel.is_some() {
            return Err(Error::Config("redis: set cluster or sentinel, not both".into()));
        }
        if self.sentinel.as_ref().is_some_and(|s| s.nodes.is_empty() || s.master.is_empty()) {
            return Err(Error::Config("redis.sentinel needs a master name and at least one node".into()));
        }
        if self.pool_size == 0 || self.pool_size > 256 {
            return Err(Error::Config("redis.pool_size must be between 1 and 256".into()));
        }
        Ok(())
    }
}
