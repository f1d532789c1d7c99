//! mock-upstream: a model provider for tests, demos and benchmarks, reached over real HTTP. It
//! speaks five dialects, answers deterministically, and has knobs for latency, error statuses,
//! broken bodies and broken streams.
//!
//! Usage: `mock-upstream [--listen 127.0.0.1:0] [--latency-ms N] [--ttft-ms N] [--chunk-delay-ms N]
//!         [--slow-stream-ms N] [--status CODE] [--malformed] [--malformed-chunk] [--no-usage]
//!         [--fail-first N] [--error-mid-stream] [--truncate-stream] [--drop-connection]
//!         [--cached-tokens N] [--reasoning-tokens N] [--require-credential VALUE]`
//! Prints `listening on <addr>` once bound. `MOCK_WORKERS` sets the worker count (default 2).
//!
//! # Dialects
//!
//! - OpenAI: `POST /v1/chat/completions`, `POST /v1/embeddings`, `GET /v1/models`, and the
//!   Responses API, `POST /v1/responses` (plain, or `"stream": true` for its event sequence with
//!   `event:` lines and `sequence_number`s, ending at `response.completed`, no `[DONE]`).
//!   Credential: `authorization: Bearer X`.
//! - Azure OpenAI: `POST /openai/deployments/{deployment}/chat/completions?api-version=V` and
//!   `.../embeddings?api-version=V`: OpenAI's answers with the deployment as the model; 400
//!   without `api-version`. Credential: `api-key` (else a bearer token).
//! - Anthropic Messages: `POST /v1/messages` (400 without `max_tokens`); `"stream": true` gives
//!   SSE with `event:` lines (`message_start`, `content_block_start`, `ping`,
//!   `content_block_delta`..., `content_block_stop`, `message_delta`, `message_stop`);
//!   `POST /v1/messages/count_tokens` gives `{"input_tokens"}` as a message's usage would.
//!   Credential: `x-api-key` (else a bearer token).
//! - Gemini: `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent` (SSE
//!   `data:` events with `?alt=sse`, no `[DONE]`; without it one JSON array of the fragments),
//!   `:embedContent`, `:batchEmbedContents` (also under `/v1/models/`). Credential:
//!   `x-goog-api-key` (else `?key=`, else a bearer token).
//! - Bedrock Converse: `POST /model/{modelId}/converse` (`modelId` may be percent-encoded; no
//!   streaming). Requests need `authorization: AWS4-HMAC-SHA256 Credential=<id>/...` and
//!   `x-amz-date`, else 403 `{"message": "Missing Authentication Token"}`; the signature is not
//!   checked. Credential: the access key id.
//!
//! Errors come in each dialect's own shape (OpenAI `{"error": {"message", "type", ...}}`,
//! Anthropic `{"type": "error", "error": {"type", "message"}}`, Gemini `{"error": {"code",
//! "message", "status"}}`, Bedrock `{"message"}` plus `x-amzn-ErrorType`).
//!
//! # Answers
//!
//! A reply is `Mock upstream reply <digest>: <the last user message's first 8 words>`, the digest
//! taken over the conversation reduced to OpenAI-shaped messages (system text first, each
//! message's content as its text), so one conversation gets the same reply in every dialect.
//! Token counts: prompt = words + 3 per message, completion = the reply's words. When the
//! request declares tools (Anthropic `tools`, Gemini `functionDeclarations`, Bedrock
//! `toolConfig`) and the last message is the user's and mentions `weather`, the answer is a call
//! of the first tool with `{"city": "Paris"}` (a tool choice of none / any / a named tool is
//! honoured); when the last message carries a tool result, the answer is `The tool said:
//! <result>`. Stop sequences (Anthropic, Gemini, Bedrock) cut the reply; so does an OpenAI or
//! Azure request's `max_completion_tokens` / `max_tokens` (a word a token, `finish_reason:
//! "length"`). Embeddings are derived from a digest of each input (8 values unless `dimensions`
//! / `outputDimensionality` says otherwise).
//!
//! OpenAI and Azure chat answer the reply (or the `reply` knob's text) unless a knob says
//! otherwise; they make tool calls and refusals only when told to:
//!
//! - `tool_call_arguments`: `message: {"role": "assistant", "content": null, "refusal": null,
//!   "tool_calls": [{"id": "call_mock<n>", "type": "function", "function": {"name", "arguments":
//!   <the knob's text>}}]}`, the name the request's first `tools[].function.name` (else `tool`),
//!   finish reason `tool_calls`. Streamed: a first delta with the role, `content: null` and
//!   `tool_calls: [{"index": 0, "id", "type": "function", "function": {"name", "arguments":
//!   ""}}]`, then `tool_calls: [{"index": 0, "function": {"arguments": <piece>}}]` deltas of
//!   `chunk_chars` characters (6 when it is 0), then the finishing chunk. Completion tokens: the
//!   arguments' whitespace-separated words, at least 1.
//! - `refusal`: `content: null, refusal: <text>`; streamed after a first delta `{"role":
//!   "assistant", "content": null, "refusal": ""}` as `delta.refusal` pieces (one word an
//!   event, or `chunk_chars` characters, as replies). Completion tokens: its words.
//! - `logprobs`: text answers get `choices[].logprobs = {"content": [{"token", "logprob": -0.1,
//!   "bytes": <the token's UTF-8 bytes>, "top_logprobs": [the same, without top_logprobs]}, ...],
//!   "refusal": null}`, a token per word (later words with their leading space, so the tokens
//!   concatenate back to the text); streamed, each content chunk gets the same with its piece as
//!   its one token. Refusals get them under `refusal` (`content` null); tool calls, and the role
//!   and finishing chunks, `logprobs: null`. Whether or not the request asked for logprobs.
//!
//! `tool_call_arguments` wins over `refusal`, which wins over `reply`. `reasoning_tokens` add to
//! every answer's completion tokens, and usage reports count what the answer says.
//!
//! # Knobs
//!
//! The fields of [`Knobs`], in four layers, later ones winning: the global ones (command line,
//! `POST /_mock/config` with snake_case JSON); a path prefix `/k/<name=value,...>/` in front of
//! any model path (e.g. `/k/status=503,latency_ms=200,tag=abc/v1/chat/completions`; numbers,
//! `true`/`1`/`false`/`0`, text, a bare name meaning `true`, `%XX` escapes decoded): a gw
//! deployment whose `base_url` carries the prefix gets these faults, whatever its dialect;
//! `x-mock-<name>` headers (dashes for underscores; `x-mock-malformed` counts by its presence);
//! and a top-level `"mock": {...}` object in the request body (gw forwards unknown body fields,
//! so tests steer the mock through gw this way). Every knob works in every dialect, in that
//! dialect's format; the stream knobs apply to streamed answers only. A model request is
//! counted and its credential recorded first; then come Bedrock's signature check (403),
//! `require_credential` (401), `latency_ms`, `fail_first` (503), `status`, the dialect's own
//! validation (400) and the answer, which `malformed`, `drop_connection` and the stream knobs
//! may break.
//!
//! # Admin
//!
//! - `GET /_mock/stats`: the number of model requests (every dialect; not `/v1/models`) since
//!   start or the last `POST /_mock/config`, and the last request body; `?tag=T` the same for
//!   the requests whose knobs carry `"tag": "T"` (counted since start), with the last one's
//!   body as it came (`last_raw`) and its `traceparent` header (`last_traceparent`). Tests sharing one mock
//!   use tags to stay apart. Without a tag it also gives `abandoned_bodies`: streamed bodies the
//!   client hung up on before their end (since start).
//! - `GET /_mock/credentials`: `{"credentials": {"<value>": {"count", "first_ms", "last_ms"}}}`,
//!   every credential seen (see the dialects), times in milliseconds since the mock started.
//!   `POST /_mock/credentials/reset` forgets them.
//! - `POST /_mock/usage/prices`, `POST /_mock/usage/adjust`: see below.
//!
//! # Usage reports
//!
//! A ledger, per credential, per model and UTC day, of `requests`, `input_tokens` (whole
//! prompts, cached tokens included, as OpenAI's `prompt_tokens`), `output_tokens`,
//! `cached_tokens` and `cost`, so gw's spend reconciliation can be tested against it. Every
//! OpenAI / Azure chat and Anthropic message answered 200 and whole (streamed or not; not broken
//! by `malformed`, `drop_connection` or the stream knobs) is recorded when answered, under the
//! request's credential (none, not recorded), the model the answer names (the request's `model`,
//! Azure's deployment) and today, with the tokens the mock counted even when `no_usage` hides
//! them.
//!
//! - `POST /_mock/usage/prices` merges `{"<model>": {"input_per_mtok": "0.15", "output_per_mtok":
//!   "0.6", "cached_input_per_mtok": "0.075"}}` (decimal strings, USD per million tokens; cached
//!   defaults to input) into the price table. A request's cost, fixed when it is recorded at the
//!   prices then known (0 for a model without prices), is `(uncached input × input + cached ×
//!   cached price + output × output) / 1e6`, exact, rounded half away from zero to 10 places, as
//!   gw stores a request's cost (NUMERIC(20,10)); a cell's cost is the sum of those. Its output
//!   and cached-input parts are rounded per request likewise, and uncached input gets what the
//!   total leaves, so a report's line items add up to the cell's cost exactly.
//! - `POST /_mock/usage/adjust` `{"credential", "model", "day": "YYYY-MM-DD", "requests",
//!   "input_tokens", "output_tokens", "cached_tokens", "cost": "0.001"}` (numbers optional and
//!   signed, `cost` a decimal string) adds to that cell, creating it: 204. Test discrepancies; a
//!   cost adjustment shows as uncached input in the line items.
//!
//! The reports give the ledger of the credential that asks for them. Their buckets are UTC days,
//! from the start's day while a day starts before the end (exclusive; default: the end of today),
//! days without usage included with no results; `limit` buckets a page (default 7, 1 to 31); when
//! `has_more`, pass `next_page` back as `page`. Only `bucket_width=1d` (the default); `group_by`
//! may be repeated, written `group_by[]`, or comma-separated. A bad parameter is a 400.
//!
//! - OpenAI (`authorization: Bearer`, else 401), `start_time` and `end_time` in unix seconds:
//!   `GET /v1/organization/usage/completions` gives `{"object": "page", "data": [{"object":
//!   "bucket", "start_time", "end_time", "results": [{"object":
//!   "organization.usage.completions.result", "input_tokens", "output_tokens",
//!   "input_cached_tokens", "input_audio_tokens": 0, "output_audio_tokens": 0,
//!   "num_model_requests", "project_id": null, "user_id": null, "api_key_id": null, "model",
//!   "batch": null}]}], "has_more", "next_page"}`, a result per model with `group_by=model`, else
//!   one with `"model": null`. `GET /v1/organization/costs` the same with results `{"object":
//!   "organization.costs.result", "amount": {"value": 0.0123, "currency": "usd"}, "amount_exact":
//!   "0.0123", "line_item", "project_id": null}`: with `group_by=line_item` per model
//!   `"<model>, input"` (cached input included) and `"<model>, output"`, else one line (`null`).
//!   `amount_exact` is not OpenAI's: the exact decimal, which `value` (a float) may miss.
//! - Anthropic (`x-api-key`, else a bearer token, else 401; `anthropic-version` required, else
//!   400), `starting_at` and `ending_at` RFC 3339: `GET /v1/organizations/usage_report/messages`
//!   gives `{"data": [{"starting_at": "2026-11-24T00:00:00Z", "ending_at":
//!   "2026-11-25T00:00:00Z", "results": [{"uncached_input_tokens", "cache_creation":
//!   {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0}, "cache_read_input_tokens",
//!   "output_tokens", "server_tool_use": {"web_search_requests": 0}, "model", "api_key_id": null,
//!   "workspace_id": null, "service_tier": "standard", "context_window": "0-200k"}]}],
//!   "has_more", "next_page"}`, per model with `group_by[]=model`, else one with `"model": null`.
//!   `GET /v1/organizations/cost_report` the same with results `{"currency": "USD", "amount":
//!   "<cents, exact decimal string>", "workspace_id": null, "description": "<model> usage",
//!   "cost_type": "tokens", "context_window": "0-200k", "model", "service_tier": "standard",
//!   "token_type"}`: with `group_by[]=description` per model `uncached_input_tokens`,
//!   `output_tokens` and, when there are cached tokens, `cache_read_input_tokens`; else one line
//!   with the other fields `null`.
//!
//! The report paths take no `/k/` prefix and no knobs.
//!
//! # Stripe
//!
//! `POST /v1/customers`, `/v1/checkout/sessions`, `/v1/billing_portal/sessions` in Stripe's
//! dialect, and `GET /_mock/stripe/requests`: see the `stripe` module.

mod anthropic;
mod bedrock;
mod convo;
mod gemini;
mod openai;
mod responses;
mod stripe;
mod usage;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix_web::http::{Method, StatusCode};
use actix_web::{get, post, web, App, HttpRequest, HttpResponse, HttpServer};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Knobs {
    /// Delay before answering.
    latency_ms: u64,
    /// Adds to `latency_ms` a normally distributed delay with this standard deviation (ms; the
    /// total never below zero), drawn from the request body's SHA-256: the same body always
    /// waits the same, so a test's traffic is one fixed sample, whatever order it arrives in.
    latency_jitter_ms: u64,
    /// Streams: delay before the first event.
    ttft_ms: u64,
    /// Streams: delay between events.
    chunk_delay_ms: u64,
    /// Streams: delay between events; the larger of this and `chunk_delay_ms` applies.
    slow_stream_ms: u64,
    /// Answer every model request with this status and an error body.
    status: Option<u16>,
    /// Answer 200 with a body that is not the answer (not JSON; a stream of one such event).
    malformed: bool,
    /// Streams: one good content event, then a content event that is not JSON, and the end.
    malformed_chunk: bool,
    /// Leave usage out of answers.
    no_usage: bool,
    /// Fail (503) the first N model requests, then behave. With a `tag`, the first N requests
    /// carrying that tag; without, the first N since start or the last `POST /_mock/config`.
    fail_first: u64,
    /// Streams: send a couple of content events, then an error event, and end.
    error_mid_stream: bool,
    /// Streams: send a couple of content events and end without the stream's proper end.
    truncate_stream: bool,
    /// Send the status and headers, then drop the connection: halfway through the body, or
    /// after a couple of content events of a stream.
    drop_connection: bool,
    /// Prompt tokens reported as read from a cache (OpenAI `prompt_tokens_details`, Anthropic
    /// `cache_read_input_tokens`, Gemini `cachedContentTokenCount`, Bedrock
    /// `cacheReadInputTokens`); at most the prompt's tokens.
    cached_tokens: u64,
    /// Reasoning tokens reported (OpenAI `completion_tokens_details`, included in
    /// `completion_tokens`; Gemini `thoughtsTokenCount`).
    reasoning_tokens: u64,
    /// Answer 401 in the dialect's shape unless the request's credential is this one.
    require_credential: Option<String>,
    /// Groups requests for `fail_first` and `GET /_mock/stats?tag=`.
    tag: Option<String>,
    /// OpenAI and Azure chat: answer with this text instead of the usual reply.
    reply: Option<String>,
    /// OpenAI and Azure chat: answer with this many words (`word word ...`) instead of the usual
    /// reply (long answers without a long request body).
    reply_words: usize,
    /// OpenAI and Azure streams: pieces of this many characters instead of one word per event
    /// (text and refusals), or instead of 6 (tool-call arguments).
    chunk_chars: usize,
    /// OpenAI and Azure chat: answer with a call of the request's first `tools[].function.name`
    /// (else `tool`) with these arguments (sent as they are, valid JSON or not), finish reason
    /// `tool_calls`. Wins over `refusal` and `reply`.
    tool_call_arguments: Option<String>,
    /// OpenAI and Azure chat: answer with this refusal (`content` null). Wins over `reply`.
    refusal: Option<String>,
    /// OpenAI and Azure chat: attach `logprobs` to text and refusal answers and to each content
    /// (or refusal) chunk of a stream, whether or not the request asked for them.
    logprobs: bool,
}

/// What the mock saw of the model requests with one tag.
#[derive(Default)]
struct TagStats {
    requests: u64,
    last_body: Value,
    /// The last request's W3C `traceparent` header, when it had one.
    last_traceparent: Option<String>,
    /// The last request's body as it came (bytes as text).
    last_raw: String,
}

/// One credential's sightings.
#[derive(Serialize)]
struct CredentialSeen {
    count: u64,
    first_ms: u64,
    last_ms: u64,
}

struct State {
    knobs: Mutex<Knobs>,
    requests: AtomicU64,
    last_body: Mutex<Value>,
    tags: Mutex<HashMap<String, TagStats>>,
    started: Instant,
    credentials: Mutex<HashMap<String, CredentialSeen>>,
    /// What each credential's complete answers spent, per model and UTC day.
    usage: Mutex<usage::Ledger>,
    prices: Mutex<usage::Prices>,
}

impl State {
    /// Counts a request under its tag; returns its position among the tag's requests.
    fn count_tag(&self, tag: Option<&str>, body: &Value, raw: &[u8], traceparent: Option<&str>) -> Option<u64> {
        let tag = tag?;
        let mut tags = self.tags.lock().ok()?;
        let t = tags.entry(tag.to_string()).or_default();
        t.requests += 1;
        t.last_body = body.clone();
        t.last_raw = String::from_utf8_lossy(raw).into_owned();
        t.last_traceparent = traceparent.map(str::to_string);
        Some(t.requests)
    }

    fn saw_credential(&self, credential: &str) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let Ok(mut seen) = self.credentials.lock() else { return };
        if let Some(s) = seen.get_mut(credential) {
            s.count += 1;
            s.last_ms = ms;
        } else {
            seen.insert(credential.to_string(), CredentialSeen { count: 1, first_ms: ms, last_ms: ms });
        }
    }
}

/// `k` with the knob `name` set from the text `value`, read as the knob's type: a number,
/// `true`/`1`/`yes`/`on` or `false`/`0`/`no`/`off` for switches, else text; `null` unsets.
fn set_knob(k: &Knobs, name: &str, value: &str) -> Result<Knobs, String> {
    let mut all = serde_json::to_value(k).map_err(|e| e.to_string())?;
    if all.get(name).is_none() {
        return Err(format!("unknown mock knob {name:?}"));
    }
    let mut candidates = Vec::with_capacity(3);
    if let Ok(n) = value.parse::<u64>() {
        candidates.push(json!(n));
    }
    match value {
        "true" | "1" | "yes" | "on" => candidates.push(json!(true)),
        "false" | "0" | "no" | "off" => candidates.push(json!(false)),
        "null" => candidates.push(Value::Null),
        _ => {}
    }
    candidates.push(json!(value));
    for candidate in candidates {
        all[name] = candidate;
        if let Ok(set) = Knobs::deserialize(&all) {
            return Ok(set);
        }
    }
    Err(format!("invalid value {value:?} for mock knob {name:?}"))
}

/// `k` overridden by the request's `x-mock-<name>` headers; values that do not fit are ignored.
fn with_header_knobs(mut k: Knobs, req: &HttpRequest) -> Knobs {
    for (name, value) in req.headers() {
        let Some(knob) = name.as_str().strip_prefix("x-mock-") else { continue };
        if knob == "malformed" {
            k.malformed = true;
        } else if let Some(set) = value.to_str().ok().and_then(|v| set_knob(&k, &knob.replace('-', "_"), v).ok()) {
            k = set;
        }
    }
    k
}

/// `k` overridden by the request body's `"mock"` object, if it has one: only the knobs that
/// object names change.
fn with_body_knobs(k: Knobs, body: &Value) -> Result<Knobs, String> {
    let over = match body.get("mock") {
        None | Some(Value::Null) => return Ok(k),
        Some(Value::Object(over)) => over,
        Some(_) => return Err("'mock' must be an object of mock-upstream knobs".into()),
    };
    let mut merged = serde_json::to_value(&k).map_err(|e| e.to_string())?;
    if let Value::Object(m) = &mut merged {
        for (name, v) in over {
            m.insert(name.clone(), v.clone());
        }
    }
    serde_json::from_value(merged).map_err(|e| format!("invalid 'mock' knobs: {e}"))
}

/// `s` with its `%XX` escapes decoded (others left as they are).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = s
            .get(i + 1..i + 3)
            .filter(|h| bytes[i] == b'%' && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        if let Some(b) = escaped {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits the `/k/<name=value,...>` prefixes off a raw path: the knob settings and the
/// (decoded) rest of the path.
fn split_knob_prefix(path: &str) -> (Vec<(String, String)>, String) {
    let mut settings = Vec::new();
    let mut rest = path;
    while let Some(after) = rest.strip_prefix("/k/") {
        let (spec, tail) = after.find('/').map_or((after, ""), |at| after.split_at(at));
        for setting in spec.split(',').filter(|s| !s.is_empty()) {
            let (name, value) = setting.split_once('=').unwrap_or((setting, "true"));
            settings.push((percent_decode(name), percent_decode(value)));
        }
        rest = tail;
    }
    (settings, percent_decode(rest))
}

/// `authorization: Bearer <token>`.
fn bearer(req: &HttpRequest) -> Option<String> {
    let value = req.headers().get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_string())
}

fn header(req: &HttpRequest, name: &str) -> Option<String> {
    req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// What a model path serves.
enum Route {
    /// OpenAI chat; Azure's with the deployment.
    Chat(Option<String>),
    /// OpenAI embeddings; Azure's with the deployment.
    Embeddings(Option<String>),
    Models,
    /// OpenAI's Responses API.
    Responses,
    /// Anthropic Messages.
    Messages,
    /// Anthropic's token count of a Messages request.
    CountTokens,
    /// Gemini: the model and the method.
    Gemini(String, gemini::Method),
    /// Bedrock Converse: the model id.
    Converse(String),
}

impl Route {
    fn parse(method: &Method, path: &str) -> Option<Route> {
        let post = *method == Method::POST;
        match path {
            "/v1/chat/completions" if post => return Some(Route::Chat(None)),
            "/v1/embeddings" if post => return Some(Route::Embeddings(None)),
            "/v1/models" if *method == Method::GET => return Some(Route::Models),
            "/v1/responses" if post => return Some(Route::Responses),
            "/v1/messages" if post => return Some(Route::Messages),
            "/v1/messages/count_tokens" if post => return Some(Route::CountTokens),
            _ if !post => return None,
            _ => {}
        }
        if let Some(rest) = path.strip_prefix("/openai/deployments/") {
            let (deployment, operation) = rest.split_once('/')?;
            return match operation {
                "chat/completions" => Some(Route::Chat(Some(deployment.to_string()))),
                "embeddings" => Some(Route::Embeddings(Some(deployment.to_string()))),
                _ => None,
            };
        }
        if let Some(rest) = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/v1/models/")) {
            let (model, name) = rest.rsplit_once(':')?;
            return Some(Route::Gemini(model.to_string(), gemini::Method::parse(name)?));
        }
        let model = path.strip_prefix("/model/")?.strip_suffix("/converse")?;
        Some(Route::Converse(model.to_string()))
    }

    /// The credential the request carries, as this dialect sends it.
    fn credential(&self, req: &HttpRequest, query: &HashMap<String, String>) -> Option<String> {
        match self {
            Route::Chat(None) | Route::Embeddings(None) | Route::Models | Route::Responses => bearer(req),
            Route::Chat(Some(_)) | Route::Embeddings(Some(_)) => header(req, "api-key").or_else(|| bearer(req)),
            Route::Messages | Route::CountTokens => header(req, "x-api-key").or_else(|| bearer(req)),
            Route::Gemini(..) => {
                header(req, "x-goog-api-key").or_else(|| query.get("key").cloned()).or_else(|| bearer(req))
            }
            Route::Converse(_) => bedrock::access_key(req),
        }
    }

    /// An error in this dialect's shape; `param` names the faulty field (OpenAI's `param`).
    fn error(&self, status: u16, message: &str, param: Option<&str>) -> HttpResponse {
        match self {
            Route::Chat(_) | Route::Embeddings(_) | Route::Models | Route::Responses => {
                openai::error(status, message, param)
            }
            Route::Messages | Route::CountTokens => anthropic::error(status, message),
            Route::Gemini(..) => gemini::error(status, message),
            Route::Converse(_) => bedrock::error(status, message),
        }
    }

    /// The answer to the `status` and `fail_first` knobs.
    fn fault(&self, status: u16) -> HttpResponse {
        match self {
            Route::Chat(_) | Route::Embeddings(_) | Route::Models | Route::Responses => openai::fault(status),
            _ => self.error(status, &format!("mock upstream failure ({status})"), None),
        }
    }
}

/// An admitted model request.
struct Call {
    /// All knob layers merged.
    k: Knobs,
    body: Value,
    /// The request's number since start or the last `POST /_mock/config`.
    n: u64,
    query: HashMap<String, String>,
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A 200 whose body is not JSON.
fn garbage() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body("{\"this is\": not json")
}

/// `mean` ms plus a normal variate of standard deviation `sd` ms seeded by `body` (Box–Muller on
/// two uniforms from its SHA-256), never below zero.
fn jittered(mean: u64, sd: u64, body: &Value) -> u64 {
    use sha2::{Digest, Sha256};
    if sd == 0 {
        return mean;
    }
    let digest = Sha256::digest(body.to_string().as_bytes());
    let uniform = |b: &[u8]| {
        let n = u64::from_be_bytes(b.try_into().unwrap_or([0; 8])) >> 11;
        (n as f64 + 0.5) / (1u64 << 53) as f64
    };
    let (u1, u2) = (uniform(&digest[0..8]), uniform(&digest[8..16]));
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (mean as f64 + z * sd as f64).round().max(0.0) as u64
}

/// `events` one after the other, `first_wait` ms before the first and `delay` ms before each
/// other; with `cut_off`, the connection then breaks (actix aborts a body whose stream fails,
/// without the chunked encoding's end).
fn send(events: Vec<Bytes>, first_wait: u64, delay: u64, cut_off: bool, content_type: &'static str) -> HttpResponse {
    let guard = Unfinished(true);
    let body = futures::stream::unfold(
        (events.into_iter(), true, cut_off, guard),
        move |(mut it, first, cut_off, mut guard)| async move {
            let Some(next) = it.next() else {
                guard.0 = false;
                if !cut_off {
                    return None;
                }
                // Pending first lets the server flush the status line and what came so far.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let cut = actix_web::error::ErrorInternalServerError("mock upstream dropped the connection");
                return Some((Err(cut), (it, false, false, guard)));
            };
            let wait = if first { first_wait } else { delay };
            if wait > 0 {
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            Some((Ok(next), (it, false, cut_off, guard)))
        },
    );
    let mut resp = HttpResponse::Ok();
    resp.content_type(content_type);
    if content_type == "text/event-stream" {
        resp.insert_header(("Cache-Control", "no-cache"));
    }
    resp.streaming(body)
}

/// Bodies the server dropped before their end: the client (gw) went away mid-answer.
static ABANDONED: AtomicU64 = AtomicU64::new(0);

/// Counts a body dropped while it still had events to send.
struct Unfinished(bool);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.0 {
            ABANDONED.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A non-streamed answer, as the `malformed` and `drop_connection` knobs leave it.
fn json_reply(body: &Value, k: &Knobs) -> HttpResponse {
    if k.malformed {
        return garbage();
    }
    if k.drop_connection {
        let mut bytes = serde_json::to_vec(body).unwrap_or_default();
        bytes.truncate(bytes.len() / 2);
        return send(vec![Bytes::from(bytes)], 0, 0, true, "application/json");
    }
    HttpResponse::Ok().json(body)
}

/// Whether [`json_reply`] (`stream` false) or [`stream_reply`] sends the answer whole: only
/// such answers go into the usage ledger.
fn intact(k: &Knobs, stream: bool) -> bool {
    let broken_stream = k.malformed_chunk || k.error_mid_stream || k.truncate_stream;
    !(k.malformed || k.drop_connection || (stream && broken_stream))
}

/// A streamed answer and where this dialect's stream faults cut it.
struct StreamPlan {
    /// The complete stream, one element per event.
    events: Vec<Bytes>,
    /// How many events go up to and including the first content event.
    first: usize,
    /// How many events go up to and including the second content event.
    partial: usize,
    /// This dialect's mid-stream error event.
    error: Bytes,
    /// A content event whose data is not JSON.
    bad_chunk: Bytes,
}

/// A streamed answer, as the stream knobs leave it. Precedence: `malformed`,
/// `malformed_chunk`, `error_mid_stream`, `truncate_stream`, `drop_connection`.
fn stream_reply(plan: StreamPlan, k: &Knobs) -> HttpResponse {
    let StreamPlan { mut events, first, partial, error, bad_chunk } = plan;
    // Whatever the reply's length, a cut stream misses at least its last event.
    let partial = partial.min(events.len().saturating_sub(1));
    let first = first.min(partial);
    let mut cut_off = false;
    if k.malformed {
        events = vec![Bytes::from_static(b"data: {not json at all\n\n")];
    } else if k.malformed_chunk {
        events.truncate(first);
        events.push(bad_chunk);
    } else if k.error_mid_stream {
        events.truncate(partial);
        events.push(error);
    } else if k.truncate_stream {
        events.truncate(partial);
    } else if k.drop_connection {
        events.truncate(partial);
        cut_off = true;
    }
    send(events, k.ttft_ms, k.chunk_delay_ms.max(k.slow_stream_ms), cut_off, "text/event-stream")
}

/// Every model path, with or without a `/k/...` knob prefix.
async fn dispatch(state: web::Data<State>, req: HttpRequest, raw: web::Bytes) -> HttpResponse {
    let (settings, path) = split_knob_prefix(req.path());
    let Some(route) = Route::parse(req.method(), &path) else {
        let message = format!("mock-upstream has no route for {} {path}", req.method());
        return openai::error(404, &message, None);
    };
    let query = web::Query::<HashMap<String, String>>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let credential = route.credential(&req, &query);
    if let Route::Models = route {
        if let Some(c) = &credential {
            state.saw_credential(c);
        }
        return openai::models();
    }
    let mut k = state.knobs.lock().map(|k| k.clone()).unwrap_or_default();
    for (name, value) in &settings {
        k = match set_knob(&k, name, value) {
            Ok(k) => k,
            Err(e) => return route.error(400, &format!("the path's knobs: {e}"), Some("mock")),
        };
    }
    let k = with_header_knobs(k, &req);
    let n = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
    if let Some(c) = &credential {
        state.saw_credential(c);
    }
    let body: Value = match serde_json::from_slice(&raw) {
        Ok(v) => v,
        Err(e) => return route.error(400, &format!("invalid JSON: {e}"), None),
    };
    if let Ok(mut last) = state.last_body.lock() {
        *last = body.clone();
    }
    let k = match with_body_knobs(k, &body) {
        Ok(k) => k,
        Err(e) => return route.error(400, &e, Some("mock")),
    };
    // The position of this request among those with its tag, else among all.
    let traceparent = req.headers().get("traceparent").and_then(|v| v.to_str().ok());
    let seen = state.count_tag(k.tag.as_deref(), &body, &raw, traceparent).unwrap_or(n);
    if matches!(route, Route::Converse(_)) && credential.is_none() {
        return bedrock::missing_token();
    }
    if k.require_credential.as_ref().is_some_and(|want| credential.as_ref() != Some(want)) {
        return route.error(401, "mock upstream: not the required credential", None);
    }
    let latency = jittered(k.latency_ms, k.latency_jitter_ms, &body);
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    if seen <= k.fail_first {
        return route.fault(503);
    }
    if let Some(status) = k.status {
        return route.fault(status);
    }
    let call = Call { k, body, n, query };
    let (resp, spent) = match route {
        Route::Chat(deployment) => openai::chat(call, deployment.as_deref()),
        Route::Embeddings(deployment) => (openai::embeddings(call, deployment.as_deref()), None),
        Route::Models => (openai::models(), None),
        Route::Responses => responses::responses(call),
        Route::Messages => anthropic::messages(call),
        Route::CountTokens => (anthropic::count_tokens(call), None),
        Route::Gemini(model, method) => (gemini::handle(call, &model, method), None),
        Route::Converse(model) => (bedrock::converse(call, &model), None),
    };
    if let (Some(credential), Some(spent)) = (&credential, spent) {
        usage::record(&state, credential, spent);
    }
    resp
}

#[post("/_mock/config")]
async fn set_config(state: web::Data<State>, body: web::Json<Knobs>) -> HttpResponse {
    if let Ok(mut k) = state.knobs.lock() {
        *k = body.into_inner();
    }
    state.requests.store(0, Ordering::SeqCst);
    HttpResponse::NoContent().finish()
}

#[derive(Deserialize)]
struct StatsQuery {
    tag: Option<String>,
}

#[get("/_mock/stats")]
async fn stats(state: web::Data<State>, q: web::Query<StatsQuery>) -> HttpResponse {
    if let Some(tag) = &q.tag {
        let (requests, last, raw, traceparent) = state
            .tags
            .lock()
            .ok()
            .and_then(|tags| {
                let t = tags.get(tag)?;
                Some((t.requests, t.last_body.clone(), t.last_raw.clone(), t.last_traceparent.clone()))
            })
            .unwrap_or((0, Value::Null, String::new(), None));
        return HttpResponse::Ok()
            .json(json!({"requests": requests, "last_body": last, "last_raw": raw, "last_traceparent": traceparent}));
    }
    let last = state.last_body.lock().map(|v| v.clone()).unwrap_or(Value::Null);
    HttpResponse::Ok().json(json!({
        "requests": state.requests.load(Ordering::SeqCst),
        "last_body": last,
        "abandoned_bodies": ABANDONED.load(Ordering::SeqCst),
    }))
}

#[get("/_mock/credentials")]
async fn credentials(state: web::Data<State>) -> HttpResponse {
    let seen = state.credentials.lock().ok().and_then(|seen| serde_json::to_value(&*seen).ok()).unwrap_or_default();
    HttpResponse::Ok().json(json!({"credentials": seen}))
}

#[post("/_mock/credentials/reset")]
async fn reset_credentials(state: web::Data<State>) -> HttpResponse {
    if let Ok(mut seen) = state.credentials.lock() {
        seen.clear();
    }
    HttpResponse::NoContent().finish()
}

fn parse_args() -> Result<(String, Knobs), String> {
    let mut listen = "127.0.0.1:0".to_string();
    let mut k = Knobs::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            args.next().and_then(|v| v.parse().ok()).ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--listen" => listen = args.next().ok_or("--listen needs an address")?,
            "--latency-ms" => k.latency_ms = num("--latency-ms")?,
            "--ttft-ms" => k.ttft_ms = num("--ttft-ms")?,
            "--chunk-delay-ms" => k.chunk_delay_ms = num("--chunk-delay-ms")?,
            "--slow-stream-ms" => k.slow_stream_ms = num("--slow-stream-ms")?,
            "--status" => k.status = Some(num("--status")? as u16),
            "--fail-first" => k.fail_first = num("--fail-first")?,
            "--cached-tokens" => k.cached_tokens = num("--cached-tokens")?,
            "--reasoning-tokens" => k.reasoning_tokens = num("--reasoning-tokens")?,
            "--require-credential" => {
                k.require_credential = Some(args.next().ok_or("--require-credential needs a value")?)
            }
            "--malformed" => k.malformed = true,
            "--malformed-chunk" => k.malformed_chunk = true,
            "--no-usage" => k.no_usage = true,
            "--error-mid-stream" => k.error_mid_stream = true,
            "--truncate-stream" => k.truncate_stream = true,
            "--drop-connection" => k.drop_connection = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok((listen, k))
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let (listen, knobs) = match parse_args() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("mock-upstream: {e}");
            std::process::exit(2);
        }
    };
    let state = web::Data::new(State {
        knobs: Mutex::new(knobs),
        requests: AtomicU64::new(0),
        last_body: Mutex::new(Value::Null),
        tags: Mutex::new(HashMap::new()),
        started: Instant::now(),
        credentials: Mutex::new(HashMap::new()),
        usage: Mutex::new(HashMap::new()),
        prices: Mutex::new(HashMap::new()),
    });
    let workers = std::env::var("MOCK_WORKERS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(web::PayloadConfig::new(64 * 1024 * 1024))
            .app_data(web::JsonConfig::default().limit(64 * 1024 * 1024))
            .service(set_config)
            .service(stats)
            .service(credentials)
            .service(reset_credentials)
            .service(usage::set_prices)
            .service(usage::adjust)
            .service(usage::openai_usage)
            .service(usage::openai_costs)
            .service(usage::anthropic_usage)
            .service(usage::anthropic_costs)
            .service(stripe::customers)
            .service(stripe::checkout_sessions)
            .service(stripe::portal_sessions)
            .service(stripe::requests)
            .service(stripe::meter_events)
            .service(stripe::counted_meter_events)
            .service(stripe::set_delay)
            .service(stripe::expire_idempotency)
            .default_service(web::to(dispatch))
    })
    .workers(workers)
    .bind(&listen)?;
    for addr in server.addrs() {
        println!("listening on {addr}");
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    server.run().await
}
