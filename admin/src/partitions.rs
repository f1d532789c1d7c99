//! The audit log's monthly partitions: made ahead of time and, past retention, detached and
//! dropped, each step a short statement of its own with a lock timeout, apart from the rollups.
//!
//! Making a partition attaches a table made beforehand (`gw_audit_partition`: SHARE UPDATE
//! EXCLUSIVE on `audit_logs`, which reads and writes do not wait for). Retention detaches a month
//! `CONCURRENTLY` (the same lock level; it then waits, blocking nobody, for the transactions that
//! may still read the month) and drops the table it became. `DETACH ... CONCURRENTLY` runs outside
//! any transaction, so this runs on a connection of its own straight to the primary
//! (`database.direct_url` behind a transaction pooler), taken only when there is work.

use chrono::{DateTime, Months, Utc};
use diesel::sql_types::{Bool, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use gw_shared::config::Pooler;

use crate::state::AppState;

/// Months of partitions made ahead of time (a proxy makes a missing one itself too).
const MONTHS_AHEAD: u32 = 2;
/// `pg_try_advisory_lock` key of this upkeep ("gwpart"): one replica at a time.
const PARTITION_LOCK: i64 = 0x0000_6777_7061_7274;
/// Longest wait for the locks of making or dropping a table.
const DDL_LOCK_TIMEOUT: &str = "5s";
/// Longest wait of a detach for the transactions still reading its month (it blocks nobody while
/// it waits; an interrupted detach is finalized by the next run).
const DETACH_LOCK_TIMEOUT: &str = "10min";

#[derive(QueryableByName)]
struct Partition {
    #[diesel(sql_type = Text)]
    name: String,
    /// A detach was interrupted and awaits `FINALIZE`.
    #[diesel(sql_type = Bool)]
    pending: bool,
}

/// The partition name of the month `at` is in (as `gw_audit_partition` names it).
pub fn month_name(at: DateTime<Utc>) -> String {
    format!("audit_logs_y{}", at.format("%Ym%m"))
}

/// What there is to do: the months to make, the months to detach and drop (names, with whether a
/// detach of it is pending), and month tables past retention that are no partition any more (a
/// detach whose drop failed or never ran).
async fn work(
    conn: &mut AsyncPgConnection,
    now: DateTime<Utc>,
    retention_months: u32,
) -> gw_shared::Result<(Vec<DateTime<Utc>>, Vec<(String, bool)>, Vec<String>)> {
    let attached: Vec<Partition> = diesel::sql_query(
        "SELECT c.relname AS name, i.inhdetachpending AS pending FROM pg_inherits i \
         JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'audit_logs'::regclass AND c.relname ~ '^audit_logs_y[0-9]{4}m[0-9]{2}$'",
    )
    .load(conn)
    .await?;
    #[derive(QueryableByName)]
    struct Name {
        #[diesel(sql_type = Text)]
        name: String,
    }
    let loose: Vec<Name> = diesel::sql_query(
        "SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname ~ '^audit_logs_y[0-9]{4}m[0-9]{2}$' \
         AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)",
    )
    .load(conn)
    .await?;
    let missing = (0..=MONTHS_AHEAD)
        .filter_map(|m| now.checked_add_months(Months::new(m)))
        .filter(|at| !attached.iter().any(|p| p.name == month_name(*at)))
        .collect();
    // Kept: this month and the `retention_months - 1` before it. Names sort as months do.
    let oldest = match retention_months {
        0 => None,
        keep => now.checked_sub_months(Months::new(keep - 1)).map(month_name),
    };
    let Some(oldest) = oldest else { return Ok((missing, Vec::new(), Vec::new())) };
    let expired = attached.into_iter().filter(|p| p.name < oldest).map(|p| (p.name, p.pending)).collect();
    let leftovers = loose.into_iter().map(|n| n.name).filter(|n| *n < oldest).collect();
    Ok((missing, expired, leftovers))
}

/// One round: `None` when there was nothing to do or another replica does it; else the number
/// of months dropped.
pub async fn upkeep(state: &AppState) -> Result<Option<usize>, String> {
    let now = state.clock.now();
    let retention = state.cfg.admin.audit_retention_months;
    // A look through the pool first: nearly every run finds nothing to do and opens nothing.
    let (missing, expired, leftovers) = {
        let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
        work(&mut conn, now, retention).await.map_err(|e| e.to_string())?
    };
    if missing.is_empty() && expired.is_empty() && leftovers.is_empty() {
        return Ok(None);
    }
    let url = state.cfg.database.migration_url().map_err(|e| e.to_string())?;
    let mut conn = gw_shared::db::connect(url, Pooler::None).await.map_err(|e| e.to_string())?;
    #[derive(QueryableByName)]
    struct Locked {
        #[diesel(sql_type = Bool)]
        locked: bool,
    }
    let locked: Locked = diesel::sql_query(format!("SELECT pg_try_advisory_lock({PARTITION_LOCK}) AS locked"))
        .get_result(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    if !locked.locked {
        return Ok(None);
    }
    // Under the lock, what there is to do now (another replica may have done some of it).
    let result = match work(&mut conn, now, retention).await {
        Ok((missing, expired, leftovers)) => steps(&mut conn, &missing, &expired, &leftovers).await,
        Err(e) => Err(e.to_string()),
    };
    // The connection ends with this round, and its session lock with it.
    drop(conn);
    result.map(Some)
}

async fn steps(
    conn: &mut AsyncPgConnection,
    missing: &[DateTime<Utc>],
    expired: &[(String, bool)],
    leftovers: &[String],
) -> Result<usize, String> {
    let exec = |sql: String| diesel::sql_query(sql);
    exec(format!("SET lock_timeout = '{DDL_LOCK_TIMEOUT}'")).execute(conn).await.map_err(|e| e.to_string())?;
    for at in missing {
        exec(format!("SELECT gw_audit_partition('{}'::timestamptz)", at.to_rfc3339()))
            .execute(conn)
            .await
            .map_err(|e| format!("making the partition of {}: {e}", month_name(*at)))?;
    }
    let mut dropped = 0;
    // Names come from pg_class and match ^audit_logs_y[0-9]{4}m[0-9]{2}$: safe to quote.
    for (name, pending) in expired {
        exec(format!("SET lock_timeout = '{DETACH_LOCK_TIMEOUT}'")).execute(conn).await.map_err(|e| e.to_string())?;
        let detach = if *pending {
            format!("ALTER TABLE audit_logs DETACH PARTITION \"{name}\" FINALIZE")
        } else {
            format!("ALTER TABLE audit_logs DETACH PARTITION \"{name}\" CONCURRENTLY")
        };
        exec(detach).execute(conn).await.map_err(|e| format!("detaching {name}: {e}"))?;
        exec(format!("SET lock_timeout = '{DDL_LOCK_TIMEOUT}'")).execute(conn).await.map_err(|e| e.to_string())?;
        exec(format!("DROP TABLE \"{name}\"")).execute(conn).await.map_err(|e| format!("dropping {name}: {e}"))?;
        dropped += 1;
    }
    for name in leftovers {
        exec(format!("DROP TABLE \"{name}\"")).execute(conn).await.map_err(|e| format!("dropping {name}: {e}"))?;
        dropped += 1;
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_are_named_as_the_database_names_them() {
        let at = DateTime::parse_from_rfc3339("2027-01-31T23:59:59Z").unwrap().with_timezone(&Utc);
        assert_eq!(month_name(at), "audit_logs_y2027m01");
        // Names sort as months do (retention compares them).
        assert!(month_name(at).as_str() < "audit_logs_y2027m02");
        assert!("audit_logs_y2026m12" < month_name(at).as_str());
    }
}
