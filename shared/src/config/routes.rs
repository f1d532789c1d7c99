//! The route catalog: the providers gw calls and the models clients name, with their
//! deployments. The file's `[[providers]]` and `[[models]]` are one; `/api/v1/gateway` keeps
//! another in Postgres, versioned. Both are checked here the same way, every fault named by its
//! path in the document (`models[2].deployments[0].provider`), and nothing is applied unless the
//! whole catalog holds.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::{Config, DeploymentConfig, ModelConfig, ProviderConfig};
use crate::providers::UpstreamUrl;

/// Most providers, models and deployments per model one catalog holds: every proxy keeps the
/// whole catalog in memory and rebuilds it on each change.
pub const MAX_PROVIDERS: usize = 256;
pub const MAX_MODELS: usize = 2_048;
pub const MAX_DEPLOYMENTS: usize = 32;
/// Most aliases and fallbacks per model.
const MAX_NAMES: usize = 32;
/// Longest name (provider, model, alias, upstream model, region, environment variable).
pub const MAX_NAME_CHARS: usize = 200;

/// Where providers and models come from.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RoutesSource {
    /// The configuration file; `SIGHUP` reloads it.
    #[default]
    File,
    /// Postgres, through `/api/v1/gateway`; the file seeds it when it is empty.
    Database,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Routes {
    #[serde(default)]
    pub providers: Vec<ProviderConfig>,
    #[serde(default)]
    pub models: Vec<ModelConfig>,
}

/// A fault in a catalog, at a path of the document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RouteError {
    pub path: String,
    pub message: String,
}

fn fault(path: impl Into<String>, message: impl Into<String>) -> RouteError {
    RouteError { path: path.into(), message: message.into() }
}

/// A name as the catalog accepts it: 1 to [`MAX_NAME_CHARS`] characters, no control characters
/// or surrounding spaces.
fn name(path: impl Fn() -> String, value: &str) -> Result<(), RouteError> {
    if value.is_empty() || value.chars().count() > MAX_NAME_CHARS {
        return Err(fault(path(), format!("must be 1 to {MAX_NAME_CHARS} characters")));
    }
    if value.chars().any(char::is_control) || value.trim() != value {
        return Err(fault(path(), "must not hold control characters or surrounding spaces"));
    }
    Ok(())
}

impl Routes {
    pub fn provider(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// The model named `name` (or one of its aliases), with its index.
    pub fn model(&self, name: &str) -> Option<(usize, &ModelConfig)> {
        self.models.iter().enumerate().find(|(_, m)| m.name == name || m.aliases.iter().any(|a| a == name))
    }

    /// Whether a client may name `model` (a model or an alias).
    pub fn knows_model(&self, model: &str) -> bool {
        self.model(model).is_some()
    }

    /// Checks the whole catalog; `prices` answers the price of a deployment (its own, `[pricing]`
    /// or the built-in catalog's). Which adapter kinds exist, and what each serves, is the
    /// router's to check (see `Router`).
    pub fn validate(&self, prices: &Config) -> Result<(), RouteError> {
        if self.providers.len() > MAX_PROVIDERS {
            return Err(fault("providers", format!("at most {MAX_PROVIDERS} providers")));
        }
        if self.models.len() > MAX_MODELS {
            return Err(fault("models", format!("at most {MAX_MODELS} models")));
        }
        let mut names = HashSet::new();
        for (i, p) in self.providers.iter().enumerate() {
            name(|| format!("providers[{i}].name"), &p.name)?;
            name(|| format!("providers[{i}].kind"), &p.kind)?;
            if !names.insert(p.name.as_str()) {
                return Err(fault(format!("providers[{i}].name"), format!("provider {:?} is defined twice", p.name)));
            }
            if let Some(url) = p.base_url.as_deref() {
                UpstreamUrl::parse(url)
                    .map_err(|e| fault(format!("providers[{i}].base_url"), format!("provider {:?}: {e}", p.name)))?;
            }
            if let Some(var) = &p.api_key_env {
                env_name(|| format!("providers[{i}].api_key_env"), var)?;
            }
        }
        let kinds: HashMap<&str, &str> = self.providers.iter().map(|p| (p.name.as_str(), p.kind.as_str())).collect();
        let mut models = HashSet::new();
        for (i, m) in self.models.iter().enumerate() {
            name(|| format!("models[{i}].name"), &m.name)?;
            for (j, alias) in m.aliases.iter().enumerate() {
                name(|| format!("models[{i}].aliases[{j}]"), alias)?;
            }
            if m.aliases.len() > MAX_NAMES || m.fallbacks.len() > MAX_NAMES {
                return Err(fault(format!("models[{i}]"), format!("at most {MAX_NAMES} aliases and fallbacks")));
            }
            for (j, n) in std::iter::once(&m.name).chain(&m.aliases).enumerate() {
                if !models.insert(n.as_str()) {
                    let path =
                        if j == 0 { format!("models[{i}].name") } else { format!("models[{i}].aliases[{}]", j - 1) };
                    return Err(fault(path, format!("model name {n:?} is defined twice")));
                }
            }
            if m.deployments.is_empty() {
                return Err(fault(
                    format!("models[{i}].deployments"),
                    format!("model {:?} has no deployments", m.name),
                ));
            }
            if m.deployments.len() > MAX_DEPLOYMENTS {
                return Err(fault(
                    format!("models[{i}].deployments"),
                    format!("model {:?}: at most {MAX_DEPLOYMENTS} deployments", m.name),
                ));
            }
            let mut ids = HashSet::new();
            for (j, d) in m.deployments.iter().enumerate() {
                let at = |field: &str| format!("models[{i}].deployments[{j}].{field}");
                if let Some(id) = d.id {
                    if !ids.insert(id) {
                        return Err(fault(at("id"), format!("model {:?}: deployment id {id} is used twice", m.name)));
                    }
                }
                let Some(kind) = kinds.get(d.provider.as_str()) else {
                    return Err(fault(
                        at("provider"),
                        format!("model {:?} uses unknown provider {:?}", m.name, d.provider),
                    ));
                };
                if let Some(upstream) = &d.model {
                    name(|| at("model"), upstream)?;
                }
                if let Some(region) = &d.region {
                    name(|| at("region"), region)?;
                }
                if let Some(var) = &d.api_key_env {
                    env_name(|| at("api_key_env"), var)?;
                }
                // A model without a price would be served for free and silently under-billed.
                if prices.deployment_price(kind, d, &m.name).is_none() {
                    let upstream = d.model.as_deref().unwrap_or(&m.name);
                    return Err(fault(
                        at("price"),
                        format!(
                            "model {:?}: upstream model {upstream:?} is not in the catalog and has no [pricing] entry (give it a price)",
                            m.name
                        ),
                    ));
                }
                if let Some(p) = &d.price {
                    let all = [
                        Some(p.input_per_mtok),
                        Some(p.output_per_mtok),
                        p.cached_input_per_mtok,
                        p.cache_write_per_mtok,
                        p.reasoning_per_mtok,
                    ];
                    if all.iter().flatten().any(|v| v.is_sign_negative()) {
                        return Err(fault(at("price"), format!("model {:?}: prices must not be negative", m.name)));
                    }
                }
                if d.weight == 0 {
                    return Err(fault(
                        at("weight"),
                        format!("model {:?}: deployment weights must be positive", m.name),
                    ));
                }
                if d.rpm == Some(0) || d.tpm == Some(0) {
                    return Err(fault(at("rpm"), format!("model {:?}: rpm and tpm must be positive when set", m.name)));
                }
            }
        }
        for (i, m) in self.models.iter().enumerate() {
            for (j, f) in m.fallbacks.iter().enumerate() {
                let path = format!("models[{i}].fallbacks[{j}]");
                match self.model(f).map(|(_, t)| t) {
                    None => return Err(fault(path, format!("model {:?}: unknown fallback {f:?}", m.name))),
                    Some(t) if t.name == m.name => {
                        return Err(fault(path, format!("model {:?} lists itself as a fallback", m.name)))
                    }
                    Some(t) if t.mode != m.mode => {
                        return Err(fault(path, format!("model {:?}: fallback {f:?} serves another mode", m.name)))
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// The gateway's own catalog: its providers authenticate with the operator's credentials
    /// (`api_key_env`), never with one organization's key.
    pub fn validate_gateway(&self) -> Result<(), RouteError> {
        for (i, p) in self.providers.iter().enumerate() {
            if p.provider_key_id.is_some() {
                return Err(fault(
                    format!("providers[{i}].provider_key_id"),
                    "the gateway's providers use api_key_env; provider_key_id is for organizations' own providers",
                ));
            }
        }
        Ok(())
    }

    /// The catalog with an id on every deployment (kept where one is set).
    pub fn with_ids(mut self) -> Routes {
        for m in &mut self.models {
            for d in &mut m.deployments {
                give_id(d);
            }
        }
        self
    }
}

/// Gives a deployment an id if it has none.
pub fn give_id(d: &mut DeploymentConfig) {
    if d.id.is_none() {
        d.id = Some(crate::ids::new_id());
    }
}

/// An environment variable's name: letters, digits and `_`, not starting with a digit.
fn env_name(path: impl Fn() -> String, value: &str) -> Result<(), RouteError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_NAME_CHARS
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !value.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(fault(path(), "must be an environment variable's name (letters, digits and _)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        Config::parse("", |_| None).unwrap()
    }

    fn doc(json: serde_json::Value) -> Routes {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn faults_are_named_by_their_path() {
        let c = cfg();
        let base = serde_json::json!({
            "providers": [{"name": "up", "kind": "openai", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "UP_KEY"}],
            "models": [{"name": "m", "aliases": [], "fallbacks": [],
                "deployments": [{"provider": "up", "model": "gpt-4o-mini", "weight": 1}]}]
        });
        assert_eq!(doc(base.clone()).validate(&c), Ok(()));
        let cases = [
            ("/models/0/deployments/0/provider", serde_json::json!("nope"), "models[0].deployments[0].provider"),
            ("/models/0/deployments/0/model", serde_json::json!("unpriced-x"), "models[0].deployments[0].price"),
            ("/models/0/deployments/0/weight", serde_json::json!(0), "models[0].deployments[0].weight"),
            ("/models/0/fallbacks", serde_json::json!(["m"]), "models[0].fallbacks[0]"),
            ("/models/0/aliases", serde_json::json!(["m"]), "models[0].aliases[0]"),
            ("/providers/0/base_url", serde_json::json!("ftp://x"), "providers[0].base_url"),
            ("/providers/0/api_key_env", serde_json::json!("1 BAD"), "providers[0].api_key_env"),
            ("/models/0/name", serde_json::json!(" m"), "models[0].name"),
        ];
        for (pointer, value, path) in cases {
            let mut v = base.clone();
            *v.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer}")) = value;
            let err = doc(v).validate(&c).unwrap_err();
            assert_eq!(err.path, path, "{pointer}: {err}");
        }
    }

    #[test]
    fn a_price_of_its_own_serves_an_unknown_upstream() {
        let d = doc(serde_json::json!({
            "providers": [{"name": "up", "kind": "openai", "base_url": "http://127.0.0.1:1/v1"}],
            "models": [{"name": "m", "deployments": [{"provider": "up", "model": "unpriced-x",
                "price": {"input_per_mtok": "1", "output_per_mtok": "2"}}]}]
        }));
        assert_eq!(d.validate(&cfg()), Ok(()));
        let ids = d.with_ids();
        assert!(ids.models[0].deployments[0].id.is_some());
        let back: Routes = serde_json::from_value(serde_json::to_value(&ids).unwrap()).unwrap();
        assert_eq!(back, ids, "the stored form reads back the same");
    }
}
