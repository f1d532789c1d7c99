//! The audit log: one row per proxied request, written in batches by the proxy's flusher.

use chrono::Datelike;
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
    let months: std::collections::BTreeSet<_> = rows
        .iter()
        .map(|r| r.created_at.date_naive().with_day(1).unwrap_or(r.created_at.date_naive()))
        .collect();
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

pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<AuditRecord>> {
    Ok(audit_logs::table
        .filter(audit_logs::org_id.eq(org_id))
        .filter(audit_logs::id.eq(id))
        .select(AuditRecord::as_select())
        .first(conn)
        .await
        .optional()?)
}
