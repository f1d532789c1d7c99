//! The model catalog: prices, context windows and capabilities of the models providers serve,
//! generated from the community-maintained LiteLLM price list by `scripts/catalog/convert.py`
//! (see `docs/catalog.md`). Built into the binaries so the zero-config run prices every known
//! model; `catalog = "path"` in `conf/` replaces it and `[pricing]` overrides single entries.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::pricing::{ModelPrice, TierPrice};

/// What a model serves.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelMode {
    #[default]
    Chat,
    Embedding,
}

const BUILTIN: &str = include_str!("../../conf/catalog.json");

#[derive(Debug, Default, Deserialize)]
pub struct Catalog {
    #[serde(default)]
    pub source: CatalogSource,
    #[serde(default)]
    pub models: BTreeMap<String, CatalogEntry>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub struct CatalogSource {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub version: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CatalogEntry {
    pub provider: String,
    pub mode: ModelMode,
    #[serde(flatten)]
    pub price: CatalogPrice,
    #[serde(default)]
    pub context_window: Option<u64>,
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// The price fields of an entry; other fields of the entry are ignored here.
#[derive(Debug, Clone, Deserialize)]
pub struct CatalogPrice {
    #[serde(with = "rust_decimal::serde::str")]
    pub input_per_mtok: rust_decimal::Decimal,
    #[serde(with = "rust_decimal::serde::str")]
    pub output_per_mtok: rust_decimal::Decimal,
    #[serde(default, with = "rust_decimal::serde::str_option")]
    pub cached_input_per_mtok: Option<rust_decimal::Decimal>,
    #[serde(default, with = "rust_decimal::serde::str_option")]
    pub cache_write_per_mtok: Option<rust_decimal::Decimal>,
    #[serde(default, with = "rust_decimal::serde::str_option")]
    pub reasoning_per_mtok: Option<rust_decimal::Decimal>,
    #[serde(default)]
    pub tiers: BTreeMap<String, TierPrice>,
}

impl From<&CatalogPrice> for ModelPrice {
    fn from(p: &CatalogPrice) -> Self {
        ModelPrice {
            input_per_mtok: p.input_per_mtok,
            output_per_mtok: p.output_per_mtok,
            cached_input_per_mtok: p.cached_input_per_mtok,
            cache_write_per_mtok: p.cache_write_per_mtok,
            reasoning_per_mtok: p.reasoning_per_mtok,
            tiers: p.tiers.clone(),
        }
    }
}

impl Catalog {
    pub fn parse(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::Config(format!("invalid model catalog: {e}")))
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read catalog {}: {e}", path.display())))?;
        Self::parse(&text)
    }

    /// The catalog compiled into gw, parsed once per process.
    pub fn builtin() -> Result<Arc<Self>> {
        static CELL: OnceLock<std::result::Result<Arc<Catalog>, String>> = OnceLock::new();
        CELL.get_or_init(|| Catalog::parse(BUILTIN).map(Arc::new).map_err(|e| e.to_string()))
            .clone()
            .map_err(Error::Config)
    }

    /// An upstream model's entry: prefixed with the provider kind where the catalog keys it so
    /// (`azure/gpt-4o` is priced apart from OpenAI's `gpt-4o`), else by its own name.
    pub fn entry(&self, kind: &str, upstream_model: &str) -> Option<&CatalogEntry> {
        self.models.get(&format!("{kind}/{upstream_model}")).or_else(|| self.models.get(upstream_model))
    }

    pub fn price(&self, kind: &str, upstream_model: &str) -> Option<ModelPrice> {
        self.entry(kind, upstream_model).map(|e| ModelPrice::from(&e.price))
    }

    /// The most completion tokens the model may produce in one answer, when the catalog knows.
    pub fn max_output(&self, kind: &str, upstream_model: &str) -> Option<u64> {
        self.entry(kind, upstream_model).and_then(|e| e.max_output_tokens).filter(|n| *n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_is_large_and_versioned() {
        let c = Catalog::builtin().unwrap();
        assert!(!c.source.version.is_empty());
        let chat = c.models.values().filter(|e| e.mode == ModelMode::Chat).count();
        assert!(chat >= 100, "{chat} chat models");
        for provider in ["openai", "anthropic", "gemini"] {
            assert!(c.models.values().any(|e| e.provider == provider), "no {provider} models");
        }
        assert!(c.price("openai", "gpt-4o-mini").is_some());
        assert!(c.price("nope", "no-such-model").is_none());
        assert_eq!(c.max_output("openai", "gpt-4o-mini"), Some(16384));
        assert_eq!(c.max_output("nope", "no-such-model"), None);
    }
}
