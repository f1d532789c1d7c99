//! The metered usage sync's ledger (`billing_usage_sync`) and where the sync stands
//! (`billing_sync_state`): which hours of which organizations are to be sent to the billing
//! provider, what each send carries, and what became of it. Planning runs on the leader inside
//! its transaction; sending claims due rows one batch at a time, outside it (`docs/billing.md`).

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use diesel::sql_types::{Array, BigInt, Integer, Nullable, Numeric, Text, Timestamptz, Uuid as SqlUuid};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::billing::meter::{identifier, HourUsage, Usage};
use crate::config::MeterConfig;
use crate::error::Result;

/// Hours planned per run at most: a sync that was down for long catches up over several runs.
const MAX_HOURS_PER_RUN: usize = 48;
/// Organization-hours checked for late rows per run at most (the rest wait for the next run).
const MAX_LATE_PER_RUN: i64 = 5000;
/// Like the rollups': transactions that started before a scan and committed after it.
const LATE_MARGIN: TimeDelta = TimeDelta::minutes(2);

#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct State {
    #[diesel(sql_type = Timestamptz)]
    pub synced_until: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    pub scanned_until: DateTime<Utc>,
}

pub async fn state(conn: &mut AsyncPgConnection) -> Result<State> {
    Ok(diesel::sql_query("SELECT synced_until, scanned_until FROM billing_sync_state WHERE id = 1")
        .get_result(conn)
        .await?)
}

/// What one planning pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Planned {
    /// Completed hours newly entered in the ledger.
    pub hours: usize,
    /// Sends of those hours queued (organization-hours with usage).
    pub sends: usize,
    /// Adjustments queued for hours already sent that late rows changed.
    pub adjustments: usize,
}

#[derive(QueryableByName)]
struct Metered {
    #[diesel(sql_type = SqlUuid)]
    org_id: Uuid,
    #[diesel(sql_type = Text)]
    plan: String,
    #[diesel(sql_type = Text)]
    customer_id: String,
}

#[derive(QueryableByName)]
struct OrgUsage {
    #[diesel(sql_type = SqlUuid)]
    org_id: Uuid,
    #[diesel(sql_type = BigInt)]
    answered: i64,
    #[diesel(sql_type = BigInt)]
    tokens: i64,
    #[diesel(sql_type = Numeric)]
    gateway_cost_usd: Decimal,
}

/// Each of `orgs`' usage in `hour`, from the hourly rollups (absent: none).
async fn hour_usage(
    conn: &mut AsyncPgConnection,
    hour: DateTime<Utc>,
    orgs: &[Uuid],
) -> Result<BTreeMap<Uuid, HourUsage>> {
    let rows: Vec<OrgUsage> = diesel::sql_query(
        "SELECT org_id, coalesce(sum(requests - errors), 0)::bigint AS answered, \
           coalesce(sum(prompt_tokens + completion_tokens), 0)::bigint AS tokens, \
           coalesce(sum(gateway_cost_usd), 0) AS gateway_cost_usd \
         FROM audit_rollups_hourly WHERE hour = $1 AND org_id = ANY($2) GROUP BY org_id",
    )
    .bind::<Timestamptz, _>(hour)
    .bind::<Array<SqlUuid>, _>(orgs)
    .load(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.org_id, HourUsage { answered: r.answered, tokens: r.tokens, gateway_cost_usd: r.gateway_cost_usd }))
        .collect())
}

/// One ledger row to write.
struct Send<'a> {
    org_id: Uuid,
    usage: Usage,
    hour: DateTime<Utc>,
    revision: i32,
    event_name: &'a str,
    customer_id: &'a str,
    quantity: i64,
    hour_total: i64,
}

async fn insert(conn: &mut AsyncPgConnection, s: &Send<'_>, now: DateTime<Utc>) -> Result<bool> {
    let status = if s.quantity == 0 { "empty" } else { "pending" };
    let n = diesel::sql_query(
        "INSERT INTO billing_usage_sync (org_id, usage, hour, revision, event_name, customer_id, quantity, \
           hour_total, identifier, status, next_attempt_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING",
    )
    .bind::<SqlUuid, _>(s.org_id)
    .bind::<Text, _>(s.usage.label())
    .bind::<Timestamptz, _>(s.hour)
    .bind::<Integer, _>(s.revision)
    .bind::<Text, _>(s.event_name)
    .bind::<Text, _>(s.customer_id)
    .bind::<BigInt, _>(s.quantity)
    .bind::<BigInt, _>(s.hour_total)
    .bind::<Text, _>(identifier(s.org_id, s.usage, s.hour, s.revision))
    .bind::<Text, _>(status)
    .bind::<Timestamptz, _>(now)
    .execute(conn)
    .await?;
    Ok(n == 1 && s.quantity > 0)
}

#[derive(QueryableByName)]
struct OrgHour {
    #[diesel(sql_type = SqlUuid)]
    org_id: Uuid,
    #[diesel(sql_type = Timestamptz)]
    hour: DateTime<Utc>,
}

#[derive(QueryableByName)]
struct Latest {
    #[diesel(sql_type = Text)]
    usage: String,
    #[diesel(sql_type = Integer)]
    revision: i32,
    #[diesel(sql_type = BigInt)]
    hour_total: i64,
    #[diesel(sql_type = Text)]
    event_name: String,
    #[diesel(sql_type = Text)]
    customer_id: String,
}

/// Queues an adjustment for every hour already in the ledger whose usage grew since: audit rows
/// ingested since the last scan (a spool replayed after an outage) that fall in such an hour.
async fn adjust(conn: &mut AsyncPgConnection, st: &State, now: DateTime<Utc>) -> Result<usize> {
    let late: Vec<OrgHour> = diesel::sql_query(
        "SELECT DISTINCT org_id, date_trunc('hour', created_at) AS hour FROM audit_logs \
         WHERE ingested_at >= $1 AND created_at < $2 LIMIT $3",
    )
    .bind::<Timestamptz, _>(st.scanned_until - LATE_MARGIN)
    .bind::<Timestamptz, _>(st.synced_until)
    .bind::<BigInt, _>(MAX_LATE_PER_RUN)
    .load(conn)
    .await?;
    let mut queued = 0;
    for OrgHour { org_id, hour } in late {
        let sent: Vec<Latest> = diesel::sql_query(
            "SELECT DISTINCT ON (usage) usage, revision, hour_total, event_name, customer_id \
             FROM billing_usage_sync WHERE org_id = $1 AND hour = $2 ORDER BY usage, revision DESC",
        )
        .bind::<SqlUuid, _>(org_id)
        .bind::<Timestamptz, _>(hour)
        .load(conn)
        .await?;
        if sent.is_empty() {
            continue;
        }
        let now_usage = hour_usage(conn, hour, &[org_id]).await?.remove(&org_id).unwrap_or_default();
        for last in sent {
            let Some(usage) = Usage::parse(&last.usage) else { continue };
            let Some(total) = usage.quantity(&now_usage) else { continue };
            if total < last.hour_total {
                // Audit rows are never deleted before their hour is long synced: this is a bug
                // or a manual edit, and never a negative send.
                log::warn!(
                    "usage sync: organization {org_id}'s {} at {hour} fell from {} to {total}; not sent",
                    usage.label(),
                    last.hour_total
                );
                continue;
            }
            if total == last.hour_total {
                continue;
            }
            let s = Send {
                org_id,
                usage,
                hour,
                revision: last.revision + 1,
                event_name: &last.event_name,
                customer_id: &last.customer_id,
                quantity: total - last.hour_total,
                hour_total: total,
            };
            queued += usize::from(insert(conn, &s, now).await?);
        }
    }
    Ok(queued)
}

/// Brings the ledger up to `horizon` (completed, settled hours; never past what the rollups
/// cover): each new hour of each organization on a metered plan with a provider customer gets
/// its send queued, and hours already sent that late rows changed get an adjustment. The caller
/// holds the leader lock in a transaction; `now` schedules the sends.
pub async fn plan(
    conn: &mut AsyncPgConnection,
    meters: &BTreeMap<String, MeterConfig>,
    horizon: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Planned> {
    let st = state(conn).await?;
    let rolled = super::rollups::state(conn).await?;
    let horizon = super::rollups::floor_hour(horizon.min(rolled.rolled_until));
    let mut out = Planned::default();
    if st.synced_until.timestamp() <= 0 {
        // The first run: usage is billed from here on, never for hours before metering existed.
        save(conn, horizon, rolled.scanned_until).await?;
        return Ok(out);
    }
    out.adjustments = adjust(conn, &st, now).await?;
    let plans: Vec<&str> = meters.keys().map(String::as_str).collect();
    let metered: Vec<Metered> = diesel::sql_query(
        "SELECT b.org_id, o.plan, b.customer_id FROM billing_accounts b JOIN organizations o ON o.id = b.org_id \
         WHERE b.customer_id IS NOT NULL AND o.plan = ANY($1)",
    )
    .bind::<Array<Text>, _>(&plans)
    .load(conn)
    .await?;
    let ids: Vec<Uuid> = metered.iter().map(|m| m.org_id).collect();
    let mut hour = st.synced_until;
    while hour < horizon && out.hours < MAX_HOURS_PER_RUN {
        let usage = hour_usage(conn, hour, &ids).await?;
        for m in &metered {
            let Some(meter) = meters.get(&m.plan) else { continue };
            let used = usage.get(&m.org_id).cloned().unwrap_or_default();
            let Some(quantity) = meter.usage.quantity(&used) else {
                log::warn!("usage sync: organization {}'s usage at {hour} is past what a meter carries", m.org_id);
                continue;
            };
            let s = Send {
                org_id: m.org_id,
                usage: meter.usage,
                hour,
                revision: 0,
                event_name: &meter.event_name,
                customer_id: &m.customer_id,
                quantity,
                hour_total: quantity,
            };
            out.sends += usize::from(insert(conn, &s, now).await?);
        }
        hour += TimeDelta::hours(1);
        out.hours += 1;
    }
    save(conn, hour.max(st.synced_until), rolled.scanned_until).await?;
    Ok(out)
}

async fn save(conn: &mut AsyncPgConnection, synced_until: DateTime<Utc>, scanned_until: DateTime<Utc>) -> Result<()> {
    diesel::sql_query("UPDATE billing_sync_state SET synced_until = $1, scanned_until = $2 WHERE id = 1")
        .bind::<Timestamptz, _>(synced_until)
        .bind::<Timestamptz, _>(scanned_until)
        .execute(conn)
        .await?;
    Ok(())
}

/// A send to make.
#[derive(Debug, Clone, QueryableByName)]
pub struct Due {
    #[diesel(sql_type = SqlUuid)]
    pub org_id: Uuid,
    #[diesel(sql_type = Text)]
    pub usage: String,
    #[diesel(sql_type = Timestamptz)]
    pub hour: DateTime<Utc>,
    #[diesel(sql_type = Integer)]
    pub revision: i32,
    #[diesel(sql_type = Text)]
    pub event_name: String,
    #[diesel(sql_type = Text)]
    pub customer_id: String,
    #[diesel(sql_type = BigInt)]
    pub quantity: i64,
    #[diesel(sql_type = Text)]
    pub identifier: String,
    /// This one included.
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
}

/// Claims up to `limit` sends due at `now`, oldest hours first, for `lease`: a replica (or this
/// one after a crash) takes a claimed send again only once its lease is over, and then sends it
/// with the same identifier.
pub async fn claim(conn: &mut AsyncPgConnection, now: DateTime<Utc>, lease: TimeDelta, limit: i64) -> Result<Vec<Due>> {
    Ok(diesel::sql_query(
        "UPDATE billing_usage_sync s SET attempts = s.attempts + 1, next_attempt_at = $2 \
         FROM (SELECT org_id, usage, hour, revision FROM billing_usage_sync \
               WHERE status = 'pending' AND next_attempt_at <= $1 ORDER BY hour, revision LIMIT $3 \
               FOR UPDATE SKIP LOCKED) d \
         WHERE (s.org_id, s.usage, s.hour, s.revision) = (d.org_id, d.usage, d.hour, d.revision) \
         RETURNING s.org_id, s.usage, s.hour, s.revision, s.event_name, s.customer_id, s.quantity, s.identifier, \
           s.attempts",
    )
    .bind::<Timestamptz, _>(now)
    .bind::<Timestamptz, _>(now + lease)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?)
}

/// What became of a send.
pub enum Outcome<'a> {
    Sent { answer: &'a str },
    Retry { error: &'a str, at: DateTime<Utc> },
    GaveUp { error: &'a str },
}

pub async fn finish(conn: &mut AsyncPgConnection, d: &Due, outcome: Outcome<'_>, now: DateTime<Utc>) -> Result<()> {
    let (status, error, answer, next, sent_at) = match outcome {
        Outcome::Sent { answer } => ("sent", None, Some(answer), now, Some(now)),
        Outcome::Retry { error, at } => ("pending", Some(error), None, at, None),
        Outcome::GaveUp { error } => ("failed", Some(error), None, now, None),
    };
    diesel::sql_query(
        "UPDATE billing_usage_sync SET status = $5, last_error = coalesce($6, last_error), provider_answer = $7, \
           next_attempt_at = $8, sent_at = $9 \
         WHERE org_id = $1 AND usage = $2 AND hour = $3 AND revision = $4",
    )
    .bind::<SqlUuid, _>(d.org_id)
    .bind::<Text, _>(&d.usage)
    .bind::<Timestamptz, _>(d.hour)
    .bind::<Integer, _>(d.revision)
    .bind::<Text, _>(status)
    .bind::<Nullable<Text>, _>(error)
    .bind::<Nullable<Text>, _>(answer)
    .bind::<Timestamptz, _>(next)
    .bind::<Nullable<Timestamptz>, _>(sent_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Puts `org_id`'s failed sends back in the queue, due at `now`, tries counted afresh; how many.
pub async fn retry_failed(conn: &mut AsyncPgConnection, org_id: Uuid, now: DateTime<Utc>) -> Result<usize> {
    Ok(diesel::sql_query(
        "UPDATE billing_usage_sync SET status = 'pending', attempts = 0, next_attempt_at = $2 \
         WHERE org_id = $1 AND status = 'failed'",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<Timestamptz, _>(now)
    .execute(conn)
    .await?)
}
