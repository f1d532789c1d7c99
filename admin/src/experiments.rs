//! Judging experiments and ending them: the results of an experiment (its variants' figures from
//! the audit log, judged by `gw_shared::experiments::results`), and its completion once the
//! sequential test declares a winner or every variant reaches its sample cap: in one transaction
//! the status, the organization's trail entry and `experiment.completed` on the outbox. Run by
//! the leader every `admin.experiment_check_secs`, and by `GET .../results` (so results never
//! show a winner the experiment has not completed with).

use std::sync::Arc;
use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::db::experiments::{self as db, Experiment};
use gw_shared::db::{admin_audit, invalidations};
use gw_shared::experiments::results::{judge, Figures, Judgement};
use gw_shared::experiments::spec::Variant;
use gw_shared::experiments::stats::Settings;
use gw_shared::redis::Invalidation;
use gw_shared::webhooks::payloads::{experiment_completed, ExperimentEnd};
use serde_json::json;
use uuid::Uuid;

use crate::state::AppState;

/// `pg_try_advisory_xact_lock` key of the completion check ("gwexper").
const CHECK_LOCK: i64 = 0x0067_7765_7870_6572;
/// Running experiments checked per run at most.
const BATCH: i64 = 500;

/// An experiment's variants with their figures, in the variants' order (control first).
pub struct Evaluated {
    pub variants: Vec<Variant>,
    pub figures: Vec<Figures>,
    pub judgement: Judgement,
}

pub async fn evaluate(conn: &mut AsyncPgConnection, org_id: Uuid, e: &Experiment) -> gw_shared::Result<Evaluated> {
    let variants = e.variant_list()?;
    let rows = db::figures(conn, org_id, e).await?;
    let figures: Vec<Figures> = variants
        .iter()
        .map(|v| {
            rows.iter()
                .find(|r| r.variant == v.name)
                .map(|r| Figures { n: r.n.max(0) as u64, mean: r.mean, variance: r.variance })
                .unwrap_or_default()
        })
        .collect();
    let judgement = judge(&figures, e.metric(), &Settings::default(), e.max_samples_per_variant.max(0) as u64);
    Ok(Evaluated { variants, figures, judgement })
}

/// What [`conclude`] found: the experiment as it stands, its evaluation, and whether this call
/// completed it (then with the invalidation its transaction logged, to announce).
pub struct Concluded {
    pub experiment: Experiment,
    pub evaluated: Evaluated,
    pub completed_now: bool,
    pub logged: Vec<(i64, Invalidation)>,
}

/// Evaluates an experiment and, when it is running and its results say so, completes it (locked,
/// so it completes once). `None`: no such experiment.
pub async fn conclude(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> gw_shared::Result<Option<Concluded>> {
    conn.transaction(async |conn| {
        let Some(e) = db::lock(conn, org_id, id).await? else { return Ok(None) };
        let evaluated = evaluate(conn, org_id, &e).await?;
        let decided = match (evaluated.judgement.winner, evaluated.judgement.exhausted) {
            _ if e.status != "running" => None,
            (Some(i), _) => Some(("winner", evaluated.variants.get(i).map(|v| v.name.clone()))),
            (None, true) => Some(("max_samples", None)),
            (None, false) => None,
        };
        let Some((reason, winner)) = decided else {
            return Ok(Some(Concluded { experiment: e, evaluated, completed_now: false, logged: Vec::new() }));
        };
        let done = complete(conn, &e, &evaluated, reason, winner.as_deref()).await?;
        let logged = invalidations::record_all(conn, [Invalidation::Experiments { org_id }]).await?;
        Ok(Some(Concluded { experiment: done, evaluated, completed_now: true, logged }))
    })
    .await
}

/// Ends a locked experiment: status, trail entry, event (the caller's transaction).
pub async fn complete(
    conn: &mut AsyncPgConnection,
    e: &Experiment,
    ev: &Evaluated,
    reason: &str,
    winner: Option<&str>,
) -> gw_shared::Result<Experiment> {
    let org_id = e.org_id;
    let done = db::set_status(conn, org_id, e.id, "completed", Some((reason, winner))).await?;
    let samples: Vec<(String, u64)> = ev.variants.iter().zip(&ev.figures).map(|(v, f)| (v.name.clone(), f.n)).collect();
    let end = ExperimentEnd { id: e.id, name: &e.name, metric: &e.metric, reason, winner, samples: &samples };
    gw_shared::db::events::emit(conn, experiment_completed(org_id, &end)).await?;
    let event = admin_audit::Event::system(
        org_id,
        None,
        "experiment.complete",
        ("experiment", Some(e.id.to_string())),
        json!({"reason": reason, "winner": winner}),
    );
    admin_audit::insert(conn, &event).await?;
    Ok(done)
}

pub fn spawn(state: Arc<AppState>) {
    actix_web::rt::spawn(async move {
        let every = Duration::from_secs(state.cfg.admin.experiment_check_secs.max(1));
        loop {
            if let Err(e) = check_once(&state).await {
                state.metrics.job_failures.with_label_values(&["experiments"]).inc();
                log::warn!("experiment completion check failed: {e}");
            }
            actix_web::rt::time::sleep(every).await;
        }
    });
}

/// On the leader: every running experiment whose results say it is over completes. Pages
/// through all of them by id, so none waits behind others.
async fn check_once(state: &AppState) -> Result<(), String> {
    let mut conn = state.db.get().await.map_err(|e| e.to_string())?;
    let mut after = None;
    loop {
        let page = conn
            .transaction(async |conn| {
                if !gw_shared::db::try_leader_lock(conn, CHECK_LOCK).await? {
                    return Ok::<_, gw_shared::Error>(None);
                }
                db::all_running(conn, after, BATCH).await.map(Some)
            })
            .await
            .map_err(|e| e.to_string())?;
        let Some(page) = page else { return Ok(()) };
        for &(org_id, id) in &page {
            match conclude(&mut conn, org_id, id).await {
                Ok(Some(c)) if c.completed_now => {
                    let what = format!("the completion of experiment {id}");
                    state.announce(&c.logged, what).await
                }
                Ok(_) => {}
                Err(e) => log::warn!("experiment {id}: completion check failed: {e}"),
            }
        }
        match page.last() {
            Some(&(_, last)) if page.len() as i64 == BATCH => after = Some(last),
            _ => return Ok(()),
        }
    }
}
