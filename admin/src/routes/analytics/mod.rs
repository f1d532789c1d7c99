//! Analytics, read from the request audit log: policy decisions (`policy`), the response cache's
//! hit rates (`cache`), the overview (`overview`), the request log (`logs`), the auditor's export
//! (`compliance`) and spend reconciliation with providers' own reports (`reconcile`). `period`
//! reads the time ranges every one of them takes; `export` is what the streamed exports share.

mod cache;
mod compliance;
pub(crate) mod export;
mod logs;
mod overview;
mod policy;
mod reconcile;

use utoipa_actix_web::service_config::ServiceConfig;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(policy::summary)
        .service(policy::export)
        .service(cache::cache_summary)
        .service(overview::overview)
        .service(logs::list)
        .service(logs::detail)
        .service(compliance::export)
        .service(reconcile::create_run)
        .service(reconcile::list_runs)
        .service(reconcile::get_run);
}
