//! Model routing: a public model name resolves to an ordered list of deployments (primary first,
//! then fallbacks), each a provider, the upstream model name and its price.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Config, ModelPrice, ProviderKind};
use crate::error::{Error, Result};
use crate::providers::UpstreamUrl;

#[derive(Debug)]
pub struct Provider {
    pub name: String,
    pub kind: ProviderKind,
    pub upstream: Option<UpstreamUrl>,
    pub api_key: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Deployment {
    pub provider: Arc<Provider>,
    pub upstream_model: String,
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
    pub fn from_config(cfg: &Config) -> Result<Self> {
        let mut providers = HashMap::new();
        for p in &cfg.providers {
            let upstream = match p.kind {
                ProviderKind::Mock => None,
                _ => Some(
                    UpstreamUrl::parse(p.base_url.as_deref().unwrap_or_default())
                        .map_err(|e| Error::Config(e.to_string()))?,
                ),
            };
            providers.insert(
                p.name.clone(),
                Arc::new(Provider { name: p.name.clone(), kind: p.kind, upstream, api_key: p.api_key.clone() }),
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
                let upstream_model = d.model.clone().unwrap_or_else(|| m.name.clone());
                let price = *cfg
                    .pricing
                    .get(&upstream_model)
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
        let r = Router::from_config(&cfg).unwrap();
        let names: Vec<_> = r.models().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        let b = r.resolve("b").unwrap();
        assert_eq!(b.deployments[0].upstream_model, "real-b");
        assert_eq!(b.deployments[0].provider.upstream.as_ref().unwrap().port, 1);
        assert_eq!(b.deployments[1].upstream_model, "b");
        assert!(r.resolve("nope").is_none());
    }
}
