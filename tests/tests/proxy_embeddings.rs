//! `POST /v1/embeddings`: the built-in mock's vectors as floats and as base64, requested
//! dimensions and several inputs; the OpenAI-compatible, Gemini and Azure deployments through the
//! mock upstream; the audit row and its exact cost; then every way a request can fail, one test
//! each.
//!
//! All on the test binary's shared stack, each test with its own organization.

use gw_tests::{db, dec, expect_openai_error, header, per_million, request_id, Stack, GW_HEADERS};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;

/// Dimensions of the built-in mock's vectors when the request names none.
const MOCK_DIMS: usize = 256;

fn embeddings_url(stack: &Stack) -> String {
    format!("{}/v1/embeddings", stack.proxy)
}

async fn embed(stack: &Stack, key: &str, body: Value) -> reqwest::Response {
    stack.http.post(embeddings_url(stack)).bearer_auth(key).json(&body).send().await.unwrap()
}

/// Exact cost of `tokens` prompt tokens at `price` USD per million.
fn cost(tokens: u64, price: &str) -> Decimal {
    per_million(tokens, price)
}

/// Standard base64 (with padding) decoded; panics on anything else.
fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    assert!(text.as_bytes().chunks_exact(4).remainder().is_empty(), "base64 without padding: {text}");
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.trim_end_matches('=').bytes() {
        let v = ALPHABET.iter().position(|&a| a == c).unwrap_or_else(|| panic!("not base64: {:?}", c as char));
        acc = (acc << 6) | u32::try_from(v).unwrap();
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from(acc >> bits).unwrap());
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// A float embedding as the bit patterns of its `f32`s (the JSON numbers are `f32` values).
fn float_bits(embedding: &Value) -> Vec<u32> {
    let values = embedding.as_array().unwrap_or_else(|| panic!("not a float array: {embedding}"));
    values.iter().map(|v| (v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) as f32).to_bits()).collect()
}

/// A base64 embedding as the bit patterns of its little-endian `f32`s.
fn base64_bits(embedding: &Value) -> Vec<u32> {
    let bytes = base64_decode(embedding.as_str().unwrap_or_else(|| panic!("not a base64 string: {embedding}")));
    let words = bytes.chunks_exact(4);
    assert!(words.remainder().is_empty(), "{} bytes are not whole f32s", bytes.len());
    words.map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).to_bits()).collect()
}

/// Asserts OpenAI's `CreateEmbeddingResponse` shape with `n` items of `dims` floats each, in input
/// order, and usage.
fn check_float_list(body: &Value, n: usize, dims: usize) {
    assert_eq!(body["object"], "list", "{body}");
    assert!(body["model"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    let data = body["data"].as_array().unwrap_or_else(|| panic!("no data: {body}"));
    assert_eq!(data.len(), n, "{body}");
    for (i, item) in data.iter().enumerate() {
        assert_eq!(item["object"], "embedding", "{item}");
        assert_eq!(item["index"], i, "{item}");
        let values = item["embedding"].as_array().unwrap_or_else(|| panic!("not a float array: {item}"));
        assert_eq!(values.len(), dims, "{item}");
        assert!(values.iter().all(Value::is_number), "{item}");
    }
    let usage = &body["usage"];
    assert!(usage["prompt_tokens"].as_u64().is_some_and(|t| t > 0), "{body}");
    assert_eq!(usage["total_tokens"], usage["prompt_tokens"], "{body}");
}

// ---- the built-in mock ----

#[tokio::test]
async fn mock_embedding_floats() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = embed(&stack, &key, json!({"model": "mock-embedding", "input": "the quick brown fox"})).await;
    assert_eq!(resp.status(), 200);
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h}");
    }
    assert!(header(&resp, "content-type").starts_with("application/json"));
    assert_eq!(header(&resp, "x-gw-provider"), "mock");
    assert_eq!(header(&resp, "x-gw-model"), "text-embedding-3-small");
    let body: Value = resp.json().await.unwrap();
    check_float_list(&body, 1, MOCK_DIMS);
    // The built-in mock counts words.
    assert_eq!(body["usage"]["prompt_tokens"], 4, "{body}");
    // Deterministic unit vectors.
    let norm: f64 = body["data"][0]["embedding"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap().powi(2)).sum();
    assert!((norm - 1.0).abs() < 1e-3, "norm {norm}");
}

#[tokio::test]
async fn mock_embedding_base64_is_the_float_answer_as_little_endian_f32() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let input = "encode me as base64 please";
    let floats =
        embed(&stack, &key, json!({"model": "mock-embedding", "input": input, "encoding_format": "float"})).await;
    assert_eq!(floats.status(), 200);
    let floats: Value = floats.json().await.unwrap();
    let encoded =
        embed(&stack, &key, json!({"model": "mock-embedding", "input": input, "encoding_format": "base64"})).await;
    assert_eq!(encoded.status(), 200);
    let encoded: Value = encoded.json().await.unwrap();

    assert_eq!(encoded["object"], "list");
    assert_eq!(encoded["data"][0]["object"], "embedding");
    assert_eq!(encoded["data"][0]["index"], 0);
    let from_base64 = base64_bits(&encoded["data"][0]["embedding"]);
    assert_eq!(from_base64.len(), MOCK_DIMS);
    assert_eq!(from_base64, float_bits(&floats["data"][0]["embedding"]));
    assert_eq!(encoded["usage"], floats["usage"]);
}

#[tokio::test]
async fn mock_embedding_honours_dimensions() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = embed(&stack, &key, json!({"model": "mock-embedding", "input": "short vector", "dimensions": 8})).await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    check_float_list(&body, 1, 8);
}

#[tokio::test]
async fn mock_embedding_of_several_inputs_keeps_their_order() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let inputs = ["one", "two words", "and three words"];
    let resp = embed(&stack, &key, json!({"model": "mock-embedding", "input": inputs})).await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    check_float_list(&body, inputs.len(), MOCK_DIMS);
    assert_eq!(body["usage"]["prompt_tokens"], 6, "{body}");
    // Each item is its own input's vector: the same as that input embedded alone.
    for (i, input) in inputs.iter().enumerate() {
        let alone = embed(&stack, &key, json!({"model": "mock-embedding", "input": input})).await;
        let alone: Value = alone.json().await.unwrap();
        assert_eq!(float_bits(&body["data"][i]["embedding"]), float_bits(&alone["data"][0]["embedding"]), "input {i}");
    }
    assert_ne!(body["data"][0]["embedding"], body["data"][1]["embedding"]);
}

#[tokio::test]
async fn embeddings_audit_row_has_endpoint_tokens_and_exact_cost() {
    let stack = Stack::shared().await;
    let (session, key, key_id) = stack.org_with_key().await;
    let resp =
        embed(&stack, &key, json!({"model": "mock-embedding", "input": ["audit these four words", "too"]})).await;
    assert_eq!(resp.status(), 200);
    let id = request_id(&resp);
    let header_cost = dec(header(&resp, "x-gw-cost-usd"));
    let body: Value = resp.json().await.unwrap();
    let tokens = body["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(tokens, 5);
    // text-embedding-3-small, the deployment's upstream model, costs 0.02 USD per million.
    let expected = cost(tokens, "0.02");
    assert_eq!(header_cost, expected.normalize());

    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.endpoint, "/v1/embeddings");
    assert_eq!(row.api_key_id, Some(Uuid::parse_str(&key_id).unwrap()));
    assert_eq!(row.status_code, 200);
    assert!(!row.stream);
    assert_eq!(row.model.as_deref(), Some("mock-embedding"));
    assert_eq!(row.provider.as_deref(), Some("mock"));
    assert_eq!(row.upstream_model.as_deref(), Some("text-embedding-3-small"));
    assert_eq!((row.prompt_tokens as u64, row.completion_tokens, row.total_tokens as u64), (tokens, 0, tokens));
    assert_eq!(row.cost_usd, expected);
    assert_eq!(row.routing.as_array().map(Vec::len), Some(1), "{}", row.routing);
    assert_eq!(row.routing[0]["outcome"], "ok");
}

// ---- through the mock upstream ----

#[tokio::test]
async fn openai_compatible_embedding_through_the_upstream() {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let resp = embed(
        &stack,
        &key,
        json!({"model": "text-embedding-3-small", "input": ["first upstream input", "second"], "dimensions": 16}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-provider"), "upstream");
    assert_eq!(header(&resp, "x-gw-model"), "text-embedding-3-small");
    let id = request_id(&resp);
    let body: Value = resp.json().await.unwrap();
    // The mock upstream makes as many dimensions as asked: gw passed the parameter on.
    check_float_list(&body, 2, 16);
    let tokens = body["usage"]["prompt_tokens"].as_u64().unwrap();
    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.endpoint, "/v1/embeddings");
    assert_eq!(row.provider.as_deref(), Some("upstream"));
    assert_eq!(row.prompt_tokens as u64, tokens);
    assert_eq!(row.cost_usd, cost(tokens, "0.02"));
}

#[tokio::test]
async fn gemini_embedding_in_openai_shape() {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let inputs = ["hello gemini", "second input here"];
    let resp = embed(&stack, &key, json!({"model": "gemini-embedding", "input": inputs, "dimensions": 12})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-provider"), "gemini");
    assert_eq!(header(&resp, "x-gw-model"), "gemini-embedding-001");
    let id = request_id(&resp);
    let header_cost = dec(header(&resp, "x-gw-cost-usd"));
    let body: Value = resp.json().await.unwrap();
    // `dimensions` became Gemini's outputDimensionality.
    check_float_list(&body, inputs.len(), 12);
    assert_ne!(body["data"][0]["embedding"], body["data"][1]["embedding"]);
    // Gemini reports no usage for embeddings: gw estimates ⌈characters / 4⌉ per input.
    let estimate: u64 = inputs.iter().map(|s| (s.chars().count() as u64).div_ceil(4)).sum();
    assert_eq!(body["usage"]["prompt_tokens"].as_u64(), Some(estimate), "{body}");
    let expected = cost(estimate, "0.15");
    assert_eq!(header_cost, expected.normalize());
    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.provider.as_deref(), Some("gemini"));
    assert_eq!(row.upstream_model.as_deref(), Some("gemini-embedding-001"));
    assert_eq!(row.cost_usd, expected);
}

#[tokio::test]
async fn azure_embedding_in_openai_shape() {
    let stack = Stack::shared().await;
    let (session, key, _) = stack.org_with_key().await;
    let resp = embed(&stack, &key, json!({"model": "azure-embedding", "input": "azure vectors please"})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-gw-provider"), "azure");
    assert_eq!(header(&resp, "x-gw-model"), "my-embedding");
    let id = request_id(&resp);
    let body: Value = resp.json().await.unwrap();
    // The mock upstream's default length.
    check_float_list(&body, 1, 8);
    let tokens = body["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(tokens, 3, "{body}");
    let row = db::audit_row(session.org_id, id).await;
    assert_eq!(row.provider.as_deref(), Some("azure"));
    assert_eq!(row.cost_usd, cost(tokens, "0.02"));
}

// ---- failures ----

#[tokio::test]
async fn chat_model_on_embeddings_is_400_wrong_endpoint() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = embed(&stack, &key, json!({"model": "gpt-4o-mini", "input": "x"})).await;
    let b = expect_openai_error(resp, 400).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "wrong_endpoint",
        "message": "The model 'gpt-4o-mini' is not served on /v1/embeddings; it serves /v1/chat/completions.",
        "param": "model",
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "wrong_endpoint", "{b}");
    assert_eq!(b["error"]["param"], "model", "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("/v1/chat/completions"), "{b}");
}

#[tokio::test]
async fn embedding_model_on_chat_completions_is_400_wrong_endpoint() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp =
        stack.chat(&key, json!({"model": "mock-embedding", "messages": [{"role": "user", "content": "x"}]})).await;
    let b = expect_openai_error(resp, 400).await;
    assert_eq!(b["error"]["code"], "wrong_endpoint", "{b}");
    assert_eq!(b["error"]["param"], "model", "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("/v1/embeddings"), "{b}");
}

#[tokio::test]
async fn missing_input_is_400_naming_input() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let b = expect_openai_error(embed(&stack, &key, json!({"model": "mock-embedding"})).await, 400).await;
    assert_eq!(b["error"]["param"], "input", "{b}");
    assert_eq!(b["error"]["type"], "invalid_request_error", "{b}");
}

#[tokio::test]
async fn unknown_encoding_format_is_400_naming_it() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = embed(&stack, &key, json!({"model": "mock-embedding", "input": "x", "encoding_format": "int8"})).await;
    let b = expect_openai_error(resp, 400).await;
    assert_eq!(b["error"]["param"], "encoding_format", "{b}");
}

#[tokio::test]
async fn unknown_model_is_404_model_not_found() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let b =
        expect_openai_error(embed(&stack, &key, json!({"model": "no-such-embedder", "input": "x"})).await, 404).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "model_not_found",
        "message": "The model 'no-such-embedder' does not exist or you do not have access to it.",
        "param": "model",
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "model_not_found", "{b}");
    assert_eq!(b["error"]["param"], "model", "{b}");
}

#[tokio::test]
async fn token_arrays_to_gemini_are_400_unsupported_parameter() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = embed(&stack, &key, json!({"model": "gemini-embedding", "input": [[1, 2, 3], [4, 5]]})).await;
    assert_eq!(header(&resp, "x-gw-provider"), "gemini");
    let b = expect_openai_error(resp, 400).await;
    assert_eq!(b["error"]["code"], "unsupported_parameter", "{b}");
}

#[tokio::test]
async fn without_credentials_is_401() {
    let stack = Stack::shared().await;
    let resp =
        stack.http.post(embeddings_url(&stack)).json(&json!({"model": "mock-embedding", "input": "x"})).send().await;
    let b = expect_openai_error(resp.unwrap(), 401).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "invalid_api_key",
        "message": "You didn't provide an API key. Send it as 'Authorization: Bearer <API_KEY>'.",
        "param": null,
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "invalid_api_key", "{b}");
}

#[tokio::test]
async fn get_is_405_with_allow_post() {
    let stack = Stack::shared().await;
    let (_, key, _) = stack.org_with_key().await;
    let resp = stack.http.get(embeddings_url(&stack)).bearer_auth(&key).send().await.unwrap();
    assert_eq!(header(&resp, "allow"), "POST");
    let b = expect_openai_error(resp, 405).await;
    insta::assert_json_snapshot!(b, @r#"
    {
      "error": {
        "code": "method_not_allowed",
        "message": "Method GET is not allowed on /v1/embeddings; use POST.",
        "param": null,
        "type": "invalid_request_error"
      }
    }
    "#);
    assert_eq!(b["error"]["code"], "method_not_allowed", "{b}");
}
