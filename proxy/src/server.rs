//! Assembling the data plane: the Pingora server, its services, and the shared state.

use std::sync::Arc;
use std::time::Duration;

use gw_shared::config::Config;
use gw_shared::providers::Registry;
use gw_shared::routing::Router;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::services::listening::Service;

use crate::audit_flusher;
use crate::embedder::Embedder;
use crate::events::{Outbox, OutboxWriter};
use crate::health::HealthChecks;
use crate::invalidation::{Caches, InvalidationListener};
use crate::limiter::{Limiter, LimiterConfig, LimiterService};
use crate::logline::RateLimitedLog;
use crate::lookup::{Lookup, LookupConfig};
use crate::metrics::Metrics;
use crate::ops::OpsApp;
use crate::org_routes::{OrgRoutes, OrgRoutesSource, RouteBuilder};
use crate::response_cache::{CacheConfig, CacheWriter, ResponseCache};
use crate::sources::{
    compiled_cache, CacheSettingsSource, ExperimentSource, KeySource, Lookups, OrgSource, PolicySource,
    ProviderKeySource, TeamSource, TemplateSource, TemplateVersionSource,
};
use crate::state::{Gateway, Limits, ScanBudget};
use crate::throttle::{AuthThrottle, SharedCounts};
use crate::transport::Transport;

use crate::drain::{Drain, InFlight};
use crate::traffic_metrics::TrafficMetrics;

/// How a process starts: `upgrade` takes the listening sockets over from a running gw-proxy
/// (`gw-proxy --upgrade`; then SIGQUIT to the old one: docs/scaling.md).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    pub upgrade: bool,
}

/// Runs the proxy until the process is told to stop; returns only on a start-up error.
pub fn run(cfg: Config, registry: Registry) -> Result<(), Box<dyn std::error::Error>> {
    run_with(cfg, registry, RunOptions::default())
}

/// [`run`], with [`RunOptions`].
pub fn run_with(cfg: Config, registry: Registry, opts: RunOptions) -> Result<(), Box<dyn std::error::Error>> {
    let p = &cfg.proxy;
    let metrics = Arc::new(Metrics::new()?);
    let db = gw_shared::db::pool(&cfg.database, cfg.database.pool_size)?;
    let redis = gw_shared::redis::pool(&cfg.redis, cfg.redis.pool_size)?;
    let router = Arc::new(Router::new(cfg.routing.clone(), crate::routes_watch::initial(&cfg, &registry)?));
    let builder = Arc::new(RouteBuilder { cfg: arc_swap::ArcSwap::from_pointee(cfg.clone()), registry });
    let routes_wake = Arc::new(tokio::sync::Notify::new());
    let lookups = LookupConfig {
        max_bytes: p.lookup_cache_max_bytes,
        fresh_for: Duration::from_secs(p.key_cache_ttl_secs),
        negative_for: Duration::from_secs(p.key_negative_ttl_secs),
        stale_for: Duration::from_secs(p.key_cache_max_stale_secs),
        store_timeout: Duration::from_millis(p.store_timeout_ms),
    };
    let lookups = Arc::new(Lookups {
        keys: Lookup::new(KeySource { db: db.clone() }, redis.clone(), lookups, metrics.clone()),
        teams: Lookup::new(TeamSource { db: db.clone() }, redis.clone(), lookups, metrics.clone()),
        orgs: Lookup::new(OrgSource { db: db.clone() }, redis.clone(), lookups, metrics.clone()),
        policies: Lookup::new(PolicySource { db: db.clone() }, redis.clone(), lookups, metrics.clone()),
        compiled: compiled_cache(p.policy_cache_max_bytes),
        cache_settings: Lookup::new(CacheSettingsSource { db: db.clone() }, redis.clone(), lookups, metrics.clone()),
        provider_keys: Lookup::new(ProviderKeySource { db: db.clone() }, redis.clone(), lookups, metrics.clone()),
        org_routes: OrgRoutes::new(
            Lookup::new(OrgRoutesSource { db: db.clone() }, redis.clone(), lookups, metrics.clone()),
            builder.clone(),
        ),
        templates: Lookup::new(TemplateSource { db: db.clone() }, redis.clone(), lookups, metrics.clone()),
        template_versions: Lookup::new(
            TemplateVersionSource { db: db.clone() },
            redis.clone(),
            lookups,
            metrics.clone(),
        ),
        experiments: Lookup::new(ExperimentSource { db: db.clone() }, redis.clone(), lookups, metrics.clone()),
    });
    let outbox = Arc::new(Outbox::new(db.clone(), metrics.clone()));
    let limiter = Arc::new(Limiter::new(
        LimiterConfig {
            redis: cfg.redis.clone(),
            timeout: Duration::from_millis(p.limits_timeout_ms.max(1)),
            replicas: p.limits_replicas.max(1),
        },
        outbox.clone(),
        metrics.clone(),
    ));
    let responses = Arc::new(ResponseCache::new(
        CacheConfig {
            redis: cfg.redis.clone(),
            l2_org_max_bytes: p.cache_l2_org_max_bytes,
            l1_max_bytes: p.cache_l1_max_bytes,
            l2_timeout: Duration::from_millis(p.cache_l2_timeout_ms.max(1)),
            l3_timeout: Duration::from_millis(p.cache_l3_timeout_ms.max(1)),
            queue: p.cache_store_queue,
        },
        db.clone(),
        gw_shared::db::read_pool(&cfg.database)?,
        Embedder::new(&p.cache_embedding_model_dir),
        metrics.clone(),
    ));
    let health = HealthChecks {
        router: router.clone(),
        interval: Duration::from_millis(cfg.routing.health_check_interval_ms),
        metrics: metrics.clone(),
    };
    let spool_dir = match &p.audit_spool_dir {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            let port = p.listen.rsplit(':').next().unwrap_or("proxy");
            std::path::PathBuf::from(format!(".gw/spool/proxy-{port}"))
        }
    };
    // This process's own folder under the spool directory (another process, the one being
    // upgraded away, may hold another).
    let spool = Arc::new(crate::audit_spool::claim(&spool_dir, p.audit_spool_max_bytes, metrics.clone())?);
    log::info!("audit spool: {}", spool.dir().display());
    let journal = p
        .audit_journal
        .then(|| Arc::new(crate::audit_journal::Journal::new(spool.dir(), p.audit_max_body_bytes, metrics.clone())));
    let in_flight = InFlight::default();
    let finishing = crate::drain::Finishing::default();
    let (sink, flusher) = audit_flusher::channel(
        audit_flusher::ChannelOptions {
            capacity: p.audit_channel_capacity,
            batch_size: p.audit_batch_size,
            interval: Duration::from_millis(p.audit_flush_interval_ms),
            // Room after it for the last writes (bounded) before Pingora's grace period ends.
            drain_for: Duration::from_secs(
                p.shutdown_grace_secs.saturating_sub(audit_flusher::WRITE_TIMEOUT.as_secs() + 2).max(1),
            ),
            spill_after: Duration::from_millis(p.audit_spill_after_ms.max(1)),
            in_flight: in_flight.clone(),
            spool_root: spool_dir.clone(),
            journal: journal.clone(),
        },
        &cfg.database,
        spool,
        metrics.clone(),
    );
    let table = router.table();
    let traffic = Arc::new(TrafficMetrics::new(
        &metrics.registry,
        table.names().map(str::to_string),
        table.providers().iter().map(|p| p.name.to_string()),
    )?);
    drop(table);
    let tracer = crate::traces::Tracer::new(&cfg.telemetry, &metrics.registry)?;
    let routes_watch = crate::routes_watch::RoutesWatch {
        builder,
        router: router.clone(),
        db: db.clone(),
        metrics: metrics.clone(),
        traffic: traffic.clone(),
        wake: routes_wake.clone(),
        failed: std::sync::atomic::AtomicI64::new(0),
    };
    let closing = crate::drain::Closing::default();
    let gateway = Gateway {
        in_flight: in_flight.clone(),
        journal,
        closing: closing.clone(),
        router,
        lookups: lookups.clone(),
        cache: responses.clone(),
        limiter: limiter.clone(),
        outbox: outbox.clone(),
        default_max_tokens: p.limits_default_max_tokens.max(1),
        gateway_quota: cfg.gateway_quota.clone(),
        keyring: cfg.secrets.keyring.clone(),
        throttle: AuthThrottle::new(
            p.auth_failures_per_minute,
            Duration::from_secs(60),
            Some(SharedCounts { redis: redis.clone(), timeout: Duration::from_millis(p.store_timeout_ms.max(1)) }),
        ),
        scan_budget: ScanBudget { inline: p.policy_inline_scan_work, max: p.policy_max_scan_work },
        scan_pool: crate::scan_pool::ScanPool::start(
            p.policy_scan_threads,
            p.policy_scan_queue,
            p.policy_scan_per_org,
        )?,
        transport: Transport::new(
            Duration::from_millis(p.upstream_connect_timeout_ms),
            Duration::from_millis(p.upstream_read_timeout_ms),
            p.max_upstream_body_bytes,
            Duration::from_secs(p.dns_ttl_secs),
            p.upstream_keepalive_pool_size,
        ),
        drain_max_bytes: p.stream_drain_max_bytes,
        audit: sink,
        tracer: tracer.clone(),
        audit_max_body: p.audit_max_body_bytes,
        traffic: traffic.clone(),
        metrics: metrics.clone(),
        limits: Limits {
            max_body_bytes: p.max_body_bytes,
            max_header_bytes: p.max_header_bytes,
            max_header_value_bytes: p.max_header_value_bytes,
        },
        request_timeout: Duration::from_millis(p.request_timeout_ms),
        keepalive_idle_secs: p.keepalive_idle_secs,
        trusted_proxies: p.trusted_proxies.clone(),
        started_at: chrono::Utc::now().timestamp(),
        warn_log: RateLimitedLog::new("gw_proxy::gateway", Duration::from_secs(1)),
    };

    let upgrade_sock = match &p.upgrade_sock {
        Some(path) => path.clone(),
        None => spool_dir.join("upgrade.sock").display().to_string(),
    };
    let conf = ServerConf {
        threads: p.threads.max(1),
        // An upper bound: `Drain` ends the process as soon as nothing is in flight and the
        // audit rows are flushed.
        grace_period_seconds: Some(p.shutdown_grace_secs.max(1)),
        graceful_shutdown_timeout_seconds: Some(5),
        upgrade_sock,
        ..Default::default()
    };
    let opt = pingora::server::configuration::Opt { upgrade: opts.upgrade, ..Default::default() };
    let mut server = Server::new_with_opt_and_conf(Some(opt), conf);
    closing.watch(server.watch_execution_phase());
    server.bootstrap();

    let mut proxy = pingora::proxy::http_proxy_service_with_name(&server.configuration, gateway, "gw-proxy");
    proxy.add_listener(
        ListenerConfig::tcp(p.listen.clone()).l4_buffer(L4BufferSettings::default().read(p.client_read_buffer_bytes)),
    );
    server.add_service(proxy);
    server.add_service(background_service("audit-flusher", finishing.track(flusher)));
    server.add_service(background_service(
        "invalidation-listener",
        InvalidationListener::new(
            redis.clone(),
            db.clone(),
            Caches { lookups: lookups.clone(), responses: responses.clone(), routes: routes_wake },
            metrics.clone(),
        ),
    ));
    server.add_service(background_service("routes-watch", routes_watch));
    server.add_service(background_service("health-checks", health));
    server.add_service(background_service("cache-writer", CacheWriter(responses)));
    server.add_service(background_service("limiter", finishing.track(LimiterService(limiter))));
    server.add_service(background_service("events-outbox", finishing.track(OutboxWriter(outbox))));
    if let Some(tracer) = tracer {
        let endpoint = cfg.telemetry.otlp_endpoint.as_deref().map(gw_shared::config::shown_endpoint);
        log::info!("traces go to {}", endpoint.unwrap_or_default());
        let exporter = crate::traces::TraceExporter {
            tracer,
            in_flight: in_flight.clone(),
            grace: Duration::from_secs(p.shutdown_grace_secs.max(1)),
        };
        server.add_service(background_service("trace-exporter", finishing.track(exporter)));
    }
    server.add_service(background_service("drain", Drain { finishing, in_flight }));
    let ops = OpsApp {
        metrics,
        db: db.clone(),
        redis,
        lookups: lookups.clone(),
        store_timeout: Duration::from_millis(p.store_timeout_ms),
    };
    let mut metrics_svc = Service::new("metrics".into(), ops);
    metrics_svc.add_tcp(&p.metrics_listen);
    metrics_svc.threads = Some(1);
    server.add_service(metrics_svc);

    log::info!("gw-proxy listening on {} (metrics on {})", p.listen, p.metrics_listen);
    server.run_forever();
}
