//! The caller's organization.

use actix_web::{web, HttpResponse};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use gw_shared::db::orgs;

use crate::error::{ApiError, ApiResult};
use crate::session::Session;
use crate::state::AppState;

#[derive(Serialize)]
struct DataResidency {
    region: String,
}

#[derive(Serialize)]
struct OrganizationOut {
    id: Uuid,
    name: String,
    plan: String,
    data_residency: DataResidency,
    metadata: Value,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
}

pub async fn current(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let org = orgs::find(&mut conn, session.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    Ok(HttpResponse::Ok().json(OrganizationOut {
        id: org.id,
        name: org.name,
        plan: org.plan,
        data_residency: DataResidency { region: org.data_residency_region },
        metadata: org.metadata,
        created_at: org.created_at,
        updated_at: org.updated_at,
    }))
}
