//! `POST /v1/chat/completions` through the translating providers: Anthropic (`claude-test`),
//! Gemini (`gemini-test`), Azure OpenAI (`azure-test`) and Bedrock Converse (`bedrock-test`),
//! each served by the mock upstream in that provider's own dialect. Plain answers in OpenAI's
//! shape with the right headers, usage, audit row and exact cost; streams that carry the same
//! answer and cost; tool calls there and back, plain and streamed; the alias; what a provider
//! cannot do; and how each dialect's faults reach the client.
//!
//! The translating adapters rewrite the request body, so the mock's per-request `"mock"` knobs
//! do not reach it: fault tests put their knobs in a provider's base URL (`/k/<knobs>/`) and so
//! run stacks of their own. The rest share the test binary's stack, each test with its own
//! organization.

use gw_tests::{
    db, dec, delta_text, expect_openai_error, header, per_million, request_id, sse_data, user_message, Stack,
    StackOptions, GW_HEADERS,
};
use rust_decimal::Decimal;
use serde_json::{json, Value};

/// A model of the shared stack's config and what serves it.
struct Served {
    model: &'static str,
    provider: &'static str,
    upstream_model: &'static str,
    /// USD per million prompt and completion tokens (`[pricing]` of the shared config).
    input_price: &'static str,
    output_price: &'static str,
}

const CLAUDE: Served = Served {
    model: "claude-test",
    provider: "anthropic",
    upstream_model: "claude-sonnet-4-5",
    input_price: "3",
    output_price: "15",
};

const GEMINI: Served = Served {
    model: "gemini-test",
    provider: "gemini",
    upstream_model: "gemini-2.5-flash",
    input_price: "0.3",
    output_price: "2.5",
};

const AZURE: Served = Served {
    model: "azure-test",
    provider: "azure",
    upstream_model: "my-gpt4o",
    input_price: "2.5",
    output_price: "10",
};

const BEDROCK: Served = Served {
    model: "bedrock-test",
    provider: "bedrock",
    upstream_model: "anthropic.claude-3-haiku-20240307-v1:0",
    input_price: "0.25",
    output_price: "1.25",
};

/// The user message the mock answers with a call of the first declared tool.
const WEATHER: &str = "What's the weather in Paris?";

/// What the client's tool answers.
const TOOL_RESULT: &str = "sunny, 21C";

/// Exact cost of `prompt` and `completion` tokens at per-million-token prices.
fn cost(prompt: u64, completion: u64, input_price: &str, output_price: &str) -> Decimal {
    per_million(prompt, input_price) + per_million(completion, output_price)
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

fn tools() -> Value {
    json!([{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        }
    }])
}

/// A stream's chunks (every `data:` payload before the final `[DONE]`, which must be there).
fn chunks_of(text: &str) -> Vec<Value> {
    let data = sse_data(text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "the stream did not end with [DONE]: {text}");
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("chunk is not JSON ({e}): {d}")))
        .collect()
}

/// The finish reasons a stream's chunks carry.
fn finish_reasons(chunks: &[Value]) -> Vec<String> {
    chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str().map(str::to_string)).collect()
}

/// The exact cost a stream reports in its closing `: x-gw-cost-usd=...` comment (the header went
/// out before the usage was known).
fn stream_cost(text: &str) -> Decimal {
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(": x-gw-cost-usd="))
        .unwrap_or_else(|| panic!("no cost comment in the stream: {text}"));
    dec(value.trim())
}

/// A streamed tool call, assembled from its deltas.
#[derive(Debug, Default, Clone)]
struct StreamedCall {
    id: String,
    kind: String,
    name: String,
    arguments: String,
}

/// The tool calls of a stream's deltas, by their `index`, assembled as OpenAI's SDKs do: text
/// fields concatenate, `type` is replaced.
fn streamed_tool_calls(chunks: &[Value]) -> Vec<StreamedCall> {
    let mut calls: Vec<StreamedCall> = Vec::new();
    for chunk in chunks {
        for delta in chunk["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let at = usize::try_from(delta["index"].as_u64().expect("a tool call delta without an index")).unwrap();
            if calls.len() <= at {
                calls.resize(at + 1, StreamedCall::default());
            }
            let call = &mut calls[at];
            call.id.push_str(delta["id"].as_str().unwrap_or_default());
            if let Some(kind) = delta["type"].as_str() {
                call.kind = kind.to_string();
            }
            call.name.push_str(delta["function"]["name"].as_str().unwrap_or_default());
            call.arguments.push_str(delta["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    calls
}

// ---- plain answers ----

/// A plain completion from `m`: OpenAI's shape, the provider's headers, the mock's usage
/// translated faithfully, and the cost (header and audit row) exactly tokens × prices.
async fn plain_completion(m: &Served) {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let prompt = format!("plain answer from {} please", m.model);
    let resp = stack.chat(&key, json!({"model": m.model, "messages": user_message(&prompt)})).await;
    assert_eq!(resp.status(), 200);
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h}");
    }
    assert!(header(&resp, "content-type").starts_with("application/json"));
    assert_eq!(header(&resp, "x-gw-provider"), m.provider);
    assert_eq!(header(&resp, "x-gw-model"), m.upstream_model);
    let id = request_id(&resp);
    let header_cost = dec(header(&resp, "x-gw-cost-usd"));
    let body: Value = resp.json().await.unwrap();

    assert_eq!(body["object"], "chat.completion", "{body}");
    assert!(body["id"].as_str().is_some_and(|s| !s.is_empty()), "{body}");
    assert!(body["created"].as_i64().is_some_and(|t| t > 0), "{body}");
    assert!(body["model"].as_str().is_some_and(|s| !s.is_empty()), "{body}");
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 1, "{body}");
    assert_eq!(choices[0]["index"], 0);
    assert_eq!(choices[0]["finish_reason"], "stop");
    let message = &choices[0]["message"];
    assert_eq!(message["role"], "assistant");
    let content = message["content"].as_str().unwrap_or_else(|| panic!("no text content: {body}"));
    // The mock echoes the last user message: the prompt got through the translation.
    assert!(content.starts_with("Mock upstream reply") && content.contains(&prompt), "{content}");

    // The mock counts words + 3 per message in, the reply's words out, in every dialect.
    let usage = &body["usage"];
    let (p, c) = (usage["prompt_tokens"].as_u64().unwrap(), usage["completion_tokens"].as_u64().unwrap());
    assert_eq!(p, words(&prompt) + 3, "{usage}");
    assert_eq!(c, words(content), "{usage}");
    assert_eq!(usage["total_tokens"].as_u64(), Some(p + c), "{usage}");

    let expected = cost(p, c, m.input_price, m.output_price);
    assert_eq!(header_cost, expected.normalize());
    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.status_code, 200);
    assert_eq!(row.endpoint, "/v1/chat/completions");
    assert!(!row.stream);
    assert_eq!(row.model.as_deref(), Some(m.model));
    assert_eq!(row.provider.as_deref(), Some(m.provider));
    assert_eq!(row.upstream_model.as_deref(), Some(m.upstream_model));
    assert_eq!((row.prompt_tokens as u64, row.completion_tokens as u64), (p, c));
    assert_eq!((row.cached_tokens, row.reasoning_tokens, row.cache_creation_tokens), (0, 0, 0));
    assert_eq!(row.cost_usd, expected);
    let attempts = row.routing.as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{}", row.routing);
    assert_eq!(attempts[0]["provider"], m.provider);
    assert_eq!(attempts[0]["model"], m.upstream_model);
    assert_eq!(attempts[0]["outcome"], "ok");
    assert_eq!(attempts[0]["status"], 200);
}

#[tokio::test]
async fn claude_plain_completion_in_openai_shape_with_exact_cost() {
    plain_completion(&CLAUDE).await;
}

#[tokio::test]
async fn gemini_plain_completion_in_openai_shape_with_exact_cost() {
    plain_completion(&GEMINI).await;
}

#[tokio::test]
async fn azure_plain_completion_in_openai_shape_with_exact_cost() {
    plain_completion(&AZURE).await;
}

#[tokio::test]
async fn bedrock_plain_completion_in_openai_shape_with_exact_cost() {
    plain_completion(&BEDROCK).await;
}

#[tokio::test]
async fn claude_alias_reaches_the_anthropic_deployment() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "claude", "messages": user_message("by alias")})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-provider"), "anthropic");
    assert_eq!(header(&resp, "x-gw-model"), "claude-sonnet-4-5");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert!(body["choices"][0]["message"]["content"].as_str().unwrap().contains("by alias"), "{body}");
}

// ---- streams ----

/// The same prompt to `m` plain, streamed without and with usage: the stream concatenates to the
/// plain answer, shows usage only when asked (last, with no choices) and costs the same.
async fn stream_matches_plain(m: &Served) {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let prompt = format!("stream the {} answer please", m.model);

    let plain = stack.chat(&key, json!({"model": m.model, "messages": user_message(&prompt)})).await;
    assert_eq!(plain.status(), 200);
    let plain_cost = dec(header(&plain, "x-gw-cost-usd"));
    let plain: Value = plain.json().await.unwrap();
    let plain_content = plain["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert!(plain_cost > Decimal::ZERO);

    // Without include_usage: no usage anywhere, one choice per chunk.
    let resp = stack.chat(&key, json!({"model": m.model, "messages": user_message(&prompt), "stream": true})).await;
    assert_eq!(resp.status(), 200);
    assert!(header(&resp, "content-type").starts_with("text/event-stream"));
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h}");
    }
    assert_eq!(header(&resp, "x-gw-provider"), m.provider);
    assert_eq!(header(&resp, "x-gw-model"), m.upstream_model);
    assert!(header(&resp, "x-gw-ttft-ms").parse::<u64>().is_ok());
    let text = resp.text().await.unwrap();
    let chunks = chunks_of(&text);
    assert!(!chunks.is_empty());
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk", "{c}");
        assert!(c.get("usage").is_none_or(Value::is_null), "usage leaked: {c}");
        assert_eq!(c["choices"].as_array().map(Vec::len), Some(1), "{c}");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant", "{}", chunks[0]);
    assert_eq!(delta_text(&chunks), plain_content);
    assert_eq!(finish_reasons(&chunks), ["stop"]);
    assert_eq!(stream_cost(&text), plain_cost);

    // With include_usage: the last chunk carries the usage and no choices; the audit row agrees.
    let resp = stack
        .chat(
            &key,
            json!({"model": m.model, "messages": user_message(&prompt), "stream": true,
                   "stream_options": {"include_usage": true}}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let id = request_id(&resp);
    let text = resp.text().await.unwrap();
    let chunks = chunks_of(&text);
    let (last, rest) = chunks.split_last().unwrap();
    assert_eq!(last["choices"], json!([]), "{last}");
    assert_eq!(last["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"], "{last}");
    assert_eq!(last["usage"]["completion_tokens"], plain["usage"]["completion_tokens"], "{last}");
    assert_eq!(last["usage"]["total_tokens"], plain["usage"]["total_tokens"], "{last}");
    assert!(rest.iter().all(|c| c.get("usage").is_none_or(Value::is_null)), "usage before the last chunk");
    assert_eq!(delta_text(rest), plain_content);
    assert_eq!(stream_cost(&text), plain_cost);

    let row = db::audit_row(session.org_id, id).await;
    assert!(row.stream);
    assert_eq!(row.provider.as_deref(), Some(m.provider));
    assert_eq!(row.total_tokens as u64, plain["usage"]["total_tokens"].as_u64().unwrap());
    assert_eq!(row.cost_usd, plain_cost);
}

#[tokio::test]
async fn claude_stream_matches_the_plain_answer_and_cost() {
    stream_matches_plain(&CLAUDE).await;
}

#[tokio::test]
async fn gemini_stream_matches_the_plain_answer_and_cost() {
    stream_matches_plain(&GEMINI).await;
}

#[tokio::test]
async fn azure_stream_matches_the_plain_answer_and_cost() {
    stream_matches_plain(&AZURE).await;
}

#[tokio::test]
async fn bedrock_stream_is_400_unsupported_parameter() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp =
        stack.chat(&key, json!({"model": "bedrock-test", "messages": user_message("stream me"), "stream": true})).await;
    let b = expect_openai_error(resp, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "unsupported_parameter",
        "message": "Streaming is not available for this model's Bedrock deployment; set 'stream' to false.",
        "param": null,
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "unsupported_parameter", "{b}");
    assert_eq!(b["error"]["type"], "invalid_request_error", "{b}");
}

// ---- tools ----

/// A tool call and its result, there and back: the model calls `get_weather` with
/// `{"city": "Paris"}`, the client answers, the model's reply quotes the answer.
async fn tool_round_trip(model: &str) {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": model, "messages": user_message(WEATHER), "tools": tools()})).await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{body}");
    assert_eq!(choice["message"]["role"], "assistant");
    let calls = choice["message"]["tool_calls"].as_array().unwrap_or_else(|| panic!("no tool calls: {body}"));
    assert_eq!(calls.len(), 1, "{body}");
    let call = &calls[0];
    assert!(call["id"].as_str().is_some_and(|s| !s.is_empty()), "{call}");
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Paris"}));
    assert!(body["usage"]["completion_tokens"].as_u64().is_some_and(|n| n > 0), "{body}");

    let messages = json!([
        {"role": "user", "content": WEATHER},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT},
    ]);
    let resp = stack.chat(&key, json!({"model": model, "messages": messages, "tools": tools()})).await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "stop", "{body}");
    assert!(choice["message"]["tool_calls"].as_array().is_none_or(Vec::is_empty), "{body}");
    let content = choice["message"]["content"].as_str().unwrap_or_else(|| panic!("no text answer: {body}"));
    assert!(content.contains(TOOL_RESULT), "{content}");
}

#[tokio::test]
async fn claude_tool_call_round_trip() {
    tool_round_trip(CLAUDE.model).await;
}

#[tokio::test]
async fn gemini_tool_call_round_trip() {
    tool_round_trip(GEMINI.model).await;
}

/// The same tool call streamed: its deltas assemble into one call of `get_weather` with
/// `{"city": "Paris"}`, and the stream finishes for `tool_calls`.
async fn streamed_tool_call(model: &str) {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack
        .chat(&key, json!({"model": model, "messages": user_message(WEATHER), "tools": tools(), "stream": true}))
        .await;
    assert_eq!(resp.status(), 200);
    assert!(header(&resp, "content-type").starts_with("text/event-stream"));
    let chunks = chunks_of(&resp.text().await.unwrap());
    let calls = streamed_tool_calls(&chunks);
    assert_eq!(calls.len(), 1, "{chunks:?}");
    let call = &calls[0];
    assert!(!call.id.is_empty(), "{call:?}");
    assert_eq!(call.kind, "function");
    assert_eq!(call.name, "get_weather");
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|e| panic!("{e}: {call:?}"));
    assert_eq!(arguments, json!({"city": "Paris"}));
    assert_eq!(finish_reasons(&chunks), ["tool_calls"]);
    assert_eq!(delta_text(&chunks), "", "a tool call carries no text");
}

#[tokio::test]
async fn claude_tool_call_streamed() {
    streamed_tool_call(CLAUDE.model).await;
}

#[tokio::test]
async fn gemini_tool_call_streamed() {
    streamed_tool_call(GEMINI.model).await;
}

// ---- private stacks: knobs in the provider's base URL ----

/// A stack whose config adds a provider of `kind` at the mock behind `/k/{knobs}/{version}` and
/// a single-deployment model `model` on it, for `upstream_model` (priced in the shared config).
async fn stack_with(kind: &str, knobs: &str, version: &str, model: &str, upstream_model: &str) -> Stack {
    let extra = format!(
        "[[providers]]\nname = \"{model}-provider\"\nkind = \"{kind}\"\nbase_url = \"{{mock}}/k/{knobs}/{version}\"\n\
         api_key_env = \"GW_TEST_UPSTREAM_KEY\"\n\
         [[models]]\nname = \"{model}\"\ndeployments = [{{ provider = \"{model}-provider\", model = \"{upstream_model}\" }}]\n"
    );
    Stack::start_with(StackOptions { extra_config: extra, ..Default::default() }).await
}

#[tokio::test]
async fn anthropic_cached_tokens_are_counted_and_priced_as_cached() {
    let stack = stack_with("anthropic", "cached_tokens=5", "v1", "claude-cached", "claude-sonnet-4-5").await;
    let (session, key, _) = stack.org_with_key().await;
    let prompt = "cached prompt tokens cost less";
    let resp = stack.chat(&key, json!({"model": "claude-cached", "messages": user_message(prompt)})).await;
    assert_eq!(resp.status(), 200);
    let id = request_id(&resp);
    let header_cost = dec(header(&resp, "x-gw-cost-usd"));
    let body: Value = resp.json().await.unwrap();
    let usage = &body["usage"];
    // Anthropic reports cache reads apart from input_tokens; gw's prompt tokens include them.
    let p = words(prompt) + 3;
    assert_eq!(usage["prompt_tokens"].as_u64(), Some(p), "{usage}");
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 5, "{usage}");
    let c = usage["completion_tokens"].as_u64().unwrap();
    let expected = (Decimal::from(p - 5) * dec("3") + Decimal::from(5) * dec("0.3") + Decimal::from(c) * dec("15"))
        / Decimal::from(1_000_000);
    assert_eq!(header_cost, expected.normalize());

    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.provider.as_deref(), Some("claude-cached-provider"));
    assert_eq!(row.prompt_tokens as u64, p);
    assert_eq!(row.cached_tokens, 5);
    assert_eq!(row.cache_creation_tokens, 0);
    assert_eq!(row.cost_usd, expected);

    // A stream of the same prompt reports the same cached tokens and costs the same.
    let resp = stack
        .chat(
            &key,
            json!({"model": "claude-cached", "messages": user_message(prompt), "stream": true,
                   "stream_options": {"include_usage": true}}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let id = request_id(&resp);
    let text = resp.text().await.unwrap();
    let chunks = chunks_of(&text);
    let last = chunks.last().unwrap();
    assert_eq!(last["usage"]["prompt_tokens_details"]["cached_tokens"], 5, "{last}");
    assert_eq!(stream_cost(&text), expected);
    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.cached_tokens, 5);
    assert_eq!(row.cost_usd, expected);
}

#[tokio::test]
async fn anthropic_overloaded_529_is_502_api_error() {
    let stack = stack_with("anthropic", "status=529", "v1", "claude-overloaded", "claude-sonnet-4-5").await;
    let (session, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "claude-overloaded", "messages": user_message("x")})).await;
    let id = request_id(&resp);
    let b = expect_openai_error(resp, 502).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "upstream_unavailable",
        "message": "Upstream provider 'claude-overloaded-provider' returned HTTP 529.",
        "param": null,
        "type": "api_error"
      }
    }
    "#);
    assert_eq!(b["error"]["type"], "api_error", "{b}");
    assert_eq!(b["error"]["code"], "upstream_unavailable", "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("529"), "{b}");
    // The upstream's own words stay in the log.
    assert!(!b["error"]["message"].as_str().unwrap().contains("mock upstream failure"), "{b}");
    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.status_code, 502);
    let attempts = row.routing.as_array().unwrap();
    assert!(!attempts.is_empty(), "{}", row.routing);
    assert!(
        attempts.iter().all(|a| a["status"] == 529 && a["provider"] == "claude-overloaded-provider"),
        "{}",
        row.routing
    );
}

#[tokio::test]
async fn gemini_429_is_429_rate_limit_error() {
    let stack = stack_with("gemini", "status=429", "v1beta", "gemini-limited", "gemini-2.5-flash").await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "gemini-limited", "messages": user_message("x")})).await;
    let b = expect_openai_error(resp, 429).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "upstream_rate_limited",
        "message": "Upstream provider 'gemini-limited-provider' is rate limiting requests; retry later.",
        "param": null,
        "type": "rate_limit_error"
      }
    }
    "#);
    assert_eq!(b["error"]["type"], "rate_limit_error", "{b}");
    assert_eq!(b["error"]["code"], "upstream_rate_limited", "{b}");
}

#[tokio::test]
async fn anthropic_invalid_request_passes_its_message_through() {
    let stack = stack_with("anthropic", "status=400", "v1", "claude-refusing", "claude-sonnet-4-5").await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack.chat(&key, json!({"model": "claude-refusing", "messages": user_message("x")})).await;
    let b = expect_openai_error(resp, 400).await;
    assert_eq!(b["error"]["type"], "invalid_request_error", "{b}");
    // The mock's Anthropic error body says this; a 400 is about the client's request, so gw
    // hands the upstream's message on.
    assert_eq!(b["error"]["message"], "mock upstream failure (400)", "{b}");
}
