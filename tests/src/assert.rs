//! Assertions and readers of answers: error bodies of both planes, headers, SSE, money.

use serde_json::Value;
use uuid::Uuid;

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n").filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_string)).collect()
}

pub const GW_HEADERS: [&str; 9] = [
    "x-gw-request-id",
    "x-gw-provider",
    "x-gw-model",
    "x-gw-cost-usd",
    "x-gw-latency-ms",
    "x-gw-ttft-ms",
    "x-gw-cache",
    "x-gw-policy-action",
    "x-gw-policy-reason",
];

pub fn header<'a>(resp: &'a reqwest::Response, name: &str) -> &'a str {
    resp.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_else(|| panic!("missing header {name}"))
}

/// Asserts a `/v1` error: `status`, every `x-gw-*` header, and OpenAI's error object with
/// `message` (not empty), `type`, `param` and `code`. Returns the body.
pub async fn expect_openai_error(resp: reqwest::Response, status: u16) -> Value {
    assert_eq!(resp.status(), status);
    for h in GW_HEADERS {
        assert!(resp.headers().contains_key(h), "missing {h} on a {status}");
    }
    let body: Value = resp.json().await.expect("error body is JSON");
    let err = body["error"].as_object().unwrap_or_else(|| panic!("no error object: {body}"));
    for f in ["message", "type", "param", "code"] {
        assert!(err.contains_key(f), "error lacks {f}: {body}");
    }
    assert!(!err["message"].as_str().expect("message is a string").is_empty());
    body
}

/// Asserts an `/api/v1` error: `status`, an `x-request-id` header, and
/// `{"error":{"code","message"}}` with both strings. Returns the body.
pub async fn expect_api_error(resp: reqwest::Response, status: u16) -> Value {
    assert_eq!(resp.status(), status);
    assert!(resp.headers().contains_key("x-request-id"), "no x-request-id on a {status}");
    let body: Value = resp.json().await.expect("error body is JSON");
    assert!(body["error"]["code"].is_string() && body["error"]["message"].is_string(), "{body}");
    body
}

/// 401 `unauthorized` with `WWW-Authenticate: Bearer`, on `/api/v1`.
pub async fn expect_unauthorized(resp: reqwest::Response) -> Value {
    assert_eq!(header(&resp, "www-authenticate"), "Bearer");
    let b = expect_api_error(resp, 401).await;
    assert_eq!(b["error"]["code"], "unauthorized");
    b
}

/// The response's JSON body, after asserting its status.
pub async fn json_of(resp: reqwest::Response, status: u16) -> Value {
    let got = resp.status();
    let text = resp.text().await.expect("body");
    assert_eq!(got, status, "{text}");
    serde_json::from_str(&text).expect("JSON body")
}

/// Asserts an `/api/v1` 400 `validation_error` whose first field error names `field` (`what`
/// says which case failed). Returns the body.
pub async fn expect_field_error(resp: reqwest::Response, field: &str, what: &str) -> Value {
    let b = expect_api_error(resp, 400).await;
    assert_eq!(b["error"]["code"], "validation_error", "{what}: {b}");
    assert_eq!(b["error"]["fields"][0]["field"], field, "{what}: {b}");
    b
}

/// The request id gw gave a `/v1` answer (`x-gw-request-id`).
pub fn request_id(resp: &reqwest::Response) -> Uuid {
    header(resp, "x-gw-request-id").parse().expect("request id")
}

/// A time as a query parameter takes it: RFC 3339 with microseconds, `+` escaped.
/// A decimal from its text.
pub fn dec(s: &str) -> rust_decimal::Decimal {
    s.parse().unwrap_or_else(|e| panic!("{s:?} is not a decimal: {e}"))
}

/// A money field of an answer: a decimal string (`/api/v1` never answers money as a float).
pub fn usd(v: &Value) -> rust_decimal::Decimal {
    dec(v.as_str().unwrap_or_else(|| panic!("money must be a decimal string, got {v}")))
}

/// The exact cost of `tokens` at `price` US dollars per million.
pub fn per_million(tokens: u64, price: &str) -> rust_decimal::Decimal {
    rust_decimal::Decimal::from(tokens) * dec(price) / rust_decimal::Decimal::from(1_000_000)
}

pub fn query_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true).replace('+', "%2B")
}

/// The JSON payloads among a stream's `data:` lines (`[DONE]` is not one).
pub fn sse_json(data: &[String]) -> Vec<Value> {
    data.iter().filter_map(|d| serde_json::from_str(d).ok()).collect()
}

/// The text content a stream's chunks carry, in order.
pub fn delta_text(chunks: &[Value]) -> String {
    chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect()
}

/// The `id` of a created or read resource.
pub fn id_of(v: &Value) -> Uuid {
    v["id"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no id in {v}"))
}
