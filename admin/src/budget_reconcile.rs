//! Budgets that survive Redis (`docs/limits.md`). Budget counters live in Redis; a Redis that
//! restarts empty, or a failover that loses acknowledged writes, would reset a period's spend
//! to zero and let it be spent again. On the leader, every `admin.budget_reconcile_secs`, each
//! budget's spend in its current period is read from the audit log (the hourly rollups and the
//! un-rolled tail) and its Redis counter raised to it where Redis holds less; Redis is never
//! lowered (it also counts spend the audit writer has not flushed yet).
//!
//! An epoch marker (`gw:epoch`) tells data loss apart: each complete pass writes it, and every
//! replica looks for it every second; when it is gone, Redis lost its data (or this is its first
//! start) and the pass runs at once instead of at its next tick.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use diesel::sql_types::{Jsonb, Nullable, Text, Uuid as SqlUuid};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use gw_shared::db::rollups::{self, Owner};
use gw_shared::limits::plan::{budget_keys, Plan, Scope};
use gw_shared::limits::script::Scripts;
use gw_shared::limits::settings::Budget;
use redis::AsyncCommands;
use uuid::Uuid;

use crate::state::AppState;

/// `pg_try_advisory_xact_lock` key of the reconciliation ("gwbudget").
const LOCK: i64 = 0x6777_6275_6467_6574;
/// The Redis epoch marker: present while Redis holds what the last pass saw.
pub const EPOCH_KEY: &str = "gw:epoch";
/// How often each replica looks for the marker.
const MARKER_EVERY: Duration = Duration::from_secs(1);
/// How long past its period's end a counter made here is kept (as the limiter keeps its own).
const KEEP_AFTER_PERIOD_MS: i64 = 86_400_000;

pub fn spawn(state: Arc<AppState>) {
    actix_web::rt::spawn(async move {
        let every = Duration::from_secs(state.cfg.admin.budget_reconcile_secs.max(1));
        let mut last: Option<Instant> = None;
        loop {
            let due = last.is_none_or(|t| t.elapsed() >= every) || marker_gone(&state).await;
            if due {
                match run_once(&state).await {
                    Ok(Some(raised)) => {
                        last = Some(Instant::now());
                        if raised > 0 {
                            log::warn!(
                                "budget reconciliation: {raised} budget counter(s) raised to the audit log's spend"
                            );
                        }
                    }
                    // Another replica leads; it runs the pass.
                    Ok(None) => last = Some(Instant::now()),
                    Err(e) => {
                        state.metrics.job_failures.with_label_values(&["budget_reconcile"]).inc();
                        log::warn!("budget reconciliation failed: {e}");
                    }
                }
            }
            actix_web::rt::time::sleep(MARKER_EVERY).await;
        }
    });
}

/// True when Redis answers without the marker (an unreachable Redis is not data loss).
async fn marker_gone(state: &AppState) -> bool {
    let Ok(mut conn) = state.redis.get().await else { return false };
    let marker: Result<Option<String>, _> = conn.get(EPOCH_KEY).await;
    matches!(marker, Ok(None))
}

#[derive(QueryableByName)]
struct Budgeted {
    #[diesel(sql_type = SqlUuid)]
    org_id: Uuid,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    owner_id: Option<Uuid>,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Jsonb)]
    budget: serde_json::Value,
}

/// One pass on the leader: how many counters it raised; `None` when another replica leads.
pub async fn run_once(state: &AppState) -> Result<Option<usize>, String> {
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    let raised = conn
        .transaction(async |conn| {
            if !gw_shared::db::try_leader_lock(conn, LOCK).await? {
                return Ok::<_, gw_shared::Error>(None);
            }
            Ok(Some(reconcile(state, conn).await?))
        })
        .await
        .map_err(|e| e.to_string())?;
    if raised.is_some() {
        let mut redis = state.redis.get().await.map_err(|e| e.to_string())?;
        let _: () = redis.set(EPOCH_KEY, Uuid::now_v7().to_string()).await.map_err(|e| e.to_string())?;
    }
    Ok(raised)
}

async fn reconcile(state: &AppState, conn: &mut AsyncPgConnection) -> gw_shared::Result<usize> {
    let rows: Vec<Budgeted> = diesel::sql_query(
        "SELECT id AS org_id, NULL::uuid AS owner_id, 'org' AS kind, budget FROM organizations \
           WHERE budget IS NOT NULL \
         UNION ALL SELECT org_id, id, 'team', budget FROM teams WHERE budget IS NOT NULL AND deleted_at IS NULL \
         UNION ALL SELECT org_id, id, 'key', budget FROM api_keys WHERE budget IS NOT NULL AND revoked_at IS NULL",
    )
    .load(conn)
    .await?;
    let now = state.clock.now();
    let scripts = Scripts::default();
    let mut redis = state.redis.get().await?;
    let mut raised = 0;
    for r in rows {
        let Ok(budget) = serde_json::from_value::<Budget>(r.budget) else { continue };
        let (owner, scope, id) = match (r.kind.as_str(), r.owner_id) {
            ("team", Some(id)) => (Owner::Team, Scope::Team(id), id),
            ("key", Some(id)) => (Owner::Key, Scope::Key(id), id),
            _ => (Owner::Org, Scope::Org, r.org_id),
        };
        let window = budget.period().window(now);
        let from = window.start.unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
        let spend = rollups::spend(conn, r.org_id, owner, &[id], from, now).await?;
        let Some(nanos) = spend.get(&id).and_then(|usd| gw_shared::money::to_nanos(*usd)).filter(|n| *n > 0) else {
            continue;
        };
        let [key, _] = budget_keys(&Plan::prefix(r.org_id), scope, &window.id);
        let ttl =
            window.end.map(|end| ((end - now).num_milliseconds().max(0) + KEEP_AFTER_PERIOD_MS) as u64).unwrap_or(0);
        if scripts.raise(&mut redis, &key, nanos, ttl).await? > 0 {
            raised += 1;
        }
    }
    Ok(raised)
}
