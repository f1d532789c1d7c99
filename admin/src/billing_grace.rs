//! The grace period of a failed payment: a subscription past due (the provider retrying a
//! renewal payment) keeps its plan for `[billing] grace_days`; then, on the leader (a Postgres
//! advisory lock), its organization drops to the free plan, in one transaction with the trail
//! entry and the `billing.subscription_updated` event. A payment that succeeds later brings the
//! plan back through the provider's next subscription event.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use diesel_async::AsyncConnection;
use gw_shared::billing::FREE;
use gw_shared::db::{billing, invalidations};
use gw_shared::redis::Invalidation;
use gw_shared::webhooks::payloads::{subscription_updated, PlanChange};

use crate::state::AppState;

/// `pg_try_advisory_xact_lock` key of the grace job ("gwgrace").
const GRACE_LOCK: i64 = 0x0067_7767_7261_6365;
/// Organizations downgraded per run at most.
const BATCH: i64 = 200;

pub fn spawn(state: Arc<AppState>) {
    if state.cfg.billing.airgap {
        return;
    }
    actix_web::rt::spawn(async move {
        let every = Duration::from_secs(state.cfg.billing.grace_check_secs.max(1));
        loop {
            if let Err(e) = run_once(&state).await {
                state.metrics.job_failures.with_label_values(&["billing_grace"]).inc();
                log::warn!("billing grace: {e}");
            }
            actix_web::rt::time::sleep(every).await;
        }
    });
}

async fn run_once(state: &AppState) -> Result<(), String> {
    let cutoff = Utc::now() - chrono::Duration::days(i64::from(state.cfg.billing.grace_days));
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    let dropped = conn
        .transaction(async |conn| {
            if !gw_shared::db::try_leader_lock(conn, GRACE_LOCK).await? {
                return Ok::<_, gw_shared::Error>(Vec::new());
            }
            let mut dropped = Vec::new();
            for (org_id, status) in billing::grace_over(conn, cutoff, BATCH).await? {
                let Some((from, sso_disabled)) = billing::set_plan(conn, org_id, FREE).await? else {
                    continue;
                };
                let change = PlanChange {
                    from: &from,
                    to: FREE,
                    source: "grace_expired",
                    subscription_status: Some(&status),
                    provider_event_id: None,
                    sso_connections_disabled: sso_disabled,
                };
                gw_shared::db::events::emit(conn, subscription_updated(org_id, &change)).await?;
                let detail =
                    serde_json::json!({"plan_from": from, "plan_to": FREE, "sso_connections_disabled": sso_disabled});
                let resource = ("organization", Some(org_id.to_string()));
                let entry =
                    gw_shared::db::admin_audit::Event::system(org_id, None, "billing.grace_expired", resource, detail);
                gw_shared::db::admin_audit::insert(conn, &entry).await?;
                let logged = invalidations::record_all(conn, [Invalidation::Org { org_id }]).await?;
                dropped.push((org_id, logged));
            }
            Ok(dropped)
        })
        .await
        .map_err(|e| e.to_string())?;
    for (org_id, logged) in dropped {
        log::info!("organization {org_id}: past due beyond its grace, now on the free plan");
        state.announce(&logged, format_args!("the plan of organization {org_id}")).await;
    }
    Ok(())
}
