//! The audit log: one row per proxied request, written in batches by the proxy's flusher.

use chrono::{DateTime, Datelike, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::audit_logs;
use crate::audit::AuditRecord;
use crate::error::Result;

/// Inserts rows as they are, chain fields included (fixtures and benchmarks; the proxy writes
/// through `audit_copy`, which links rows onto their chain). Creates the months' partitions
/// first; rows already present are skipped.
pub async fn insert_batch(conn: &mut AsyncPgConnection, rows: &[AuditRecord]) -> Result<usize> {
    if rows.is_empty() {
        return Ok(0);
    }
    let months: std::collections::BTreeSet<_> =
        rows.iter().map(|r| r.created_at.date_naive().with_day(1).unwrap_or(r.created_at.date_naive())).collect();
    for month in months {
        let at = month.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc();
        diesel::sql_query("SELECT gw_audit_partition($1)")
            .bind::<diesel::sql_types::Timestamptz, _>(at)
            .execute(conn)
            .await?;
    }
    Ok(diesel::insert_into(audit_logs::table)
        .values(rows)
        .on_conflict((audit_logs::id, audit_logs::created_at))
        .do_nothing()
        .execute(conn)
        .await?)
}

/// One row by request id. A request id is a UUIDv7 minted with the row's `created_at`, so a v7
/// id is looked for in the hour around its timestamp only (one partition, the primary key; an
/// unknown id costs no scan of every month); any other id everywhere.
pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<AuditRecord>> {
    let minted = id.get_timestamp().and_then(|t| {
        let (secs, nanos) = t.to_unix();
        DateTime::from_timestamp(i64::try_from(secs).ok()?, nanos)
    });
    if let Some(at) = minted {
        let window = chrono::TimeDelta::hours(1);
        let near = audit_logs::table
            .filter(audit_logs::org_id.eq(org_id))
            .filter(audit_logs::id.eq(id))
            .filter(audit_logs::created_at.ge(at - window))
            .filter(audit_logs::created_at.lt(at + window))
            .select(AuditRecord::as_select())
            .first(conn)
            .await
            .optional()?;
        return Ok(near);
    }
    Ok(audit_logs::table
        .filter(audit_logs::org_id.eq(org_id))
        .filter(audit_logs::id.eq(id))
        .select(AuditRecord::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Filters of the request log; every query is also bounded by organization and time.
#[derive(Debug, Clone, Default)]
pub struct LogFilter {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub team_id: Option<Uuid>,
    pub api_key_id: Option<Uuid>,
    pub model: Option<String>,
    pub status: Option<StatusFilter>,
    /// `bypass`, `miss`, `L1`, `L2`, `L3`; `hit` means any tier.
    pub cache: Option<String>,
    /// `flagged`, `redacted`, `blocked`, or `none` for requests no policy acted on.
    pub policy_action: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StatusFilter {
    Exact(i32),
    /// `[low, high)`, e.g. 400..500 for `4xx`.
    Range(i32, i32),
}

/// Newest first: a page ends before this row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogCursor {
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
}

/// A page of the request log, newest first (`limit + 1` rows fetched so the caller knows whether
/// another page follows).
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    f: &LogFilter,
    cursor: Option<LogCursor>,
    limit: i64,
) -> Result<Vec<AuditRecord>> {
    let mut q = audit_logs::table
        .filter(audit_logs::org_id.eq(org_id))
        .filter(audit_logs::created_at.ge(f.from))
        .filter(audit_logs::created_at.lt(f.to))
        .select(AuditRecord::as_select())
        .order((audit_logs::created_at.desc(), audit_logs::id.desc()))
        .limit(limit + 1)
        .into_boxed();
    if let Some(c) = cursor {
        q = q.filter(
            audit_logs::created_at
                .lt(c.created_at)
                .or(audit_logs::created_at.eq(c.created_at).and(audit_logs::id.lt(c.id))),
        );
    }
    if let Some(team) = f.team_id {
        q = q.filter(audit_logs::team_id.eq(team));
    }
    if let Some(key) = f.api_key_id {
        q = q.filter(audit_logs::api_key_id.eq(key));
    }
    if let Some(model) = &f.model {
        q = q.filter(audit_logs::model.eq(model.clone()));
    }
    match f.status {
        Some(StatusFilter::Exact(s)) => q = q.filter(audit_logs::status_code.eq(s)),
        Some(StatusFilter::Range(lo, hi)) => {
            q = q.filter(audit_logs::status_code.ge(lo)).filter(audit_logs::status_code.lt(hi))
        }
        None => {}
    }
    match f.cache.as_deref() {
        Some("hit") => q = q.filter(audit_logs::cache_status.eq_any(["L1", "L2", "L3"])),
        Some(tier) => q = q.filter(audit_logs::cache_status.eq(tier.to_string())),
        None => {}
    }
    match f.policy_action.as_deref() {
        Some("none") => q = q.filter(audit_logs::policy_action.is_null()),
        Some(a) => q = q.filter(audit_logs::policy_action.eq(a.to_string())),
        None => {}
    }
    Ok(q.load(conn).await?)
}

pub async fn user_agent(conn: &mut AsyncPgConnection, id: i64) -> Result<Option<String>> {
    use super::schema::audit_user_agents;
    Ok(audit_user_agents::table
        .filter(audit_user_agents::id.eq(id))
        .select(audit_user_agents::value)
        .first(conn)
        .await
        .optional()?)
}

/// The first and last chain positions among an organization's rows created in `[from, to)`.
pub async fn chain_span(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(Option<i64>, Option<i64>, i64)> {
    use diesel::dsl::{count_star, max, min};
    Ok(audit_logs::table
        .filter(audit_logs::org_id.eq(org_id))
        .filter(audit_logs::created_at.ge(from))
        .filter(audit_logs::created_at.lt(to))
        .select((min(audit_logs::chain_seq), max(audit_logs::chain_seq), count_star()))
        .first(conn)
        .await?)
}

/// Rows of an organization's chain with positions in `(after, up_to]`, in chain order, at most
/// `limit`.
pub async fn chain_batch(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    after: i64,
    up_to: i64,
    limit: i64,
) -> Result<Vec<AuditRecord>> {
    Ok(audit_logs::table
        .filter(audit_logs::org_id.eq(org_id))
        .filter(audit_logs::chain_seq.gt(after))
        .filter(audit_logs::chain_seq.le(up_to))
        .order(audit_logs::chain_seq.asc())
        .limit(limit)
        .select(AuditRecord::as_select())
        .load(conn)
        .await?)
}

/// The row at one chain position, if it is still there.
pub async fn chain_link(conn: &mut AsyncPgConnection, org_id: Uuid, seq: i64) -> Result<Option<AuditRecord>> {
    Ok(audit_logs::table
        .filter(audit_logs::org_id.eq(org_id))
        .filter(audit_logs::chain_seq.eq(seq))
        .select(AuditRecord::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The organization's chain head: the position and hash of its last row.
pub async fn chain_head(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Option<(i64, Vec<u8>)>> {
    use super::schema::audit_chain_heads;
    Ok(audit_chain_heads::table
        .filter(audit_chain_heads::org_id.eq(org_id))
        .select((audit_chain_heads::seq, audit_chain_heads::hash))
        .first(conn)
        .await
        .optional()?)
}

/// Rows created in `[from, to)` that carry no chain fields (written before the chain existed),
/// oldest first after `after`.
pub async fn unchained_batch(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<AuditRecord>> {
    let mut q = audit_logs::table
        .filter(audit_logs::org_id.eq(org_id))
        .filter(audit_logs::created_at.ge(from))
        .filter(audit_logs::created_at.lt(to))
        .filter(audit_logs::chain_seq.is_null())
        .order((audit_logs::created_at.asc(), audit_logs::id.asc()))
        .limit(limit)
        .select(AuditRecord::as_select())
        .into_boxed();
    if let Some((t, id)) = after {
        q = q.filter(audit_logs::created_at.gt(t).or(audit_logs::created_at.eq(t).and(audit_logs::id.gt(id))));
    }
    Ok(q.load(conn).await?)
}
