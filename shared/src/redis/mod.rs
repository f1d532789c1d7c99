//! Redis: the pool, and the invalidation channel the control plane publishes on and every
//! proxy replica listens to. Key layouts and channel names are defined here once.

mod client;

pub use crate::config::Topology;
pub use client::{key_slot, needs_new_connection, Conn, ConnOptions, Pool};

use redis::AsyncCommands;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::keys::KeyHash;

/// Channel carrying [`Invalidation`] messages.
pub const INVALIDATION_CHANNEL: &str = "gw:invalidate";

/// The main Redis of a configuration, with `connections` multiplexed connections.
pub fn pool(cfg: &crate::config::RedisConfig, connections: usize) -> Result<Pool> {
    Pool::from_config(cfg, ConnOptions { connections, ..ConnOptions::default() })
}

/// What a replica must forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidation {
    /// One API key, by its SHA-256.
    ApiKey(KeyHash),
    /// One team of an organization.
    Team { org_id: Uuid, team_id: Uuid },
    /// An organization's provider keys.
    ProviderKeys { org_id: Uuid },
    /// An organization's own settings (budget, rate limits).
    Org { org_id: Uuid },
    /// An organization's policy document.
    Policy { org_id: Uuid },
    /// An organization's (or one of its teams') cache settings.
    CacheSettings { org_id: Uuid },
    /// An organization's cached answers (all, or one model's): every replica drops its copies.
    CachePurge { org_id: Uuid, model: Option<crate::cache::key::ModelTag> },
    /// The route catalog: a new version is in force.
    Routes { version: i64 },
    /// An organization's own routes.
    OrgRoutes { org_id: Uuid },
    /// One prompt template's head (its latest version and labels; versions never change).
    Template { org_id: Uuid, template_id: Uuid },
    /// An organization's running experiments.
    Experiments { org_id: Uuid },
    /// Everything cached from Postgres.
    All,
}

impl Invalidation {
    pub fn encode(&self) -> String {
        match self {
            Invalidation::ApiKey(h) => format!("api_key:{}", hex::encode(h)),
            Invalidation::Team { org_id, team_id } => format!("team:{org_id}:{team_id}"),
            Invalidation::ProviderKeys { org_id } => format!("provider_keys:{org_id}"),
            Invalidation::Org { org_id } => format!("org:{org_id}"),
            Invalidation::Policy { org_id } => format!("policy:{org_id}"),
            Invalidation::CacheSettings { org_id } => format!("cache_settings:{org_id}"),
            Invalidation::CachePurge { org_id, model: None } => format!("cache_purge:{org_id}"),
            Invalidation::CachePurge { org_id, model: Some(m) } => format!("cache_purge:{org_id}:{}", hex::encode(m)),
            Invalidation::Routes { version } => format!("routes:{version}"),
            Invalidation::OrgRoutes { org_id } => format!("org_routes:{org_id}"),
            Invalidation::Template { org_id, template_id } => format!("template:{org_id}:{template_id}"),
            Invalidation::Experiments { org_id } => format!("experiments:{org_id}"),
            Invalidation::All => "all".into(),
        }
    }

    pub fn decode(msg: &str) -> Option<Self> {
        if msg == "all" {
            return Some(Invalidation::All);
        }
        if let Some(rest) = msg.strip_prefix("template:") {
            let (org, id) = rest.split_once(':')?;
            return Some(Invalidation::Template { org_id: org.parse().ok()?, template_id: id.parse().ok()? });
        }
        if let Some(org) = msg.strip_prefix("experiments:") {
            return Some(Invalidation::Experiments { org_id: org.parse().ok()? });
        }
        if let Some(org) = msg.strip_prefix("org_routes:") {
            return Some(Invalidation::OrgRoutes { org_id: org.parse().ok()? });
        }
        if let Some(version) = msg.strip_prefix("routes:") {
            return Some(Invalidation::Routes { version: version.parse().ok()? });
        }
        if let Some(org) = msg.strip_prefix("provider_keys:") {
            return Some(Invalidation::ProviderKeys { org_id: org.parse().ok()? });
        }
        if let Some(org) = msg.strip_prefix("cache_settings:") {
            return Some(Invalidation::CacheSettings { org_id: org.parse().ok()? });
        }
        if let Some(rest) = msg.strip_prefix("cache_purge:") {
            let (org, model) = match rest.split_once(':') {
                Some((org, m)) => (org, Some(hex::decode(m).ok()?.try_into().ok()?)),
                None => (rest, None),
            };
            return Some(Invalidation::CachePurge { org_id: org.parse().ok()?, model });
        }
        if let Some(org) = msg.strip_prefix("policy:") {
            return Some(Invalidation::Policy { org_id: org.parse().ok()? });
        }
        if let Some(org) = msg.strip_prefix("org:") {
            return Some(Invalidation::Org { org_id: org.parse().ok()? });
        }
        if let Some(rest) = msg.strip_prefix("team:") {
            let (org, team) = rest.split_once(':')?;
            return Some(Invalidation::Team { org_id: org.parse().ok()?, team_id: team.parse().ok()? });
        }
        let hex_hash = msg.strip_prefix("api_key:")?;
        let bytes = hex::decode(hex_hash).ok()?;
        Some(Invalidation::ApiKey(bytes.try_into().ok()?))
    }

    /// The Redis key of the shared cache copy this message makes stale, if any.
    pub fn cache_key(&self) -> Option<String> {
        match self {
            Invalidation::ApiKey(h) => Some(api_key_cache_key(h)),
            Invalidation::Team { org_id, team_id } => Some(team_cache_key(*org_id, *team_id)),
            Invalidation::ProviderKeys { org_id } => Some(provider_keys_cache_key(*org_id)),
            Invalidation::Org { org_id } => Some(org_cache_key(*org_id)),
            Invalidation::Policy { org_id } => Some(policy_cache_key(*org_id)),
            Invalidation::CacheSettings { org_id } => Some(cache_settings_key(*org_id)),
            // The purge generations travel with the cache settings.
            Invalidation::CachePurge { org_id, .. } => Some(cache_settings_key(*org_id)),
            Invalidation::OrgRoutes { org_id } => Some(org_routes_cache_key(*org_id)),
            Invalidation::Template { org_id, template_id } => Some(template_cache_key(*org_id, *template_id)),
            Invalidation::Experiments { org_id } => Some(experiments_cache_key(*org_id)),
            Invalidation::Routes { .. } | Invalidation::All => None,
        }
    }
}

/// Redis key of the shared cache copy of an API key's authorization record.
pub fn api_key_cache_key(hash: &KeyHash) -> String {
    format!("gw:cache:key:{}", hex::encode(hash))
}

pub fn team_cache_key(org_id: Uuid, team_id: Uuid) -> String {
    format!("gw:cache:team:{org_id}:{team_id}")
}

/// Redis key of the shared copy of an organization's cache settings.
pub fn cache_settings_key(org_id: Uuid) -> String {
    format!("gw:cache:cache_settings:{org_id}")
}

pub fn org_cache_key(org_id: Uuid) -> String {
    format!("gw:cache:org:{org_id}")
}

pub fn policy_cache_key(org_id: Uuid) -> String {
    format!("gw:cache:policy:{org_id}")
}

/// Redis key of the shared copy of a prompt template's head.
pub fn template_cache_key(org_id: Uuid, template_id: Uuid) -> String {
    format!("gw:cache:template:{org_id}:{template_id}")
}

/// Redis key of the shared copy of a template version's content (immutable).
pub fn template_version_cache_key(org_id: Uuid, template_id: Uuid, version: i32) -> String {
    format!("gw:cache:template_version:{org_id}:{template_id}:{version}")
}

/// Redis key of the shared copy of an organization's running experiments.
pub fn experiments_cache_key(org_id: Uuid) -> String {
    format!("gw:cache:experiments:{org_id}")
}

/// Redis key of the shared copy of an organization's own routes.
pub fn org_routes_cache_key(org_id: Uuid) -> String {
    format!("gw:cache:org_routes:{org_id}")
}

/// Redis key of the shared copy of an organization's provider keys (still sealed: Redis never
/// holds a provider secret in the clear).
/// Failed authentications from one client address in one fixed window (`window` = Unix seconds
/// divided by the window's length), counted across proxy replicas. The address is kept as a
/// truncated SHA-256, not in the clear.
pub fn auth_failures_key(ip: std::net::IpAddr, window: u64) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(ip.to_string().as_bytes());
    // The address is a hash tag: a window and the one before it share a slot on a cluster, so
    // one pipeline reads both.
    format!("gw:authfail:{{{}}}:{window}", hex::encode(&digest[..12]))
}

pub fn provider_keys_cache_key(org_id: Uuid) -> String {
    format!("gw:cache:provider_keys:{org_id}")
}

/// A shared cache copy with the time it was read from Postgres, so a replica that picks it up
/// ages it from the read, not from its own fetch.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Stamped<V> {
    /// Unix milliseconds of the Postgres read.
    pub at_ms: i64,
    pub v: V,
}

impl<V> Stamped<V> {
    pub fn now(v: V) -> Self {
        Self { at_ms: chrono::Utc::now().timestamp_millis(), v }
    }
}

pub async fn put_stamped<V: Serialize>(pool: &Pool, key: &str, value: &Stamped<V>, ttl_secs: u64) -> Result<()> {
    let text = serde_json::to_string(value).map_err(|e| Error::Redis(e.to_string()))?;
    let mut conn = pool.get().await?;
    let _: () = conn.set_ex(key, text, ttl_secs.max(1)).await?;
    Ok(())
}

/// The copy under `key`; one that no longer decodes (an older layout) counts as absent.
pub async fn get_stamped<V: DeserializeOwned>(pool: &Pool, key: &str) -> Result<Option<Stamped<V>>> {
    let mut conn = pool.get().await?;
    let text: Option<String> = conn.get(key).await?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

/// Drops the shared cache copy a change makes stale, then tells every replica to forget it.
pub async fn invalidate(pool: &Pool, inv: &Invalidation) -> Result<()> {
    if let Some(key) = inv.cache_key() {
        let mut conn = pool.get().await?;
        let _: i64 = conn.del(key).await?;
    }
    publish(pool, inv).await
}

/// Drops the shared cache copy a logged change makes stale, then announces the log entry.
pub async fn announce(pool: &Pool, id: i64, inv: &Invalidation) -> Result<()> {
    if let Some(key) = inv.cache_key() {
        let mut conn = pool.get().await?;
        let _: i64 = conn.del(key).await?;
    }
    let mut conn = pool.get().await?;
    let _: i64 = conn.publish(INVALIDATION_CHANNEL, Announcement::Entry(id, inv.clone()).encode()).await?;
    Ok(())
}

/// The admin leader's beat: the newest id in the invalidation log. A replica that hears none
/// for a while, or hears of an id it has not applied, reads the log from Postgres.
pub async fn heartbeat(pool: &Pool, latest: i64) -> Result<()> {
    let mut conn = pool.get().await?;
    let _: i64 = conn.publish(INVALIDATION_CHANNEL, Announcement::Heartbeat(latest).encode()).await?;
    Ok(())
}

/// What travels on [`INVALIDATION_CHANNEL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    /// Invalidation-log entry `id`.
    Entry(i64, Invalidation),
    /// The newest id in the log.
    Heartbeat(i64),
    /// An invalidation not in the log (a command-line tool's `All` after a failure).
    Bare(Invalidation),
}

impl Announcement {
    pub fn encode(&self) -> String {
        match self {
            Announcement::Entry(id, inv) => format!("{id} {}", inv.encode()),
            Announcement::Heartbeat(id) => format!("hb {id}"),
            Announcement::Bare(inv) => inv.encode(),
        }
    }

    pub fn decode(msg: &str) -> Option<Self> {
        if let Some(id) = msg.strip_prefix("hb ") {
            return Some(Announcement::Heartbeat(id.parse().ok()?));
        }
        match msg.split_once(' ') {
            Some((id, inv)) => Some(Announcement::Entry(id.parse().ok()?, Invalidation::decode(inv)?)),
            None => Some(Announcement::Bare(Invalidation::decode(msg)?)),
        }
    }
}

pub async fn publish(pool: &Pool, inv: &Invalidation) -> Result<()> {
    let mut conn = pool.get().await?;
    let _: i64 = conn.publish(INVALIDATION_CHANNEL, inv.encode()).await?;
    Ok(())
}

pub async fn ping(pool: &Pool) -> Result<()> {
    let mut conn = pool.get().await?;
    let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
    if pong == "PONG" {
        Ok(())
    } else {
        Err(Error::Redis(format!("unexpected PING reply {pong:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidation_round_trip() {
        let inv = Invalidation::ApiKey([7; 32]);
        assert_eq!(Invalidation::decode(&inv.encode()), Some(inv));
        assert_eq!(Invalidation::decode("all"), Some(Invalidation::All));
        assert_eq!(Invalidation::decode("api_key:zz"), None);
        assert_eq!(Invalidation::decode("api_key:0102"), None);
        let team = Invalidation::Team { org_id: Uuid::now_v7(), team_id: Uuid::now_v7() };
        assert_eq!(Invalidation::decode(&team.encode()), Some(team.clone()));
        let org = Invalidation::Org { org_id: Uuid::now_v7() };
        assert_eq!(Invalidation::decode(&org.encode()), Some(org.clone()));
        let policy = Invalidation::Policy { org_id: Uuid::now_v7() };
        assert_eq!(Invalidation::decode(&policy.encode()), Some(policy.clone()));
        assert!(policy.cache_key().unwrap().starts_with("gw:cache:policy:"));
        for inv in [
            Invalidation::Routes { version: 7 },
            Invalidation::OrgRoutes { org_id: Uuid::now_v7() },
            Invalidation::Template { org_id: Uuid::now_v7(), template_id: Uuid::now_v7() },
            Invalidation::Experiments { org_id: Uuid::now_v7() },
        ] {
            assert_eq!(Invalidation::decode(&inv.encode()), Some(inv.clone()));
        }
        let pk = Invalidation::ProviderKeys { org_id: Uuid::now_v7() };
        assert_eq!(Invalidation::decode(&pk.encode()), Some(pk.clone()));
        assert!(team.cache_key().unwrap().starts_with("gw:cache:team:"));
        assert_eq!(Invalidation::decode("team:x:y"), None);
        assert_eq!(Invalidation::decode("other"), None);
    }

    #[test]
    fn announcements_round_trip() {
        for a in [
            Announcement::Entry(42, Invalidation::Org { org_id: Uuid::now_v7() }),
            Announcement::Heartbeat(7),
            Announcement::Bare(Invalidation::All),
            Announcement::Entry(1, Invalidation::ApiKey([3; 32])),
        ] {
            assert_eq!(Announcement::decode(&a.encode()), Some(a.clone()));
        }
        assert_eq!(Announcement::decode("hb x"), None);
        assert_eq!(Announcement::decode("12 nonsense"), None);
        assert_eq!(Announcement::decode("x all"), None);
    }
}
