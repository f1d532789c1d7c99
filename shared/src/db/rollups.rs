//! Hourly aggregates of the audit log, kept by the admin leader's job, so an overview over
//! months reads thousands of small rows instead of millions of audit rows. Hours already
//! aggregated are recomputed when rows for them arrive late (replayed from a proxy's spool),
//! found through `ingested_at`.

use std::collections::BTreeMap;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Int4, Nullable, Numeric, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use rust_decimal::Decimal;
use uuid::Uuid;

use super::schema::audit_rollups_hourly;
use crate::analytics::{buckets, latency_bounds_ms, merge};
use crate::error::Result;

/// One group of audit rows: requests of one organization, hour, team, API key, model and
/// provider.
#[derive(Debug, Clone, Default, PartialEq, Queryable, Selectable, Insertable)]
#[diesel(table_name = audit_rollups_hourly)]
pub struct Rollup {
    pub org_id: Uuid,
    pub hour: DateTime<Utc>,
    pub team_id: Option<Uuid>,
    pub api_key_id: Option<Uuid>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub requests: i64,
    pub errors: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    pub cost_usd: Decimal,
    pub cache_saved_usd: Decimal,
    pub cache_hits: i64,
    pub cache_lookups: i64,
    pub latency_hist: Vec<i64>,
    /// What requests answered on the gateway's own provider credentials cost (the last attempt's
    /// credential), what a `gateway_cost` meter bills.
    pub gateway_cost_usd: Decimal,
}

impl Rollup {
    /// Adds another group's counts into this one.
    pub fn add(&mut self, o: &Rollup) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
        self.cached_tokens += o.cached_tokens;
        self.cost_usd += o.cost_usd;
        self.cache_saved_usd += o.cache_saved_usd;
        self.cache_hits += o.cache_hits;
        self.cache_lookups += o.cache_lookups;
        self.gateway_cost_usd += o.gateway_cost_usd;
        merge(&mut self.latency_hist, &o.latency_hist);
    }
}

#[derive(QueryableByName)]
struct Bucketed {
    #[diesel(sql_type = SqlUuid)]
    org_id: Uuid,
    #[diesel(sql_type = Timestamptz)]
    hour: DateTime<Utc>,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    team_id: Option<Uuid>,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    api_key_id: Option<Uuid>,
    #[diesel(sql_type = Nullable<Text>)]
    model: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    provider: Option<String>,
    #[diesel(sql_type = Int4)]
    bucket: i32,
    #[diesel(sql_type = BigInt)]
    requests: i64,
    #[diesel(sql_type = BigInt)]
    errors: i64,
    #[diesel(sql_type = BigInt)]
    prompt_tokens: i64,
    #[diesel(sql_type = BigInt)]
    completion_tokens: i64,
    #[diesel(sql_type = BigInt)]
    cached_tokens: i64,
    #[diesel(sql_type = Numeric)]
    cost_usd: Decimal,
    #[diesel(sql_type = Numeric)]
    cache_saved_usd: Decimal,
    #[diesel(sql_type = BigInt)]
    cache_hits: i64,
    #[diesel(sql_type = BigInt)]
    cache_lookups: i64,
    #[diesel(sql_type = Numeric)]
    gateway_cost_usd: Decimal,
}

/// Organization, hour, team, key, model, provider.
type GroupKey = (Uuid, DateTime<Utc>, Option<Uuid>, Option<Uuid>, Option<String>, Option<String>);

/// Which of an organization's requests to aggregate: all, a team's, a key's.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scope {
    pub team_id: Option<Uuid>,
    pub api_key_id: Option<Uuid>,
}

/// Aggregates audit rows created in `[from, to)` straight from the log, one organization's or
/// every organization's, by hour, team, key, model and provider.
pub async fn aggregate(
    conn: &mut AsyncPgConnection,
    org_id: Option<Uuid>,
    scope: Scope,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<Rollup>> {
    let rows: Vec<Bucketed> = diesel::sql_query(
        "SELECT org_id, date_trunc('hour', created_at) AS hour, team_id, api_key_id, model, provider, \
           width_bucket(latency_ms, $6) AS bucket, count(*) AS requests, \
           count(*) FILTER (WHERE status_code >= 400) AS errors, \
           coalesce(sum(prompt_tokens), 0)::bigint AS prompt_tokens, \
           coalesce(sum(completion_tokens), 0)::bigint AS completion_tokens, \
           coalesce(sum(cached_tokens), 0)::bigint AS cached_tokens, \
           coalesce(sum(cost_usd), 0) AS cost_usd, coalesce(sum(cache_saved_usd), 0) AS cache_saved_usd, \
           count(*) FILTER (WHERE cache_status IN ('L1', 'L2', 'L3')) AS cache_hits, \
           count(*) FILTER (WHERE cache_status <> 'bypass') AS cache_lookups, \
           coalesce(sum(cost_usd) FILTER (WHERE coalesce(routing->-1->>'credential', 'gateway') = 'gateway'), 0) \
             AS gateway_cost_usd \
         FROM audit_logs WHERE created_at >= $1 AND created_at < $2 \
           AND ($3::uuid IS NULL OR org_id = $3) AND ($4::uuid IS NULL OR team_id = $4) \
           AND ($5::uuid IS NULL OR api_key_id = $5) \
         GROUP BY 1, 2, 3, 4, 5, 6, 7",
    )
    .bind::<Timestamptz, _>(from)
    .bind::<Timestamptz, _>(to)
    .bind::<Nullable<SqlUuid>, _>(org_id)
    .bind::<Nullable<SqlUuid>, _>(scope.team_id)
    .bind::<Nullable<SqlUuid>, _>(scope.api_key_id)
    .bind::<Array<Int4>, _>(latency_bounds_ms())
    .load(conn)
    .await?;
    let n = buckets();
    let mut groups: BTreeMap<GroupKey, Rollup> = BTreeMap::new();
    for r in rows {
        let key = (r.org_id, r.hour, r.team_id, r.api_key_id, r.model.clone(), r.provider.clone());
        let g = groups.entry(key).or_insert_with(|| Rollup {
            org_id: r.org_id,
            hour: r.hour,
            team_id: r.team_id,
            api_key_id: r.api_key_id,
            model: r.model,
            provider: r.provider,
            latency_hist: vec![0; n],
            ..Rollup::default()
        });
        let mut hist = vec![0; n];
        if let Some(slot) = usize::try_from(r.bucket).ok().and_then(|b| hist.get_mut(b)) {
            *slot = r.requests;
        }
        g.add(&Rollup {
            requests: r.requests,
            errors: r.errors,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            cached_tokens: r.cached_tokens,
            cost_usd: r.cost_usd,
            cache_saved_usd: r.cache_saved_usd,
            cache_hits: r.cache_hits,
            cache_lookups: r.cache_lookups,
            gateway_cost_usd: r.gateway_cost_usd,
            latency_hist: hist,
            ..Rollup::default()
        });
    }
    Ok(groups.into_values().collect())
}

/// One organization's aggregates for the hours in `[from, to)`.
pub async fn read(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    scope: Scope,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<Rollup>> {
    let mut q = audit_rollups_hourly::table
        .filter(audit_rollups_hourly::org_id.eq(org_id))
        .filter(audit_rollups_hourly::hour.ge(from))
        .filter(audit_rollups_hourly::hour.lt(to))
        .select(Rollup::as_select())
        .into_boxed();
    if let Some(team) = scope.team_id {
        q = q.filter(audit_rollups_hourly::team_id.eq(team));
    }
    if let Some(key) = scope.api_key_id {
        q = q.filter(audit_rollups_hourly::api_key_id.eq(key));
    }
    Ok(q.load(conn).await?)
}

fn ceil_hour(t: DateTime<Utc>) -> DateTime<Utc> {
    let f = floor_hour(t);
    if f == t {
        f
    } else {
        f + TimeDelta::hours(1)
    }
}

/// The part of `[from, to)` the aggregates cover (whole hours already rolled up); empty (`a ==
/// b`, at `from`) when they cover none of it. The rest comes from the log.
fn rolled_part(from: DateTime<Utc>, to: DateTime<Utc>, rolled_until: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let a = ceil_hour(from);
    let b = floor_hour(to).min(rolled_until);
    if a >= b {
        (from, from)
    } else {
        (a, b)
    }
}

/// An organization's groups of audit rows over `[from, to)`: the aggregates for the whole hours
/// they cover, the audit log for the rest, so counts and sums are exact.
pub async fn collect(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    scope: Scope,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<Rollup>> {
    let (a, b) = rolled_part(from, to, state(conn).await?.rolled_until);
    if a == b {
        return aggregate(conn, Some(org_id), scope, from, to).await;
    }
    let mut rows = read(conn, org_id, scope, a, b).await?;
    if from < a {
        rows.extend(aggregate(conn, Some(org_id), scope, from, a).await?);
    }
    if b < to {
        rows.extend(aggregate(conn, Some(org_id), scope, b, to).await?);
    }
    Ok(rows)
}

/// What spend is summed by.
#[derive(Debug, Clone, Copy)]
pub enum Owner {
    Org,
    Team,
    Key,
}

#[derive(QueryableByName)]
struct OwnerSpend {
    #[diesel(sql_type = SqlUuid)]
    id: Uuid,
    #[diesel(sql_type = Numeric)]
    spend: Decimal,
}

/// The spend of each of `ids` (`org_id` itself, or teams or keys of it) over `[from, to)`, exact like
/// [`collect`]; ids without requests are absent.
pub async fn spend(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    owner: Owner,
    ids: &[Uuid],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<std::collections::HashMap<Uuid, Decimal>> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let (a, b) = rolled_part(from, to, state(conn).await?.rolled_until);
    let column = match owner {
        Owner::Org => "org_id",
        Owner::Team => "team_id",
        Owner::Key => "api_key_id",
    };
    let rows: Vec<OwnerSpend> = diesel::sql_query(format!(
        "SELECT id, sum(cost) AS spend FROM ( \
           SELECT {column} AS id, cost_usd AS cost FROM audit_rollups_hourly \
             WHERE org_id = $1 AND {column} = ANY($6) AND hour >= $3 AND hour < $4 \
           UNION ALL \
           SELECT {column}, cost_usd FROM audit_logs WHERE org_id = $1 AND {column} = ANY($6) \
             AND ((created_at >= $2 AND created_at < $3) OR (created_at >= $4 AND created_at < $5)) \
         ) s GROUP BY id"
    ))
    .bind::<SqlUuid, _>(org_id)
    .bind::<Timestamptz, _>(from)
    .bind::<Timestamptz, _>(a)
    .bind::<Timestamptz, _>(b)
    .bind::<Timestamptz, _>(to)
    .bind::<Array<SqlUuid>, _>(ids)
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.spend)).collect())
}

#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct State {
    /// Every hour before this one is aggregated.
    #[diesel(sql_type = Timestamptz)]
    pub rolled_until: DateTime<Utc>,
    /// Rows ingested before this instant are reflected.
    #[diesel(sql_type = Timestamptz)]
    pub scanned_until: DateTime<Utc>,
}

pub async fn state(conn: &mut AsyncPgConnection) -> Result<State> {
    Ok(diesel::sql_query("SELECT rolled_until, scanned_until FROM audit_rollup_state WHERE id = 1")
        .get_result(conn)
        .await?)
}

pub fn floor_hour(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::hours(1)).unwrap_or(t)
}

/// Replaces the aggregates of one hour, in one transaction.
async fn refresh_hour(conn: &mut AsyncPgConnection, hour: DateTime<Utc>) -> Result<usize> {
    let end = hour + TimeDelta::hours(1);
    conn.transaction(async |conn| {
        let rows = aggregate(conn, None, Scope::default(), hour, end).await?;
        diesel::delete(audit_rollups_hourly::table.filter(audit_rollups_hourly::hour.eq(hour))).execute(conn).await?;
        for chunk in rows.chunks(2000) {
            diesel::insert_into(audit_rollups_hourly::table).values(chunk).execute(conn).await?;
        }
        Ok::<_, crate::Error>(rows.len())
    })
    .await
}

#[derive(QueryableByName)]
struct Hour {
    #[diesel(sql_type = Nullable<Timestamptz>)]
    hour: Option<DateTime<Utc>>,
}

/// `pg_advisory_xact_lock` key the audit upkeep (partitions, retention, rollups) runs under
/// ("gwaudit"): one runner per cluster.
pub const UPKEEP_LOCK: i64 = 0x0067_7761_7564_6974;

/// Margin for transactions that started before a scan and committed after it.
const LATE_MARGIN: TimeDelta = TimeDelta::minutes(2);
/// Hours aggregated per run at most (a first run over a long history catches up over runs).
const MAX_HOURS_PER_RUN: usize = 24 * 31;

/// Brings the aggregates up to the last full hour before `now` (the process's clock:
/// `gw_shared::clock`), recomputing earlier hours that received rows since the last run. Returns the hours recomputed. The caller holds the
/// leader lock.
pub async fn run(conn: &mut AsyncPgConnection, now: DateTime<Utc>) -> Result<usize> {
    let st = state(conn).await?;
    let target = floor_hour(now);
    let mut hours: std::collections::BTreeSet<DateTime<Utc>> = std::collections::BTreeSet::new();
    let mut start = st.rolled_until;
    if start.timestamp() <= 0 {
        let first: Hour = diesel::sql_query("SELECT date_trunc('hour', min(created_at)) AS hour FROM audit_logs")
            .get_result(conn)
            .await?;
        start = first.hour.unwrap_or(target);
    }
    let mut h = start;
    while h < target && hours.len() < MAX_HOURS_PER_RUN {
        hours.insert(h);
        h += TimeDelta::hours(1);
    }
    let rolled_until = h;
    if st.scanned_until.timestamp() > 0 {
        let late: Vec<Hour> = diesel::sql_query(
            "SELECT DISTINCT date_trunc('hour', created_at) AS hour FROM audit_logs \
             WHERE ingested_at >= $1 AND created_at < $2",
        )
        .bind::<Timestamptz, _>(st.scanned_until - LATE_MARGIN)
        .bind::<Timestamptz, _>(st.rolled_until)
        .load(conn)
        .await?;
        hours.extend(late.into_iter().filter_map(|h| h.hour));
    }
    for hour in &hours {
        refresh_hour(conn, *hour).await?;
    }
    // Ingestion is stamped by Postgres's clock, so the scan's instant is too (the transaction's
    // start: rows committed since are found again next time).
    diesel::sql_query("UPDATE audit_rollup_state SET rolled_until = $1, scanned_until = now() WHERE id = 1")
        .bind::<Timestamptz, _>(rolled_until.max(st.rolled_until))
        .execute(conn)
        .await?;
    Ok(hours.len())
}
