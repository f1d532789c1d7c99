//! Spend reconciliation. `POST /analytics/reconcile` puts what a provider's own usage and cost
//! reports say about a period next to what gw logged of the requests that provider answered for
//! the organization, per model and UTC day, keeps the run and returns every difference; `GET
//! /analytics/reconcile` and `GET /analytics/reconcile/{run_id}` read runs back. Tenants are
//! charged from gw's log while the provider bills from its own meters: requests that never
//! reached the log, a price table that lags the provider's, or the key used outside gw show up
//! only here. Building the report URLs, reading pages and comparing are `gw_shared::reconcile`,
//! the calls `crate::reports`; this module validates, stores and answers.
//!
//! The provider's admin key (sent with the request, else the organization's provider key) goes to
//! the provider and nowhere else: not into the run, the trail or the log. A failed fetch names the
//! provider, the report and at most a status, never the provider's response body.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Days, NaiveDate, NaiveTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::config::{ProviderConfig, Routes};
use gw_shared::db::provider_keys;
use gw_shared::db::reconcile_runs::{self, Run, RunSummary};
use gw_shared::ids::new_id;
use gw_shared::reconcile::{self as rec, Dialect, Discrepancy, Ledger};
use gw_shared::webhooks::payloads;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::{self, Page};
use crate::reports::ReportClient;
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{Entry, Trail};
use crate::validate;

/// Longest period one run covers, both ends included: a quarter of three 31-day months.
const MAX_DAYS: i64 = 93;
/// The provider kinds with usage and cost report APIs (`Dialect::from_kind`), for messages.
const SUPPORTED_KINDS: &str = "openai, anthropic";

/// A run to make.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReconcileRequest {
    /// A configured provider's name, of kind `openai` or `anthropic`.
    provider: String,
    /// The first UTC day, `YYYY-MM-DD`; not after today.
    from: String,
    /// The day after the last, `YYYY-MM-DD` (exclusive, like every `to`); default: the day after
    /// `from` (one day). Not after tomorrow, at most 93 days after `from`.
    to: Option<String>,
    /// The provider's admin key (its usage reports refuse project keys), used for this run only
    /// and never stored. Default: the organization's provider key for `provider`.
    admin_key: Option<String>,
}

/// What one side counted on one model on one UTC day.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ReconcileUsage {
    /// The upstream model, as the provider names it.
    model: String,
    day: NaiveDate,
    /// Null where the source does not count requests (Anthropic's reports).
    requests: Option<u64>,
    /// Whole prompts, cached tokens included.
    input_tokens: u64,
    output_tokens: u64,
    /// Of the input tokens, those read from the provider's prompt cache.
    cached_tokens: u64,
    /// USD, an exact decimal.
    #[schema(value_type = String)]
    cost_usd: String,
}

/// One field of one model and day on which the provider and gw disagree.
#[derive(Serialize, Deserialize, ToSchema)]
pub struct ReconcileDiscrepancy {
    model: String,
    day: NaiveDate,
    /// `requests`, `input_tokens`, `output_tokens`, `cached_tokens` or `cost_usd`.
    field: String,
    /// An exact decimal.
    logged: String,
    /// An exact decimal.
    reported: String,
    /// `reported - logged`: positive when the provider counts more than gw logged.
    difference: String,
}

impl From<Discrepancy> for ReconcileDiscrepancy {
    fn from(d: Discrepancy) -> Self {
        ReconcileDiscrepancy {
            model: d.model,
            day: d.day,
            field: d.field.to_string(),
            logged: d.logged,
            reported: d.reported,
            difference: d.difference,
        }
    }
}

/// A run: both sides and every difference between them.
#[derive(Serialize, ToSchema)]
pub struct ReconcileRun {
    id: Uuid,
    /// The gw provider's name.
    provider: String,
    /// The first day.
    from: NaiveDate,
    /// The day after the last (exclusive).
    to: NaiveDate,
    /// Null once that user is deleted.
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    /// Whether the two sides agree on every field.
    matched: bool,
    /// By model, day, then field. Requests are compared only where the provider counts them.
    discrepancies: Vec<ReconcileDiscrepancy>,
    /// What gw logged of the requests the provider answered (status below 400, not served from
    /// gw's cache), per upstream model and UTC day.
    logged: Vec<ReconcileUsage>,
    /// What the provider's usage and cost reports say, per model and UTC day.
    reported: Vec<ReconcileUsage>,
}

impl TryFrom<Run> for ReconcileRun {
    type Error = ApiError;

    fn try_from(r: Run) -> ApiResult<Self> {
        let id = r.id;
        let bad = |part: &str, e: serde_json::Error| ApiError::Internal(format!("reconcile run {id}: {part}: {e}"));
        let discrepancies: Vec<ReconcileDiscrepancy> =
            serde_json::from_value(r.discrepancies).map_err(|e| bad("discrepancies", e))?;
        Ok(ReconcileRun {
            id,
            provider: r.provider,
            from: r.start_day,
            to: day_after(r.end_day)?,
            created_by: r.created_by,
            created_at: r.created_at,
            matched: discrepancies.is_empty(),
            discrepancies,
            logged: serde_json::from_value(r.logged).map_err(|e| bad("logged", e))?,
            reported: serde_json::from_value(r.reported).map_err(|e| bad("reported", e))?,
        })
    }
}

/// A run as a list shows it, without its ledgers.
#[derive(Serialize, ToSchema)]
pub struct ReconcileRunSummary {
    id: Uuid,
    provider: String,
    from: NaiveDate,
    /// Exclusive.
    to: NaiveDate,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    matched: bool,
    /// How many differences the run found; `GET /analytics/reconcile/{run_id}` lists them.
    discrepancy_count: i32,
}

impl From<RunSummary> for ReconcileRunSummary {
    fn from(r: RunSummary) -> Self {
        ReconcileRunSummary {
            id: r.id,
            provider: r.provider,
            from: r.start_day,
            to: r.end_day.checked_add_days(Days::new(1)).unwrap_or(r.end_day),
            created_by: r.created_by,
            created_at: r.created_at,
            matched: r.discrepancies == 0,
            discrepancy_count: r.discrepancies,
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReconcileListQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
}

/// Compare a provider's own usage and cost reports for a period with what gw logged of the
/// requests it answered for this organization, per model and UTC day, and keep the run.
#[utoipa::path(operation_id = "reconcile_spend", tag = "analytics", request_body = ReconcileRequest,
    responses((status = 201, body = ReconcileRun), Errors))]
#[post("/analytics/reconcile")]
pub async fn create_run(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<ReconcileRequest>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let routes = state.routes().await?;
    let (provider, dialect) = provider(&routes, &b.provider)?;
    let (start, end) = period(&b.from, b.to.as_deref(), Utc::now().date_naive())?;
    let base_url = provider
        .base_url
        .as_deref()
        .ok_or_else(|| ApiError::Validation(format!("provider {:?} has no base_url configured", provider.name)))?;
    // Only a base URL the server's config got wrong can fail here: the period is checked.
    let requests = rec::report_requests(dialect, base_url, start, end)
        .map_err(|e| ApiError::Internal(format!("provider {}: {e}", provider.name)))?;
    let (key, credential) = match &b.admin_key {
        Some(k) => (validate::secret("admin_key", k)?, "admin_key"),
        None => (org_key(&state, session.org_id, &provider.name).await?, "provider_key"),
    };
    let client = ReportClient::new(dialect, &key)?;

    // A failed read stores nothing: the 502 names the provider, the report and at most a status.
    let mut reported = client.ledger(&requests, &provider.name).await.inspect_err(|e| {
        log::warn!("reconcile of org {} with provider {} failed: {e}", session.org_id, provider.name);
        state.metrics.reconcile_runs.with_label_values(&["failed"]).inc();
    })?;
    // The log side covers exactly these days; a bucket outside them is not the run's.
    reported.retain(|(_, day), _| (start..=end).contains(day));

    let to = midnight(day_after(end)?);
    let mut conn = state.conn().await?;
    let logged = reconcile_runs::logged_usage(&mut conn, session.org_id, &provider.name, midnight(start), to).await?;
    let found = rec::compare(&logged, &reported, dialect == Dialect::OpenAi);
    let days: std::collections::BTreeSet<chrono::NaiveDate> = found.iter().map(|d| d.day).collect();
    let discrepancies: Vec<ReconcileDiscrepancy> = found.into_iter().map(Into::into).collect();
    let run_id = new_id();
    let event = (!days.is_empty()).then(|| {
        let period = (start, end);
        payloads::reconcile_discrepancy(session.org_id, run_id, &provider.name, period, &logged, &reported, &days)
    });
    let run = Run {
        id: run_id,
        org_id: session.org_id,
        provider: provider.name.clone(),
        start_day: start,
        end_day: end,
        created_by: Some(session.user_id),
        created_at: Utc::now(),
        logged: document(&usage_rows(&logged))?,
        reported: document(&usage_rows(&reported))?,
        discrepancies: document(&discrepancies)?,
    };
    let trail = Trail::of(&session, &req);
    let run = conn.transaction(async |conn| store(conn, &trail, &run, credential, event).await).await?;
    let outcome = if discrepancies.is_empty() { "matched" } else { "discrepancies" };
    state.metrics.reconcile_runs.with_label_values(&[outcome]).inc();
    log::info!(
        "reconcile run {} of org {}: provider {}, {start} to {end}, {} discrepancies",
        run.id,
        run.org_id,
        run.provider,
        discrepancies.len()
    );
    Ok(HttpResponse::Created().json(ReconcileRun::try_from(run)?))
}

/// The organization's reconcile runs, newest first, without their ledgers.
#[utoipa::path(operation_id = "list_reconcile_runs", tag = "analytics", params(ReconcileListQuery),
    responses((status = 200, body = Page<ReconcileRunSummary>), Errors))]
#[get("/analytics/reconcile")]
pub async fn list_runs(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<ReconcileListQuery>,
) -> ApiResult<HttpResponse> {
    let limit = pagination::limit(q.limit)?;
    let mut conn = state.conn().await?;
    let rows = reconcile_runs::list(&mut conn, session.org_id, q.cursor, limit + 1).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(rows, limit, |r| r.id, ReconcileRunSummary::from)))
}

/// One reconcile run, with both ledgers and every difference.
#[utoipa::path(operation_id = "get_reconcile_run", tag = "analytics",
    params(("run_id" = Uuid, Path, description = "The run's id")),
    responses((status = 200, body = ReconcileRun), Errors))]
#[get("/analytics/reconcile/{run_id}")]
pub async fn get_run(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let run = reconcile_runs::find(&mut conn, session.org_id, id.into_inner())
        .await?
        .ok_or(ApiError::NotFound("reconcile run"))?;
    Ok(HttpResponse::Ok().json(ReconcileRun::try_from(run)?))
}

/// The run, its `reconcile.discrepancy` event (when it found differences) and its trail entry,
/// committed together.
async fn store(
    conn: &mut AsyncPgConnection,
    trail: &Trail,
    run: &Run,
    credential: &str,
    event: Option<gw_shared::limits::events::NewEvent>,
) -> ApiResult<Run> {
    let stored = reconcile_runs::insert(conn, run).await?;
    if let Some(event) = event {
        gw_shared::db::events::emit(conn, event).await?;
    }
    let entry = Entry {
        action: "analytics.reconcile",
        resource_type: "reconcile_run",
        resource_id: Some(stored.id.to_string()),
        detail: json!({"provider": stored.provider, "start": stored.start_day, "end": stored.end_day,
                       "credential": credential,
                       "discrepancies": stored.discrepancies.as_array().map_or(0, Vec::len)}),
    };
    trail.record(conn, entry).await?;
    Ok(stored)
}

/// The configured provider and the report dialect its kind speaks.
fn provider<'a>(routes: &'a Routes, requested: &str) -> ApiResult<(&'a ProviderConfig, Dialect)> {
    let providers = &routes.providers;
    let Some(p) = providers.iter().find(|p| p.name == requested) else {
        let reportable: Vec<&str> =
            providers.iter().filter(|p| Dialect::from_kind(&p.kind).is_some()).map(|p| p.name.as_str()).collect();
        let known = if reportable.is_empty() { "none are configured".to_string() } else { reportable.join(", ") };
        return Err(ApiError::field(
            "provider",
            format!("unknown provider {requested:?}; providers with usage reports: {known}"),
        ));
    };
    let dialect = Dialect::for_kind(&p.kind).map_err(|_| {
        ApiError::field(
            "provider",
            format!(
                "provider {:?} is of kind {:?}, which has no usage report API; supported kinds: {SUPPORTED_KINDS}",
                p.name, p.kind
            ),
        )
    })?;
    Ok((p, dialect))
}

/// The checked period: `start..=end` in UTC days, ending today at the latest.
/// The days `[from, to)` as their first and last: `to` defaults to the day after `from`.
fn period(from: &str, to: Option<&str>, today: NaiveDate) -> ApiResult<(NaiveDate, NaiveDate)> {
    let start = day("from", from)?;
    if start > today {
        return Err(ApiError::field("from", format!("must not be after today ({today}, UTC)")));
    }
    let next = match to {
        Some(t) => day("to", t)?,
        None => day_after(start)?,
    };
    if next <= start {
        return Err(ApiError::field("to", "must be after from"));
    }
    if next > day_after(today)? {
        return Err(ApiError::field("to", format!("must not be after tomorrow (today is {today}, UTC)")));
    }
    if (next - start).num_days() > MAX_DAYS {
        return Err(ApiError::field("to", format!("must be at most {MAX_DAYS} days after from")));
    }
    Ok((start, next - Days::new(1)))
}

fn day_after(d: NaiveDate) -> ApiResult<NaiveDate> {
    d.checked_add_days(Days::new(1)).ok_or_else(|| ApiError::field("to", "is past the calendar's end"))
}

fn day(field: &str, value: &str) -> ApiResult<NaiveDate> {
    NaiveDate::parse_from_str(value.trim(), "%Y-%m-%d")
        .map_err(|_| ApiError::field(field, "must be a date, YYYY-MM-DD"))
}

fn midnight(day: NaiveDate) -> DateTime<Utc> {
    day.and_time(NaiveTime::MIN).and_utc()
}

/// The secret of the organization's live key for `provider`, opened.
async fn org_key(state: &AppState, org_id: Uuid, provider: &str) -> ApiResult<String> {
    let keys = {
        let mut conn = state.conn().await?;
        provider_keys::live_for_org(&mut conn, org_id).await?
    };
    let Some(sealed) = keys.for_provider(provider) else {
        return Err(ApiError::Validation(format!("no admin key: pass admin_key or add a provider key for {provider}")));
    };
    let ring = state.keyring("provider keys need")?;
    Ok(sealed.open(ring, org_id)?)
}

fn usage_rows(ledger: &Ledger) -> Vec<ReconcileUsage> {
    ledger
        .iter()
        .map(|((model, day), u)| ReconcileUsage {
            model: model.clone(),
            day: *day,
            requests: u.requests,
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cached_tokens: u.cached_tokens,
            cost_usd: u.cost_usd.normalize().to_string(),
        })
        .collect()
}

fn document<T: Serialize>(value: &T) -> ApiResult<Value> {
    serde_json::to_value(value).map_err(|e| ApiError::Internal(format!("cannot encode a reconcile run: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn field_of(r: ApiResult<(NaiveDate, NaiveDate)>) -> String {
        match r {
            Err(ApiError::Field { field, .. }) => field,
            Err(other) => panic!("{other:?}"),
            Ok(p) => panic!("accepted {p:?}"),
        }
    }

    #[test]
    fn periods() {
        let today = date("2026-03-10");
        assert_eq!(period("2026-03-10", None, today).unwrap(), (today, today));
        assert_eq!(
            period(" 2026-03-01 ", Some("2026-03-10"), today).unwrap(),
            (date("2026-03-01"), date("2026-03-09"))
        );
        // 93 days: `to` is the day after the last.
        assert!(period("2025-12-08", Some("2026-03-11"), today).is_ok());
        assert_eq!(field_of(period("2025-12-07", Some("2026-03-11"), today)), "to");
        assert_eq!(field_of(period("2026-03-05", Some("2026-03-05"), today)), "to");
        assert_eq!(field_of(period("2026-03-05", Some("2026-03-12"), today)), "to");
        assert_eq!(field_of(period("2026-03-11", None, today)), "from");
        assert_eq!(field_of(period("10/03/2026", None, today)), "from");
        assert_eq!(field_of(period("2026-03-01", Some("2026-02-30"), today)), "to");
    }
}
