//! gw-proxy: the data plane. One Pingora server answering `/v1`, plus the audit flusher, the
//! invalidation listener and a Prometheus endpoint.

mod audit;
mod auth;
mod body;
mod chat;
mod ctx;
mod error;
mod gateway;
mod invalidation;
mod metrics;
mod models;
mod respond;
mod upstream;

use std::sync::Arc;
use std::time::Duration;

use gw_shared::config::Config;
use gw_shared::routing::Router;
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::services::listening::Service;

/// Seconds between SIGTERM and the end of the process: in-flight requests finish and the audit
/// flusher drains in this window.
const GRACE_SECS: u64 = 3;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    if let Err(e) = run() {
        log::error!("gw-proxy failed to start: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let cfg = Config::load()?;
    let p = &cfg.proxy;
    let metrics = Arc::new(metrics::Metrics::new()?);
    let db = gw_shared::db::pool(&cfg.database.url, cfg.database.pool_size)?;
    let router = Router::from_config(&cfg)?;
    let keys = Arc::new(auth::KeyCache::new(
        db.clone(),
        metrics.clone(),
        p.key_cache_capacity,
        Duration::from_secs(p.key_cache_ttl_secs),
        Duration::from_secs(p.key_negative_ttl_secs),
    ));
    let (sink, flusher) = audit::channel(
        p.audit_channel_capacity,
        db.clone(),
        metrics.clone(),
        p.audit_batch_size,
        Duration::from_millis(p.audit_flush_interval_ms),
        Duration::from_secs(GRACE_SECS),
    );
    let upstreams = upstream::Upstreams::new(
        Duration::from_millis(p.upstream_connect_timeout_ms),
        Duration::from_millis(p.upstream_read_timeout_ms),
        p.max_upstream_body_bytes,
    );
    let mut gateway =
        gateway::Gateway::new(router, keys.clone(), upstreams, sink, metrics.clone(), db, p.max_body_bytes);
    gateway.keepalive_idle_secs = p.keepalive_idle_secs;

    let conf = ServerConf {
        threads: p.threads.max(1),
        grace_period_seconds: Some(GRACE_SECS),
        graceful_shutdown_timeout_seconds: Some(5),
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    let mut proxy = pingora::proxy::http_proxy_service_with_name(&server.configuration, gateway, "gw-proxy");
    proxy.add_tcp(&p.listen);
    server.add_service(proxy);
    server.add_service(background_service("audit-flusher", flusher));
    server.add_service(background_service(
        "invalidation-listener",
        invalidation::InvalidationListener { redis_url: cfg.redis.url.clone(), keys },
    ));
    let mut metrics_svc = Service::new("metrics".into(), metrics::MetricsApp(metrics));
    metrics_svc.add_tcp(&p.metrics_listen);
    metrics_svc.threads = Some(1);
    server.add_service(metrics_svc);

    log::info!("gw-proxy listening on {} (metrics on {})", p.listen, p.metrics_listen);
    server.run_forever();
}
