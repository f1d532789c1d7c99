//! AWS Bedrock through the Converse API, signed with SigV4 (`aws-sigv4`). The credential is
//! `ACCESS_KEY_ID:SECRET_ACCESS_KEY` (or `...:SESSION_TOKEN`), the region comes from the
//! provider's `region`. Non-streaming only: Converse streams use AWS's binary event-stream
//! framing, not SSE, so a streamed request moves on to the next deployment (or gets 400).

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use serde_json::{json, Map, Value};

use super::{
    log_snippet, Adapter, AdapterError, Call, Completion, Exchange, Flow, StreamSetup, StreamSink, StreamTranslator,
    UpstreamError, UpstreamFailure, UpstreamRequest,
};
use crate::openai::{message_text, ChatRequest, ErrorBody};
use crate::pricing::TokenUsage;

pub struct BedrockAdapter;

const SERVICE: &str = "bedrock";

impl Adapter for BedrockAdapter {
    fn build(&self, call: &Call<'_>) -> Result<Exchange, AdapterError> {
        if call.request.stream {
            return Err(AdapterError::Unsupported(
                "Streaming is not available for this model's Bedrock deployment; set 'stream' to false.".into(),
            ));
        }
        let body = serde_json::to_vec(&to_converse(call.request)?).map_err(AdapterError::config)?;
        let model = encode_path_segment(call.upstream_model);
        let path = format!("{}/model/{model}/converse", call.base_path);
        let headers = signed_headers(call, &path, &body)?;
        Ok(Exchange::Http(UpstreamRequest { path, headers, body: body.into() }))
    }

    fn parse_response(&self, call: &Call<'_>, body: &[u8]) -> Result<Completion, UpstreamError> {
        from_converse(body, &call.completion_id(), call.upstream_model, call.created)
    }

    fn stream(&self, _setup: StreamSetup) -> Box<dyn StreamTranslator> {
        Box::new(NoStream)
    }

    fn map_error(&self, status: u16, body: &[u8]) -> UpstreamError {
        map_error(status, body)
    }
}

/// Never reached: `build` refuses streamed requests.
struct NoStream;

impl StreamTranslator for NoStream {
    fn event(&mut self, _event: &str, _data: &str, _out: &mut StreamSink) -> Result<Flow, UpstreamError> {
        Err(UpstreamError::bad_response("Bedrock deployments do not stream"))
    }
}

/// Model ids hold `:` (`anthropic.claude-3-haiku-20240307-v1:0`), which Bedrock expects encoded.
fn encode_path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn signed_headers(
    call: &Call<'_>,
    path: &str,
    body: &[u8],
) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, AdapterError> {
    let cred =
        call.api_key.ok_or_else(|| AdapterError::Config("Bedrock needs ACCESS_KEY_ID:SECRET credentials".into()))?;
    let mut parts = cred.splitn(3, ':');
    let (Some(id), Some(secret)) = (parts.next(), parts.next()) else {
        return Err(AdapterError::Config("Bedrock credentials must be ACCESS_KEY_ID:SECRET[:SESSION_TOKEN]".into()));
    };
    let token = parts.next().map(str::to_string);
    let region = call.options.region.as_deref().ok_or_else(|| AdapterError::Config("Bedrock needs a region".into()))?;
    let identity = Credentials::new(id, secret, token, None, "gw-config").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(AdapterError::config)?
        .into();
    let host = &call.options.host;
    let url = format!("https://{host}{path}");
    // Exactly the headers the transport sends with these values; others stay unsigned.
    let signed = [("host", host.as_str()), ("content-type", "application/json")];
    let request = SignableRequest::new("POST", &url, signed.into_iter(), SignableBody::Bytes(body))
        .map_err(AdapterError::config)?;
    let (instructions, _signature) = sign(request, &params).map_err(AdapterError::config)?.into_parts();
    instructions
        .headers()
        .map(|(name, value)| {
            let name = http::HeaderName::try_from(name).map_err(AdapterError::config)?;
            let mut value = http::HeaderValue::try_from(value).map_err(AdapterError::config)?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

fn unsupported(what: &str) -> AdapterError {
    AdapterError::Unsupported(format!("{what} is not supported by this model's Bedrock deployment."))
}

/// The Converse request for an OpenAI chat request.
pub fn to_converse(req: &ChatRequest) -> Result<Value, AdapterError> {
    let body = req.body();
    if body.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return Err(unsupported("'n' greater than 1"));
    }
    let mut system = Vec::new();
    let mut messages: Vec<Value> = Vec::new();
    for m in req.messages() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let (role, blocks) = match role {
            "system" | "developer" => {
                system.push(json!({ "text": message_text(m) }));
                continue;
            }
            "user" => ("user", user_blocks(m)?),
            "assistant" => ("assistant", assistant_blocks(m)?),
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or_default();
                ("user", vec![json!({"toolResult": {"toolUseId": id, "content": [{"text": message_text(m)}]}})])
            }
            other => return Err(unsupported(&format!("A message with role '{other}'"))),
        };
        // Converse wants alternating roles: consecutive messages of one role become one message.
        match messages.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(content) = last["content"].as_array_mut() {
                    content.extend(blocks);
                }
            }
            _ => messages.push(json!({ "role": role, "content": blocks })),
        }
    }
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(messages));
    if !system.is_empty() {
        out.insert("system".into(), Value::Array(system));
    }
    let mut inference = Map::new();
    if let Some(v) = body.get("max_completion_tokens").or_else(|| body.get("max_tokens")).filter(|v| !v.is_null()) {
        inference.insert("maxTokens".into(), v.clone());
    }
    for (from, to) in [("temperature", "temperature"), ("top_p", "topP")] {
        if let Some(v) = body.get(from).filter(|v| !v.is_null()) {
            inference.insert(to.into(), v.clone());
        }
    }
    match body.get("stop") {
        Some(Value::String(s)) => {
            inference.insert("stopSequences".into(), json!([s]));
        }
        Some(Value::Array(a)) => {
            inference.insert("stopSequences".into(), Value::Array(a.clone()));
        }
        _ => {}
    }
    if !inference.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(inference));
    }
    if let Some(tools) = body.get("tools").and_then(Value::as_array).filter(|t| !t.is_empty()) {
        let specs: Vec<Value> = tools
            .iter()
            .filter_map(|t| t.get("function"))
            .map(|f| {
                let params =
                    f.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object", "properties": {}}));
                let mut spec =
                    json!({ "name": f.get("name").cloned().unwrap_or(Value::Null), "inputSchema": { "json": params } });
                if let Some(d) = f.get("description") {
                    spec["description"] = d.clone();
                }
                json!({ "toolSpec": spec })
            })
            .collect();
        let mut config = json!({ "tools": specs });
        match body.get("tool_choice") {
            Some(Value::String(s)) if s == "required" => config["toolChoice"] = json!({"any": {}}),
            Some(Value::String(s)) if s == "auto" => config["toolChoice"] = json!({"auto": {}}),
            Some(Value::String(s)) if s == "none" => {
                return Err(unsupported("'tool_choice' none with tools"));
            }
            Some(Value::Object(o)) => {
                let name = o.get("function").and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null);
                config["toolChoice"] = json!({"tool": {"name": name}});
            }
            _ => {}
        }
        out.insert("toolConfig".into(), config);
    }
    Ok(Value::Object(out))
}

fn user_blocks(m: &Value) -> Result<Vec<Value>, AdapterError> {
    match m.get("content") {
        Some(Value::String(s)) => Ok(vec![json!({ "text": s })]),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => Ok(json!({ "text": p.get("text").cloned().unwrap_or(Value::Null) })),
                Some("image_url") => {
                    let url = p.get("image_url").and_then(|i| i.get("url")).and_then(Value::as_str).unwrap_or_default();
                    let (format, data) =
                        data_url(url).ok_or_else(|| unsupported("An image that is not a data: URL"))?;
                    Ok(json!({ "image": { "format": format, "source": { "bytes": data } } }))
                }
                _ => Err(unsupported("This content part type")),
            })
            .collect(),
        _ => Ok(Vec::new()),
    }
}

/// `data:image/png;base64,XXXX` → (`png`, `XXXX`).
fn data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:image/")?;
    let (format, data) = rest.split_once(";base64,")?;
    Some((format, data))
}

fn assistant_blocks(m: &Value) -> Result<Vec<Value>, AdapterError> {
    let mut blocks = Vec::new();
    let text = message_text(m);
    if !text.is_empty() {
        blocks.push(json!({ "text": text }));
    }
    for call in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let f = call.get("function").cloned().unwrap_or(Value::Null);
        let args = f.get("arguments").and_then(Value::as_str).unwrap_or("{}");
        let input: Value = serde_json::from_str(args)
            .map_err(|_| AdapterError::Unsupported("A tool call's 'arguments' is not valid JSON.".into()))?;
        blocks.push(json!({ "toolUse": { "toolUseId": call.get("id"), "name": f.get("name"), "input": input } }));
    }
    Ok(blocks)
}

/// An OpenAI chat completion from a Converse answer.
pub fn from_converse(body: &[u8], id: &str, model: &str, created: i64) -> Result<Completion, UpstreamError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| UpstreamError::bad_response(format!("not a Converse answer: {e}")))?;
    let content = v
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .ok_or_else(|| UpstreamError::bad_response("a Converse answer without output.message.content"))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        if let Some(t) = block.get("text").and_then(Value::as_str) {
            text.push_str(t);
        } else if let Some(tu) = block.get("toolUse") {
            let args = tu.get("input").map(Value::to_string).unwrap_or_else(|| "{}".into());
            tool_calls.push(json!({
                "id": tu.get("toolUseId"), "type": "function",
                "function": { "name": tu.get("name"), "arguments": args }
            }));
        }
    }
    let finish = match v.get("stopReason").and_then(Value::as_str) {
        Some("max_tokens") => "length",
        Some("tool_use") => "tool_calls",
        Some("guardrail_intervened" | "content_filtered") => "content_filter",
        _ => "stop",
    };
    let u = v.get("usage").cloned().unwrap_or(Value::Null);
    let n = |k: &str| u.get(k).and_then(Value::as_u64).and_then(|x| u32::try_from(x).ok()).unwrap_or(0);
    let (cached, written) = (n("cacheReadInputTokens"), n("cacheWriteInputTokens"));
    let usage = TokenUsage {
        prompt_tokens: n("inputTokens").saturating_add(cached).saturating_add(written),
        completion_tokens: n("outputTokens"),
        cached_tokens: cached,
        cache_creation_tokens: written,
        ..Default::default()
    };
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(text) },
        "refusal": null,
    });
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let out = json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish }],
        "usage": {
            "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total(),
            "prompt_tokens_details": { "cached_tokens": cached },
            "completion_tokens_details": { "reasoning_tokens": 0 }
        }
    });
    let body = serde_json::to_vec(&out).map_err(|e| UpstreamError::bad_response(e.to_string()))?;
    Ok(Completion { body: body.into(), usage: Some(usage) })
}

fn map_error(status: u16, body: &[u8]) -> UpstreamError {
    let detail = format!("HTTP {status}: {}", log_snippet(body));
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("message").or_else(|| v.get("Message")).and_then(Value::as_str).map(str::to_string));
    let failure = match status {
        400 | 413 | 422 => {
            let msg = message.unwrap_or_else(|| format!("The upstream rejected the request with HTTP {status}."));
            let code = (msg.contains("too long") || msg.contains("context")).then_some("context_length_exceeded");
            UpstreamFailure::Rejected {
                status,
                body: Box::new(ErrorBody::new(msg, "invalid_request_error", code, None)),
            }
        }
        429 => UpstreamFailure::RateLimited,
        s if s >= 500 => UpstreamFailure::Unavailable { status: Some(s) },
        _ => UpstreamFailure::Unavailable { status: Some(status) },
    };
    UpstreamError::new(failure, detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{Endpoint, ProviderOptions};

    fn req(v: Value) -> ChatRequest {
        ChatRequest::parse(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn translates_a_conversation_with_tools() {
        let r = req(json!({"model":"m","messages":[
            {"role":"system","content":"be brief"},
            {"role":"user","content":"weather?"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}}]},
            {"role":"tool","tool_call_id":"t1","content":"sunny"}],
            "tools":[{"type":"function","function":{"name":"w","parameters":{"type":"object"}}}],
            "tool_choice":"required","max_tokens":50,"temperature":0.5,"stop":"END"}));
        let c = to_converse(&r).unwrap();
        assert_eq!(
            c,
            json!({
                "system":[{"text":"be brief"}],
                "messages":[
                    {"role":"user","content":[{"text":"weather?"}]},
                    {"role":"assistant","content":[{"toolUse":{"toolUseId":"t1","name":"w","input":{"city":"Paris"}}}]},
                    {"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"text":"sunny"}]}}]}
                ],
                "inferenceConfig":{"maxTokens":50,"temperature":0.5,"stopSequences":["END"]},
                "toolConfig":{"tools":[{"toolSpec":{"name":"w","inputSchema":{"json":{"type":"object"}}}}],"toolChoice":{"any":{}}}
            })
        );
    }

    #[test]
    fn parses_answers_with_text_and_tools() {
        let body = br#"{"output":{"message":{"role":"assistant","content":[{"text":"Hi"},{"toolUse":{"toolUseId":"t9","name":"w","input":{"a":1}}}]}},"stopReason":"tool_use","usage":{"inputTokens":10,"outputTokens":4,"totalTokens":14,"cacheReadInputTokens":5}}"#;
        let c = from_converse(body, "chatcmpl-x", "m", 7).unwrap();
        let v: Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(v["choices"][0]["message"]["content"], "Hi");
        assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(v["usage"]["prompt_tokens"], 15);
        let u = c.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.cached_tokens, u.completion_tokens), (15, 5, 4));
        assert!(from_converse(b"{}", "i", "m", 1).is_err());
    }

    #[test]
    fn signs_requests_and_refuses_streams() {
        let r = req(json!({"model":"m","messages":[{"role":"user","content":"hi"}]}));
        let opts = ProviderOptions {
            region: Some("us-east-1".into()),
            host: "bedrock-runtime.us-east-1.amazonaws.com".into(),
            ..Default::default()
        };
        let call = Call {
            endpoint: Endpoint::ChatCompletions,
            request: &r,
            upstream_model: "anthropic.claude-3-haiku-20240307-v1:0",
            api_key: Some("AKIDEXAMPLE:wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            base_path: "",
            options: &opts,
            request_id: uuid::Uuid::nil(),
            created: 1,
        };
        let Exchange::Http(up) = BedrockAdapter.build(&call).unwrap() else { panic!() };
        assert_eq!(up.path, "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse");
        let auth = up.headers.iter().find(|(n, _)| n == "authorization").unwrap().1.to_str().unwrap().to_string();
        assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), "{auth}");
        assert!(auth.contains("/us-east-1/bedrock/aws4_request"));
        assert!(auth.contains("SignedHeaders=content-type;host;x-amz-date"), "{auth}");
        assert!(up.headers.iter().any(|(n, _)| n == "x-amz-date"));
        assert!(matches!(
            BedrockAdapter.build(&Call { api_key: Some("no-colon"), ..call }),
            Err(AdapterError::Config(_))
        ));
        let s = req(json!({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}));
        assert!(matches!(BedrockAdapter.build(&Call { request: &s, ..call }), Err(AdapterError::Unsupported(_))));
    }

    #[test]
    fn errors_map() {
        let e = map_error(400, br#"{"message":"Input is too long for requested model."}"#);
        match e.failure {
            UpstreamFailure::Rejected { status: 400, body } => {
                assert_eq!(body.error.code.as_deref(), Some("context_length_exceeded"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(map_error(429, b"").failure, UpstreamFailure::RateLimited);
        assert_eq!(map_error(503, b"").failure, UpstreamFailure::Unavailable { status: Some(503) });
        assert_eq!(map_error(403, b"").failure, UpstreamFailure::Unavailable { status: Some(403) });
    }
}
