//! The audit log: one row per proxied request, written in batches by the proxy's flusher.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::audit_logs;
use crate::audit::AuditRecord;
use crate::error::Result;

/// Inserts a batch in one statement. Rows already present (a retried batch whose first attempt
/// did commit) are skipped, so a retry never duplicates and never fails on them.
pub async fn insert_batch(conn: &mut AsyncPgConnection, rows: &[AuditRecord]) -> Result<usize> {
    if rows.is_empty() {
        return Ok(0);
    }
    Ok(diesel::insert_into(audit_logs::table)
        .values(rows)
        .on_conflict(audit_logs::id)
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
