//! `POST /api/v1/playground/compare`: one prompt sent concurrently to 2–8 models through the
//! proxy's own `/v1/chat/completions` (so policies, limits, budgets, routing, cost and the audit
//! log apply as to any request), on a short-lived key of the caller's (kind `playground`: never
//! listed, revoked when the comparison ends; its audit rows carry `origin = playground`). Each
//! model's figures are read back from its audit row, so they are the figures the request log
//! shows. Answers as JSON, or as server-sent events, one per model as it finishes
//! (`docs/playground.md`).

use std::time::{Duration, Instant};

use actix_web::{post, web, HttpResponse};
use bytes::Bytes;
use chrono::Utc;
use diesel_async::AsyncConnection;
use eventsource_stream2::Eventsource;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use gw_shared::accounts::PERM_CHAT;
use gw_shared::audit::AuditRecord;
use gw_shared::db::api_keys::{self, NewApiKey, KIND_PLAYGROUND};
use gw_shared::db::{audit_logs, invalidations, prompt_templates};
use gw_shared::ids::new_id;
use gw_shared::prompt_template::PromptRef;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::session::Session;
use crate::state::AppState;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(compare);
}

const MIN_MODELS: usize = 2;
const MAX_MODELS: usize = 8;
/// Longest answer text returned per model (a longer one is cut and marked).
const MAX_ANSWER_BYTES: usize = 256 * 1024;
/// How long a model's audit row is waited for once its answer ended.
const AUDIT_WAIT: Duration = Duration::from_secs(5);
const AUDIT_POLL: Duration = Duration::from_millis(50);
/// Parameters the comparison sets itself.
const RESERVED: [&str; 6] = ["model", "messages", "prompt", "stream", "stream_options", "n"];

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompareRequest {
    /// 2 to 8 distinct models (or aliases) the caller may use.
    models: Vec<String>,
    /// Chat messages as on `/v1/chat/completions`; with `prompt`, they follow the template's.
    #[serde(default)]
    messages: Option<Vec<Value>>,
    /// A prompt template reference as on `/v1/chat/completions`: `{"id", "version", "variables"}`.
    #[serde(default)]
    prompt: Option<Value>,
    /// Any other chat parameters (`temperature`, `max_tokens`, ...), sent to every model.
    #[serde(default)]
    parameters: Map<String, Value>,
    /// The team whose budget and limits the calls count against (a member must belong to it).
    #[serde(default)]
    team_id: Option<Uuid>,
    /// Answer as server-sent events, one per model as it finishes.
    #[serde(default)]
    stream: bool,
}

/// A model's failure, as `/v1` reported it.
#[derive(Serialize, ToSchema, Clone)]
pub struct CompareError {
    /// The HTTP status `/v1` answered with (0: the proxy was not reached).
    status: u16,
    #[serde(rename = "type")]
    kind: String,
    code: Option<String>,
    message: String,
    param: Option<String>,
}

#[derive(Serialize, ToSchema, Clone)]
pub struct ModelResult {
    /// The model's position in `models`.
    index: usize,
    /// The model as asked.
    model: String,
    /// The request's id (`x-gw-request-id`): its audit row.
    request_id: Option<Uuid>,
    status: u16,
    /// The provider and model that actually answered.
    provider: Option<String>,
    upstream_model: Option<String>,
    /// Time to the first token and total latency, in milliseconds, as the audit row has them.
    ttft_ms: Option<i32>,
    latency_ms: Option<i32>,
    prompt_tokens: i32,
    completion_tokens: i32,
    cached_tokens: i32,
    reasoning_tokens: i32,
    total_tokens: i32,
    /// USD, exact decimal as a string.
    cost_usd: String,
    /// The answer's text (cut at 256 KiB: `answer_truncated`).
    answer: Option<String>,
    answer_truncated: bool,
    finish_reason: Option<String>,
    error: Option<CompareError>,
    /// The figures are the audit row's; false when the row was not written within 5 s (then
    /// they are the playground's own measurements).
    audited: bool,
}

#[derive(Serialize, ToSchema)]
pub struct CompareResponse {
    /// In the order of `models`.
    results: Vec<ModelResult>,
}

/// What one call saw on the wire.
#[derive(Default)]
struct Seen {
    status: u16,
    request_id: Option<Uuid>,
    provider: Option<String>,
    upstream_model: Option<String>,
    ttft: Option<Duration>,
    latency: Duration,
    answer: String,
    truncated: bool,
    finish_reason: Option<String>,
    usage: Option<Value>,
    error: Option<CompareError>,
}

fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers().get(name).and_then(|v| v.to_str().ok()).filter(|v| *v != "none").map(str::to_string)
}

fn error_of(status: u16, body: &Value) -> CompareError {
    let e = &body["error"];
    let text = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
    CompareError {
        status,
        kind: text("type").unwrap_or_else(|| "api_error".into()),
        code: text("code"),
        message: text("message").unwrap_or_else(|| format!("HTTP {status}")),
        param: text("param"),
    }
}

fn unreachable(why: &str) -> CompareError {
    CompareError {
        status: 0,
        kind: "api_error".into(),
        code: Some("proxy_unreachable".into()),
        message: format!("The playground could not reach the gateway: {why}."),
        param: None,
    }
}

/// One model's call, streamed so the time to the first token is real.
async fn call(client: &reqwest::Client, url: &str, secret: &str, body: Value) -> Seen {
    let started = Instant::now();
    let mut seen = Seen::default();
    let resp = match client.post(url).bearer_auth(secret).json(&body).send().await {
        Ok(r) => r,
        Err(e) => {
            seen.error = Some(unreachable(if e.is_timeout() { "timed out" } else { "connection failed" }));
            seen.latency = started.elapsed();
            return seen;
        }
    };
    seen.status = resp.status().as_u16();
    seen.request_id = header(&resp, gw_shared::headers::REQUEST_ID).and_then(|v| v.parse().ok());
    seen.provider = header(&resp, gw_shared::headers::PROVIDER);
    seen.upstream_model = header(&resp, gw_shared::headers::MODEL);
    if !resp.status().is_success() {
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        seen.error = Some(error_of(seen.status, &body));
        seen.latency = started.elapsed();
        return seen;
    }
    let mut events = std::pin::pin!(resp.bytes_stream().eventsource());
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(e) => e,
            Err(_) => {
                seen.error = Some(unreachable("the stream broke off"));
                break;
            }
        };
        if event.data == "[DONE]" {
            break;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(&event.data) else { continue };
        if chunk.get("error").is_some() {
            seen.error = Some(error_of(seen.status, &chunk));
            break;
        }
        if let Some(m) = chunk.get("model").and_then(Value::as_str).filter(|_| seen.upstream_model.is_none()) {
            seen.upstream_model = Some(m.to_string());
        }
        for choice in chunk.get("choices").and_then(Value::as_array).into_iter().flatten() {
            if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
                if seen.ttft.is_none() && !text.is_empty() {
                    seen.ttft = Some(started.elapsed());
                }
                if seen.answer.len() + text.len() <= MAX_ANSWER_BYTES {
                    seen.answer.push_str(text);
                } else {
                    seen.truncated = true;
                }
            }
            if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
                seen.finish_reason = Some(r.to_string());
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            seen.usage = Some(u.clone());
        }
    }
    seen.latency = started.elapsed();
    seen
}

/// The request's audit row, once written (the proxy writes it right behind the answer).
async fn audit_row(state: &AppState, org_id: Uuid, id: Uuid) -> Option<AuditRecord> {
    let deadline = Instant::now() + AUDIT_WAIT;
    loop {
        if let Ok(mut conn) = state.db.get().await {
            if let Ok(Some(row)) = audit_logs::find(&mut conn, org_id, id).await {
                return Some(row);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        actix_web::rt::time::sleep(AUDIT_POLL).await;
    }
}

fn tokens(usage: Option<&Value>, path: &str) -> i32 {
    usage.and_then(|u| u.pointer(path)).and_then(Value::as_i64).map_or(0, |n| i32::try_from(n).unwrap_or(i32::MAX))
}

async fn result(state: &AppState, org_id: Uuid, index: usize, model: String, seen: Seen) -> ModelResult {
    let row = match seen.request_id {
        Some(id) => audit_row(state, org_id, id).await,
        None => None,
    };
    let usage = seen.usage.as_ref();
    let answered = seen.error.is_none();
    let mut r = ModelResult {
        index,
        model,
        request_id: seen.request_id,
        status: seen.status,
        provider: seen.provider,
        upstream_model: seen.upstream_model,
        ttft_ms: seen.ttft.map(gw_shared::audit::ms_i32),
        latency_ms: Some(gw_shared::audit::ms_i32(seen.latency)),
        prompt_tokens: tokens(usage, "/prompt_tokens"),
        completion_tokens: tokens(usage, "/completion_tokens"),
        cached_tokens: tokens(usage, "/prompt_tokens_details/cached_tokens"),
        reasoning_tokens: tokens(usage, "/completion_tokens_details/reasoning_tokens"),
        total_tokens: tokens(usage, "/total_tokens"),
        cost_usd: "0".into(),
        answer: answered.then_some(seen.answer),
        answer_truncated: seen.truncated,
        finish_reason: seen.finish_reason,
        error: seen.error,
        audited: false,
    };
    if let Some(row) = row {
        r.status = u16::try_from(row.status_code).unwrap_or(r.status);
        r.provider = row.provider;
        r.upstream_model = row.upstream_model;
        r.ttft_ms = row.ttft_ms;
        r.latency_ms = Some(row.latency_ms);
        r.prompt_tokens = row.prompt_tokens;
        r.completion_tokens = row.completion_tokens;
        r.cached_tokens = row.cached_tokens;
        r.reasoning_tokens = row.reasoning_tokens;
        r.total_tokens = row.total_tokens;
        r.cost_usd = row.cost_usd.normalize().to_string();
        r.audited = true;
    }
    r
}

/// The proxy's `/v1` base: `admin.proxy_url`, else the proxy's listen address.
fn proxy_base(state: &AppState) -> String {
    if let Some(u) = &state.cfg.admin.proxy_url {
        return u.trim_end_matches('/').to_string();
    }
    let listen = state.cfg.proxy.listen.replace("0.0.0.0", "127.0.0.1").replace("[::]", "[::1]");
    format!("http://{listen}")
}

/// A checked comparison: the body each model gets, but for its name.
struct Plan {
    models: Vec<String>,
    body: Map<String, Value>,
}

async fn plan(state: &AppState, session: &Session, b: CompareRequest) -> ApiResult<Plan> {
    if !(MIN_MODELS..=MAX_MODELS).contains(&b.models.len()) {
        return Err(ApiError::field("models", format!("must name {MIN_MODELS} to {MAX_MODELS} models")));
    }
    for (i, m) in b.models.iter().enumerate() {
        if m.trim().is_empty() || m.len() > 256 {
            return Err(ApiError::field(format!("models[{i}]"), "must be 1 to 256 characters"));
        }
        if b.models[..i].contains(m) {
            return Err(ApiError::field(format!("models[{i}]"), format!("\"{m}\" is named twice")));
        }
    }
    if b.messages.is_none() && b.prompt.is_none() {
        return Err(ApiError::field("messages", "send messages, a prompt template reference (prompt), or both"));
    }
    if b.messages.as_ref().is_some_and(Vec::is_empty) && b.prompt.is_none() {
        return Err(ApiError::field("messages", "must not be empty"));
    }
    for k in b.parameters.keys() {
        if RESERVED.contains(&k.as_str()) {
            return Err(ApiError::field(format!("parameters.{k}"), "is set by the playground itself"));
        }
    }
    let mut conn = state.conn().await?;
    if let Some(p) = &b.prompt {
        let r = PromptRef::parse(p).map_err(|e| ApiError::field(&e.field, e.message))?;
        let head = prompt_templates::head(&mut conn, session.org_id, r.id).await?;
        if head.is_none_or(|h| h.number(&r.version).is_none()) {
            return Err(ApiError::NotFound("prompt template version"));
        }
    }
    match b.team_id {
        Some(team) => {
            if !gw_shared::db::teams::exists_in_org(&mut conn, session.org_id, team).await? {
                return Err(ApiError::field("team_id", "no such team in this organization"));
            }
            session.require_team(&mut conn, team).await?;
        }
        // As for keys: a member spends only a team's budget, under its allow-list and limits.
        None if !session.is_admin() => {
            return Err(ApiError::field("team_id", "members compare on a team they belong to: name it"));
        }
        None => {}
    }
    let mut body = b.parameters;
    if let Some(m) = b.messages {
        body.insert("messages".into(), Value::Array(m));
    }
    if let Some(p) = b.prompt {
        body.insert("prompt".into(), p);
    }
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    Ok(Plan { models: b.models, body })
}

/// The comparison's key: the caller's, for one comparison's time, on the chosen team.
async fn issue_key(state: &AppState, session: &Session, team_id: Option<Uuid>) -> ApiResult<(Uuid, String)> {
    let k = gw_shared::keys::generate_api_key();
    let perms = [PERM_CHAT.to_string()];
    let expires = Utc::now() + chrono::Duration::seconds(state.cfg.admin.playground_timeout_secs as i64 + 60);
    let mut conn = state.conn().await?;
    let row = api_keys::insert(
        &mut conn,
        &NewApiKey {
            id: new_id(),
            org_id: session.org_id,
            team_id,
            name: "playground",
            key_prefix: &k.prefix,
            key_hash: &k.hash,
            permissions: &perms,
            allowed_models: None,
            created_by: Some(session.user_id),
            expires_at: Some(expires),
            budget: None,
            rate_limits: None,
            kind: KIND_PLAYGROUND,
        },
    )
    .await?;
    Ok((row.id, k.secret))
}

async fn revoke_key(state: &AppState, org_id: Uuid, id: Uuid) {
    // The revocation and the proxies' invalidation commit together.
    let revoked = match state.db.get().await {
        Ok(mut conn) => {
            conn.transaction(async |conn| {
                let Some(hashes) = api_keys::revoke(conn, org_id, id).await? else {
                    return Ok::<_, gw_shared::Error>(None);
                };
                invalidations::record_keys(conn, &hashes).await.map(Some)
            })
            .await
        }
        Err(e) => Err(gw_shared::Error::Pool(e.to_string())),
    };
    match revoked {
        Ok(Some(logged)) => state.announce(&logged, format_args!("the revocation of key {id}")).await,
        Ok(None) => {}
        // The key expires by itself shortly.
        Err(e) => log::warn!("playground key {id} not revoked: {e}"),
    }
}

/// Runs every model's call at once; `each` sees each result as it finishes.
async fn run(
    state: web::Data<AppState>,
    org_id: Uuid,
    key: (Uuid, String),
    p: Plan,
    mut each: impl FnMut(ModelResult),
) {
    let timeout = Duration::from_secs(state.cfg.admin.playground_timeout_secs.max(1));
    let client = reqwest::Client::builder().timeout(timeout).build().ok();
    let url = format!("{}/v1/chat/completions", proxy_base(&state));
    let mut calls = FuturesUnordered::new();
    for (index, model) in p.models.into_iter().enumerate() {
        let mut body = p.body.clone();
        body.insert("model".into(), Value::String(model.clone()));
        let (client, url, secret, state) = (client.clone(), url.clone(), key.1.clone(), state.clone());
        calls.push(async move {
            let seen = match &client {
                Some(c) => call(c, &url, &secret, Value::Object(body)).await,
                None => Seen { error: Some(unreachable("no HTTP client")), ..Seen::default() },
            };
            result(&state, org_id, index, model, seen).await
        });
    }
    while let Some(r) = calls.next().await {
        each(r);
    }
    revoke_key(&state, org_id, key.0).await;
}

/// Send one prompt to 2–8 models at once and compare their answers, speed, tokens and cost.
#[utoipa::path(operation_id = "playground_compare", tag = "playground", request_body = CompareRequest,
    responses((status = 200,
        description = "JSON; or with `stream: true`, `text/event-stream` events `{\"type\": \"result\", ...ModelResult}` as each model finishes, then `{\"type\": \"done\"}`",
        content((CompareResponse = "application/json"), (String = "text/event-stream"))),
        Errors))]
#[post("/playground/compare")]
pub async fn compare(
    state: web::Data<AppState>,
    session: Session,
    body: crate::body::Json<CompareRequest>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let (stream, team) = (b.stream, b.team_id);
    let p = plan(&state, &session, b).await?;
    let (key_id, secret) = issue_key(&state, &session, team).await?;
    let org_id = session.org_id;
    if !stream {
        // On a task of its own: a client that leaves does not stop the calls or the key's
        // revocation.
        let task = actix_web::rt::spawn(async move {
            let mut results = Vec::with_capacity(p.models.len());
            run(state, org_id, (key_id, secret), p, |r| results.push(r)).await;
            results
        });
        let mut results = task.await.map_err(|e| ApiError::Internal(format!("playground comparison: {e}")))?;
        results.sort_by_key(|r| r.index);
        return Ok(HttpResponse::Ok().json(CompareResponse { results }));
    }
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, actix_web::Error>>();
    actix_web::rt::spawn(async move {
        let send = |v: Value| {
            if let Ok(b) = gw_shared::openai::sse_event(&v) {
                // A client that left stops reading; the calls still finish and the key is revoked.
                let _ = tx.unbounded_send(Ok(b));
            }
        };
        run(state, org_id, (key_id, secret), p, |r| {
            let mut v = serde_json::to_value(&r).unwrap_or(Value::Null);
            if let Some(o) = v.as_object_mut() {
                o.insert("type".into(), json!("result"));
            }
            send(v);
        })
        .await;
        send(json!({"type": "done"}));
    });
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream; charset=utf-8")
        .insert_header(("cache-control", "no-cache"))
        .streaming(rx))
}
