//! Model routing: a public model name resolves to an ordered list of deployments (primary first,
//! then fallbacks), each a provider, the upstream model name and its price.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Config, ModelPrice};
use crate::error::{Error, Result};
use crate::providers::{Adapter, Registry, UpstreamUrl};

pub struct Provider {
    pub name: Arc<str>,
    pub kind: String,
    pub adapter: Arc<dyn Adapter>,
    pub upstream: Option<UpstreamUrl>,
    pub api_key: Option<String>,
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

#[derive(Debug, Clone)]
pub struct Deployment {
    pub provider: Arc<Provider>,
    pub upstream_model: Arc<str>,
    pub price: ModelPrice,
}

#[derive(Debug)]
pub struct ModelRoute {
    pub name: String,
    pub owned_by: String,
    pub deployments: Vec<Deployment>,
}

#[derive(Debug, Default)]
pub struct Router {
    models: HashMap<String, Arc<ModelRoute>>,
    /// Public names in configuration order, for `/v1/models`.
    order: Vec<String>,
}

impl Router {
    pub fn from_config(cfg: &Config, registry: &Registry) -> Result<Self> {
        let mut providers = HashMap::new();
        for p in &cfg.providers {
            let adapter = registry.get(&p.kind).ok_or_else(|| {
                Error::Config(format!(
                    "provider {:?}: unknown kind {:?} (known: {})",
                    p.name,
                    p.kind,
                    registry.kinds().join(", ")
                ))
            })?;
            let upstream = match (&p.base_url, adapter.needs_base_url()) {
                (Some(url), _) => Some(UpstreamUrl::parse(url).map_err(|e| Error::Config(e.to_string()))?),
                (None, false) => None,
                (None, true) => return Err(Error::Config(format!("provider {:?} needs base_url", p.name))),
            };
            providers.insert(
                p.name.clone(),
                Arc::new(Provider {
                    name: Arc::from(p.name.as_str()),
                    kind: p.kind.clone(),
                    adapter,
                    upstream,
                    api_key: p.api_key.clone(),
                }),
            );
        }
        let mut router = Router::default();
        for m in &cfg.models {
            let mut deployments = Vec::with_capacity(m.deployments.len());
            for d in &m.deployments {
                let provider = providers
                    .get(&d.provider)
                    .cloned()
                    .ok_or_else(|| Error::Config(format!("unknown provider {:?}", d.provider)))?;
                let upstream_model: Arc<str> = Arc::from(d.model.as_deref().unwrap_or(&m.name));
                let price = *cfg
                    .pricing
                    .get(&*upstream_model)
                    .ok_or_else(|| Error::Config(format!("no price for {upstream_model:?}")))?;
                deployments.push(Deployment { provider, upstream_model, price });
            }
            router.order.push(m.name.clone());
            router.models.insert(
                m.name.clone(),
                Arc::new(ModelRoute { name: m.name.clone(), owned_by: m.owned_by.clone(), deployments }),
            );
        }
        Ok(router)
    }

    pub fn resolve(&self, model: &str) -> Option<Arc<ModelRoute>> {
        self.models.get(model).cloned()
    }

    pub fn models(&self) -> impl Iterator<Item = &ModelRoute> {
        self.order.iter().filter_map(|n| self.models.get(n).map(|m| m.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_in_order() {
        let cfg = Config::parse(
            r#"
[[providers]]
name = "mock"
kind = "mock"
[[providers]]
name = "up"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
[[models]]
name = "b"
deployments = [{ provider = "up", model = "real-b" }, { provider = "mock" }]
[[models]]
name = "a"
deployments = [{ provider = "mock" }]
[pricing]
"real-b" = { input_per_mtok = "1", output_per_mtok = "2" }
"b" = { input_per_mtok = "0", output_per_mtok = "0" }
"a" = { input_per_mtok = "0", output_per_mtok = "0" }
"#,
            |_| None,
        )
        .unwrap();
        let r = Router::from_config(&cfg, &Registry::builtin()).unwrap();
        let names: Vec<_> = r.models().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        let b = r.resolve("b").unwrap();
        assert_eq!(&*b.deployments[0].upstream_model, "real-b");
        assert_eq!(b.deployments[0].provider.upstream.as_ref().unwrap().port, 1);
        assert_eq!(&*b.deployments[1].upstream_model, "b");
        assert!(r.resolve("nope").is_none());
    }

    #[test]
    fn kinds_come_from_the_registry() {
        let text = "[[providers]]\nname = \"x\"\nkind = \"nope\"\n";
        let cfg = Config::parse(text, |_| None).unwrap();
        let err = Router::from_config(&cfg, &Registry::builtin()).unwrap_err();
        assert!(err.to_string().contains("unknown kind"), "{err}");
        let text = "[[providers]]\nname = \"x\"\nkind = \"openai\"\n";
        let cfg = Config::parse(text, |_| None).unwrap();
        assert!(Router::from_config(&cfg, &Registry::builtin()).unwrap_err().to_string().contains("base_url"));
    }
}
