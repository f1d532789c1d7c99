//! Sign-in and sign-up throttling in Redis, shared by every admin replica: attempts per client
//! address (IPv6 per /64), password attempts per account and address (so guessing from one
//! place never keeps the owner out from another), and a much higher ceiling per account across
//! addresses (a distributed guess) that a password reset clears. Counters are fixed windows (`INCR` + `EXPIRE NX` in
//! one script). Account keys hold the SHA-256 of the normalized address, never the address.
//! When Redis is down, throttling fails open with a log line: the hashing semaphore still
//! bounds the work an attacker can cause.

use std::net::IpAddr;

use actix_web::HttpRequest;
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// Increments `KEYS[1]` (by `ARGV[2]`), starting its window of `ARGV[1]` seconds on first use;
/// returns the count and the seconds left in the window.
const COUNT: &str = r"
local n = redis.call('INCRBY', KEYS[1], ARGV[2])
if n == tonumber(ARGV[2]) then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('TTL', KEYS[1])
if ttl < 0 then redis.call('EXPIRE', KEYS[1], ARGV[1]); ttl = tonumber(ARGV[1]) end
return {n, ttl}
";

/// The client's address: the peer, or the last `X-Forwarded-For` hop when configured to trust
/// the proxy in front.
pub fn client_ip(state: &AppState, req: &HttpRequest) -> Option<IpAddr> {
    if state.cfg.admin.trust_forwarded_for {
        let forwarded = req
            .headers()
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse().ok());
        if forwarded.is_some() {
            return forwarded;
        }
    }
    req.peer_addr().map(|a| a.ip())
}

/// IPv4 addresses count one by one; IPv6 ones by /64, the block one client usually holds.
fn address_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

fn account_key(normalized_email: &str) -> String {
    format!("gw:throttle:account:{}", hex::encode(Sha256::digest(normalized_email.as_bytes())))
}

fn account_address_key(normalized_email: &str, ip: Option<IpAddr>) -> String {
    let from = ip.map(address_key).unwrap_or_else(|| "unknown".into());
    let digest = Sha256::digest(format!("{normalized_email}\n{from}").as_bytes());
    format!("gw:throttle:account-address:{}", hex::encode(digest))
}

async fn count(state: &AppState, key: &str, window: u64, by: u64) -> Option<(u64, u64)> {
    let mut conn = match state.redis.get().await {
        Ok(c) => c,
        Err(e) => {
            log::warn!("throttling skipped, redis unavailable: {e}");
            return None;
        }
    };
    let reply = redis::cmd("EVAL")
        .arg(COUNT)
        .arg(1)
        .arg(key)
        .arg(window.max(1))
        .arg(by)
        .query_async::<(u64, u64)>(&mut conn)
        .await;
    match reply {
        Ok(v) => Some(v),
        Err(e) => {
            log::warn!("throttling skipped, redis error: {e}");
            None
        }
    }
}

/// Counts one sign-in or sign-up attempt from the client's address (`what` keeps the two
/// apart); 429 past the limit.
pub async fn attempt(state: &AppState, req: &HttpRequest, what: &str) -> ApiResult<()> {
    let Some(ip) = client_ip(state, req) else {
        return Ok(());
    };
    let cfg = &state.cfg.admin;
    let key = format!("gw:throttle:{what}:ip:{}", address_key(ip));
    if let Some((n, ttl)) = count(state, &key, cfg.ip_window_secs, 1).await {
        if n > cfg.ip_attempts {
            state.metrics.throttled.with_label_values(&["ip"]).inc();
            return Err(ApiError::TooManyRequests(ttl.max(1)));
        }
    }
    Ok(())
}

/// Counts a password attempt against the account from this address (and against the account's
/// ceiling across addresses) before any password work, refusing past either limit. Counting
/// first (not after a failure) keeps a burst of concurrent guesses inside the limit too; a
/// successful sign-in clears this address's count ([`account_succeeded`]).
pub async fn account_attempt(state: &AppState, req: &HttpRequest, normalized_email: &str) -> ApiResult<()> {
    let cfg = &state.cfg.admin;
    let key = account_address_key(normalized_email, client_ip(state, req));
    if let Some((n, ttl)) = count(state, &key, cfg.account_window_secs, 1).await {
        if n > cfg.account_failures {
            state.metrics.throttled.with_label_values(&["account"]).inc();
            return Err(ApiError::TooManyRequests(ttl.max(1)));
        }
    }
    if let Some((n, ttl)) = count(state, &account_key(normalized_email), cfg.account_window_secs, 1).await {
        if n > cfg.account_total_failures {
            state.metrics.throttled.with_label_values(&["account_total"]).inc();
            return Err(ApiError::TooManyRequests(ttl.max(1)));
        }
    }
    Ok(())
}

async fn delete(state: &AppState, key: String) {
    if let Ok(mut conn) = state.redis.get().await {
        let _: Result<i64, _> = redis::cmd("DEL").arg(key).query_async(&mut conn).await;
    }
}

/// A successful sign-in clears the account's failures from this address.
pub async fn account_succeeded(state: &AppState, req: &HttpRequest, normalized_email: &str) {
    delete(state, account_address_key(normalized_email, client_ip(state, req))).await;
}

/// A password reset clears the account's ceiling: whoever proved the mailbox is let in.
pub async fn account_reset(state: &AppState, normalized_email: &str) {
    delete(state, account_key(normalized_email)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_count_per_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        assert_ne!(address_key(a), address_key(c));
        assert_eq!(address_key("10.0.0.1".parse().unwrap()), "10.0.0.1");
    }

    #[test]
    fn account_counters_are_per_address_and_hold_no_address() {
        let a = account_address_key("owner@example.com", Some("10.0.0.1".parse().unwrap()));
        let b = account_address_key("owner@example.com", Some("10.0.0.2".parse().unwrap()));
        assert_ne!(a, b);
        assert!(!a.contains("owner") && !a.contains("10.0.0.1"), "{a}");
    }
}
