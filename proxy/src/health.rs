//! Active health checks of the HTTP providers, through `pingora-load-balancing`: a TCP connect
//! to each provider's address on a schedule. A provider whose every address fails is left out
//! of routing until a check succeeds again (unless every deployment of a model is unhealthy:
//! then they are all tried, since a check can be wrong and refusing outright surely is).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gw_shared::routing::{Provider, Router};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use pingora_load_balancing::discovery;
use pingora_load_balancing::health_check::TcpHealthCheck;
use pingora_load_balancing::selection::RoundRobin;
use pingora_load_balancing::{Backend, Backends, LoadBalancer};

use crate::metrics::Metrics;

pub struct HealthChecks {
    /// Its current table's providers are checked: a new catalog version brings its own.
    pub router: Arc<Router>,
    pub interval: Duration,
    pub metrics: Arc<Metrics>,
}

struct Target {
    provider: Arc<Provider>,
    lb: LoadBalancer<RoundRobin>,
}

impl HealthChecks {
    /// Resolves each provider's address and sets up its checker; providers that do not resolve
    /// yet are retried on the next round.
    async fn target(provider: &Arc<Provider>) -> Option<Target> {
        let url = provider.upstream.as_ref()?;
        let addrs =
            tokio::time::timeout(Duration::from_secs(5), tokio::net::lookup_host((url.host.as_str(), url.port)))
                .await
                .ok()?
                .ok()?;
        let set: BTreeSet<Backend> = addrs.filter_map(|a| Backend::new(&a.to_string()).ok()).collect();
        if set.is_empty() {
            return None;
        }
        let mut lb = LoadBalancer::<RoundRobin>::from_backends(Backends::new(discovery::Static::new(set)));
        let mut check = TcpHealthCheck::new();
        // One refused connect is not an outage; two in a row are.
        check.consecutive_failure = 2;
        check.consecutive_success = 1;
        check.peer_template.options.connection_timeout = Some(Duration::from_secs(2));
        lb.set_health_check(check);
        lb.update().await.ok()?;
        Some(Target { provider: provider.clone(), lb })
    }

    async fn round(&self, targets: &mut Vec<Target>, pending: &mut Vec<Arc<Provider>>) {
        let mut still = Vec::new();
        for p in pending.drain(..) {
            match Self::target(&p).await {
                Some(t) => targets.push(t),
                None => still.push(p),
            }
        }
        *pending = still;
        for t in targets.iter() {
            let backends = t.lb.backends();
            backends.run_health_check(true).await;
            let up = backends.get_backend().iter().any(|b| backends.ready(b));
            if up != t.provider.healthy() {
                if up {
                    log::info!("provider {} passes its health check again", t.provider.name);
                } else {
                    log::warn!("provider {} fails its health check; routing around it", t.provider.name);
                }
                t.provider.set_healthy(up);
            }
            self.metrics.provider_healthy.with_label_values(&[&t.provider.name]).set(i64::from(up));
        }
    }
}

#[async_trait]
impl BackgroundService for HealthChecks {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        if self.interval.is_zero() {
            return;
        }
        let mut targets = Vec::new();
        let mut pending: Vec<Arc<Provider>> = Vec::new();
        let mut version = None;
        loop {
            let table = self.router.table();
            if version != Some(table.version) {
                // Providers the new table took over unchanged keep their checker.
                let now: Vec<Arc<Provider>> = table.providers().iter().filter(|p| p.health_check).cloned().collect();
                targets.retain(|t: &Target| now.iter().any(|p| Arc::ptr_eq(p, &t.provider)));
                pending = now.into_iter().filter(|p| !targets.iter().any(|t| Arc::ptr_eq(p, &t.provider))).collect();
                version = Some(table.version);
            }
            drop(table);
            self.round(&mut targets, &mut pending).await;
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}
