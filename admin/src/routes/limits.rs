//! Where an organization, a team or a key stands against its limits right now: the current
//! period's spend, open reservations and what is left of the budget, and this minute's use of
//! each rate limit, read from the shared counters the proxies keep in Redis.

use std::collections::BTreeMap;

use actix_web::{get, web, HttpResponse};
use chrono::{DateTime, Utc};
use gw_shared::db::rollups::Owner;
use gw_shared::db::{api_keys, orgs, teams};
use gw_shared::limits::period::Period;
use gw_shared::limits::plan::{budget_keys, window_key, Measure, Plan, Scope, WINDOW_MS};
use gw_shared::limits::script::Scripts;
use gw_shared::limits::settings::{Budget, RateLimits, ScopeLimits};
use redis::AsyncCommands;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::session::Session;
use crate::spend::{self, PeriodSpend};
use crate::state::AppState;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(org_limits).service(team_limits).service(key_limits);
}

#[derive(Serialize, ToSchema)]
pub struct BudgetStatus {
    #[schema(value_type = String)]
    amount_usd: String,
    period: String,
    /// The current period (`2026-11-23`, `2026-W48`, `2026-11`, `total`).
    period_id: String,
    period_start: Option<DateTime<Utc>>,
    /// When the next period begins; null for `total`.
    period_end: Option<DateTime<Utc>>,
    hard_limit: bool,
    alert_thresholds: Vec<u8>,
    /// Settled spend this period.
    #[schema(value_type = String)]
    spend_usd: String,
    /// Held by requests in flight (their maximum possible cost, until they settle).
    #[schema(value_type = String)]
    reserved_usd: String,
    /// `amount_usd` minus spend and reservations, at least 0.
    #[schema(value_type = String)]
    remaining_usd: String,
    /// Settled spend as a percentage of `amount_usd`.
    percent_used: f64,
    /// Requests in flight holding a reservation.
    reservations: i64,
}

#[derive(Serialize, ToSchema)]
pub struct WindowStatus {
    limit: u64,
    /// Counted in the current minute (tokens: estimates corrected by real usage as requests end).
    used: u64,
    remaining: u64,
    /// Milliseconds until the minute ends.
    reset_ms: u64,
}

#[derive(Serialize, ToSchema)]
pub struct ConcurrencyStatus {
    limit: u64,
    in_flight: u64,
}

#[derive(Serialize, ToSchema)]
pub struct ModelWindows {
    rpm: Option<WindowStatus>,
    tpm: Option<WindowStatus>,
}

#[derive(Serialize, ToSchema)]
pub struct RateLimitStatus {
    rpm: Option<WindowStatus>,
    tpm: Option<WindowStatus>,
    max_concurrent: Option<ConcurrencyStatus>,
    models: BTreeMap<String, ModelWindows>,
}

#[derive(Serialize, ToSchema)]
pub struct LimitsStatus {
    /// `organization`, `team` or `key`.
    scope: &'static str,
    /// The budget and where it stands; null when none is set.
    budget: Option<BudgetStatus>,
    /// The rate limits and this minute's use; null when none are set.
    rate_limits: Option<RateLimitStatus>,
    /// Spend in the budget's current period, or this calendar month without a budget, from the
    /// audit log (`budget.spend_usd` is the budget counter's, which also counts spend not yet
    /// written to the log).
    spend: PeriodSpend,
}

async fn status(state: &AppState, org_id: Uuid, scope: Scope, limits: ScopeLimits) -> ApiResult<LimitsStatus> {
    let (owner, id) = match scope {
        // The gateway quota's spend is not the organization's whole spend; shown as the
        // organization's until the quota has a status of its own.
        Scope::Org | Scope::Gateway => (Owner::Org, org_id),
        Scope::Team(t) => (Owner::Team, t),
        Scope::Key(k) => (Owner::Key, k),
    };
    let period = limits.budget.as_ref().map(|b| b.period()).unwrap_or(Period::Month);
    let mut db = state.conn().await?;
    let spend = spend::current(&mut db, org_id, owner, &[(id, period)]).await?.remove(&id);
    drop(db);
    let spend = spend.unwrap_or_else(|| spend::zero(period));
    let mut conn = state.redis.get().await.map_err(|e| ApiError::Unavailable(format!("redis: {e}")))?;
    let prefix = Plan::prefix(org_id);
    let now = Utc::now();
    let budget = match limits.budget {
        Some(b) => Some(budget_status(&mut conn, &prefix, scope, b, now).await?),
        None => None,
    };
    let rate_limits = match limits.rate_limits {
        Some(r) => Some(rate_status(&mut conn, &prefix, scope, r, now).await?),
        None => None,
    };
    Ok(LimitsStatus { scope: scope.label(), budget, rate_limits, spend })
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::Unavailable(format!("redis: {e}"))
}

async fn budget_status(
    conn: &mut gw_shared::redis::Conn,
    prefix: &str,
    scope: Scope,
    b: Budget,
    now: DateTime<Utc>,
) -> ApiResult<BudgetStatus> {
    let period = b.period();
    let window = period.window(now);
    let keys = budget_keys(prefix, scope, &window.id);
    let (spent, reserved, reservations) = Scripts::default().peek(conn, &keys).await.map_err(unavailable)?;
    let limit = b.limit_nanos();
    let usd = |n: i64| gw_shared::money::from_nanos(n).to_string();
    Ok(BudgetStatus {
        amount_usd: gw_shared::money::text(b.amount_usd),
        period: period.as_str().into(),
        period_id: window.id,
        period_start: window.start,
        period_end: window.end,
        hard_limit: b.hard_limit,
        alert_thresholds: b.alert_thresholds,
        spend_usd: usd(spent),
        reserved_usd: usd(reserved),
        remaining_usd: usd((limit - spent - reserved).max(0)),
        percent_used: if limit > 0 { (spent as f64 * 10_000.0 / limit as f64).round() / 100.0 } else { 0.0 },
        reservations,
    })
}

async fn window(
    conn: &mut gw_shared::redis::Conn,
    key: &str,
    limit: Option<u32>,
    now_ms: i64,
) -> ApiResult<Option<WindowStatus>> {
    let Some(limit) = limit.map(u64::from) else { return Ok(None) };
    let index = now_ms.div_euclid(WINDOW_MS as i64);
    let used: Option<u64> = conn.get(format!("{key}:{index}")).await.map_err(unavailable)?;
    let used = used.unwrap_or(0);
    let reset_ms = ((index + 1) * WINDOW_MS as i64 - now_ms).max(0) as u64;
    Ok(Some(WindowStatus { limit, used, remaining: limit.saturating_sub(used), reset_ms }))
}

async fn rate_status(
    conn: &mut gw_shared::redis::Conn,
    prefix: &str,
    scope: Scope,
    r: RateLimits,
    now: DateTime<Utc>,
) -> ApiResult<RateLimitStatus> {
    let now_ms = now.timestamp_millis();
    let rpm = window(conn, &window_key(prefix, scope, Measure::Requests, None), r.rpm, now_ms).await?;
    let tpm = window(conn, &window_key(prefix, scope, Measure::Tokens, None), r.tpm, now_ms).await?;
    let max_concurrent = match r.max_concurrent {
        Some(limit) => {
            let key = format!("{prefix}:c:{}", scope.tag());
            let in_flight: u64 = conn.zcount(key, now_ms, "+inf").await.map_err(unavailable)?;
            Some(ConcurrencyStatus { limit: u64::from(limit), in_flight })
        }
        None => None,
    };
    let mut models = BTreeMap::new();
    for (name, m) in r.models.unwrap_or_default() {
        let rpm = window(conn, &window_key(prefix, scope, Measure::Requests, Some(&name)), m.rpm, now_ms).await?;
        let tpm = window(conn, &window_key(prefix, scope, Measure::Tokens, Some(&name)), m.tpm, now_ms).await?;
        models.insert(name, ModelWindows { rpm, tpm });
    }
    Ok(RateLimitStatus { rpm, tpm, max_concurrent, models })
}

/// The organization's budget and rate limits, and where they stand.
#[utoipa::path(operation_id = "get_organization_limits", tag = "limits", responses((status = 200, body = LimitsStatus), Errors))]
#[get("/organizations/current/limits")]
pub async fn org_limits(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let limits = orgs::limits(&mut conn, session.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    drop(conn);
    Ok(HttpResponse::Ok().json(status(&state, session.org_id, Scope::Org, limits).await?))
}

/// A team's budget and rate limits, and where they stand.
#[utoipa::path(operation_id = "get_team_limits", tag = "limits", params(("team_id" = Uuid, Path, description = "The team's id")),
    responses((status = 200, body = LimitsStatus), Errors))]
#[get("/teams/{team_id}/limits")]
pub async fn team_limits(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let team_id = id.into_inner();
    let mut conn = state.conn().await?;
    let team = teams::find_live(&mut conn, session.org_id, team_id).await?.ok_or(ApiError::NotFound("team"))?;
    drop(conn);
    let limits = ScopeLimits::from_json(team.budget, team.rate_limits);
    Ok(HttpResponse::Ok().json(status(&state, session.org_id, Scope::Team(team_id), limits).await?))
}

/// A key's own budget and rate limits, and where they stand.
#[utoipa::path(operation_id = "get_api_key_limits", tag = "limits", params(("key_id" = Uuid, Path, description = "The key's id")),
    responses((status = 200, body = LimitsStatus), Errors))]
#[get("/api-keys/{key_id}/limits")]
pub async fn key_limits(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let key_id = id.into_inner();
    let mut conn = state.conn().await?;
    let key = api_keys::find(&mut conn, session.org_id, key_id).await?.ok_or(ApiError::NotFound("api key"))?;
    drop(conn);
    let limits = ScopeLimits::from_json(key.budget, key.rate_limits);
    Ok(HttpResponse::Ok().json(status(&state, session.org_id, Scope::Key(key_id), limits).await?))
}
