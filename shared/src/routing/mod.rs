//! Model routing: a public model name (or alias) resolves to a route — its deployments (provider,
//! upstream model, price, weight, caps, timeouts) and the models to fall back on. For each request
//! the router orders a route's deployments by the model's strategy and leaves out those whose
//! circuit is open, whose provider fails its health check, or that reached their per-minute caps.

mod breaker;
mod strategy;
mod table;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use breaker::{DeploymentState, Gate, InflightGuard};
pub use strategy::{order, Candidate};
pub use table::RouteTable;

use crate::catalog::ModelMode;
use arc_swap::ArcSwap;

use crate::config::{Config, RoutingConfig, Strategy};
use crate::error::{Error, Result};
use crate::pricing::ModelPrice;
use crate::providers::{Adapter, Endpoint, ProviderOptions, Registry, UpstreamUrl};

pub struct Provider {
    pub name: Arc<str>,
    pub kind: String,
    pub adapter: Arc<dyn Adapter>,
    pub upstream: Option<UpstreamUrl>,
    pub api_key: Option<String>,
    pub options: ProviderOptions,
    /// Whether the background health check covers this provider.
    pub health_check: bool,
    /// An organization's own provider: the provider key of the requesting organization that
    /// authenticates it (no other credential is ever sent to it).
    pub org_key: Option<uuid::Uuid>,
    /// Connections go to public addresses only (`crate::net_guard`): a tenant gave the URL.
    pub public_only: bool,
    healthy: AtomicBool,
}

impl Provider {
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    pub fn set_healthy(&self, up: bool) {
        self.healthy.store(up, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("upstream", &self.upstream)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Resolved per-attempt timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    /// The whole attempt; `None`: only the request's deadline bounds it.
    pub total: Option<Duration>,
}

pub struct Deployment {
    /// The catalog's id of this deployment (none for one the file defines without the database).
    pub id: Option<uuid::Uuid>,
    pub provider: Arc<Provider>,
    pub upstream_model: Arc<str>,
    pub price: ModelPrice,
    /// The most completion tokens the upstream model gives one answer (the catalog's figure);
    /// `None`: unknown, so a budget's reservation caps the request instead.
    pub max_output_tokens: Option<u64>,
    pub weight: u32,
    pub rpm: Option<u32>,
    pub tpm: Option<u64>,
    pub region: Option<Arc<str>>,
    /// A key for this deployment only; else the provider's.
    pub api_key: Option<String>,
    pub timeouts: Timeouts,
    /// Kept across catalog versions while the deployment is unchanged.
    pub state: Arc<DeploymentState>,
}

impl Deployment {
    /// The configured credential: the deployment's own, else its provider's.
    pub fn configured_key(&self) -> Option<&str> {
        self.api_key.as_deref().or(self.provider.api_key.as_deref())
    }
}

impl std::fmt::Debug for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deployment")
            .field("provider", &self.provider.name)
            .field("upstream_model", &self.upstream_model)
            .field("weight", &self.weight)
            .finish()
    }
}

#[derive(Debug)]
pub struct ModelRoute {
    pub name: String,
    pub aliases: Vec<String>,
    pub owned_by: String,
    pub mode: ModelMode,
    pub strategy: Strategy,
    pub deployments: Vec<Arc<Deployment>>,
    /// Canonical names of the models tried after this one.
    pub fallbacks: Vec<String>,
    pub retries: u32,
    pub retry_backoff: Duration,
    /// Only keys or teams whose allow-list names it may call it (`visibility = "allow_list"`).
    pub restricted: bool,
    rr: AtomicU64,
}

impl ModelRoute {
    pub fn endpoint(&self) -> Endpoint {
        match self.mode {
            ModelMode::Chat => Endpoint::ChatCompletions,
            ModelMode::Embedding => Endpoint::Embeddings,
        }
    }

    /// Whether `name` (as a client sent it) names this model.
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
    }

    /// Whether an allow-list (a key's or a team's; `None`: every model) admits this model: an
    /// entry naming it or any of its aliases does.
    pub fn admitted_by(&self, list: Option<&[String]>) -> bool {
        list.is_none_or(|l| l.iter().any(|m| self.is_named(m)))
    }

    /// Whether a caller with these allow-lists (a key's and its team's) may call this model: both
    /// admit it and, for a restricted model, one of them names it.
    pub fn admitted(&self, key: Option<&[String]>, team: Option<&[String]>) -> bool {
        let names = |l: Option<&[String]>| l.is_some_and(|l| l.iter().any(|m| self.is_named(m)));
        self.admitted_by(key) && self.admitted_by(team) && (!self.restricted || names(key) || names(team))
    }
}

/// Routes requests over the current [`RouteTable`], which a catalog change replaces whole.
pub struct Router {
    table: ArcSwap<RouteTable>,
    pub settings: RoutingConfig,
    epoch: Instant,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router").field("version", &self.table.load().version).finish()
    }
}

impl Router {
    /// The router of the configuration file's providers and models.
    pub fn from_config(cfg: &Config, registry: &Registry) -> Result<Self> {
        let table = RouteTable::build(cfg, &cfg.routes(), registry, &|_| None, None)
            .map_err(|e| Error::Config(e.to_string()))?;
        Ok(Router::new(cfg.routing.clone(), table))
    }

    pub fn new(settings: RoutingConfig, table: RouteTable) -> Self {
        Router { table: ArcSwap::from_pointee(table), settings, epoch: Instant::now() }
    }

    /// The current table: resolve a request's routes in one snapshot.
    pub fn table(&self) -> Arc<RouteTable> {
        self.table.load_full()
    }

    /// Makes `table` the one new requests resolve in; requests under way keep theirs.
    pub fn replace(&self, table: RouteTable) {
        self.table.store(Arc::new(table));
    }

    pub fn resolve(&self, model: &str) -> Option<Arc<ModelRoute>> {
        self.table.load().resolve(model)
    }

    /// Milliseconds on the router's clock (breakers and caps use it).
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The route's deployments for one round, best first, leaving out open circuits and
    /// unhealthy providers (unless every closed one is unhealthy: a health check can be wrong,
    /// and trying is better than refusing for sure). A deployment whose cooldown is over is
    /// included: [`Router::take`] decides at attempt time whether this request is its one trial.
    pub fn plan(&self, route: &ModelRoute, prompt_tokens_hint: u32) -> Vec<Arc<Deployment>> {
        let now = self.now_ms();
        let any_healthy = route.deployments.iter().any(|d| !d.state.is_open(now) && d.provider.healthy());
        let usable =
            route.deployments.iter().filter(|d| !d.state.is_open(now) && (!any_healthy || d.provider.healthy()));
        if route.strategy == Strategy::Ordered {
            // The common case: no ordering state to gather.
            return usable.cloned().collect();
        }
        let usable: Vec<&Arc<Deployment>> = usable.collect();
        let candidates: Vec<Candidate> = usable
            .iter()
            .map(|d| Candidate {
                weight: d.weight,
                inflight: d.state.inflight(),
                latency_us: d.state.latency_us(),
                unit_cost: unit_cost(&d.price, prompt_tokens_hint),
            })
            .collect();
        let rr = route.rr.fetch_add(1, Ordering::Relaxed);
        order(route.strategy, &candidates, rr, rand::random::<f64>)
            .into_iter()
            .filter_map(|j| usable.get(j).map(|d| Arc::clone(d)))
            .collect()
    }

    /// Claims `d` for an attempt now: `None` when its circuit is open (another request holds the
    /// trial) or it reached a per-minute cap. Every `Some` must be followed by [`Router::record`].
    pub fn take(&self, d: &Deployment, caps: Caps) -> Option<Gate> {
        let now = self.now_ms();
        let gate = d.state.gate(now);
        if gate == Gate::Open {
            return None;
        }
        let within = match caps {
            Caps::Shared => true,
            Caps::Local { replicas } => d.state.admit(now, d.rpm, d.tpm, replicas),
        };
        if !within {
            if gate == Gate::Trial {
                d.state.release_trial();
            }
            return None;
        }
        Some(gate)
    }

    /// Whether this replica's share of `d`'s per-minute caps (each divided by `replicas`) has
    /// room for one more attempt, which it then counts: for when the shared caps are out of reach.
    pub fn within_local_caps(&self, d: &Deployment, replicas: u64) -> bool {
        d.state.admit(self.now_ms(), d.rpm, d.tpm, replicas)
    }

    /// Gives back a claim from [`Router::take`] whose attempt will not be made.
    pub fn give_back(&self, d: &Deployment, gate: Gate) {
        if gate == Gate::Trial {
            d.state.release_trial();
        }
    }

    /// Tokens an answer used, for the deployment's token cap.
    pub fn add_tokens(&self, d: &Deployment, tokens: u64) {
        if d.tpm.is_some() {
            d.state.add_tokens(self.now_ms(), tokens);
        }
    }

    /// Records how an attempt on `d` ended, for its circuit and latency average.
    pub fn record(&self, d: &Deployment, outcome: AttemptVerdict) {
        let now = self.now_ms();
        match outcome {
            AttemptVerdict::Success { header_latency } => {
                d.state.record_success();
                let us = u64::try_from(header_latency.as_micros()).unwrap_or(u64::MAX);
                d.state.observe_latency(us, self.settings.latency_ewma_alpha);
            }
            AttemptVerdict::Failure => {
                if d.state.record_failure(now, self.settings.circuit_failures, self.settings.circuit_cooldown_ms) {
                    log::warn!(
                        "circuit opened for {}/{} for {} ms",
                        d.provider.name,
                        d.upstream_model,
                        self.settings.circuit_cooldown_ms
                    );
                }
            }
            AttemptVerdict::NoVerdict => d.state.release_trial(),
        }
    }
}

/// Who holds a deployment's per-minute caps for [`Router::take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caps {
    /// The caps all replicas share are checked apart (Redis counted the attempt, and it fit):
    /// only the circuit is.
    Shared,
    /// This replica alone, with its share: each cap divided by the replicas alive.
    Local { replicas: u64 },
}

impl Deployment {
    /// Whether it has a per-minute cap.
    pub fn capped(&self) -> bool {
        self.rpm.is_some() || self.tpm.is_some()
    }

    /// The identity its shared caps are kept under: its catalog id, or (for one the file
    /// defines) its provider and upstream model.
    pub fn caps_id(&self) -> String {
        match self.id {
            Some(id) => id.simple().to_string(),
            None => {
                use sha2::Digest;
                let d = sha2::Sha256::digest(format!("{}\0{}", self.provider.name, self.upstream_model).as_bytes());
                hex::encode(&d[..12])
            }
        }
    }
}

/// How an attempt bears on its deployment's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptVerdict {
    Success {
        header_latency: Duration,
    },
    /// The deployment failed (connect, timeout, 5xx, 429, garbage).
    Failure,
    /// Nothing learned: the client's own request was refused, or the client left.
    NoVerdict,
}

/// A comparable price for the lowest-cost strategy: the request's prompt at the input price plus
/// as many completion tokens at the output price (a typical ratio when the answer's length is
/// unknown).
fn unit_cost(p: &ModelPrice, prompt_tokens: u32) -> rust_decimal::Decimal {
    let t = rust_decimal::Decimal::from(prompt_tokens.max(1));
    t * p.input_per_mtok + t * p.output_per_mtok
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = r#"
[routing]
circuit_failures = 2
circuit_cooldown_ms = 50
[[providers]]
name = "mock"
kind = "mock"
[[providers]]
name = "up"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
[[models]]
name = "b"
aliases = ["bee"]
fallbacks = ["a"]
deployments = [{ provider = "up", model = "real-b", timeout_ms = 700 }, { provider = "mock" }]
[[models]]
name = "a"
deployments = [{ provider = "mock" }]
[[models]]
name = "e"
mode = "embedding"
deployments = [{ provider = "up", model = "real-b" }]
[pricing]
"real-b" = { input_per_mtok = "1", output_per_mtok = "2" }
"b" = { input_per_mtok = "0", output_per_mtok = "0" }
"a" = { input_per_mtok = "0", output_per_mtok = "0" }
"#;

    fn router() -> Router {
        let cfg = Config::parse(CFG, |_| None).unwrap();
        Router::from_config(&cfg, &Registry::builtin()).unwrap()
    }

    #[test]
    fn resolves_names_aliases_and_fallbacks() {
        let r = router();
        let table = r.table();
        let names: Vec<_> = table.models().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["b", "a", "e"]);
        let b = r.resolve("bee").unwrap();
        assert_eq!(b.name, "b");
        assert!(b.is_named("bee") && b.is_named("b") && !b.is_named("a"));
        assert_eq!(b.fallbacks, ["a"]);
        assert_eq!(&*b.deployments[0].upstream_model, "real-b");
        assert_eq!(b.deployments[0].provider.upstream.as_ref().unwrap().port, 1);
        assert_eq!(b.deployments[0].timeouts.total, Some(Duration::from_millis(700)));
        assert_eq!(b.deployments[1].timeouts.total, None);
        assert_eq!(b.deployments[1].timeouts.connect, Duration::from_millis(5_000));
        assert_eq!(&*b.deployments[1].upstream_model, "b");
        assert_eq!(r.resolve("e").unwrap().endpoint(), Endpoint::Embeddings);
        assert!(r.resolve("nope").is_none());
    }

    #[test]
    fn plan_leaves_out_open_circuits_until_the_trial() {
        let r = router();
        let b = r.resolve("b").unwrap();
        let names = |p: &[Arc<Deployment>]| p.iter().map(|d| d.upstream_model.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&r.plan(&b, 10)), ["real-b", "b"]);
        r.record(&b.deployments[0], AttemptVerdict::Failure);
        assert_eq!(names(&r.plan(&b, 10)), ["real-b", "b"]);
        r.record(&b.deployments[0], AttemptVerdict::Failure);
        assert_eq!(names(&r.plan(&b, 10)), ["b"], "open after two failures");
        assert_eq!(r.take(&b.deployments[0], Caps::Local { replicas: 1 }), None);
        std::thread::sleep(Duration::from_millis(60));
        let plan = r.plan(&b, 10);
        assert_eq!(names(&plan), ["real-b", "b"]);
        assert_eq!(r.take(&plan[0], Caps::Local { replicas: 1 }), Some(Gate::Trial));
        // While the trial is out, nobody else gets the deployment.
        assert_eq!(names(&r.plan(&b, 10)), ["b"]);
        assert_eq!(r.take(&plan[0], Caps::Local { replicas: 1 }), None);
        r.record(&b.deployments[0], AttemptVerdict::Success { header_latency: Duration::from_millis(3) });
        assert_eq!(names(&r.plan(&b, 10)), ["real-b", "b"]);
        assert_eq!(b.deployments[0].state.latency_us(), 3000);
    }

    #[test]
    fn a_new_version_keeps_the_state_of_what_it_did_not_change() {
        let cfg = Config::parse(CFG, |_| None).unwrap();
        let registry = Registry::builtin();
        let old = RouteTable::build(&cfg, &cfg.routes(), &registry, &|_| None, None).unwrap();
        let mut routes = cfg.routes();
        // Model "b": its first deployment changes upstream model, its second stays.
        routes.models[0].deployments[0].model = Some("gpt-4o-mini".into());
        let new = RouteTable::build(&cfg, &routes, &registry, &|_| None, Some(&old)).unwrap();
        let (ob, nb) = (old.resolve("b").unwrap(), new.resolve("b").unwrap());
        assert!(!Arc::ptr_eq(&ob.deployments[0].state, &nb.deployments[0].state), "a changed deployment starts over");
        assert!(Arc::ptr_eq(&ob.deployments[1].state, &nb.deployments[1].state), "an unchanged one goes on");
        assert!(Arc::ptr_eq(&ob.deployments[0].provider, &nb.deployments[0].provider), "so does its provider");
        // The router swaps tables whole; a route already resolved is the old one still.
        let router = Router::new(cfg.routing.clone(), old);
        let held = router.resolve("b").unwrap();
        router.replace(new);
        assert_eq!(&*held.deployments[0].upstream_model, "real-b");
        assert_eq!(&*router.resolve("b").unwrap().deployments[0].upstream_model, "gpt-4o-mini");
    }

    #[test]
    fn a_restricted_model_needs_an_allow_list_that_names_it() {
        let text = CFG.replace("name = \"a\"\n", "name = \"a\"\nvisibility = \"allow_list\"\n");
        let cfg = Config::parse(&text, |_| None).unwrap();
        let r = Router::from_config(&cfg, &Registry::builtin()).unwrap();
        let (a, b) = (r.resolve("a").unwrap(), r.resolve("b").unwrap());
        let named = vec!["a".to_string()];
        let other = vec!["b".to_string()];
        assert!(b.admitted(None, None) && !a.admitted(None, None), "no allow-list: public models only");
        assert!(a.admitted(Some(&named), None) && a.admitted(None, Some(&named)));
        assert!(!a.admitted(Some(&other), None) && !a.admitted(Some(&named), Some(&other)));
    }

    #[test]
    fn unhealthy_providers_are_skipped() {
        let r = router();
        let b = r.resolve("b").unwrap();
        b.deployments[0].provider.set_healthy(false);
        assert_eq!(r.plan(&b, 1).len(), 1);
        b.deployments[0].provider.set_healthy(true);
        assert_eq!(r.plan(&b, 1).len(), 2);
        // All unhealthy: all are tried rather than none.
        let e = r.resolve("e").unwrap();
        e.deployments[0].provider.set_healthy(false);
        assert_eq!(r.plan(&e, 1).len(), 1);
    }

    #[test]
    fn kinds_come_from_the_registry_and_must_serve_the_mode() {
        let text = "[[providers]]\nname = \"x\"\nkind = \"nope\"\n";
        let cfg = Config::parse(text, |_| None).unwrap();
        let err = Router::from_config(&cfg, &Registry::builtin()).unwrap_err();
        assert!(err.to_string().contains("unknown kind"), "{err}");
        let text = "[[providers]]\nname = \"x\"\nkind = \"openai\"\n";
        let cfg = Config::parse(text, |_| None).unwrap();
        assert!(Router::from_config(&cfg, &Registry::builtin()).unwrap_err().to_string().contains("base_url"));
        let text = CFG.replace("kind = \"openai\"", "kind = \"anthropic\"");
        let cfg = Config::parse(&text, |_| None).unwrap();
        let err = Router::from_config(&cfg, &Registry::builtin()).unwrap_err();
        assert!(err.to_string().contains("does not serve embeddings"), "{err}");
    }
}
