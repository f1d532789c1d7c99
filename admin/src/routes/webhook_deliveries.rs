//! Webhook delivery history and retries: every delivery of the organization's events, with each
//! attempt's time, status code, latency, error and the first 1 KiB of the receiver's answer
//! (members read); a retry by hand attempts at once (admins). See `docs/webhooks.md`.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use gw_shared::db::webhook_deliveries::{self as deliveries, Attempt, Delivery, Filter};
use gw_shared::webhooks::EVENT_TYPES;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::{self, Page};
use crate::period::instant;
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{self, Entry};
use crate::webhook_relay::{attempt_now, AttemptNow};

/// Registered before `/webhooks/{webhook_id}`, which would take `deliveries` for an id.
pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list).service(retry);
}

const STATUSES: &[&str] = &["pending", "succeeded", "failed", "dropped"];

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeliveryQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
    /// Only deliveries to this endpoint.
    webhook_id: Option<Uuid>,
    /// Only this event type.
    event_type: Option<String>,
    /// `pending`, `succeeded`, `failed` or `dropped`.
    status: Option<String>,
    /// Deliveries made at or after this time: an RFC 3339 time or a date (midnight UTC).
    from: Option<String>,
    /// Deliveries made before this time.
    to: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct AttemptOut {
    attempted_at: DateTime<Utc>,
    /// The receiver's status code; null when there was no answer.
    status_code: Option<i32>,
    latency_ms: i32,
    /// Why the attempt failed when it had no answer, or was redirected.
    error: Option<String>,
    /// The first 1 KiB of the receiver's answer.
    response_body: Option<String>,
    /// Made by a retry by hand.
    manual: bool,
}

impl From<Attempt> for AttemptOut {
    fn from(a: Attempt) -> Self {
        AttemptOut {
            attempted_at: a.attempted_at,
            status_code: a.status_code,
            latency_ms: a.latency_ms,
            error: a.error,
            response_body: a.response_body,
            manual: a.manual,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct DeliveryOut {
    id: Uuid,
    webhook_id: Uuid,
    /// The `webhook-id` header of every attempt: the event's id.
    event_id: Uuid,
    event_type: String,
    /// `pending` (due at `next_attempt_at`), `succeeded`, `failed` (after the last automatic
    /// attempt) or `dropped` (the endpoint's queue was full; retry it by hand).
    status: String,
    /// Attempts so far, by hand included.
    attempts: i32,
    /// When the next automatic attempt is due; null unless pending.
    next_attempt_at: Option<DateTime<Utc>>,
    /// True for a summary of coalesced `policy.blocked` events.
    coalesced: bool,
    /// The body every attempt posts: `{type, timestamp, data}`.
    #[schema(value_type = Object)]
    payload: Value,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    /// Every attempt, oldest first.
    attempt_history: Vec<AttemptOut>,
}

impl DeliveryOut {
    fn new(d: Delivery, attempts: Vec<AttemptOut>) -> Self {
        DeliveryOut {
            id: d.id,
            webhook_id: d.endpoint_id,
            event_id: d.event_id,
            event_type: d.event_type,
            next_attempt_at: (d.status == "pending").then_some(d.next_attempt_at),
            status: d.status,
            attempts: d.attempts,
            coalesced: d.coalesce_key.is_some(),
            payload: d.body,
            created_at: d.created_at,
            updated_at: d.updated_at,
            attempt_history: attempts,
        }
    }
}

fn filter(q: &DeliveryQuery) -> ApiResult<Filter> {
    if let Some(t) = q.event_type.as_deref() {
        if !EVENT_TYPES.contains(&t) {
            return Err(ApiError::field("event_type", format!("must be one of {}", EVENT_TYPES.join(", "))));
        }
    }
    if let Some(s) = q.status.as_deref() {
        if !STATUSES.contains(&s) {
            return Err(ApiError::field("status", format!("must be one of {}", STATUSES.join(", "))));
        }
    }
    let since = q.from.as_deref().map(|v| instant("from", v)).transpose()?;
    let until = q.to.as_deref().map(|v| instant("to", v)).transpose()?;
    if let (Some(a), Some(b)) = (since, until) {
        if a >= b {
            return Err(ApiError::field("to", "must be after from"));
        }
    }
    Ok(Filter { endpoint_id: q.webhook_id, event_type: q.event_type.clone(), status: q.status.clone(), since, until })
}

/// The organization's webhook deliveries, newest first, each with its attempts.
#[utoipa::path(operation_id = "list_webhook_deliveries", tag = "webhooks", params(DeliveryQuery),
    responses((status = 200, body = Page<DeliveryOut>), Errors))]
#[get("/organizations/current/webhooks/deliveries")]
pub async fn list(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<DeliveryQuery>,
) -> ApiResult<HttpResponse> {
    let limit = pagination::limit(q.limit)?;
    let f = filter(&q)?;
    let mut conn = state.conn().await?;
    let rows = deliveries::list(&mut conn, session.org_id, &f, q.cursor, limit + 1).await?;
    let ids: Vec<Uuid> = rows.iter().take(limit as usize).map(|d| d.id).collect();
    let mut attempts: std::collections::HashMap<Uuid, Vec<AttemptOut>> = std::collections::HashMap::new();
    for a in deliveries::attempts_of(&mut conn, session.org_id, &ids).await? {
        attempts.entry(a.delivery_id).or_default().push(a.into());
    }
    Ok(HttpResponse::Ok().json(Page::from_rows(
        rows,
        limit,
        |d| d.id,
        |d| {
            let mine = attempts.remove(&d.id).unwrap_or_default();
            DeliveryOut::new(d, mine)
        },
    )))
}

/// Attempt a delivery now, whatever its status, without waiting for its schedule; the answer is
/// the delivery with the new attempt. A pending delivery keeps its automatic schedule if this
/// attempt fails.
#[utoipa::path(operation_id = "retry_webhook_delivery", tag = "webhooks",
    params(("delivery_id" = Uuid, Path, description = "The delivery's id")),
    responses((status = 200, body = DeliveryOut), Errors))]
#[post("/organizations/current/webhooks/deliveries/{delivery_id}/retry")]
pub async fn retry(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    state.keyring("webhook delivery needs")?;
    let d = match attempt_now(&state, session.org_id, id).await {
        Ok(Some(d)) => d,
        Ok(None) => return Err(ApiError::NotFound("webhook delivery")),
        Err(AttemptNow::InFlight) => {
            return Err(ApiError::Conflict("an attempt at this delivery is under way; try again shortly".into()))
        }
        Err(AttemptNow::Failed(e)) => return Err(ApiError::Internal(format!("webhook retry: {e}"))),
    };
    let mut conn = state.conn().await?;
    let entry = Entry {
        action: "webhook.retry",
        resource_type: "webhook_delivery",
        resource_id: Some(id.to_string()),
        detail: json!({"webhook_id": d.endpoint_id, "event_type": d.event_type, "status": d.status}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    let attempts = deliveries::attempts_of(&mut conn, session.org_id, &[d.id]).await?;
    Ok(HttpResponse::Ok().json(DeliveryOut::new(d, attempts.into_iter().map(AttemptOut::from).collect())))
}

pub(super) fn out(d: Delivery) -> DeliveryOut {
    DeliveryOut::new(d, Vec::new())
}
