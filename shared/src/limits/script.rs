//! The shared limiter: two Lua scripts, run atomically by Redis. `ADMIT` checks every level's
//! counters and, only if all pass, counts the request in all of them: one round trip, and no
//! interleaving with other replicas between check and count. `SETTLE` corrects the tokens
//! counted, ends the concurrency lease, swaps the budget reservation for the real cost, and
//! marks alert thresholds (`HSETNX`: one winner per threshold per period, however many replicas
//! race). Redis's own clock (`TIME`) places every replica's request in the same minute.
//!
//! Numbers reach the scripts as strings and go back to Redis as the same strings: Lua 5.1's
//! doubles would print large integers in exponent form. Each `redis.call` costs Redis about a
//! microsecond, and Redis's core is shared by every replica, so the scripts make as few as they
//! can: TTLs are set when a key is created, not on every request, and a reservation's amount
//! travels in its lease member instead of a hash field of its own.

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script, Value};

use super::plan::{Admission, BudgetSettled, Check, Outcome, Plan, SettleOp, Settlement, WINDOW_MS};

/// A budget's `spent` and `reserved` as they stand at `now`: the reservations whose lease ran out
/// (their requests died) released first. Shared by `ADMIT` and `PEEK`; `ADMIT` reads first and
/// sweeps only when the sweep could change its answer (see [`ADMIT`]).
macro_rules! budget_now {
    () => {
        r#"
local function budget_read(h)
  local v = redis.call('HMGET', h, 'spent', 'reserved')
  return tonumber(v[1] or '0'), tonumber(v[2] or '0')
end
local function budget_now(h, z, now)
  local expired = redis.call('ZRANGEBYSCORE', z, '-inf', now)
  for _, m in ipairs(expired) do
    local amt = string.match(m, ':(%d+)$')
    if amt and amt ~= '0' then redis.call('HINCRBY', h, 'reserved', '-' .. amt) end
  end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', z, '-inf', now) end
  return budget_read(h)
end
"#
    };
}

/// Dead leases (a request that never settled) are swept lazily: only when the check would fail
/// with them counted, so sweeping could change the answer, and on one admission in 64 (by the
/// millisecond) so they never pile up. A check that passes with them counted passes without them:
/// lazy sweeping never admits what an eager sweep would refuse, and saves two `redis.call`s per
/// lease-holding check on Redis's one core.
const ADMIT: &str = concat!(
    budget_now!(),
    r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id, lease = ARGV[1], tonumber(ARGV[2])
local out, todo = {0}, {}
local a, k, n, failed = 3, 1, 0, 0
while a <= #ARGV do
  n = n + 1
  local kind = ARGV[a]
  if kind == 'w' then
    local limit, amount, width = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3])
    local idx = math.floor(now / width)
    local key = KEYS[k] .. ':' .. string.format('%d', idx)
    local used = tonumber(redis.call('GET', key) or '0')
    if failed == 0 and used + amount > limit then failed = n end
    todo[n] = {'w', key, ARGV[a+2], width * 2, used == 0}
    out[#out+1] = used; out[#out+1] = (idx + 1) * width - now; out[#out+1] = idx
    a = a + 4; k = k + 1
  elseif kind == 'c' then
    local limit = tonumber(ARGV[a+1])
    local busy = redis.call('ZCARD', KEYS[k])
    if busy >= limit or now % 64 == 0 then
      redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now)
      busy = redis.call('ZCARD', KEYS[k])
    end
    if failed == 0 and busy >= limit then failed = n end
    todo[n] = {'c', KEYS[k]}
    out[#out+1] = busy; out[#out+1] = 0; out[#out+1] = 0
    a = a + 2; k = k + 1
  elseif kind == 'b' then
    local limit, hard, ttl = tonumber(ARGV[a+1]), ARGV[a+3], tonumber(ARGV[a+4])
    local h, z = KEYS[k], KEYS[k+1]
    local spent, reserved = budget_read(h)
    if (hard == '1' and spent + reserved >= limit) or now % 64 == 0 then
      spent, reserved = budget_now(h, z, now)
    end
    if failed == 0 and hard == '1' and spent + reserved >= limit then failed = n end
    todo[n] = {'b', h, z, ARGV[a+2], ttl, reserved == 0}
    out[#out+1] = spent; out[#out+1] = reserved; out[#out+1] = 0
    a = a + 5; k = k + 2
  else
    return redis.error_reply('gw limits: unknown check ' .. tostring(kind))
  end
end
out[1] = failed
if failed == 0 then
  for _, d in ipairs(todo) do
    if d[1] == 'w' then
      redis.call('INCRBY', d[2], d[3])
      if d[5] then redis.call('PEXPIRE', d[2], d[4]) end
    elseif d[1] == 'c' then
      redis.call('ZADD', d[2], now + lease, id)
      redis.call('PEXPIRE', d[2], lease)
    else
      if d[4] ~= '0' then redis.call('HINCRBY', d[2], 'reserved', d[4]) end
      redis.call('ZADD', d[3], now + lease, id .. ':' .. d[4])
      if d[5] > 0 and d[6] then
        redis.call('PEXPIRE', d[2], d[5])
        redis.call('PEXPIRE', d[3], d[5])
      end
    end
  end
end
return out
"#
);

const SETTLE: &str = r#"
local id = ''
local out = {}
local a, k = 1, 1
while a <= #ARGV do
  local kind = ARGV[a]
  if kind == 'r' then
    id = ARGV[a+1]
    a = a + 2
  elseif kind == 't' then
    local key, delta = KEYS[k] .. ':' .. ARGV[a+1], tonumber(ARGV[a+2])
    local v = redis.call('INCRBY', key, ARGV[a+2])
    if v == delta and redis.call('PTTL', key) == -1 then
      redis.call('DEL', key)
    elseif v < 0 then
      redis.call('SET', key, '0', 'KEEPTTL')
    end
    a = a + 3; k = k + 1
  elseif kind == 'c' then
    redis.call('ZREM', KEYS[k], id)
    a = a + 1; k = k + 1
  elseif kind == 'b' then
    local h, z = KEYS[k], KEYS[k+1]
    local actual, limit, ttl, reserve = ARGV[a+1], tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), ARGV[a+5]
    if redis.call('ZREM', z, id .. ':' .. reserve) == 1 and reserve ~= '0' then
      redis.call('HINCRBY', h, 'reserved', '-' .. reserve)
    end
    local spent = redis.call('HINCRBY', h, 'spent', actual)
    if ttl > 0 and spent == tonumber(actual) then redis.call('PEXPIRE', h, ttl) end
    local res = {spent, 0}
    if spent >= limit and redis.call('HSETNX', h, 'x:' .. ARGV[a+2], '1') == 1 then res[2] = 1 end
    for th in string.gmatch(ARGV[a+4], '%d+') do
      if spent * 100 >= limit * tonumber(th) and redis.call('HSETNX', h, 'a' .. th .. ':' .. ARGV[a+2], '1') == 1 then
        res[#res+1] = tonumber(th)
      end
    end
    out[#out+1] = res
    a = a + 6; k = k + 2
  else
    return redis.error_reply('gw limits: unknown settle op ' .. tostring(kind))
  end
end
return out
"#;

/// A budget's counters as they stand, expired reservations released first.
const PEEK: &str = concat!(
    budget_now!(),
    r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h, z = KEYS[1], KEYS[2]
local spent, reserved = budget_now(h, z, now)
return {spent, reserved, redis.call('ZCARD', z)}
"#
);

/// Raises a budget's `spent` to what the audit log says (never lowers it: Redis also counts spend
/// the audit writer has not flushed); a counter made here gets the period's expiry. How much it
/// raised, in nano-dollars.
const RAISE: &str = r#"
local h = KEYS[1]
local want, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local spent = tonumber(redis.call('HGET', h, 'spent') or '0')
if want <= spent then return 0 end
redis.call('HSET', h, 'spent', ARGV[1])
if ttl > 0 and redis.call('PTTL', h) < 0 then redis.call('PEXPIRE', h, ttl) end
return want - spent
"#;

/// The scripts, hashed once (`EVALSHA`, loaded again after a Redis restart).
pub struct Scripts {
    admit: Script,
    settle: Script,
    peek: Script,
    raise: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Self {
            admit: Script::new(ADMIT),
            settle: Script::new(SETTLE),
            peek: Script::new(PEEK),
            raise: Script::new(RAISE),
        }
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()).unwrap_or(0),
        _ => 0,
    }
}

fn bad(what: &str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Parse, "gw limits: unexpected script reply", what.to_string()))
}

impl Scripts {
    /// Checks and counts `plan` in one round trip.
    pub async fn admit<C: ConnectionLike>(&self, conn: &mut C, plan: &Plan) -> RedisResult<Admission> {
        let mut inv = self.admit.prepare_invoke();
        inv.arg(&plan.request_id).arg(plan.lease_ms);
        for (i, check) in plan.checks.iter().enumerate() {
            for key in plan.keys(i) {
                inv.key(key);
            }
            match check {
                Check::Window { limit, amount, .. } => inv.arg("w").arg(*limit).arg(*amount).arg(WINDOW_MS),
                Check::Concurrency { limit, .. } => inv.arg("c").arg(*limit),
                Check::Budget(b) => inv
                    .arg("b")
                    .arg(b.limit_nanos)
                    .arg(b.reserve_nanos)
                    .arg(if b.hard { "1" } else { "0" })
                    .arg(plan.budget_ttl_ms(b)),
            };
        }
        let reply: Vec<i64> = inv.invoke_async(conn).await?;
        parse_admission(plan, &reply)
    }

    /// Applies `s`; returns the budgets' states after it.
    pub async fn settle<C: ConnectionLike>(&self, conn: &mut C, s: &Settlement) -> RedisResult<Vec<BudgetSettled>> {
        let mut all = self.settle_many(conn, std::slice::from_ref(s)).await?;
        Ok(all.pop().unwrap_or_default())
    }

    /// Applies several settlements in one script call (one round trip, one script's overhead in
    /// Redis); returns each one's budget states, in order.
    pub async fn settle_many<C: ConnectionLike>(
        &self,
        conn: &mut C,
        batch: &[Settlement],
    ) -> RedisResult<Vec<Vec<BudgetSettled>>> {
        let mut inv = self.settle.prepare_invoke();
        for s in batch {
            inv.arg("r").arg(&s.request_id);
            for op in &s.ops {
                match op {
                    SettleOp::Tokens { key, index, delta } => inv.key(key).arg("t").arg(*index).arg(*delta),
                    SettleOp::Release { key } => inv.key(key).arg("c"),
                    SettleOp::Budget { check, keys: [h, z], ttl_ms, actual_nanos } => {
                        let marks: Vec<String> = check.thresholds.iter().map(u8::to_string).collect();
                        inv.key(h)
                            .key(z)
                            .arg("b")
                            .arg(*actual_nanos)
                            .arg(check.limit_nanos)
                            .arg(*ttl_ms)
                            .arg(marks.join(","))
                            .arg(check.reserve_nanos)
                    }
                };
            }
        }
        let mut reply = inv.invoke_async::<Vec<Value>>(conn).await?.into_iter();
        batch
            .iter()
            .map(|s| {
                let budgets = s.ops.iter().filter_map(|op| match op {
                    SettleOp::Budget { check, .. } => Some(check),
                    _ => None,
                });
                budgets
                    .map(|check| {
                        let Some(Value::Array(items)) = reply.next() else { return Err(bad("settle")) };
                        let spent = items.first().map(int).unwrap_or(0);
                        let exceeded = items.get(1).map(int) == Some(1);
                        let thresholds_crossed = items.iter().skip(2).map(|v| int(v).clamp(0, 100) as u8).collect();
                        Ok(BudgetSettled { check: check.clone(), spent_nanos: spent, exceeded, thresholds_crossed })
                    })
                    .collect()
            })
            .collect()
    }

    /// A budget's `(spent, reserved, reservations)` in nano-dollars.
    /// Raises the budget counter `key` to `spent_nanos` if it holds less; by how much.
    pub async fn raise<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &str,
        spent_nanos: i64,
        ttl_ms: u64,
    ) -> RedisResult<i64> {
        self.raise.key(key).arg(spent_nanos).arg(ttl_ms).invoke_async(conn).await
    }

    pub async fn peek<C: ConnectionLike>(&self, conn: &mut C, keys: &[String; 2]) -> RedisResult<(i64, i64, i64)> {
        let v: Vec<i64> = self.peek.key(&keys[0]).key(&keys[1]).invoke_async(conn).await?;
        match v[..] {
            [spent, reserved, n] => Ok((spent, reserved, n)),
            _ => Err(bad("peek")),
        }
    }
}

fn parse_admission(plan: &Plan, reply: &[i64]) -> RedisResult<Admission> {
    if reply.len() != 1 + 3 * plan.checks.len() {
        return Err(bad("admit"));
    }
    let failed = reply[0];
    let outcomes = plan
        .checks
        .iter()
        .zip(reply[1..].chunks_exact(3))
        .map(|(check, r)| match check {
            Check::Window { limit, .. } => {
                Outcome::Window { limit: *limit, used: r[0].max(0) as u64, reset_ms: r[1].max(0) as u64, index: r[2] }
            }
            Check::Concurrency { limit, .. } => Outcome::Concurrency { limit: *limit, busy: r[0].max(0) as u64 },
            Check::Budget(b) => Outcome::Budget { limit_nanos: b.limit_nanos, spent: r[0], reserved: r[1] },
        })
        .collect();
    let refused = usize::try_from(failed).ok().filter(|f| *f > 0).map(|f| f - 1);
    Ok(Admission { refused, outcomes })
}
