//! The request log: a filtered, cursor-paginated list of audit rows and one row in full. Rows
//! reference static metadata (the key, the user agent) and these reads join it back in.

use actix_web::{get, web, HttpResponse};
use chrono::{DateTime, Utc};
use gw_shared::audit::detail::{Attempt, Decision};
use gw_shared::audit::AuditRecord;
use gw_shared::db::api_keys;
use gw_shared::db::audit_logs::{self, LogCursor, LogFilter, StatusFilter};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::period::period;
use crate::session::Session;
use crate::state::AppState;
use crate::{pagination, validate};

/// Default span of a log query without `from`.
const DEFAULT_DAYS: i64 = 30;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// Start, inclusive: an RFC 3339 time or a date. Default: 30 days before `to`.
    from: Option<String>,
    /// End, exclusive: an RFC 3339 time or a date. Default: now. At most 366 days after `from`.
    to: Option<String>,
    team_id: Option<Uuid>,
    /// The API key that made the request.
    key_id: Option<Uuid>,
    /// The model as requested.
    model: Option<String>,
    /// A status code (`429`), a class (`2xx`, `4xx`, `5xx`), `error` (400 and up) or `success`.
    status: Option<String>,
    /// `bypass`, `miss`, `L1`, `L2`, `L3`, or `hit` (any tier).
    cache: Option<String>,
    /// `flagged`, `redacted`, `blocked`, or `none`.
    policy_action: Option<String>,
    /// 1 to 200, default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
}

fn status_filter(s: &str) -> ApiResult<StatusFilter> {
    let bad = || ApiError::field("status", "must be a status code, 2xx, 3xx, 4xx, 5xx, error or success");
    Ok(match s {
        "error" => StatusFilter::Range(400, 1000),
        "success" => StatusFilter::Range(0, 400),
        c if c.len() == 3 && c.ends_with("xx") => {
            let d: i32 = c[..1].parse().map_err(|_| bad())?;
            if !(1..=5).contains(&d) {
                return Err(bad());
            }
            StatusFilter::Range(d * 100, d * 100 + 100)
        }
        c => StatusFilter::Exact(c.parse().ok().filter(|n| (100..600).contains(n)).ok_or_else(bad)?),
    })
}

fn cursor_text(r: &AuditRecord) -> String {
    format!("{}_{}", r.created_at.timestamp_micros(), r.id.simple())
}

fn parse_cursor(c: &str) -> ApiResult<LogCursor> {
    let bad = || ApiError::field("cursor", "is not a cursor this list returned");
    let (micros, id) = c.split_once('_').ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    Ok(LogCursor {
        created_at: DateTime::from_timestamp_micros(micros).ok_or_else(bad)?,
        id: Uuid::parse_str(id).map_err(|_| bad())?,
    })
}

impl LogQuery {
    fn filter(&self, now: DateTime<Utc>) -> ApiResult<LogFilter> {
        let (from, to) = period(("from", self.from.as_deref()), ("to", self.to.as_deref()), DEFAULT_DAYS, now)?;
        let cache = match self.cache.as_deref() {
            None => None,
            Some(c @ ("bypass" | "miss" | "L1" | "L2" | "L3" | "hit")) => Some(c.to_string()),
            Some(_) => return Err(ApiError::field("cache", "must be bypass, miss, L1, L2, L3 or hit")),
        };
        let policy_action = match self.policy_action.as_deref() {
            None => None,
            Some(a @ ("flagged" | "redacted" | "blocked" | "none")) => Some(a.to_string()),
            Some(_) => return Err(ApiError::field("policy_action", "must be flagged, redacted, blocked or none")),
        };
        Ok(LogFilter {
            from,
            to,
            team_id: self.team_id,
            api_key_id: self.key_id,
            model: self.model.as_deref().map(|m| validate::text("model", m, 256)).transpose()?,
            status: self.status.as_deref().map(status_filter).transpose()?,
            cache,
            policy_action,
        })
    }
}

#[derive(Serialize, ToSchema)]
pub struct LogTokens {
    prompt: i32,
    completion: i32,
    total: i32,
    /// Prompt tokens the provider served from its cache.
    cached: i32,
    reasoning: i32,
    cache_creation: i32,
}

#[derive(Serialize, ToSchema)]
pub struct LogLatency {
    /// Until the response ended, milliseconds.
    total_ms: i32,
    /// The answering upstream's time to its response header.
    upstream_ms: Option<i32>,
    /// Time to the first streamed token.
    ttft_ms: Option<i32>,
    /// The gateway's own share of the time to the response header, microseconds.
    overhead_us: Option<i32>,
}

#[derive(Serialize, ToSchema)]
pub struct LogEntry {
    /// The request id (`x-gw-request-id`).
    id: Uuid,
    created_at: DateTime<Utc>,
    team_id: Option<Uuid>,
    key_id: Option<Uuid>,
    key_prefix: Option<String>,
    endpoint: String,
    /// As requested.
    model: Option<String>,
    provider: Option<String>,
    upstream_model: Option<String>,
    deployment: Option<String>,
    status: i32,
    error_type: Option<String>,
    stream: bool,
    /// `bypass`, `miss`, `L1`, `L2` or `L3`.
    cache: String,
    /// The strongest guardrail action: `blocked`, `redacted`, `flagged` or `none` (as in the
    /// `x-gw-policy-action` header and the `policy_action` filter).
    policy_action: String,
    attempts: i32,
    tokens: LogTokens,
    #[schema(value_type = String)]
    cost_usd: String,
    /// How tokens and cost were settled: `usage` (the upstream's own report) or `estimate` (the
    /// upstream never reported usage: a stream the client left or that broke); null when no
    /// upstream was reached.
    settled_by: Option<String>,
    latency: LogLatency,
    /// The prompt template and version the request rendered.
    template: Option<LogTemplate>,
    /// The experiment the request took part in, and its variant.
    experiment: Option<LogExperiment>,
    /// `playground` for a playground comparison's call; null for the API.
    origin: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct LogTemplate {
    id: Uuid,
    version: Option<i32>,
}

#[derive(Serialize, ToSchema)]
pub struct LogExperiment {
    id: Uuid,
    variant: Option<String>,
}

impl LogEntry {
    fn from(r: &AuditRecord, key_prefix: Option<String>) -> Self {
        LogEntry {
            id: r.id,
            created_at: r.created_at,
            team_id: r.team_id,
            key_id: r.api_key_id,
            key_prefix,
            endpoint: r.endpoint.clone(),
            model: r.model.clone(),
            provider: r.provider.clone(),
            upstream_model: r.upstream_model.clone(),
            deployment: r.deployment.clone(),
            status: r.status_code,
            error_type: r.error_type.clone(),
            stream: r.stream,
            cache: r.cache_status.clone(),
            policy_action: r.policy_action.clone().unwrap_or_else(|| "none".into()),
            attempts: r.attempts,
            tokens: LogTokens {
                prompt: r.prompt_tokens,
                completion: r.completion_tokens,
                total: r.total_tokens,
                cached: r.cached_tokens,
                reasoning: r.reasoning_tokens,
                cache_creation: r.cache_creation_tokens,
            },
            cost_usd: r.cost_usd.normalize().to_string(),
            settled_by: r.settled_by.clone(),
            latency: LogLatency {
                total_ms: r.latency_ms,
                upstream_ms: r.upstream_latency_ms,
                ttft_ms: r.ttft_ms,
                overhead_us: r.overhead_us,
            },
            template: r.template_id.map(|id| LogTemplate { id, version: r.template_version }),
            experiment: r.experiment_id.map(|id| LogExperiment { id, variant: r.experiment_variant.clone() }),
            origin: r.origin.clone(),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct LogPage {
    data: Vec<LogEntry>,
    /// Pass as `cursor` for the next page; null on the last page.
    next_cursor: Option<String>,
}

/// The request log, newest first, filtered and paginated by cursor.
#[utoipa::path(operation_id = "list_request_logs", tag = "analytics", params(LogQuery),
    responses((status = 200, body = LogPage), Errors))]
#[get("/analytics/logs")]
pub async fn list(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<LogQuery>,
) -> ApiResult<HttpResponse> {
    let q = q.into_inner();
    let filter = q.filter(Utc::now())?;
    let limit = pagination::limit(q.limit)?;
    let cursor = q.cursor.as_deref().map(parse_cursor).transpose()?;
    let mut conn = state.read_conn().await?;
    let mut rows = audit_logs::list(&mut conn, session.org_id, &filter, cursor, limit).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let mut keys: Vec<Uuid> = rows.iter().filter_map(|r| r.api_key_id).collect();
    keys.sort_unstable();
    keys.dedup();
    let prefixes: std::collections::HashMap<Uuid, String> = api_keys::labels(&mut conn, session.org_id, &keys)
        .await?
        .into_iter()
        .map(|(id, l)| (id, l.key_prefix))
        .collect();
    let next_cursor = if more { rows.last().map(cursor_text) } else { None };
    let data = rows.iter().map(|r| LogEntry::from(r, r.api_key_id.and_then(|k| prefixes.get(&k).cloned()))).collect();
    Ok(HttpResponse::Ok().json(LogPage { data, next_cursor }))
}

#[derive(Serialize, ToSchema)]
pub struct ChainLink {
    /// The row's position in the organization's chain.
    seq: Option<i64>,
    /// Hex SHA-256 of the previous row's link, and of this one.
    prev_hash: Option<String>,
    row_hash: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct LogDetail {
    #[serde(flatten)]
    entry: LogEntry,
    /// Every upstream attempt, in order.
    routing: Vec<Attempt>,
    /// Every policy decision (entity types and counts, never matched values).
    policy: Vec<Decision>,
    #[schema(value_type = String)]
    cache_saved_usd: String,
    cache_similarity: Option<f32>,
    client_ip: Option<String>,
    user_agent: Option<String>,
    /// Only when the organization logs bodies, after redaction.
    request_body: Option<String>,
    response_body: Option<String>,
    chain: ChainLink,
}

/// One request's audit row in full.
#[utoipa::path(operation_id = "get_request_log", tag = "analytics",
    params(("log_id" = Uuid, Path, description = "The request id (`x-gw-request-id`)")),
    responses((status = 200, body = LogDetail), Errors))]
#[get("/analytics/logs/{log_id}")]
pub async fn detail(state: web::Data<AppState>, session: Session, path: web::Path<String>) -> ApiResult<HttpResponse> {
    let id = Uuid::parse_str(&path.into_inner()).map_err(|_| ApiError::NotFound("log entry"))?;
    let mut conn = state.read_conn().await?;
    let r = audit_logs::find(&mut conn, session.org_id, id).await?.ok_or(ApiError::NotFound("log entry"))?;
    let prefix = match r.api_key_id {
        Some(k) => api_keys::labels(&mut conn, session.org_id, &[k]).await?.remove(&k).map(|l| l.key_prefix),
        None => None,
    };
    let user_agent = match r.user_agent_id {
        Some(ua) => audit_logs::user_agent(&mut conn, ua).await?,
        None => None,
    };
    Ok(HttpResponse::Ok().json(LogDetail {
        entry: LogEntry::from(&r, prefix),
        routing: Attempt::list(&r.routing),
        policy: Decision::list(&r.policy),
        cache_saved_usd: r.cache_saved_usd.normalize().to_string(),
        cache_similarity: r.cache_similarity,
        client_ip: r.client_ip.map(|ip| ip.addr().to_string()),
        user_agent,
        request_body: r.request_body.clone(),
        response_body: r.response_body.clone(),
        chain: ChainLink {
            seq: r.chain_seq,
            prev_hash: r.prev_hash.as_deref().map(hex::encode),
            row_hash: r.row_hash.as_deref().map(hex::encode),
        },
    }))
}
