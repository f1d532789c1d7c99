//! Each organization's share of L2: at most `budget` bytes of live entries. One Lua script, run
//! atomically by Redis, stores an entry only if the organization's total (its ledger's) stays
//! within the budget after entries whose TTL has passed are taken off it; a replaced entry's old
//! size is taken off too. The ledger lives beside the entries (same hash tag, so the script works
//! on a Redis Cluster too): a sorted set of entry keys by expiry and a hash of their sizes, with
//! the running total. An entry evicted early (the cache Redis's `maxmemory`) or purged stays
//! counted until its TTL would have ended: the ledger errs toward less, never more. Purging all
//! of an organization's entries deletes its ledger with them (same prefix).

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script};

use super::key::{org_prefix, CacheKey};

/// What an entry is counted as beyond its bytes: its key, and Redis's own bookkeeping.
const ENTRY_OVERHEAD: u64 = 160;

/// Expired entries taken off the ledger per store, at most (the rest on later stores).
const SWEEP: u32 = 256;

const STORE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local bytes = tonumber(ARGV[3])
local total = tonumber(redis.call('HGET', KEYS[3], '_total') or '0')
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))
for _, k in ipairs(expired) do
  total = total - tonumber(redis.call('HGET', KEYS[3], k) or '0')
  redis.call('HDEL', KEYS[3], k)
  redis.call('ZREM', KEYS[2], k)
end
local old = tonumber(redis.call('HGET', KEYS[3], KEYS[1]) or '0')
local others = total - old
if others < 0 then others = 0 end
if others + bytes > tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[3], '_total', others + old)
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('HSET', KEYS[3], KEYS[1], bytes, '_total', others + bytes)
redis.call('ZADD', KEYS[2], now + ttl, KEYS[1])
local keep = ttl + 60000
for i = 2, 3 do
  if redis.call('PTTL', KEYS[i]) < keep then redis.call('PEXPIRE', KEYS[i], keep) end
end
return 1
"#;

/// Deletes entries and takes them off the ledger (their sizes off its total), in one call.
const FORGET: &str = r#"
local total = tonumber(redis.call('HGET', KEYS[2], '_total') or '0')
local n = 0
for i = 3, #KEYS do
  local size = redis.call('HGET', KEYS[2], KEYS[i])
  if size then
    total = total - tonumber(size)
    redis.call('HDEL', KEYS[2], KEYS[i])
  end
  redis.call('ZREM', KEYS[1], KEYS[i])
  n = n + redis.call('UNLINK', KEYS[i])
end
if total < 0 then total = 0 end
local fields = redis.call('HLEN', KEYS[2])
if fields == 1 then
  redis.call('DEL', KEYS[2])
elseif fields > 1 then
  redis.call('HSET', KEYS[2], '_total', total)
end
return n
"#;

/// Deletes `entries` (keys of one organization's L2 entries) and takes them off its ledger, so
/// a purge frees the organization's share at once; how many existed.
pub async fn forget<C: ConnectionLike>(conn: &mut C, org_id: uuid::Uuid, entries: &[String]) -> RedisResult<u64> {
    if entries.is_empty() {
        return Ok(0);
    }
    let (z, h) = ledger_keys(org_id);
    let script = Script::new(FORGET);
    let mut inv = script.key(z);
    inv.key(h);
    for e in entries {
        inv.key(e);
    }
    inv.invoke_async(conn).await
}

/// The organization's ledger keys: expiries, then sizes.
pub fn ledger_keys(org_id: uuid::Uuid) -> (String, String) {
    let p = org_prefix(org_id);
    (format!("{p}ledger:z"), format!("{p}ledger:h"))
}

pub struct L2Budget {
    script: Script,
    /// Bytes of live entries an organization may hold; 0: no bound.
    budget: u64,
}

impl L2Budget {
    pub fn new(budget: u64) -> Self {
        Self { script: Script::new(STORE), budget }
    }

    /// Stores `data` under `key` for `ttl_ms` if the organization's share allows; whether it
    /// was stored.
    pub async fn store<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &CacheKey,
        data: &[u8],
        ttl_ms: u64,
    ) -> RedisResult<bool> {
        let entry = key.redis_key();
        if self.budget == 0 {
            redis::cmd("SET").arg(&entry).arg(data).arg("PX").arg(ttl_ms).query_async::<()>(conn).await?;
            return Ok(true);
        }
        let (z, h) = ledger_keys(key.org_id);
        let bytes = data.len() as u64 + entry.len() as u64 + ENTRY_OVERHEAD;
        let stored: i64 = self
            .script
            .key(&entry)
            .key(z)
            .key(h)
            .arg(data)
            .arg(ttl_ms)
            .arg(bytes)
            .arg(self.budget)
            .arg(SWEEP)
            .invoke_async(conn)
            .await?;
        Ok(stored == 1)
    }
}
