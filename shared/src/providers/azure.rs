//! Azure OpenAI: OpenAI's protocol behind per-deployment paths. The upstream model of a gw
//! deployment is the Azure deployment name; the API version is a query parameter and the key
//! goes in `api-key`. Answers and streams are OpenAI's (Azure adds content-filter fields, which
//! pass through).

use super::openai::{credential_header, parse_completion, parse_embeddings, OpenAiStream};
use super::{
    Adapter, AdapterError, Call, Completion, Endpoint, Exchange, StreamSetup, StreamTranslator, UpstreamError,
    UpstreamRequest,
};
use crate::openai::EmbeddingsRequest;

/// The GA version used when the provider's `api_version` is not set.
pub const DEFAULT_API_VERSION: &str = "2024-10-21";

pub struct AzureAdapter;

fn path<R>(call: &Call<'_, R>, operation: &str) -> Result<String, AdapterError> {
    let version = call.options.api_version.as_deref().unwrap_or(DEFAULT_API_VERSION);
    // Deployment names and versions come from `conf/`; refuse anything that would change the path.
    let safe = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !safe(call.upstream_model) || !safe(version) {
        return Err(AdapterError::Config(format!(
            "Azure deployment {:?} or api-version {version:?} has characters a URL path cannot carry",
            call.upstream_model
        )));
    }
    Ok(format!("{}/openai/deployments/{}/{operation}?api-version={version}", call.base_path, call.upstream_model))
}

fn headers(key: Option<&str>) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, AdapterError> {
    key.map(|k| credential_header(http::HeaderName::from_static("api-key"), k.to_string())).into_iter().collect()
}

impl Adapter for AzureAdapter {
    fn supports(&self, _endpoint: Endpoint) -> bool {
        true
    }

    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError> {
        let body = call.request.openai_body(call.upstream_model).map_err(AdapterError::config)?;
        Ok(Exchange::Http(UpstreamRequest {
            path: path(call, "chat/completions")?,
            headers: headers(call.api_key)?,
            body,
        }))
    }

    fn parse_response(&self, _call: &Call<'_>, body: &[u8]) -> Result<Completion, UpstreamError> {
        parse_completion(body)
    }

    fn stream(&self, setup: StreamSetup) -> Box<dyn StreamTranslator> {
        Box::new(OpenAiStream::new(setup.include_usage))
    }

    fn build_embeddings(&self, call: &Call<'_, EmbeddingsRequest>) -> Result<Exchange, AdapterError> {
        let body = call.request.openai_body(call.upstream_model).map_err(AdapterError::config)?;
        Ok(Exchange::Http(UpstreamRequest { path: path(call, "embeddings")?, headers: headers(call.api_key)?, body }))
    }

    fn parse_embeddings(&self, _call: &Call<'_, EmbeddingsRequest>, body: &[u8]) -> Result<Completion, UpstreamError> {
        parse_embeddings(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::ChatRequest;
    use crate::providers::ProviderOptions;

    #[test]
    fn deployment_path_version_and_key() {
        let req = ChatRequest::parse(br#"{"model":"gpt","messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        let opts = ProviderOptions { api_version: Some("2025-01-01-preview".into()), ..Default::default() };
        let call = Call {
            endpoint: Endpoint::ChatCompletions,
            request: &req,
            upstream_model: "my-gpt4o",
            api_key: Some("az-key"),
            base_path: "",
            options: &opts,
            request_id: uuid::Uuid::nil(),
            created: 1,
        };
        let Exchange::Http(up) = AzureAdapter.build(&call).unwrap() else { panic!() };
        assert_eq!(up.path, "/openai/deployments/my-gpt4o/chat/completions?api-version=2025-01-01-preview");
        assert_eq!(up.headers[0].0.as_str(), "api-key");
        assert_eq!(up.headers[0].1, "az-key");
        assert!(up.headers[0].1.is_sensitive());
        let bad = Call { upstream_model: "../x", ..call };
        assert!(matches!(AzureAdapter.build(&bad), Err(AdapterError::Config(_))));

        let emb = EmbeddingsRequest::parse(br#"{"model":"e","input":"hi"}"#).unwrap();
        let defaults = ProviderOptions::default();
        let call = Call {
            endpoint: Endpoint::Embeddings,
            request: &emb,
            upstream_model: "emb",
            api_key: None,
            base_path: "/base",
            options: &defaults,
            request_id: uuid::Uuid::nil(),
            created: 1,
        };
        let Exchange::Http(up) = AzureAdapter.build_embeddings(&call).unwrap() else { panic!() };
        assert_eq!(up.path, format!("/base/openai/deployments/emb/embeddings?api-version={DEFAULT_API_VERSION}"));
        assert!(up.headers.is_empty());
    }
}
