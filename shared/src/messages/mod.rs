//! Anthropic's Messages API as an inbound dialect (`POST /v1/messages`,
//! `/v1/messages/count_tokens`): a request becomes the OpenAI chat request gw's pipeline runs
//! ([`chat_body`]), and the pipeline's answer goes back in the Messages shapes ([`message`],
//! [`EventEncoder`], [`error_body`]). Anthropic's API reference is the contract for both.

mod request;
mod response;

pub use request::chat_body;
pub use response::{error_body, error_event, error_type, message, stop_reason, usage, EventEncoder};

/// The `id` of a message gw answers (`msg_` and the request id).
pub fn message_id(request_id: uuid::Uuid) -> String {
    format!("msg_{}", request_id.simple())
}

#[cfg(test)]
mod tests;
