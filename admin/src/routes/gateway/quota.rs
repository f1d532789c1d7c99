//! An organization's quota on the gateway's own provider credentials, for the gateway operator:
//! what its plan's `[gateway_quota.<plan>]` gives it, the operator's override (a budget and rate
//! limits of its own, or none at all), and which one is in force. An override replaces the
//! plan's quota whole; removing it restores the plan's. The change is recorded in the affected
//! organization's audit trail and reaches the proxies at once.

use actix_web::{delete, get, put, web, HttpRequest, HttpResponse};
use gw_shared::db::{invalidations, orgs};
use gw_shared::limits::settings::{Budget, RateLimits, ScopeLimits};
use gw_shared::redis::Invalidation;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{Actor, Entry, Trail};

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(get_quota).service(set_quota).service(remove_quota);
}

/// A budget and rate limits on the gateway's credentials.
#[derive(Serialize, Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Null or absent: no budget.
    #[serde(default)]
    budget: Option<Budget>,
    /// Null or absent: no rate limits.
    #[serde(default)]
    rate_limits: Option<RateLimits>,
}

impl From<&ScopeLimits> for Quota {
    fn from(l: &ScopeLimits) -> Self {
        Quota { budget: l.budget.clone(), rate_limits: l.rate_limits.clone() }
    }
}

#[derive(Serialize, ToSchema)]
pub struct QuotaOut {
    org_id: Uuid,
    plan: String,
    /// The plan's `[gateway_quota.<plan>]`; null: the plan has none.
    plan_quota: Option<Quota>,
    /// The operator's override; null: none (the plan's applies).
    #[serde(rename = "override")]
    override_quota: Option<Quota>,
    /// `override`, `plan` or `none`.
    source: &'static str,
    /// What requests served by the gateway's credentials are held to; null: nothing.
    effective: Option<Quota>,
}

async fn out(state: &AppState, org_id: Uuid) -> ApiResult<QuotaOut> {
    let mut conn = state.conn().await?;
    let (plan, stored) = orgs::gateway_quota(&mut conn, org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    let plan_quota = state.cfg.gateway_quota.get(&plan).filter(|q| !q.is_empty()).map(Quota::from);
    let override_quota = orgs::decode_gateway_quota(stored).map(|q| Quota::from(&q));
    let (source, effective) = match (&override_quota, &plan_quota) {
        (Some(o), _) => ("override", Some(Quota { budget: o.budget.clone(), rate_limits: o.rate_limits.clone() })),
        (None, Some(p)) => ("plan", Some(Quota { budget: p.budget.clone(), rate_limits: p.rate_limits.clone() })),
        (None, None) => ("none", None),
    };
    Ok(QuotaOut { org_id, plan, plan_quota, override_quota, source, effective })
}

/// An organization's quota on the gateway's credentials: its plan's, the override, the one in force.
#[utoipa::path(tag = "gateway", params(("org_id" = Uuid, Path, description = "The organization's id")),
    responses((status = 200, body = QuotaOut), Errors))]
#[get("/gateway/organizations/{org_id}/quota")]
pub async fn get_quota(
    state: web::Data<AppState>,
    _session: Session,
    path: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(out(&state, path.into_inner()).await?))
}

/// Override the organization's quota on the gateway's credentials (replacing its plan's whole;
/// `{}` or both null: no quota at all).
#[utoipa::path(tag = "gateway", params(("org_id" = Uuid, Path, description = "The organization's id")),
    request_body = Quota, responses((status = 200, body = QuotaOut), Errors))]
#[put("/gateway/organizations/{org_id}/quota")]
pub async fn set_quota(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
    body: crate::body::Json<Quota>,
) -> ApiResult<HttpResponse> {
    let org_id = path.into_inner();
    let q = body.into_inner();
    let stored = json!({
        "budget": q.budget.map(crate::validate::budget).transpose()?,
        "rate_limits": q.rate_limits.map(crate::validate::rate_limits).transpose()?,
    });
    change(&state, &session, &req, org_id, Some(&stored)).await?;
    Ok(HttpResponse::Ok().json(out(&state, org_id).await?))
}

/// Remove the override: the organization's plan's quota applies again.
#[utoipa::path(tag = "gateway", params(("org_id" = Uuid, Path, description = "The organization's id")),
    responses((status = 200, body = QuotaOut), Errors))]
#[delete("/gateway/organizations/{org_id}/quota")]
pub async fn remove_quota(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let org_id = path.into_inner();
    change(&state, &session, &req, org_id, None).await?;
    Ok(HttpResponse::Ok().json(out(&state, org_id).await?))
}

async fn change(
    state: &AppState,
    session: &Session,
    req: &HttpRequest,
    org_id: Uuid,
    quota: Option<&Value>,
) -> ApiResult<()> {
    use diesel_async::AsyncConnection;
    // In the affected organization's trail: its admins see the operator's change.
    let trail = Trail::new(org_id, Actor::from(session), req);
    let mut conn = state.conn().await?;
    let logged = conn
        .transaction(async |c| {
            if !orgs::set_gateway_quota(c, org_id, quota).await? {
                return Err(ApiError::NotFound("organization"));
            }
            let entry = Entry {
                action: if quota.is_some() { "gateway_quota.set" } else { "gateway_quota.remove" },
                resource_type: "organization",
                resource_id: Some(org_id.to_string()),
                detail: json!({"override": quota}),
            };
            trail.record(c, entry).await?;
            Ok::<_, ApiError>(invalidations::record_all(c, [Invalidation::Org { org_id }]).await?)
        })
        .await?;
    state.announce(&logged, format_args!("the gateway quota of organization {org_id}")).await;
    Ok(())
}
