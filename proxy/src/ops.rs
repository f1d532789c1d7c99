//! The operations listener (`metrics_listen`): `/metrics` (Prometheus), `/healthz` (the process
//! answers) and `/readyz` (it can serve requests). Any other path is a 404.
//!
//! Ready means a request can be authenticated and answered: PostgreSQL or Redis answers (the
//! other one's outage mode takes over: keys from Redis's shared copies, or the audit log spooled
//! to disk), or, with both down, this process still holds looked-up keys to serve from (only
//! until the invalidation listener notices Redis is gone: it then drops every cached entry, since
//! revocations published meanwhile would be missed). Both stores down with nothing cached is the
//! state in which every request would fail: not ready, so a load balancer sends traffic to another
//! replica. Each probe asks both stores, each within `store_timeout_ms`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gw_shared::db::DbPool;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde::Serialize;

use crate::metrics::Metrics;
use crate::sources::Lookups;

pub struct OpsApp {
    pub metrics: Arc<Metrics>,
    pub db: DbPool,
    pub redis: gw_shared::redis::Pool,
    pub lookups: Arc<Lookups>,
    pub store_timeout: Duration,
}

/// The `/readyz` body.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Readiness {
    /// `ready` or `not_ready`.
    pub status: &'static str,
    /// `up` or `down`.
    pub postgres: &'static str,
    pub redis: &'static str,
    /// Whether this process holds API keys looked up earlier, which it serves while both
    /// stores are down.
    pub keys_cached: bool,
}

impl Readiness {
    pub fn of(postgres: bool, redis: bool, keys_cached: bool) -> Self {
        let state = |up: bool| if up { "up" } else { "down" };
        let ready = postgres || redis || keys_cached;
        Readiness {
            status: if ready { "ready" } else { "not_ready" },
            postgres: state(postgres),
            redis: state(redis),
            keys_cached,
        }
    }

    pub fn is_ready(&self) -> bool {
        self.status == "ready"
    }
}

impl OpsApp {
    async fn readiness(&self) -> Readiness {
        use pingora_timeout::fast_timeout::fast_timeout;
        let (pg, redis) = futures::join!(
            fast_timeout(self.store_timeout, gw_shared::db::ping(&self.db)),
            fast_timeout(self.store_timeout, gw_shared::redis::ping(&self.redis))
        );
        Readiness::of(matches!(pg, Ok(Ok(()))), matches!(redis, Ok(Ok(()))), self.lookups.keys.holds_any().await)
    }
}

fn response(status: u16, content_type: &str, body: Vec<u8>) -> http::Response<Vec<u8>> {
    let mut resp = http::Response::new(body);
    *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    let len = resp.body().len();
    resp.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
    resp
}

#[async_trait]
impl ServeHttp for OpsApp {
    async fn response(&self, session: &mut ServerSession) -> http::Response<Vec<u8>> {
        match session.req_header().uri.path() {
            "/metrics" => {
                let (status, body, content_type) = self.metrics.render();
                response(status, &content_type, body)
            }
            "/healthz" => response(200, "application/json", br#"{"status":"ok"}"#.to_vec()),
            "/readyz" => {
                let r = self.readiness().await;
                let status = if r.is_ready() { 200 } else { 503 };
                response(status, "application/json", serde_json::to_vec(&r).unwrap_or_default())
            }
            _ => response(404, "application/json", br#"{"error":"not found: /metrics, /healthz or /readyz"}"#.to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_while_either_store_answers_or_keys_are_held() {
        assert!(Readiness::of(true, true, false).is_ready());
        assert!(Readiness::of(false, true, false).is_ready());
        assert!(Readiness::of(true, false, false).is_ready());
        assert!(Readiness::of(false, false, true).is_ready());
        let down = Readiness::of(false, false, false);
        assert!(!down.is_ready());
        assert_eq!(
            serde_json::to_string(&down).unwrap(),
            r#"{"status":"not_ready","postgres":"down","redis":"down","keys_cached":false}"#
        );
    }
}
