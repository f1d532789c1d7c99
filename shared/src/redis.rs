//! Redis: the pool, and the invalidation channel the control plane publishes on and every
//! proxy replica listens to. Key layouts and channel names are defined here once.

use deadpool_redis::redis::AsyncCommands;
use deadpool_redis::{Config as PoolConfig, Pool, Runtime};

use crate::error::{Error, Result};
use crate::keys::KeyHash;

/// Channel carrying [`Invalidation`] messages.
pub const INVALIDATION_CHANNEL: &str = "gw:invalidate";

pub fn pool(url: &str, size: usize) -> Result<Pool> {
    let mut cfg = PoolConfig::from_url(url);
    cfg.pool = Some(deadpool_redis::PoolConfig::new(size.max(1)));
    cfg.create_pool(Some(Runtime::Tokio1)).map_err(|e| Error::Redis(e.to_string()))
}

/// What a replica must forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidation {
    /// One API key, by the hex of its SHA-256.
    ApiKey(KeyHash),
    /// Everything cached from Postgres.
    All,
}

impl Invalidation {
    pub fn encode(&self) -> String {
        match self {
            Invalidation::ApiKey(h) => format!("api_key:{}", hex::encode(h)),
            Invalidation::All => "all".into(),
        }
    }

    pub fn decode(msg: &str) -> Option<Self> {
        if msg == "all" {
            return Some(Invalidation::All);
        }
        let hex_hash = msg.strip_prefix("api_key:")?;
        let bytes = hex::decode(hex_hash).ok()?;
        Some(Invalidation::ApiKey(bytes.try_into().ok()?))
    }
}

pub async fn publish(pool: &Pool, inv: &Invalidation) -> Result<()> {
    let mut conn = pool.get().await?;
    let _: i64 = conn.publish(INVALIDATION_CHANNEL, inv.encode()).await?;
    Ok(())
}

pub async fn ping(pool: &Pool) -> Result<()> {
    let mut conn = pool.get().await?;
    let pong: String = deadpool_redis::redis::cmd("PING").query_async(&mut conn).await?;
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
        assert_eq!(Invalidation::decode("other"), None);
    }
}
