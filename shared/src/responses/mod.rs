//! OpenAI's Responses API as an inbound dialect (`POST /v1/responses`), stateless: a request
//! becomes the chat request gw's pipeline runs ([`chat_body`]), and the pipeline's answer goes
//! back as a `response` object ([`response`]) or the Responses event sequence
//! ([`EventEncoder`]). OpenAI's OpenAPI document is the contract for both.

mod request;
mod response;

pub use request::{chat_body, is_hosted_tool, offers_hosted_tools};
pub use response::{response, usage, Echo, EventEncoder};

/// The `id` of a response gw answers (`resp_` and the request id).
pub fn response_id(request_id: uuid::Uuid) -> String {
    format!("resp_{}", request_id.simple())
}

#[cfg(test)]
mod tests;
