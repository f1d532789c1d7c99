//! The response cache's analytics (hit rate per tier, saved cost), read from the request audit
//! log over a period.

use actix_web::{get, web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::policy::PolicyQuery;
use crate::error::{ApiResult, Errors};
use crate::session::Session;
use crate::state::AppState;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PeriodQuery {
    /// Start of the period, inclusive: an RFC 3339 time or a date (`2026-01-31`, midnight UTC).
    /// Default: 7 days before `to`.
    from: Option<String>,
    /// End of the period, exclusive: an RFC 3339 time or a date (midnight UTC). Default: now.
    /// At most 366 days after `from`.
    to: Option<String>,
    /// Only requests attributed to this team.
    team_id: Option<Uuid>,
}

impl PeriodQuery {
    fn period(self, now: DateTime<Utc>) -> ApiResult<(DateTime<Utc>, DateTime<Utc>, Option<Uuid>)> {
        let f = PolicyQuery {
            from: self.from,
            to: self.to,
            team_id: self.team_id,
            policy: None,
            action: None,
            guardrail: None,
        }
        .filter(now)?;
        Ok((f.from, f.to, f.team_id))
    }
}

#[derive(Serialize, ToSchema, Default)]
pub struct TierStats {
    /// Requests this tier answered.
    hits: i64,
    /// Of the requests looked up (hits and misses), the share this tier answered.
    hit_rate: f64,
    /// What the answers it served cost when they were produced.
    #[schema(value_type = String)]
    saved_usd: String,
}

#[derive(Serialize, ToSchema)]
pub struct CacheTiers {
    #[serde(rename = "L1")]
    l1: TierStats,
    #[serde(rename = "L2")]
    l2: TierStats,
    #[serde(rename = "L3")]
    l3: TierStats,
}

#[derive(Serialize, ToSchema)]
pub struct CacheAnalytics {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    /// Every request of the period.
    requests: i64,
    /// Requests looked up in the cache (hits and misses); the others bypassed it (caching off,
    /// `Cache-Control: no-cache`/`no-store`).
    lookups: i64,
    hits: i64,
    misses: i64,
    bypassed: i64,
    /// `hits / lookups` (0 without lookups).
    hit_rate: f64,
    #[schema(value_type = String)]
    saved_usd: String,
    tiers: CacheTiers,
}

fn rate(n: i64, of: i64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 / of as f64
    }
}

async fn cache_stats(
    conn: &mut diesel_async::AsyncPgConnection,
    org_id: Uuid,
    (from, to, team_id): (DateTime<Utc>, DateTime<Utc>, Option<Uuid>),
) -> ApiResult<CacheAnalytics> {
    let rows = gw_shared::db::cache::tier_counts(conn, org_id, from, to, team_id).await?;
    let count = |label: &str| rows.iter().filter(|r| r.cache_status == label).map(|r| r.requests).sum::<i64>();
    let saved = |label: &str| {
        rows.iter().filter(|r| r.cache_status == label).map(|r| r.saved_usd).sum::<rust_decimal::Decimal>()
    };
    let (l1, l2, l3, misses) = (count("L1"), count("L2"), count("L3"), count("miss"));
    let hits = l1 + l2 + l3;
    let lookups = hits + misses;
    let requests: i64 = rows.iter().map(|r| r.requests).sum();
    let tier = |label: &str, n: i64| TierStats {
        hits: n,
        hit_rate: rate(n, lookups),
        saved_usd: saved(label).normalize().to_string(),
    };
    let total_saved = saved("L1") + saved("L2") + saved("L3");
    Ok(CacheAnalytics {
        from,
        to,
        requests,
        lookups,
        hits,
        misses,
        bypassed: requests - lookups,
        hit_rate: rate(hits, lookups),
        saved_usd: total_saved.normalize().to_string(),
        tiers: CacheTiers { l1: tier("L1", l1), l2: tier("L2", l2), l3: tier("L3", l3) },
    })
}

/// The response cache over a period: hit rate per tier and the cost the hits saved.
#[utoipa::path(operation_id = "get_cache_analytics", tag = "analytics", params(PeriodQuery),
    responses((status = 200, body = CacheAnalytics), Errors))]
#[get("/analytics/cache")]
pub async fn cache_summary(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<PeriodQuery>,
) -> ApiResult<HttpResponse> {
    let period = q.into_inner().period(Utc::now())?;
    let mut conn = state.read_conn().await?;
    Ok(HttpResponse::Ok().json(cache_stats(&mut conn, session.org_id, period).await?))
}
