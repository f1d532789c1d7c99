//! "Test this key": one minimal chat call (one token at most) to a provider through the same
//! adapter the proxy uses, with the organization's key, reporting what the provider answered.
//! The provider and its base URL come from gw's configuration, never from the caller.

use std::time::{Duration, Instant};

use gw_shared::config::{Config, Routes};
use gw_shared::openai::request::ChatRequest;
use gw_shared::providers::{Call, Endpoint, Exchange, Registry};
use gw_shared::routing::RouteTable;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// The most of a provider's answer read (its error message is near the start).
const MAX_ANSWER_BYTES: usize = 64 * 1024;
const MAX_MESSAGE_CHARS: usize = 300;

#[derive(Debug, Serialize, ToSchema)]
pub struct KeyCheck {
    /// Whether the provider accepted the key (answered the call with a success).
    pub ok: bool,
    pub provider: String,
    /// The upstream model the call asked for (the first model gw routes to this provider).
    pub model: String,
    /// The provider's HTTP status; null when it could not be reached.
    pub status: Option<u16>,
    /// Until the provider's answer was read, milliseconds.
    pub latency_ms: u64,
    /// What the provider said (its error message on a refusal), at most 300 characters, the
    /// secret itself never included.
    pub message: String,
}

fn clip(text: &str, secret: &str) -> String {
    let text = if secret.is_empty() { text.to_string() } else { text.replace(secret, "[secret]") };
    text.chars().take(MAX_MESSAGE_CHARS).collect()
}

/// Calls `provider_name` with `secret` and reports the answer. An unknown provider or one no
/// model routes to is the caller's 400; a provider gw serves in-process accepts any key.
pub async fn check(cfg: &Config, routes: &Routes, provider_name: &str, secret: &str) -> ApiResult<KeyCheck> {
    let router = RouteTable::build(cfg, routes, &Registry::builtin(), &|_| None, None)
        .map_err(|e| ApiError::Internal(format!("the route catalog does not load: {}: {e}", e.path)))?;
    let provider = router
        .providers()
        .iter()
        .find(|p| &*p.name == provider_name)
        .cloned()
        .ok_or_else(|| ApiError::Validation(format!("provider {provider_name:?} is not configured")))?;
    let model = router
        .models()
        .flat_map(|m| m.deployments.iter())
        .find(|d| d.provider.name == provider.name)
        .map(|d| d.upstream_model.to_string())
        .ok_or_else(|| {
            ApiError::Validation(format!("no model is routed to provider {provider_name:?}: nothing to call"))
        })?;
    let body = json!({"model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1});
    let request = ChatRequest::parse(body.to_string().as_bytes())
        .map_err(|e| ApiError::Internal(format!("the test request does not parse: {e:?}")))?;
    let call = Call {
        endpoint: Endpoint::ChatCompletions,
        request: &request,
        upstream_model: &model,
        api_key: Some(secret),
        base_path: provider.upstream.as_ref().map_or("", |u| u.base_path.as_str()),
        options: &provider.options,
        request_id: uuid::Uuid::now_v7(),
        created: chrono::Utc::now().timestamp(),
    };
    let exchange =
        provider.adapter.build(&call).map_err(|e| ApiError::Internal(format!("provider {provider_name:?}: {e}")))?;
    let (Exchange::Http(up), Some(url)) = (exchange, provider.upstream.as_ref()) else {
        return Ok(KeyCheck {
            ok: true,
            provider: provider_name.to_string(),
            model,
            status: None,
            latency_ms: 0,
            message: "an in-process provider: it takes no key".into(),
        });
    };
    let scheme = if url.tls { "https" } else { "http" };
    let target = format!("{scheme}://{}:{}{}", url.host, url.port, up.path);
    let mut builder = reqwest::Client::builder()
        // No redirect may take the key anywhere the configuration did not name.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CALL_TIMEOUT);
    if provider.public_only {
        // An organization's base URL: the one SSRF guard, and the connection pinned to the
        // address it checked.
        let addr = gw_shared::net_guard::resolve_public(&url.host, url.port)
            .await
            .map_err(|why| ApiError::Validation(format!("provider {provider_name:?}: {why}")))?;
        builder = builder.resolve(&url.host, addr);
    }
    let http = builder
        .build()
        .map_err(|e| ApiError::Internal(format!("cannot build the key check client: {}", e.without_url())))?;
    let mut req = http.post(&target).header("content-type", "application/json").body(up.body.clone());
    for (name, value) in &up.headers {
        req = req.header(name, value);
    }
    let started = Instant::now();
    let sent = req.send().await;
    let report = |ok: bool, status: Option<u16>, message: String| KeyCheck {
        ok,
        provider: provider_name.to_string(),
        model: model.clone(),
        status,
        latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        message: clip(&message, secret),
    };
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => return Ok(report(false, None, format!("could not reach the provider: {}", e.without_url()))),
    };
    let status = resp.status().as_u16();
    let mut body = Vec::new();
    while body.len() < MAX_ANSWER_BYTES {
        match resp.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    if (200..300).contains(&status) {
        return Ok(report(true, Some(status), "the provider accepted the key".into()));
    }
    let error = provider.adapter.map_error(status, &body);
    Ok(report(false, Some(status), error.detail))
}
