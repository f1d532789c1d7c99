//! The catalog's resources as the API shows and takes them: the same fields as the
//! configuration file's `[[providers]]` and `[[models]]` (one format for both), converted
//! through JSON so that what the file accepts and what the API accepts cannot drift. A PATCH
//! body is merged onto the stored resource (a field sent replaces it, `null` clears it) and the
//! result is read back as a whole resource.

use gw_shared::catalog::ModelMode;
use gw_shared::config::{DeploymentConfig, ModelConfig, ProviderConfig, Strategy, Visibility};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};

fn yes() -> bool {
    true
}

/// A provider gw calls.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderDoc {
    /// Unique in the catalog; deployments name it.
    pub name: String,
    /// The adapter: `mock`, `openai` (any OpenAI-compatible API), `azure`, `anthropic`,
    /// `gemini` or `bedrock`.
    pub kind: String,
    /// e.g. `https://api.openai.com/v1`; required by every kind but `mock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The credential reference: the environment variable holding the key on the proxies
    /// (organizations' own keys take precedence for their requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Azure OpenAI `api-version`; Anthropic `anthropic-version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// AWS region (Bedrock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// `openai` only: the upstream serves OpenAI's Responses API (`{base_url}/responses`), so
    /// `/v1/responses` requests pass through to it instead of being translated to chat.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub responses_api: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Whether proxies check its reachability in the background; default true.
    #[serde(default = "yes")]
    pub health_check: bool,
}

/// Changes to a provider (its name stays).
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// null clears it.
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub base_url: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub api_key_env: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub api_version: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub region: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses_api: Option<bool>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub connect_timeout_ms: Option<Option<u64>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub first_byte_timeout_ms: Option<Option<u64>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub timeout_ms: Option<Option<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<bool>,
}

/// A deployment's own price, in USD per million tokens as decimal strings.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceDoc {
    pub input_per_mtok: String,
    pub output_per_mtok: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_per_mtok: Option<String>,
}

/// One place a model is served.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeploymentDoc {
    /// Given by gw; stable while the deployment exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(read_only)]
    pub id: Option<Uuid>,
    /// A provider of the catalog.
    pub provider: String,
    /// The model name sent upstream; default: the model's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Share of traffic under the `weighted` strategy; default 1.
    #[serde(default = "one")]
    pub weight: u32,
    /// Requests per minute this deployment takes, shared by every proxy replica; past it, it is
    /// skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    /// Tokens per minute, shared by every proxy replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// A key for this deployment only (an environment variable's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Required when the upstream model is in neither the built-in catalog nor `[pricing]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<PriceDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

fn one() -> u32 {
    1
}

/// Changes to a deployment (its id stays).
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeploymentPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub model: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u32>)]
    pub rpm: Option<Option<u32>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub tpm: Option<Option<u64>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub region: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub api_key_env: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<PriceDoc>)]
    pub price: Option<Option<PriceDoc>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub connect_timeout_ms: Option<Option<u64>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub first_byte_timeout_ms: Option<Option<u64>>,
    #[serde(default, deserialize_with = "crate::validate::double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub timeout_ms: Option<Option<u64>>,
}

/// A model clients name, with where it is served.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelDoc {
    /// The name clients send as `model`; unique with every alias in the catalog.
    pub name: String,
    /// Shown by `/v1/models`; default `gw`.
    #[serde(default = "gw")]
    pub owned_by: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    #[serde(default)]
    pub mode: ModelMode,
    #[serde(default)]
    pub strategy: Strategy,
    /// Models tried, in order, once every deployment failed (same mode).
    #[serde(default)]
    pub fallbacks: Vec<String>,
    /// Extra rounds over the deployments before the fallbacks.
    #[serde(default)]
    pub retries: u32,
    #[serde(default = "backoff")]
    pub retry_backoff_ms: u64,
    /// `public` (default) or `allow_list`: only keys or teams whose model allow-list names it.
    #[serde(default, skip_serializing_if = "Visibility::is_public")]
    pub visibility: Visibility,
    /// At least one.
    pub deployments: Vec<DeploymentDoc>,
}

fn gw() -> String {
    "gw".into()
}

fn backoff() -> u64 {
    100
}

/// Changes to a model (its name stays; deployments change through their own operations).
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owned_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aliases: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ModelMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallbacks: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<Visibility>,
}

/// `from` read as a `T` through JSON; a value `T` refuses (a price that is not a decimal) is
/// the client's fault, named under `field`.
fn convert<F: Serialize, T: DeserializeOwned>(field: &str, from: &F) -> ApiResult<T> {
    let value = serde_json::to_value(from).map_err(|e| ApiError::Internal(format!("catalog conversion: {e}")))?;
    serde_json::from_value(value).map_err(|e| ApiError::field(field, e.to_string()))
}

/// A stored resource with `patch` merged onto it: fields sent replace, `null` clears.
pub fn merged<S: Serialize, P: Serialize, T: DeserializeOwned>(field: &str, stored: &S, patch: &P) -> ApiResult<T> {
    let internal = |e: serde_json::Error| ApiError::Internal(format!("catalog merge: {e}"));
    let mut value = serde_json::to_value(stored).map_err(internal)?;
    let patch = serde_json::to_value(patch).map_err(internal)?;
    if let (Some(target), Some(changes)) = (value.as_object_mut(), patch.as_object()) {
        for (k, v) in changes {
            if v.is_null() {
                target.remove(k);
            } else {
                target.insert(k.clone(), v.clone());
            }
        }
    }
    serde_json::from_value(value).map_err(|e| ApiError::field(field, e.to_string()))
}

pub fn provider_in(doc: &ProviderDoc) -> ApiResult<ProviderConfig> {
    convert("provider", doc)
}

pub fn provider_out(p: &ProviderConfig) -> ApiResult<ProviderDoc> {
    convert("provider", p)
}

pub fn model_in(doc: &ModelDoc) -> ApiResult<ModelConfig> {
    for (i, d) in doc.deployments.iter().enumerate() {
        if d.id.is_some() {
            return Err(ApiError::field(format!("deployments[{i}].id"), "is given by gw"));
        }
    }
    convert("model", doc)
}

pub fn model_out(m: &ModelConfig) -> ApiResult<ModelDoc> {
    convert("model", m)
}

pub fn deployment_in(doc: &DeploymentDoc) -> ApiResult<DeploymentConfig> {
    if doc.id.is_some() {
        return Err(ApiError::field("id", "is given by gw"));
    }
    convert("price", doc)
}

pub fn deployment_out(d: &DeploymentConfig) -> ApiResult<DeploymentDoc> {
    convert("deployment", d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json<T: Serialize>(v: &T) -> serde_json::Value {
        serde_json::to_value(v).unwrap()
    }

    #[test]
    fn the_file_format_and_the_api_format_are_one() {
        let doc: ModelDoc = serde_json::from_value(serde_json::json!({
            "name": "m", "deployments": [{"provider": "p", "model": "x", "timeout_ms": 5,
                "price": {"input_per_mtok": "1.5", "output_per_mtok": "2"}}]
        }))
        .unwrap();
        let m = model_in(&doc).unwrap();
        assert_eq!(m.deployments[0].timeouts.timeout_ms, Some(5));
        assert_eq!(m.deployments[0].price.as_ref().unwrap().input_per_mtok.to_string(), "1.5");
        let back = model_out(&m).unwrap();
        assert_eq!(json(&back), json(&doc));
        let bad = serde_json::json!({"name": "m", "deployments": [{"provider": "p",
            "price": {"input_per_mtok": "lots", "output_per_mtok": "2"}}]});
        let doc: ModelDoc = serde_json::from_value(bad).unwrap();
        assert!(matches!(model_in(&doc), Err(ApiError::Field { .. })));
    }

    #[test]
    fn a_patch_replaces_what_it_sends_and_clears_what_it_nulls() {
        let p: ProviderConfig = serde_json::from_value(serde_json::json!({
            "name": "p", "kind": "openai", "base_url": "http://a/v1", "region": "eu", "timeout_ms": 9
        }))
        .unwrap();
        let patch: ProviderPatch =
            serde_json::from_value(serde_json::json!({"base_url": "http://b/v1", "region": null})).unwrap();
        let out: ProviderConfig = merged("provider", &p, &patch).unwrap();
        assert_eq!(out.base_url.as_deref(), Some("http://b/v1"));
        assert_eq!(out.region, None);
        assert_eq!(out.timeouts.timeout_ms, Some(9), "untouched fields stay");
    }
}
