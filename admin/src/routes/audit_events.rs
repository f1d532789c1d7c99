//! The admin audit trail: who changed what through this API, newest first, with filters. Rows
//! carry names, roles and changed field names, never secrets.

use actix_web::{get, web, HttpResponse};
use chrono::{DateTime, Utc};
use gw_shared::db::admin_audit::{self, Event, Filter};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::{self, Page};
use crate::period::instant;
use crate::session::Session;
use crate::state::AppState;
use crate::validate;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list_audit_events);
}

#[derive(Serialize, ToSchema)]
pub struct AuditEventOut {
    id: Uuid,
    /// The user who acted; null for the system.
    actor_user_id: Option<Uuid>,
    /// The actor's role when they acted.
    actor_role: Option<String>,
    /// `<resource>.<verb>`, e.g. `team.update`.
    action: String,
    /// e.g. `team`, `user`, `invite`, `api_key`.
    resource_type: String,
    resource_id: Option<String>,
    /// The `x-request-id` of the request that made the change.
    request_id: Option<String>,
    /// What changed: names, roles, changed field names; never a secret.
    #[schema(value_type = Object)]
    detail: Value,
    created_at: DateTime<Utc>,
}

impl From<Event> for AuditEventOut {
    fn from(e: Event) -> Self {
        AuditEventOut {
            id: e.id,
            actor_user_id: e.actor_user_id,
            actor_role: e.actor_role,
            action: e.action,
            resource_type: e.resource_type,
            resource_id: e.resource_id,
            request_id: e.request_id,
            detail: e.detail,
            created_at: e.created_at,
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
    actor_user_id: Option<Uuid>,
    /// e.g. `team.create`.
    action: Option<String>,
    resource_type: Option<String>,
    resource_id: Option<String>,
    /// Events at or after this time: an RFC 3339 time or a date (midnight UTC).
    from: Option<String>,
    /// Events before this time: an RFC 3339 time or a date.
    to: Option<String>,
}

fn time(field: &str, value: Option<&str>) -> ApiResult<Option<DateTime<Utc>>> {
    value.map(|v| instant(field, v)).transpose()
}

/// The organization's admin audit trail, newest first.
#[utoipa::path(tag = "audit-events", params(ListQuery), responses((status = 200, body = Page<AuditEventOut>), Errors))]
#[get("/audit-events")]
pub async fn list_audit_events(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<ListQuery>,
) -> ApiResult<HttpResponse> {
    let q = q.into_inner();
    let limit = pagination::limit(q.limit)?;
    let since = time("from", q.from.as_deref())?;
    let until = time("to", q.to.as_deref())?;
    if let (Some(s), Some(u)) = (since, until) {
        if u <= s {
            return Err(ApiError::field("to", "must be after from"));
        }
    }
    let filter = Filter {
        actor_user_id: q.actor_user_id,
        action: q.action.as_deref().map(|a| validate::text("action", a, 200)).transpose()?,
        resource_type: q.resource_type.as_deref().map(|t| validate::text("resource_type", t, 200)).transpose()?,
        resource_id: q.resource_id.as_deref().map(|r| validate::text("resource_id", r, 200)).transpose()?,
        since,
        until,
    };
    let mut conn = state.conn().await?;
    let rows = admin_audit::list(&mut conn, session.org_id, &filter, q.cursor, limit + 1).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(rows, limit, |e| e.id, AuditEventOut::from)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339() {
        assert!(time("from", Some("2026-01-31T12:00:00Z")).unwrap().is_some());
        assert!(time("from", Some("2026-01-31T12:00:00+02:00")).unwrap().is_some());
        assert!(time("from", Some("2026-01-31")).unwrap().is_some());
        assert!(time("from", None).unwrap().is_none());
        match time("to", Some("yesterday")) {
            Err(ApiError::Field { field, .. }) => assert_eq!(field, "to"),
            other => panic!("{other:?}"),
        }
    }
}
