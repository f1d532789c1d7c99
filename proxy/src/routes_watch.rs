//! Keeps the route table current without a restart. Under `routes = "database"` a new catalog
//! version is loaded when the control plane announces it (the invalidation channel), when the
//! subscription comes back (messages may have been lost) and every `routes_poll_ms` whatever
//! happens; `SIGHUP` re-reads the configuration file (its prices and, under `routes = "file"`,
//! its providers and models) and reloads. A version that cannot be loaded or built leaves the
//! last good table in use, counted in `gw_proxy_routes_reload_failures_total` and visible as
//! `gw_proxy_routes_latest_version` above `gw_proxy_routes_version`. Requests under way keep
//! the routes they resolved.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gw_shared::config::{Config, Routes, RoutesSource};
use gw_shared::db::{route_catalog, DbPool};
use gw_shared::providers::Registry;
use gw_shared::routing::{RouteTable, Router};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::Notify;

use crate::metrics::Metrics;
use crate::org_routes::RouteBuilder;
use crate::traffic_metrics::TrafficMetrics;

/// What the catalog change written by the proxy itself says when it seeds an empty database.
pub const SEED_CHANGE: &str = "seed from the configuration file";

/// The table a proxy starts with: under `routes = "database"` the database's newest version
/// (the file seeds an empty catalog first); the file's when the database cannot be read, until
/// the watcher can. Runs before the server's runtimes, on one connection of its own.
pub fn initial(cfg: &Config, registry: &Registry) -> Result<RouteTable, Box<dyn std::error::Error>> {
    let file = || RouteTable::build(cfg, &cfg.routes(), registry, &env, None);
    if cfg.routing.routes == RoutesSource::File {
        return Ok(file().map_err(|e| format!("{}: {e}", e.path))?);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let loaded = rt.block_on(route_catalog::seed_and_load(&cfg.database, &cfg.routes().with_ids(), SEED_CHANGE));
    match loaded {
        Ok(Some(v)) => match RouteTable::build(cfg, &v.routes, registry, &env, None) {
            Ok(mut table) => {
                table.version = v.version;
                log::info!("routing with catalog version {}", v.version);
                Ok(table)
            }
            Err(e) => {
                log::error!(
                    "route catalog version {} does not build ({}: {e}); routing with the file's",
                    v.version,
                    e.path
                );
                Ok(file().map_err(|e| format!("{}: {e}", e.path))?)
            }
        },
        Ok(None) => Ok(file().map_err(|e| format!("{}: {e}", e.path))?),
        Err(e) => {
            log::error!("cannot read the route catalog ({e}); routing with the file's until it can");
            Ok(file().map_err(|e| format!("{}: {e}", e.path))?)
        }
    }
}

/// Credentials named by `api_key_env`, from this process's environment.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

pub struct RoutesWatch {
    /// The configuration the catalog is built with (prices, timeouts; SIGHUP replaces it) and
    /// the adapters, shared with organizations' own routes.
    pub builder: Arc<RouteBuilder>,
    pub router: Arc<Router>,
    pub db: DbPool,
    pub metrics: Arc<Metrics>,
    pub traffic: Arc<TrafficMetrics>,
    /// Woken by the invalidation listener on a catalog message or a resubscription.
    pub wake: Arc<Notify>,
    /// The newest version that could not be applied: not tried again (nor logged again every
    /// poll) until a newer one comes, or SIGHUP.
    pub failed: std::sync::atomic::AtomicI64,
}

impl RoutesWatch {
    fn source(&self) -> RoutesSource {
        self.builder.cfg.load().routing.routes
    }

    /// Makes `table` the router's and labels metrics by its names.
    fn apply(&self, table: RouteTable) {
        let version = table.version;
        self.traffic.set_names(
            table.names().map(str::to_string).collect::<Vec<_>>(),
            table.providers().iter().map(|p| p.name.to_string()).collect::<Vec<_>>(),
        );
        self.router.replace(table);
        self.metrics.routes_version.set(version);
        self.metrics.routes_reloads.inc();
        log::info!("routing with catalog version {version}");
    }

    fn build(&self, routes: &Routes, version: i64) -> Result<RouteTable, String> {
        let cfg = self.builder.cfg.load();
        let current = self.router.table();
        let mut table = RouteTable::build(&cfg, routes, &self.builder.registry, &env, Some(&current))
            .map_err(|e| format!("{}: {e}", e.path))?;
        table.version = version;
        Ok(table)
    }

    /// Loads the database's newest version if it is not the one in use (or `force`).
    async fn check_database(&self, force: bool) {
        let result: Result<(), String> = async {
            let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
            let latest = route_catalog::latest_version(&mut conn).await.map_err(|e| e.to_string())?;
            self.metrics.routes_latest.set(latest);
            let current = self.router.table().version;
            let failed = self.failed.load(std::sync::atomic::Ordering::Relaxed);
            if latest == 0 || ((latest == current || latest == failed) && !force) {
                return Ok(());
            }
            let v = route_catalog::get(&mut conn, latest)
                .await
                .map_err(|e| {
                    // A version that does not read will not read later either; an outage will.
                    if matches!(e, gw_shared::error::Error::Config(_)) {
                        self.failed.store(latest, std::sync::atomic::Ordering::Relaxed);
                    }
                    e.to_string()
                })?
                .ok_or_else(|| format!("version {latest} vanished"))?;
            let table = self.build(&v.routes, v.version).map_err(|e| {
                self.failed.store(latest, std::sync::atomic::Ordering::Relaxed);
                format!("version {}: {e}", v.version)
            })?;
            self.apply(table);
            Ok(())
        }
        .await;
        if let Err(e) = result {
            self.metrics.routes_failures.inc();
            log::error!("route catalog not applied ({e}); the last good one stays in use");
        }
    }

    /// SIGHUP: the file again, then the routes from wherever they come from.
    async fn reload_file(&self) {
        match Config::load() {
            Ok(cfg) => {
                let source = cfg.routing.routes;
                let routes = cfg.routes();
                self.builder.cfg.store(Arc::new(cfg));
                match source {
                    RoutesSource::File => match self.build(&routes, 0) {
                        Ok(table) => self.apply(table),
                        Err(e) => {
                            self.metrics.routes_failures.inc();
                            log::error!("the configuration file's routes were not applied ({e}); the last good ones stay in use");
                        }
                    },
                    RoutesSource::Database => self.check_database(true).await,
                }
            }
            Err(e) => {
                self.metrics.routes_failures.inc();
                log::error!("the configuration file was not reloaded ({e}); the last good routes stay in use");
            }
        }
    }
}

#[async_trait]
impl BackgroundService for RoutesWatch {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let table = self.router.table();
        self.metrics.routes_version.set(table.version);
        self.metrics.routes_latest.set(table.version);
        drop(table);
        let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                log::error!("cannot listen for SIGHUP: {e}");
                None
            }
        };
        let poll = Duration::from_millis(self.builder.cfg.load().routing.routes_poll_ms.max(100));
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tick.tick() => {}
                Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                    log::info!("SIGHUP: reloading the configuration file's routes");
                    self.reload_file().await;
                    continue;
                }
                _ = shutdown.changed() => return,
            }
            if self.source() == RoutesSource::Database {
                self.check_database(false).await;
            }
        }
    }
}
