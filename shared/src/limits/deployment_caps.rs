//! A deployment's per-minute caps (`rpm`, `tpm` in the route catalog), shared by every proxy
//! replica through Redis like the other windows: one script call counts an attempt only if both
//! counts of the current minute (Redis's clock) are under their caps. Tokens are added when the
//! answer is billed. The counters of one deployment share a hash tag (one cluster slot).

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script};

/// The window's width: a minute, as for the other rate limits.
const WINDOW_MS: u64 = 60_000;

/// Counts the attempt if the minute's requests and tokens are under their caps (0: no cap).
const TAKE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local k = KEYS[1] .. ':' .. string.format('%d', math.floor(now / tonumber(ARGV[3])))
local v = redis.call('HMGET', k, 'r', 't')
local r, tok = tonumber(v[1] or '0'), tonumber(v[2] or '0')
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
if (rpm > 0 and r >= rpm) or (tpm > 0 and tok >= tpm) then return 0 end
redis.call('HINCRBY', k, 'r', 1)
if r == 0 then redis.call('PEXPIRE', k, tonumber(ARGV[3]) * 2) end
return 1
"#;

const TOKENS: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local k = KEYS[1] .. ':' .. string.format('%d', math.floor(now / tonumber(ARGV[2])))
redis.call('HINCRBY', k, 't', ARGV[1])
redis.call('PEXPIRE', k, tonumber(ARGV[2]) * 2)
return 1
"#;

/// The Redis key prefix of a deployment's windows (by [`crate::routing::Deployment::caps_id`]).
pub fn key(caps_id: &str) -> String {
    format!("gw:dep:{{{caps_id}}}")
}

pub struct DeploymentCaps {
    take: Script,
    tokens: Script,
}

impl Default for DeploymentCaps {
    fn default() -> Self {
        Self { take: Script::new(TAKE), tokens: Script::new(TOKENS) }
    }
}

impl DeploymentCaps {
    /// Counts one attempt on the deployment; false (nothing counted) when a cap is reached.
    pub async fn take<C: ConnectionLike>(
        &self,
        conn: &mut C,
        caps_id: &str,
        rpm: Option<u32>,
        tpm: Option<u64>,
    ) -> RedisResult<bool> {
        let taken: i64 = self
            .take
            .key(key(caps_id))
            .arg(rpm.unwrap_or(0))
            .arg(tpm.unwrap_or(0))
            .arg(WINDOW_MS)
            .invoke_async(conn)
            .await?;
        Ok(taken == 1)
    }

    /// Adds the tokens an answer used to the current minute.
    pub async fn add_tokens<C: ConnectionLike>(&self, conn: &mut C, caps_id: &str, tokens: u64) -> RedisResult<()> {
        let _: i64 = self.tokens.key(key(caps_id)).arg(tokens).arg(WINDOW_MS).invoke_async(conn).await?;
        Ok(())
    }
}
