//! Anthropic's Messages API as an inbound dialect (`POST /v1/messages`,
//! `/v1/messages/count_tokens`): a request becomes the OpenAI chat request gw's pipeline runs
//! ([`chat_body`]), and the pipeline's answer goes back in the Messages shapes ([`message`],
//! [`EventEncoder`], [`error_body`]). Anthropic's API reference is the contract for both.

mod request;
mod response;

pub use request::chat_body;
pub use response::{error_body, error_event, error_type, message, stop_reason, usage, EventEncoder};

/// The body an Anthropic deployment gets when a Messages request passes through: the client's
/// bytes as they came when the deployment serves the model the client named (and no object in
/// them repeats a key, `crate::json_keys`), else the body as gw read it, with the deployment's
/// model.
pub fn passthrough_body(
    raw: &bytes::Bytes,
    client_model: &str,
    upstream_model: &str,
) -> serde_json::Result<bytes::Bytes> {
    if client_model == upstream_model && crate::json_keys::keys_unique(raw) {
        return Ok(raw.clone());
    }
    let mut body: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(raw)?;
    body.insert("model".into(), serde_json::Value::String(upstream_model.to_string()));
    serde_json::to_vec(&body).map(bytes::Bytes::from)
}

/// The client's `anthropic-beta` features gw passes on: all but those Anthropic bills at rates
/// gw's prices do not know (`context-1m-*`: long-context pricing), which would be billed short.
/// `None` when nothing is left.
pub fn billable_betas(header: &http::HeaderValue) -> Option<http::HeaderValue> {
    let text = header.to_str().ok()?;
    let kept: Vec<&str> =
        text.split(',').map(str::trim).filter(|b| !b.is_empty() && !b.starts_with("context-1m")).collect();
    if kept.is_empty() {
        return None;
    }
    http::HeaderValue::from_str(&kept.join(",")).ok()
}

/// The `id` of a message gw answers (`msg_` and the request id).
pub fn message_id(request_id: uuid::Uuid) -> String {
    format!("msg_{}", request_id.simple())
}

#[cfg(test)]
mod tests;
