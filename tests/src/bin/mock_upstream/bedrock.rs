//! Bedrock Converse: `POST /model/{modelId}/converse` (no streaming). Requests must look
//! SigV4-signed; the signature itself is not checked.

use actix_web::{HttpRequest, HttpResponse};
use serde_json::{json, Value};

use crate::convo::{strings, Answer, Conversation, ToolChoice};
use crate::{json_reply, status_code, Call};

/// The access key id of a SigV4-signed request (`authorization: AWS4-HMAC-SHA256
/// Credential=<id>/<date>/...` and an `x-amz-date`); `None` when it is not signed so.
pub fn access_key(req: &HttpRequest) -> Option<String> {
    let auth = req.headers().get("authorization")?.to_str().ok()?;
    let credential = auth.strip_prefix("AWS4-HMAC-SHA256 Credential=")?;
    let id = credential.split_once('/').map_or(credential, |(id, _)| id);
    (!id.is_empty() && req.headers().contains_key("x-amz-date")).then(|| id.to_string())
}

/// AWS's answer to an unsigned request.
pub fn missing_token() -> HttpResponse {
    HttpResponse::Forbidden()
        .insert_header(("x-amzn-ErrorType", "MissingAuthenticationTokenException"))
        .json(json!({"message": "Missing Authentication Token"}))
}

/// An error in Bedrock's shape: `{"message"}` and the exception's name in `x-amzn-ErrorType`.
pub fn error(status: u16, message: &str) -> HttpResponse {
    let kind = match status {
        400 => "ValidationException",
        401 => "UnrecognizedClientException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        _ => "InternalServerException",
    };
    HttpResponse::build(status_code(status)).insert_header(("x-amzn-ErrorType", kind)).json(json!({"message": message}))
}

/// A `toolResult`'s content as text: its `text` blocks, and `json` blocks as JSON, one per line.
fn tool_result_text(result: &Value) -> String {
    let blocks = result.get("content").and_then(Value::as_array).into_iter().flatten();
    blocks
        .map(|b| {
            b.get("text")
                .and_then(Value::as_str)
                .map_or_else(|| b.get("json").map(Value::to_string).unwrap_or_default(), str::to_string)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn conversation(body: &Value) -> Result<Conversation, String> {
    let messages = body.get("messages").and_then(Value::as_array).filter(|m| !m.is_empty()).ok_or(
        "Malformed input request: #: required key [messages] not found, please reformat your input and try again.",
    )?;
    let mut conv = Conversation::default();
    for block in body.get("system").and_then(Value::as_array).into_iter().flatten() {
        if let Some(text) = block.get("text").and_then(Value::as_str) {
            conv.push("system", text.to_string(), None);
        }
    }
    for m in messages {
        let role = if m.get("role").and_then(Value::as_str) == Some("assistant") { "assistant" } else { "user" };
        let mut texts = Vec::new();
        let mut result = None;
        for block in m.get("content").and_then(Value::as_array).into_iter().flatten() {
            if let Some(text) = block.get("text").and_then(Value::as_str) {
                texts.push(text.to_string());
            } else if let Some(r) = block.get("toolResult") {
                let text = tool_result_text(r);
                texts.push(text.clone());
                result = Some(text);
            }
        }
        conv.push(role, texts.join("\n"), result);
    }
    conv.tools = body
        .pointer("/toolConfig/tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/toolSpec/name").and_then(Value::as_str).map(str::to_string))
        .collect();
    let choice = body.pointer("/toolConfig/toolChoice");
    conv.choice = if let Some(name) = choice.and_then(|c| c.pointer("/tool/name")).and_then(Value::as_str) {
        ToolChoice::Named(name.to_string())
    } else if choice.and_then(|c| c.get("any")).is_some() {
        ToolChoice::Any
    } else {
        ToolChoice::Auto
    };
    conv.stop = strings(body.pointer("/inferenceConfig/stopSequences"));
    Ok(conv)
}

pub fn converse(call: Call, model: &str) -> HttpResponse {
    let Call { k, body, .. } = call;
    if model.is_empty() {
        return error(400, "The provided model identifier is invalid.");
    }
    let out = match conversation(&body) {
        Ok(conv) => conv.answer(),
        Err(e) => return error(400, &e),
    };
    let (content, stop_reason) = match &out.answer {
        Answer::Text { text, stop } => {
            (json!({"text": text}), if stop.is_some() { "stop_sequence" } else { "end_turn" })
        }
        Answer::Tool { name, input } => (
            json!({"toolUse": {"toolUseId": format!("tooluse_{}", out.digest), "name": name, "input": input}}),
            "tool_use",
        ),
    };
    let mut resp = json!({"output": {"message": {"role": "assistant", "content": [content]}},
                          "stopReason": stop_reason, "metrics": {"latencyMs": k.latency_ms.max(1)}});
    if !k.no_usage {
        let cached = k.cached_tokens.min(out.prompt_tokens);
        let mut usage = json!({"inputTokens": out.prompt_tokens - cached, "outputTokens": out.completion_tokens,
                               "totalTokens": out.prompt_tokens + out.completion_tokens});
        if cached > 0 {
            usage["cacheReadInputTokens"] = json!(cached);
            usage["cacheWriteInputTokens"] = json!(0);
        }
        resp["usage"] = usage;
    }
    json_reply(&resp, &k)
}
