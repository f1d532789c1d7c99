//! Spend reconciliation runs (`reconcile_runs`) and the logged side of a run, summed from the
//! request audit log. A run is kept whole (both ledgers and the differences) because the
//! provider's report keeps changing after the fact (late usage, re-priced days): what a finding
//! was based on must stay readable. Every query is scoped to one organization.

use chrono::{DateTime, NaiveDate, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Date, Integer, Numeric, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use rust_decimal::Decimal;
use serde_json::Value;
use uuid::Uuid;

use super::schema::reconcile_runs;
use crate::error::Result;
use crate::reconcile::{Ledger, Usage};

/// One run. The ledgers and differences are JSON documents whose shape the API defines.
#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = reconcile_runs)]
pub struct Run {
    pub id: Uuid,
    pub org_id: Uuid,
    /// The gw provider name (not its kind).
    pub provider: String,
    pub start_day: NaiveDate,
    /// Inclusive.
    pub end_day: NaiveDate,
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub logged: Value,
    pub reported: Value,
    pub discrepancies: Value,
}

/// A run as a list shows it: without its ledgers, which may hold a row per model and day.
#[derive(Debug, Clone, Queryable)]
pub struct RunSummary {
    pub id: Uuid,
    pub provider: String,
    pub start_day: NaiveDate,
    pub end_day: NaiveDate,
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    /// How many differences the run found.
    pub discrepancies: i32,
}

pub async fn insert(conn: &mut AsyncPgConnection, run: &Run) -> Result<Run> {
    Ok(diesel::insert_into(reconcile_runs::table).values(run).returning(Run::as_returning()).get_result(conn).await?)
}

pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<Run>> {
    Ok(reconcile_runs::table
        .filter(reconcile_runs::org_id.eq(org_id))
        .filter(reconcile_runs::id.eq(id))
        .select(Run::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// One page of an organization's runs, newest first (ids are UUIDv7).
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<RunSummary>> {
    let mut q = reconcile_runs::table.filter(reconcile_runs::org_id.eq(org_id)).into_boxed();
    if let Some(before) = before {
        q = q.filter(reconcile_runs::id.lt(before));
    }
    Ok(q.order(reconcile_runs::id.desc())
        .limit(limit)
        .select((
            reconcile_runs::id,
            reconcile_runs::provider,
            reconcile_runs::start_day,
            reconcile_runs::end_day,
            reconcile_runs::created_by,
            reconcile_runs::created_at,
            diesel::dsl::sql::<Integer>("jsonb_array_length(discrepancies)"),
        ))
        .load(conn)
        .await?)
}

/// One (model, UTC day) of what gw logged.
#[derive(Debug, QueryableByName)]
struct LoggedRow {
    #[diesel(sql_type = Text)]
    model: String,
    #[diesel(sql_type = Date)]
    day: NaiveDate,
    #[diesel(sql_type = BigInt)]
    requests: i64,
    #[diesel(sql_type = BigInt)]
    input_tokens: i64,
    #[diesel(sql_type = BigInt)]
    output_tokens: i64,
    #[diesel(sql_type = BigInt)]
    cached_tokens: i64,
    #[diesel(sql_type = Numeric)]
    cost_usd: Decimal,
}

/// What gw logged of the requests `provider_name` answered for the organization in
/// `from..to`, per upstream model and UTC day: the side of a run the provider's report is put
/// against. Only requests the provider was paid for count: failures (a status of 400 or more)
/// and answers gw served from its own cache (`L1`, `L2`, `L3`) never reached its meter.
pub async fn logged_usage(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    provider_name: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Ledger> {
    // The provider and its upstream model are written together from the answering attempt, so
    // the coalesce only guards against a hand-written row.
    let rows: Vec<LoggedRow> = diesel::sql_query(
        "SELECT coalesce(upstream_model, '') AS model, (created_at AT TIME ZONE 'UTC')::date AS day, \
         count(*) AS requests, coalesce(sum(prompt_tokens), 0)::bigint AS input_tokens, \
         coalesce(sum(completion_tokens), 0)::bigint AS output_tokens, \
         coalesce(sum(cached_tokens), 0)::bigint AS cached_tokens, coalesce(sum(cost_usd), 0) AS cost_usd \
         FROM audit_logs WHERE org_id = $1 AND provider = $2 AND created_at >= $3 AND created_at < $4 \
         AND status_code < 400 AND cache_status NOT IN ('L1', 'L2', 'L3') \
         AND endpoint IN ('/v1/chat/completions', '/v1/messages', '/v1/responses') \
         AND routing -> -1 ->> 'credential' = $5 \
         GROUP BY 1, 2",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<Text, _>(provider_name)
    .bind::<Timestamptz, _>(from)
    .bind::<Timestamptz, _>(to)
    // The answering (last) attempt's `audit::detail::Attempt::credential`.
    .bind::<Text, _>(crate::audit::detail::CREDENTIAL_ORGANIZATION)
    .load(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let usage = Usage {
                requests: Some(count(r.requests)),
                input_tokens: count(r.input_tokens),
                output_tokens: count(r.output_tokens),
                cached_tokens: count(r.cached_tokens),
                cost_usd: r.cost_usd,
            };
            ((r.model, r.day), usage)
        })
        .collect())
}

/// The proxy writes token counts from unsigned numbers (saturating), so a sum is never
/// negative; zero stands in should a hand-written row make one so.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
