//! The overview: spend, volume, tokens, errors, cache hit rate and latency percentiles over a
//! period, in total and grouped by team, key, model, provider or day. Whole hours come from the
//! hourly rollups (`db::rollups::collect`), the period's ragged edges and the hours not yet
//! rolled up from the audit log itself, so the answer is exact for counts and sums and stays fast
//! at millions of rows.

use std::collections::BTreeMap;

use actix_web::{get, web, HttpResponse};
use chrono::{DateTime, Datelike, NaiveTime, TimeDelta, Utc};
use gw_shared::analytics::{latency_bounds_ms, quantile};
use gw_shared::db::rollups::{self, Rollup, Scope};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::period::period;
use crate::session::Session;
use crate::state::AppState;

const MAX_DAYS: i64 = 366;
const DEFAULT_DAYS: i64 = 7;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct OverviewQuery {
    /// The period ending now: `Nh` or `Nd` (`24h`, `7d`, `30d`), or the calendar period so far
    /// (UTC): `day`, `week` (from Monday) or `month`. Not with `from` or `to`.
    period: Option<String>,
    /// Start, inclusive: an RFC 3339 time or a date. Default: 7 days before `to`.
    from: Option<String>,
    /// End, exclusive: an RFC 3339 time or a date. Default: now. At most 366 days after `from`.
    to: Option<String>,
    team_id: Option<Uuid>,
    /// The API key that made the requests.
    key_id: Option<Uuid>,
    /// `team`, `key`, `model`, `provider` or `day` (UTC): adds `groups`.
    group_by: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum GroupBy {
    Team,
    Key,
    Model,
    Provider,
    Day,
}

/// The start of the calendar period `p` (`day`, `week`, `month`) that holds `now`, in UTC.
fn calendar_start(p: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let today = now.date_naive();
    let day = match p {
        "day" => today,
        "week" => today - TimeDelta::days(i64::from(today.weekday().num_days_from_monday())),
        "month" => today.with_day(1)?,
        _ => return None,
    };
    Some(day.and_time(NaiveTime::MIN).and_utc())
}

fn period_span(p: &str) -> ApiResult<TimeDelta> {
    let bad = || ApiError::field("period", "must be day, week, month, or a number of hours or days, like 24h or 30d");
    let (n, unit) = p.split_at(p.len().saturating_sub(1));
    let n: i64 = n.parse().map_err(|_| bad())?;
    let span = match unit {
        "h" => TimeDelta::try_hours(n),
        "d" => TimeDelta::try_days(n),
        _ => None,
    }
    .ok_or_else(bad)?;
    if n <= 0 || span > TimeDelta::days(MAX_DAYS) {
        return Err(ApiError::field("period", format!("must be between 1h and {MAX_DAYS}d")));
    }
    Ok(span)
}

impl OverviewQuery {
    fn bounds(&self, now: DateTime<Utc>) -> ApiResult<(DateTime<Utc>, DateTime<Utc>)> {
        if let Some(p) = &self.period {
            if self.from.is_some() || self.to.is_some() {
                return Err(ApiError::field("period", "give a period or from and to, not both"));
            }
            if let Some(start) = calendar_start(p, now) {
                // The first instant of a period: a window that is not empty.
                return Ok((start, now.max(start + TimeDelta::seconds(1))));
            }
            return Ok((now - period_span(p)?, now));
        }
        period(("from", self.from.as_deref()), ("to", self.to.as_deref()), DEFAULT_DAYS, now)
    }

    fn group_by(&self) -> ApiResult<Option<GroupBy>> {
        Ok(match self.group_by.as_deref() {
            None => None,
            Some("team") => Some(GroupBy::Team),
            Some("key") => Some(GroupBy::Key),
            Some("model") => Some(GroupBy::Model),
            Some("provider") => Some(GroupBy::Provider),
            Some("day") => Some(GroupBy::Day),
            Some(_) => return Err(ApiError::field("group_by", "must be team, key, model, provider or day")),
        })
    }
}

#[derive(Serialize, ToSchema)]
pub struct OverviewCache {
    /// `hits / lookups` over the period (0 without lookups).
    hit_rate: f64,
    hits: i64,
    lookups: i64,
    #[schema(value_type = String)]
    saved_usd: String,
}

#[derive(Serialize, ToSchema)]
pub struct OverviewTokens {
    prompt: i64,
    completion: i64,
    cached: i64,
    total: i64,
}

#[derive(Serialize, ToSchema)]
pub struct OverviewLatency {
    /// Milliseconds, from 15%-wide latency buckets (within about 7%); null without requests.
    p50_ms: Option<f64>,
    p95_ms: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct Figures {
    requests: i64,
    /// Requests answered with a status of 400 or more.
    errors: i64,
    error_rate: f64,
    #[schema(value_type = String)]
    spend_usd: String,
    /// Prompt plus completion tokens.
    total_tokens: i64,
    tokens: OverviewTokens,
    cache: OverviewCache,
    latency: OverviewLatency,
}

#[derive(Serialize, ToSchema)]
pub struct Group {
    /// The team id, the key id, the model, the provider or the day (`YYYY-MM-DD`); null for
    /// requests without a team, key, model or provider.
    key: Option<String>,
    /// What the group is called: the team's or the key's name (deleted teams and revoked keys
    /// keep theirs), else as `key`.
    name: Option<String>,
    #[serde(flatten)]
    figures: Figures,
}

#[derive(Serialize, ToSchema)]
pub struct Overview {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    #[serde(flatten)]
    figures: Figures,
    /// With `group_by`: one entry per team, key, model, provider or day, largest spend first
    /// (days in order).
    #[serde(skip_serializing_if = "Option::is_none")]
    groups: Option<Vec<Group>>,
}

fn rate(n: i64, of: i64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 / of as f64
    }
}

fn figures(r: &Rollup, bounds: &[i32]) -> Figures {
    Figures {
        requests: r.requests,
        errors: r.errors,
        error_rate: rate(r.errors, r.requests),
        spend_usd: r.cost_usd.normalize().to_string(),
        total_tokens: r.prompt_tokens + r.completion_tokens,
        tokens: OverviewTokens {
            prompt: r.prompt_tokens,
            completion: r.completion_tokens,
            cached: r.cached_tokens,
            total: r.prompt_tokens + r.completion_tokens,
        },
        cache: OverviewCache {
            hit_rate: rate(r.cache_hits, r.cache_lookups),
            hits: r.cache_hits,
            lookups: r.cache_lookups,
            saved_usd: r.cache_saved_usd.normalize().to_string(),
        },
        latency: OverviewLatency {
            p50_ms: quantile(&r.latency_hist, bounds, 0.5),
            p95_ms: quantile(&r.latency_hist, bounds, 0.95),
        },
    }
}

/// Spend, volume, tokens, errors, cache hit rate and latency over a period, optionally grouped.
#[utoipa::path(operation_id = "get_analytics_overview", tag = "analytics", params(OverviewQuery),
    responses((status = 200, body = Overview), Errors))]
#[get("/analytics/overview")]
pub async fn overview(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<OverviewQuery>,
) -> ApiResult<HttpResponse> {
    let q = q.into_inner();
    let (from, to) = q.bounds(Utc::now())?;
    let group_by = q.group_by()?;
    let mut conn = state.read_conn().await?;
    let scope = Scope { team_id: q.team_id, api_key_id: q.key_id };
    let rows = rollups::collect(&mut conn, session.org_id, scope, from, to).await?;
    let bounds = latency_bounds_ms();
    let mut total = Rollup::default();
    let mut groups: BTreeMap<Option<String>, Rollup> = BTreeMap::new();
    for r in &rows {
        total.add(r);
        if let Some(g) = group_by {
            let key = match g {
                GroupBy::Team => r.team_id.map(|t| t.to_string()),
                GroupBy::Key => r.api_key_id.map(|k| k.to_string()),
                GroupBy::Model => r.model.clone(),
                GroupBy::Provider => r.provider.clone(),
                GroupBy::Day => Some(r.hour.format("%Y-%m-%d").to_string()),
            };
            groups.entry(key).or_default().add(r);
        }
    }
    let names = match group_by {
        Some(GroupBy::Team) => {
            let ids: Vec<Uuid> = groups.keys().flatten().filter_map(|k| k.parse().ok()).collect();
            gw_shared::db::teams::names(&mut conn, session.org_id, &ids).await?
        }
        Some(GroupBy::Key) => {
            let ids: Vec<Uuid> = groups.keys().flatten().filter_map(|k| k.parse().ok()).collect();
            let labels = gw_shared::db::api_keys::labels(&mut conn, session.org_id, &ids).await?;
            labels.into_iter().map(|(id, l)| (id, l.name)).collect()
        }
        _ => Default::default(),
    };
    let groups = group_by.map(|g| {
        let mut list: Vec<(Option<String>, Rollup)> = groups.into_iter().collect();
        if g != GroupBy::Day {
            list.sort_by(|a, b| b.1.cost_usd.cmp(&a.1.cost_usd).then(b.1.requests.cmp(&a.1.requests)));
        }
        list.into_iter()
            .map(|(key, r)| {
                let name = match g {
                    GroupBy::Team | GroupBy::Key => {
                        key.as_deref().and_then(|k| k.parse::<Uuid>().ok()).and_then(|id| names.get(&id).cloned())
                    }
                    _ => key.clone(),
                };
                Group { key, name, figures: figures(&r, &bounds) }
            })
            .collect()
    });
    Ok(HttpResponse::Ok().json(Overview { from, to, figures: figures(&total, &bounds), groups }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn calendar_periods_start_at_their_first_utc_instant() {
        let now = at("2026-11-27T15:04:05Z");
        assert_eq!(calendar_start("day", now), Some(at("2026-11-27T00:00:00Z")));
        // 2026-11-27 is a Friday; weeks start on Monday.
        assert_eq!(calendar_start("week", now), Some(at("2026-11-23T00:00:00Z")));
        assert_eq!(calendar_start("month", now), Some(at("2026-11-01T00:00:00Z")));
        assert_eq!(calendar_start("7d", now), None);
        let q = OverviewQuery {
            period: Some("month".into()),
            from: None,
            to: None,
            team_id: None,
            key_id: None,
            group_by: None,
        };
        assert_eq!(q.bounds(now).unwrap(), (at("2026-11-01T00:00:00Z"), now));
    }
}
