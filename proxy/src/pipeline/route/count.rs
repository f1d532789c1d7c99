//! `POST /v1/messages/count_tokens` asked of Anthropic: when the deployment that would serve the
//! request first is Anthropic's, the count is Anthropic's own (its tokenizer, its framing), from
//! the client's body as it came (the deployment's model put in). Any other deployment, a request
//! policies apply to (guardrails never read a count request, so its text goes nowhere), or a
//! count Anthropic could not give, leaves the answer to gw's estimate (`answer::count_tokens`).

use gw_shared::providers::anthropic::{credentials as anthropic_headers, MESSAGES_PATH};
use gw_shared::providers::UpstreamRequest;

use super::credentials;
use crate::ctx::RequestCtx;
use crate::state::Gateway;
use crate::transport::AttemptTimeouts;

pub async fn anthropic_count(gw: &Gateway, ctx: &RequestCtx) -> Option<u64> {
    let raw = ctx.messages_raw.as_deref()?;
    if !ctx.applied.is_empty() {
        return None;
    }
    let route = ctx.routes.first()?;
    // The deployment the request would be sent to first (data residency and circuits as for a
    // message).
    let dep = gw.router.plan(route, 0).into_iter().find(|d| {
        d.provider.healthy() && d.region.as_deref().is_none_or(|r| ctx.region.as_deref().is_none_or(|own| own == r))
    })?;
    let provider = &dep.provider;
    if provider.kind != "anthropic" {
        return None;
    }
    let url = provider.upstream.as_ref()?;
    let org_id = ctx.key.as_ref().map(|k| k.org_id).unwrap_or_default();
    let org_keys = credentials::for_request(gw, ctx).await.ok()?;
    let own = credentials::secret_for(gw, &org_keys, org_id, provider).ok()?;
    let mut headers =
        anthropic_headers(own.as_deref().or(dep.configured_key()), provider.options.api_version.as_deref()).ok()?;
    if let Some(beta) = raw.beta.as_ref().and_then(gw_shared::messages::billable_betas) {
        headers.push((http::HeaderName::from_static("anthropic-beta"), beta));
    }
    let body = gw_shared::messages::passthrough_body(&raw.body, &raw.model, &dep.upstream_model).ok()?;
    let up = UpstreamRequest { path: format!("{}{MESSAGES_PATH}/count_tokens", url.base_path), headers, body };
    let remaining = ctx.remaining();
    let timeouts = AttemptTimeouts {
        connect: dep.timeouts.connect.min(remaining),
        first_byte: dep.timeouts.first_byte.min(remaining),
    };
    let sent = ctx.within_deadline(gw.transport.send(&provider.name, url, up, false, timeouts, provider.public_only));
    let (head, mut answer) = match sent.await {
        Ok(Ok(exchange)) => exchange,
        Ok(Err(e)) => {
            log::debug!("request {}: count_tokens from {}: {e}", ctx.request_id, provider.name);
            return None;
        }
        Err(_) => return None,
    };
    let bytes = ctx.within_deadline(gw.transport.read_all(&mut answer, ctx.remaining())).await.ok()?.ok()?;
    gw.transport.release(answer).await;
    if head.status != 200 {
        log::debug!("request {}: count_tokens from {}: status {}", ctx.request_id, provider.name, head.status);
        return None;
    }
    serde_json::from_slice::<serde_json::Value>(&bytes).ok()?.get("input_tokens")?.as_u64()
}
