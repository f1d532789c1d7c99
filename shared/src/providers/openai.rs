//! The OpenAI-compatible adapter: the request goes upstream as the client sent it, with the
//! deployment's model name, and with usage requested on streams so cost is always known.

use crate::openai::{ChatCompletionRequest, StreamOptions};

pub const CHAT_COMPLETIONS_PATH: &str = "/chat/completions";

/// The body we send upstream for `req` on a deployment serving `upstream_model`.
pub fn chat_request_body(req: &ChatCompletionRequest, upstream_model: &str) -> serde_json::Result<Vec<u8>> {
    let mut up = req.clone();
    up.model = upstream_model.to_string();
    if up.is_stream() {
        // Ask for the final usage chunk even when the client did not: cost needs it. The proxy
        // drops that chunk again on the way down when the client did not ask for it.
        let opts = up.stream_options.get_or_insert_with(StreamOptions::default);
        opts.include_usage = Some(true);
    }
    serde_json::to_vec(&up)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn rewrites_model_and_forces_usage() {
        let req = ChatCompletionRequest::from_json(
            br#"{"model":"public","messages":[{"role":"user","content":"hi"}],"stream":true,"top_p":0.5}"#,
        )
        .unwrap();
        let body: Value = serde_json::from_slice(&chat_request_body(&req, "real").unwrap()).unwrap();
        assert_eq!(body["model"], "real");
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["top_p"], 0.5);
    }

    #[test]
    fn non_stream_untouched() {
        let req =
            ChatCompletionRequest::from_json(br#"{"model":"p","messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        let body: Value = serde_json::from_slice(&chat_request_body(&req, "p").unwrap()).unwrap();
        assert!(body.get("stream_options").is_none());
        assert!(body.get("stream").is_none());
    }
}
