//! `/api/v1/experiments`: A/B tests of models and prompt-template versions on live traffic. An
//! experiment is created as a draft, `start` begins assignment (the proxy's experiment step),
//! `pause` suspends it, `stop` ends it; it completes by itself when the sequential test declares
//! a winner or every variant reaches its sample cap. `results` judges the variants at any time
//! without inflating the false-positive rate. Feedback scores arrive keyed by request id
//! (`PUT /api/v1/requests/{request_id}/feedback`). `docs/experiments.md`.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::AsyncConnection;
use gw_shared::db::experiments::{self as db, Experiment, NewExperiment};
use gw_shared::db::{invalidations, prompt_templates, teams};
use gw_shared::experiments::results::Comparison;
use gw_shared::experiments::spec::{self, Metric, Traffic, VariantInput};
use gw_shared::experiments::stats::Settings;
use gw_shared::ids::new_id;
use gw_shared::redis::Invalidation;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::experiments::{complete, conclude, evaluate};
use crate::pagination::{self, Page};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{self, Entry};
use crate::validate;
use crate::validate::models as known_models;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list)
        .service(create)
        .service(get)
        .service(start)
        .service(pause)
        .service(stop)
        .service(results)
        .service(feedback);
}

/// Experiments an organization may have that are not completed.
const MAX_OPEN: i64 = 100;
const MAX_NAME_CHARS: usize = 200;
const MAX_DESCRIPTION_CHARS: usize = 1000;
const MAX_COMMENT_CHARS: usize = 1000;
/// Default and largest sample cap per variant.
const DEFAULT_MAX_SAMPLES: i32 = 10_000;
const LARGEST_MAX_SAMPLES: i32 = 10_000_000;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExperimentTraffic {
    /// Requests naming this model (or alias), as sent.
    #[serde(default)]
    model: Option<String>,
    /// Requests rendering this prompt template.
    #[serde(default)]
    template_id: Option<Uuid>,
    /// Only this team's requests.
    #[serde(default)]
    team_id: Option<Uuid>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateExperiment {
    /// 1 to 200 characters.
    name: String,
    #[serde(default)]
    description: Option<String>,
    /// What is compared: `latency`, `cost`, `error_rate` (lower is better) or `feedback`
    /// (higher is better).
    metric: Metric,
    /// The traffic it applies to: a model, a template, or both; optionally one team's.
    traffic: ExperimentTraffic,
    /// 2 to 8 variants; the first is the control.
    variants: Vec<VariantInput>,
    /// The experiment completes without a winner once every variant has this many samples
    /// (30 to 10,000,000; default 10,000).
    #[serde(default)]
    max_samples_per_variant: Option<i32>,
}

#[derive(Serialize, ToSchema)]
pub struct TrafficOut {
    model: Option<String>,
    template_id: Option<Uuid>,
    team_id: Option<Uuid>,
}

#[derive(Serialize, ToSchema)]
pub struct VariantOut {
    name: String,
    model: Option<String>,
    template_version: Option<i32>,
    weight: u32,
    /// The share of the traffic, in percent.
    share_percent: f64,
    control: bool,
}

#[derive(Serialize, ToSchema)]
pub struct ExperimentOut {
    id: Uuid,
    name: String,
    description: String,
    metric: String,
    traffic: TrafficOut,
    variants: Vec<VariantOut>,
    max_samples_per_variant: i32,
    /// `draft`, `running`, `paused` or `completed`.
    status: String,
    /// Once completed: `winner`, `max_samples` or `stopped`.
    completion_reason: Option<String>,
    winner: Option<String>,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    ended_at: Option<DateTime<Utc>>,
}

fn out(e: Experiment) -> ExperimentOut {
    let variants = e.variant_list().unwrap_or_default();
    ExperimentOut {
        id: e.id,
        name: e.name,
        description: e.description,
        metric: e.metric,
        traffic: TrafficOut { model: e.match_model, template_id: e.match_template_id, team_id: e.match_team_id },
        variants: variants
            .into_iter()
            .enumerate()
            .map(|(i, v)| VariantOut {
                name: v.name,
                model: v.model,
                template_version: v.template_version,
                weight: v.weight,
                share_percent: f64::from(v.basis_points) / 100.0,
                control: i == 0,
            })
            .collect(),
        max_samples_per_variant: e.max_samples_per_variant,
        status: e.status,
        completion_reason: e.completion_reason,
        winner: e.winner,
        created_by: e.created_by,
        created_at: e.created_at,
        updated_at: e.updated_at,
        started_at: e.started_at,
        ended_at: e.ended_at,
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExperimentsQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
    /// `draft`, `running`, `paused` or `completed`.
    status: Option<String>,
}

const STATUSES: [&str; 4] = ["draft", "running", "paused", "completed"];

/// The organization's experiments, newest first.
#[utoipa::path(operation_id = "list_experiments", tag = "experiments", params(ExperimentsQuery),
    responses((status = 200, body = Page<ExperimentOut>), Errors))]
#[get("/experiments")]
pub async fn list(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<ExperimentsQuery>,
) -> ApiResult<HttpResponse> {
    let limit = pagination::limit(q.limit)?;
    if let Some(s) = q.status.as_deref() {
        if !STATUSES.contains(&s) {
            return Err(ApiError::field("status", format!("must be one of {}", STATUSES.join(", "))));
        }
    }
    let mut conn = state.conn().await?;
    let rows = db::list(&mut conn, session.org_id, q.status.as_deref(), q.cursor, limit + 1).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(rows, limit, |e| e.id, out)))
}

/// Create an experiment (a draft: nothing is assigned until it starts).
#[utoipa::path(operation_id = "create_experiment", tag = "experiments", request_body = CreateExperiment,
    responses((status = 201, body = ExperimentOut), Errors))]
#[post("/experiments")]
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<CreateExperiment>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let name = validate::text("name", &b.name, MAX_NAME_CHARS)?;
    let description =
        validate::optional_text("description", b.description.as_deref().unwrap_or_default(), MAX_DESCRIPTION_CHARS)?;
    let traffic = Traffic { model: b.traffic.model, template_id: b.traffic.template_id, team_id: b.traffic.team_id };
    spec::traffic(&traffic).map_err(|e| ApiError::field(&e.field, e.message))?;
    let variants = spec::variants(&b.variants, &traffic).map_err(|e| ApiError::field(&e.field, e.message))?;
    let max_samples = b.max_samples_per_variant.unwrap_or(DEFAULT_MAX_SAMPLES);
    if !(Settings::default().min_samples as i32..=LARGEST_MAX_SAMPLES).contains(&max_samples) {
        return Err(ApiError::field("max_samples_per_variant", format!("must be 30 to {LARGEST_MAX_SAMPLES}")));
    }
    let mut conn = state.conn().await?;
    if let Some(team) = traffic.team_id {
        if !teams::exists_in_org(&mut conn, session.org_id, team).await? {
            return Err(ApiError::field("traffic.team_id", "no such team in this organization"));
        }
    }
    if let Some(t) = traffic.template_id {
        let found = prompt_templates::find(&mut conn, session.org_id, t, false).await?;
        let latest = found
            .map(|t| t.latest_version)
            .ok_or_else(|| ApiError::field("traffic.template_id", "no such prompt template in this organization"))?;
        for (i, v) in variants.iter().enumerate() {
            if v.template_version.is_some_and(|n| n > latest) {
                return Err(ApiError::field(
                    format!("variants[{i}].template_version"),
                    format!("the template has versions 1 to {latest}"),
                ));
            }
        }
    }
    // Models must be configured ones, as for a key's allow-list.
    let routes = state.routes().await?;
    let named = |field: String, m: &str| {
        known_models(&routes, vec![m.to_string()])
            .map_err(|_| ApiError::field(field, format!("unknown model {m:?}: a configured model name or alias")))
    };
    if let Some(m) = &traffic.model {
        named("traffic.model".into(), m)?;
    }
    for (i, v) in variants.iter().enumerate() {
        if let Some(m) = &v.model {
            named(format!("variants[{i}].model"), m)?;
        }
    }
    let id = new_id();
    let trail = trail::Trail::of(&session, &req);
    let e = conn
        .transaction(async |conn| {
            if db::count_open(conn, session.org_id).await? >= MAX_OPEN {
                return Err(ApiError::Conflict(format!(
                    "an organization has at most {MAX_OPEN} experiments that are not completed"
                )));
            }
            let new = NewExperiment {
                id,
                name: &name,
                description: &description,
                metric: b.metric,
                traffic: &traffic,
                variants: &variants,
                max_samples_per_variant: max_samples,
                created_by: Some(session.user_id),
            };
            let e = db::create(conn, session.org_id, &new).await?;
            let entry = Entry {
                action: "experiment.create",
                resource_type: "experiment",
                resource_id: Some(id.to_string()),
                detail: json!({"name": e.name, "metric": e.metric}),
            };
            trail.record(conn, entry).await?;
            Ok::<_, ApiError>(e)
        })
        .await?;
    Ok(HttpResponse::Created().json(out(e)))
}

/// One experiment.
#[utoipa::path(operation_id = "get_experiment", tag = "experiments",
    params(("experiment_id" = Uuid, Path, description = "The experiment's id")),
    responses((status = 200, body = ExperimentOut), Errors))]
#[get("/experiments/{experiment_id}")]
pub async fn get(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let e = db::find(&mut conn, session.org_id, id.into_inner()).await?.ok_or(ApiError::NotFound("experiment"))?;
    Ok(HttpResponse::Ok().json(out(e)))
}

/// A status change: from the statuses allowed, in one transaction with the trail entry.
async fn transition(
    state: &AppState,
    session: &Session,
    req: &HttpRequest,
    id: Uuid,
    action: &'static str,
    from: &[&str],
    to: &'static str,
) -> ApiResult<Experiment> {
    let trail = trail::Trail::of(session, req);
    let mut conn = state.conn().await?;
    let (e, logged) = conn
        .transaction(async |conn| {
            let e = db::lock(conn, session.org_id, id).await?.ok_or(ApiError::NotFound("experiment"))?;
            if !from.contains(&e.status.as_str()) {
                return Err(ApiError::Conflict(format!(
                    "the experiment is {}; {} needs it {}",
                    e.status,
                    action.trim_start_matches("experiment."),
                    from.join(" or ")
                )));
            }
            let done = if to == "completed" {
                let ev = evaluate(conn, session.org_id, &e).await?;
                complete(conn, &e, &ev, "stopped", None).await?
            } else {
                if to == "running" {
                    db::lock_starts(conn, session.org_id).await?;
                    if let Some(other) = db::running_over(conn, session.org_id, id, &e.traffic()).await? {
                        return Err(ApiError::Conflict(format!(
                            "experiment {other} is running over the same traffic; pause or stop it first"
                        )));
                    }
                    if let Some(t) = e.match_template_id {
                        if prompt_templates::find(conn, session.org_id, t, false).await?.is_none() {
                            return Err(ApiError::Conflict("the experiment's prompt template was deleted".into()));
                        }
                    }
                }
                db::set_status(conn, session.org_id, id, to, None).await?
            };
            let entry = Entry {
                action,
                resource_type: "experiment",
                resource_id: Some(id.to_string()),
                detail: json!({"from": e.status, "to": to}),
            };
            trail.record(conn, entry).await?;
            let logged =
                invalidations::record_all(conn, [Invalidation::Experiments { org_id: session.org_id }]).await?;
            Ok::<_, ApiError>((done, logged))
        })
        .await?;
    state.announce(&logged, format_args!("experiment {id}")).await;
    Ok(e)
}

/// Start (or resume) assigning requests to the variants.
#[utoipa::path(operation_id = "start_experiment", tag = "experiments",
    params(("experiment_id" = Uuid, Path, description = "The experiment's id")),
    responses((status = 200, body = ExperimentOut), Errors))]
#[post("/experiments/{experiment_id}/start")]
pub async fn start(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let e = transition(&state, &session, &req, id.into_inner(), "experiment.start", &["draft", "paused"], "running")
        .await?;
    Ok(HttpResponse::Ok().json(out(e)))
}

/// Pause: requests are no longer assigned (they go as sent) until it starts again.
#[utoipa::path(operation_id = "pause_experiment", tag = "experiments",
    params(("experiment_id" = Uuid, Path, description = "The experiment's id")),
    responses((status = 200, body = ExperimentOut), Errors))]
#[post("/experiments/{experiment_id}/pause")]
pub async fn pause(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let e = transition(&state, &session, &req, id.into_inner(), "experiment.pause", &["running"], "paused").await?;
    Ok(HttpResponse::Ok().json(out(e)))
}

/// Stop for good: the experiment completes (reason `stopped`) without a winner.
#[utoipa::path(operation_id = "stop_experiment", tag = "experiments",
    params(("experiment_id" = Uuid, Path, description = "The experiment's id")),
    responses((status = 200, body = ExperimentOut), Errors))]
#[post("/experiments/{experiment_id}/stop")]
pub async fn stop(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    // A winner the test already has is declared, not lost to the stop: then the experiment is
    // answered as it completed.
    let mut conn = state.conn().await?;
    let found = conclude(&mut conn, session.org_id, id).await?.ok_or(ApiError::NotFound("experiment"))?;
    drop(conn);
    if found.completed_now {
        state.announce(&found.logged, format_args!("experiment {id}")).await;
        return Ok(HttpResponse::Ok().json(out(found.experiment)));
    }
    let e =
        transition(&state, &session, &req, id, "experiment.stop", &["draft", "running", "paused"], "completed").await?;
    Ok(HttpResponse::Ok().json(out(e)))
}

#[derive(Serialize, ToSchema)]
pub struct VariantResultOut {
    name: String,
    control: bool,
    /// Requests counted for the metric.
    samples: u64,
    mean: f64,
    /// The sample standard deviation.
    std_dev: f64,
    /// A fixed-sample 95 % confidence interval of the mean (for display).
    interval: [f64; 2],
    /// Against the control, by the sequential test; null for the control and until both have
    /// two samples with some variance.
    comparison: Option<Comparison>,
}

#[derive(Serialize, ToSchema)]
pub struct ExperimentResults {
    experiment_id: Uuid,
    status: String,
    metric: String,
    /// `msprt`: a mixture sequential probability ratio test (always valid at any look).
    test: &'static str,
    /// The false-positive rate held across all comparisons and looks.
    alpha: f64,
    /// The level each comparison against the control is tested at (Bonferroni).
    alpha_per_comparison: f64,
    /// Samples each variant needs before it can win.
    min_samples: u64,
    max_samples_per_variant: i32,
    /// The winning variant, once the test declares one.
    winner: Option<String>,
    completion_reason: Option<String>,
    variants: Vec<VariantResultOut>,
}

/// The variants' results: sample size, mean and interval of the metric, and each variant
/// against the control by the sequential test. Safe to read at any time.
#[utoipa::path(operation_id = "get_experiment_results", tag = "experiments",
    params(("experiment_id" = Uuid, Path, description = "The experiment's id")),
    responses((status = 200, body = ExperimentResults), Errors))]
#[get("/experiments/{experiment_id}/results")]
pub async fn results(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    // One evaluation, which also completes a running experiment its results say is over.
    let found = conclude(&mut conn, session.org_id, id).await?.ok_or(ApiError::NotFound("experiment"))?;
    if found.completed_now {
        state.announce(&found.logged, format_args!("experiment {id}")).await;
    }
    let (e, ev) = (found.experiment, found.evaluated);
    let s = Settings::default();
    let variants = ev
        .variants
        .iter()
        .zip(ev.judgement.variants)
        .enumerate()
        .map(|(i, (v, r))| VariantResultOut {
            name: v.name.clone(),
            control: i == 0,
            samples: r.n,
            mean: r.mean,
            std_dev: r.std_dev,
            interval: r.interval,
            comparison: r.comparison,
        })
        .collect();
    Ok(HttpResponse::Ok().json(ExperimentResults {
        experiment_id: e.id,
        status: e.status,
        metric: e.metric,
        test: "msprt",
        alpha: s.alpha,
        alpha_per_comparison: ev.judgement.alpha_each,
        min_samples: s.min_samples,
        max_samples_per_variant: e.max_samples_per_variant,
        winner: e.winner,
        completion_reason: e.completion_reason,
        variants,
    }))
}

/// A request id as the proxy mints them: a UUIDv7 from the past (a day's clock skew allowed),
/// so feedback cannot be parked under ids no request will ever have.
fn request_id(id: Uuid) -> ApiResult<()> {
    let minted = id.get_timestamp().map(|t| t.to_unix().0 as i64);
    let now = Utc::now().timestamp();
    match minted {
        Some(secs) if id.get_version_num() == 7 && secs <= now + 86_400 => Ok(()),
        _ => Err(ApiError::field("request_id", "is not a request id (x-gw-request-id)")),
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutFeedback {
    /// Any finite number (for example 0/1 thumbs, or a 1–5 rating); higher is better.
    score: f64,
    /// At most 1000 characters.
    #[serde(default)]
    comment: Option<String>,
}

/// Record a feedback score for a request (by its `x-gw-request-id`); a later score replaces it.
/// Experiments whose metric is `feedback` compare these.
#[utoipa::path(operation_id = "put_request_feedback", tag = "experiments", request_body = PutFeedback,
    params(("request_id" = Uuid, Path, description = "The request's id (x-gw-request-id)")),
    responses((status = 204, description = "Recorded"), Errors))]
#[put("/requests/{request_id}/feedback")]
pub async fn feedback(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<Uuid>,
    body: crate::body::Json<PutFeedback>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    if !b.score.is_finite() || b.score.abs() > 1e9 {
        return Err(ApiError::field("score", "must be a finite number between -1e9 and 1e9"));
    }
    let comment = validate::optional_text("comment", b.comment.as_deref().unwrap_or_default(), MAX_COMMENT_CHARS)?;
    let id = id.into_inner();
    request_id(id)?;
    let mut conn = state.conn().await?;
    db::put_feedback(&mut conn, session.org_id, id, b.score, &comment, Some(session.user_id)).await?;
    Ok(HttpResponse::NoContent().finish())
}
