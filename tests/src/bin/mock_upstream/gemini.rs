//! Gemini: `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent` (SSE with
//! `?alt=sse`, else one JSON array of the fragments), `:embedContent` and `:batchEmbedContents`.

use actix_web::HttpResponse;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::convo::{dimensions, embedding, pieces, strings, Answer, Conversation, ToolChoice};
use crate::{json_reply, status_code, stream_reply, Call, Knobs, StreamPlan};

#[derive(Clone, Copy)]
pub enum Method {
    Generate,
    StreamGenerate,
    Embed,
    BatchEmbed,
}

impl Method {
    pub fn parse(name: &str) -> Option<Method> {
        match name {
            "generateContent" => Some(Method::Generate),
            "streamGenerateContent" => Some(Method::StreamGenerate),
            "embedContent" => Some(Method::Embed),
            "batchEmbedContents" => Some(Method::BatchEmbed),
            _ => None,
        }
    }
}

fn error_body(status: u16, message: &str) -> Value {
    let name = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        500 => "INTERNAL",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNKNOWN",
    };
    json!({"error": {"code": status, "message": message, "status": name}})
}

/// An error in Gemini's shape.
pub fn error(status: u16, message: &str) -> HttpResponse {
    HttpResponse::build(status_code(status)).json(error_body(status, message))
}

pub fn handle(call: Call, model: &str, method: Method) -> HttpResponse {
    match method {
        Method::Generate => generate(call, model, false),
        Method::StreamGenerate => generate(call, model, true),
        Method::Embed | Method::BatchEmbed => embed(call, method),
    }
}

/// A `functionResponse.response` as text: a string, its `content`/`result`/`output` string,
/// else its JSON.
fn response_text(r: &Value) -> String {
    if let Some(s) = r.as_str() {
        return s.to_string();
    }
    ["content", "result", "output"]
        .iter()
        .find_map(|key| r.get(*key).and_then(Value::as_str))
        .map_or_else(|| r.to_string(), str::to_string)
}

/// A `Content`'s text (its text parts and function responses, one per line) and the last
/// function response in it.
fn content_text(content: &Value) -> (String, Option<String>) {
    if let Some(s) = content.as_str() {
        return (s.to_string(), None);
    }
    let mut texts = Vec::new();
    let mut result = None;
    for part in content.get("parts").and_then(Value::as_array).into_iter().flatten() {
        if let Some(t) = part.get("text").and_then(Value::as_str) {
            texts.push(t.to_string());
        } else if let Some(r) = part.get("functionResponse") {
            let text = response_text(r.get("response").unwrap_or(&Value::Null));
            texts.push(text.clone());
            result = Some(text);
        }
    }
    (texts.join("\n"), result)
}

fn conversation(body: &Value) -> Result<Conversation, String> {
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
        .ok_or("* GenerateContentRequest.contents: contents is not specified")?;
    let mut conv = Conversation::default();
    if let Some(system) = body.get("systemInstruction") {
        let (text, _) = content_text(system);
        if !text.is_empty() {
            conv.push("system", text, None);
        }
    }
    for c in contents {
        let role = if c.get("role").and_then(Value::as_str) == Some("model") { "assistant" } else { "user" };
        let (text, result) = content_text(c);
        conv.push(role, text, result);
    }
    conv.tools = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("functionDeclarations").or_else(|| t.get("function_declarations")))
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|f| f.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    let calling = body.pointer("/toolConfig/functionCallingConfig");
    conv.choice = match calling.and_then(|c| c.get("mode")).and_then(Value::as_str) {
        Some("NONE") => ToolChoice::Off,
        Some("ANY") => match strings(calling.and_then(|c| c.get("allowedFunctionNames"))).into_iter().next() {
            Some(name) => ToolChoice::Named(name),
            None => ToolChoice::Any,
        },
        _ => ToolChoice::Auto,
    };
    conv.stop = strings(body.pointer("/generationConfig/stopSequences"));
    Ok(conv)
}

fn usage(k: &Knobs, prompt: u64, completion: u64) -> Value {
    let mut u = json!({"promptTokenCount": prompt, "candidatesTokenCount": completion,
                       "totalTokenCount": prompt + completion + k.reasoning_tokens});
    let cached = k.cached_tokens.min(prompt);
    if cached > 0 {
        u["cachedContentTokenCount"] = json!(cached);
    }
    if k.reasoning_tokens > 0 {
        u["thoughtsTokenCount"] = json!(k.reasoning_tokens);
    }
    u
}

fn generate(call: Call, model: &str, streamed: bool) -> HttpResponse {
    let Call { k, body, query, .. } = call;
    let out = match conversation(&body) {
        Ok(conv) => conv.answer(),
        Err(e) => return error(400, &e),
    };
    let metadata = (!k.no_usage).then(|| usage(&k, out.prompt_tokens, out.completion_tokens));
    let fragment = |parts: Value, last: bool| {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if last {
            candidate["finishReason"] = json!("STOP");
        }
        let mut f = json!({"candidates": [candidate], "modelVersion": model, "responseId": out.digest});
        if let Some(u) = metadata.as_ref().filter(|_| last) {
            f["usageMetadata"] = u.clone();
        }
        f
    };
    let fragments: Vec<Value> = match &out.answer {
        Answer::Text { text, .. } if streamed => {
            let parts = pieces(text, 3);
            let n = parts.len();
            parts.into_iter().enumerate().map(|(i, p)| fragment(json!([{"text": p}]), i + 1 == n)).collect()
        }
        Answer::Text { text, .. } => vec![fragment(json!([{"text": text}]), true)],
        Answer::Tool { name, input } => vec![fragment(json!([{"functionCall": {"name": name, "args": input}}]), true)],
    };
    if !streamed {
        let resp = fragments.into_iter().next().unwrap_or_default();
        return json_reply(&resp, &k);
    }
    if query.get("alt").map(String::as_str) != Some("sse") {
        return json_reply(&Value::Array(fragments), &k);
    }
    let events = fragments.iter().map(|f| Bytes::from(format!("data: {f}\n\n"))).collect();
    let plan = StreamPlan {
        events,
        first: 1,
        partial: 2,
        error: Bytes::from(format!("data: {}\n\n", error_body(500, "mock upstream failed mid-stream"))),
        bad_chunk: Bytes::from_static(b"data: {not json\n\n"),
    };
    stream_reply(plan, &k)
}

fn embed(call: Call, method: Method) -> HttpResponse {
    let Call { k, body, .. } = call;
    let vector = |request: &Value| {
        let text = request.get("content").map(|c| content_text(c).0).unwrap_or_default();
        json!({"values": embedding(&text, dimensions(request.get("outputDimensionality")))})
    };
    let resp = match method {
        Method::BatchEmbed => {
            let Some(requests) = body.get("requests").and_then(Value::as_array) else {
                return error(400, "* BatchEmbedContentsRequest.requests: requests is not specified");
            };
            json!({"embeddings": requests.iter().map(vector).collect::<Vec<_>>()})
        }
        _ => {
            if body.get("content").is_none() {
                return error(400, "* EmbedContentRequest.content: content is not specified");
            }
            json!({"embedding": vector(&body)})
        }
    };
    json_reply(&resp, &k)
}
