//! One version of the catalog built for routing: providers with their adapters and
//! credentials, models with their deployments (prices, caps, timeouts), what was unchanged taken
//! over from the version before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use super::{Deployment, ModelRoute, Provider, Timeouts};
use crate::catalog::ModelMode;
use crate::config::{Config, RouteError, Routes, TimeoutConfig};
use crate::providers::{Endpoint, ProviderOptions, Registry, UpstreamUrl};

/// One version of the catalog, ready to route: what a request resolves its model in. A request
/// keeps the routes it resolved (and so this table's deployments) to its end, whatever replaces
/// the table meanwhile.
#[derive(Debug, Default)]
pub struct RouteTable {
    models: HashMap<String, Arc<ModelRoute>>,
    /// Canonical names in catalog order, for `/v1/models`.
    order: Vec<String>,
    providers: Vec<Arc<Provider>>,
    /// The catalog version it was built from (0: the configuration file).
    pub version: i64,
}

impl RouteTable {
    pub fn resolve(&self, model: &str) -> Option<Arc<ModelRoute>> {
        self.models.get(model).cloned()
    }

    /// Every model, canonical names in catalog order.
    pub fn models(&self) -> impl Iterator<Item = &ModelRoute> {
        self.order.iter().filter_map(|n| self.models.get(n).map(|m| m.as_ref()))
    }

    /// Every name a client may send (models and aliases).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    pub fn providers(&self) -> &[Arc<Provider>] {
        &self.providers
    }

    /// Builds the table for `routes`; `cfg` gives the defaults (timeouts, prices) and `env` the
    /// credentials the providers' `api_key_env` name. Providers and deployments that `previous`
    /// already has, unchanged, are taken over with their state (health, circuit, latency, caps).
    pub fn build(
        cfg: &Config,
        routes: &Routes,
        registry: &Registry,
        env: &dyn Fn(&str) -> Option<String>,
        previous: Option<&RouteTable>,
    ) -> std::result::Result<RouteTable, RouteError> {
        routes.validate(cfg)?;
        let fault = |path: String, message: String| RouteError { path, message };
        let defaults = TimeoutConfig {
            connect_timeout_ms: Some(cfg.proxy.upstream_connect_timeout_ms),
            first_byte_timeout_ms: Some(cfg.proxy.upstream_read_timeout_ms),
            timeout_ms: None,
        };
        let mut providers = HashMap::new();
        let mut provider_list = Vec::new();
        let mut provider_timeouts = HashMap::new();
        for (i, p) in routes.providers.iter().enumerate() {
            let adapter = registry.get(&p.kind).ok_or_else(|| {
                fault(
                    format!("providers[{i}].kind"),
                    format!(
                        "provider {:?}: unknown kind {:?} (known: {})",
                        p.name,
                        p.kind,
                        registry.kinds().join(", ")
                    ),
                )
            })?;
            let upstream = match (&p.base_url, adapter.needs_base_url()) {
                (Some(url), _) => Some(
                    UpstreamUrl::parse(url).map_err(|e| fault(format!("providers[{i}].base_url"), e.to_string()))?,
                ),
                (None, false) => None,
                (None, true) => {
                    return Err(fault(
                        format!("providers[{i}].base_url"),
                        format!("provider {:?} needs base_url", p.name),
                    ))
                }
            };
            if p.responses_api && p.kind != "openai" {
                return Err(fault(
                    format!("providers[{i}].responses_api"),
                    format!("provider {:?}: only openai providers serve the Responses API", p.name),
                ));
            }
            let options = ProviderOptions {
                api_version: p.api_version.clone(),
                region: p.region.clone(),
                responses_api: p.responses_api,
                host: upstream.as_ref().map(UpstreamUrl::host_header).unwrap_or_default(),
            };
            // An organization's provider never reads the gateway's environment.
            let api_key = match p.provider_key_id {
                Some(_) => None,
                None => p.api_key.clone().or_else(|| p.api_key_env.as_deref().and_then(env).filter(|k| !k.is_empty())),
            };
            // A tenant's provider: not probed by the gateway, and held to public addresses.
            let org_key = p.provider_key_id;
            let public_only = org_key.is_some() && !cfg.routing.org_private_base_urls;
            let health_check = p.health_check && upstream.is_some() && org_key.is_none();
            let same = |o: &&Arc<Provider>| {
                *o.name == *p.name
                    && o.kind == p.kind
                    && o.upstream == upstream
                    && o.api_key == api_key
                    && o.options == options
                    && o.health_check == health_check
                    && o.org_key == org_key
                    && o.public_only == public_only
            };
            let provider = match previous.and_then(|t| t.providers.iter().find(same)) {
                Some(old) => old.clone(),
                None => Arc::new(Provider {
                    name: Arc::from(p.name.as_str()),
                    kind: p.kind.clone(),
                    adapter,
                    health_check,
                    upstream,
                    api_key,
                    options,
                    org_key,
                    public_only,
                    healthy: AtomicBool::new(true),
                }),
            };
            provider_timeouts.insert(p.name.clone(), p.timeouts.or(defaults));
            provider_list.push(provider.clone());
            providers.insert(p.name.clone(), provider);
        }
        let mut table = RouteTable { providers: provider_list, ..RouteTable::default() };
        for (i, m) in routes.models.iter().enumerate() {
            let mut deployments = Vec::with_capacity(m.deployments.len());
            let old_route = previous.and_then(|t| t.models.get(&m.name));
            for (j, d) in m.deployments.iter().enumerate() {
                let at = |field: &str| format!("models[{i}].deployments[{j}].{field}");
                let provider = providers
                    .get(&d.provider)
                    .cloned()
                    .ok_or_else(|| fault(at("provider"), format!("unknown provider {:?}", d.provider)))?;
                let endpoint = match m.mode {
                    ModelMode::Chat => Endpoint::ChatCompletions,
                    ModelMode::Embedding => Endpoint::Embeddings,
                };
                if !provider.adapter.supports(endpoint) {
                    return Err(fault(
                        at("provider"),
                        format!(
                            "model {:?}: provider {:?} ({}) does not serve {}",
                            m.name,
                            d.provider,
                            provider.kind,
                            endpoint.as_str()
                        ),
                    ));
                }
                let upstream_model: Arc<str> = Arc::from(d.model.as_deref().unwrap_or(&m.name));
                let price = cfg
                    .deployment_price(&provider.kind, d, &m.name)
                    .ok_or_else(|| fault(at("price"), format!("no price for {upstream_model:?}")))?;
                let t = d.timeouts.or(provider_timeouts.get(&d.provider).copied().unwrap_or(defaults));
                let timeouts = Timeouts {
                    connect: Duration::from_millis(t.connect_timeout_ms.unwrap_or(5_000)),
                    first_byte: Duration::from_millis(t.first_byte_timeout_ms.unwrap_or(120_000)),
                    total: t.timeout_ms.map(Duration::from_millis),
                };
                let max_output_tokens = cfg.max_output_of(&provider.kind, &upstream_model);
                let api_key = match provider.org_key {
                    Some(_) => None,
                    None => {
                        d.api_key.clone().or_else(|| d.api_key_env.as_deref().and_then(env).filter(|k| !k.is_empty()))
                    }
                };
                // Same provider, upstream model and caps: the circuit, latency and caps go on.
                let state = old_route
                    .and_then(|r| {
                        r.deployments.iter().find(|o| {
                            Arc::ptr_eq(&o.provider, &provider)
                                && o.upstream_model == upstream_model
                                && o.rpm == d.rpm
                                && o.tpm == d.tpm
                        })
                    })
                    .map(|o| o.state.clone())
                    .unwrap_or_default();
                deployments.push(Arc::new(Deployment {
                    id: d.id,
                    provider,
                    upstream_model,
                    price,
                    max_output_tokens,
                    weight: d.weight.max(1),
                    rpm: d.rpm,
                    tpm: d.tpm,
                    region: d.region.as_deref().map(Arc::from),
                    api_key,
                    timeouts,
                    state,
                }));
            }
            let canonical = |f: &String| routes.model(f).map(|(_, o)| o.name.clone());
            let route = Arc::new(ModelRoute {
                name: m.name.clone(),
                aliases: m.aliases.clone(),
                owned_by: m.owned_by.clone(),
                mode: m.mode,
                strategy: m.strategy,
                deployments,
                fallbacks: m.fallbacks.iter().filter_map(canonical).collect(),
                retries: m.retries,
                retry_backoff: Duration::from_millis(m.retry_backoff_ms),
                restricted: !m.visibility.is_public(),
                rr: AtomicU64::new(0),
            });
            table.order.push(m.name.clone());
            for name in std::iter::once(&m.name).chain(&m.aliases) {
                table.models.insert(name.clone(), route.clone());
            }
        }
        Ok(table)
    }
}
