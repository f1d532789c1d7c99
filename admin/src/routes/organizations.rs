//! The caller's organization: read it; owners and admins update its name, data-residency region,
//! metadata, budget and rate limits. The plan is read-only here (billing changes it).

use actix_web::{get, patch, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::db::{billing, invalidations, orgs};
use gw_shared::limits::settings::{Budget, RateLimits};
use gw_shared::redis::Invalidation;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::read_only::{self, Fixed};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{self, Entry};
use crate::validate;

/// Regions an organization's data may be pinned to.
pub const REGIONS: &[&str] = &["us", "eu", "apac"];

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(current).service(update);
}

#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DataResidency {
    /// One of `us`, `eu`, `apac`.
    region: String,
}

#[derive(Serialize, ToSchema)]
pub struct OrganizationOut {
    id: Uuid,
    name: String,
    /// `free`, `growth` or `enterprise`; changed by billing, not here.
    plan: String,
    data_residency: DataResidency,
    #[schema(value_type = Object)]
    metadata: Value,
    /// The organization-wide budget; null: none.
    budget: Option<Budget>,
    /// Organization-wide rate limits; null: none.
    rate_limits: Option<RateLimits>,
    /// Audit rows keep request and response bodies (after redaction).
    log_bodies: bool,
    /// Members signing in with a password must give a second factor (TOTP); one without gets a
    /// session good only for enrolling it.
    require_totp: bool,
    /// What the plan gives (read-only).
    plan_terms: PlanTerms,
    /// The subscription with the billing provider, as its newest event says; null: none
    /// (read-only).
    subscription: Option<SubscriptionOut>,
    /// How the plan changes (read-only): `self_serve` (`POST /billing/checkout` and `/billing/portal`
    /// work), `operator` (air-gapped: the operator sets plans) or `unconfigured` (no billing
    /// provider on this gateway).
    #[schema(value_type = String, example = "self_serve")]
    billing_mode: &'static str,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

#[derive(Serialize, ToSchema)]
pub struct PlanTerms {
    /// The plan's name as the operator sells it (`[plans.<plan>] name`).
    name: String,
    /// People who may be members at once, pending invites included (service accounts take no
    /// seat); null: no limit.
    seats: Option<u32>,
    /// SSO connections may be configured and used (`growth`, `enterprise`).
    sso: bool,
    /// What requests served by the gateway's own provider credentials are held to (the
    /// operator's override for this organization, else the plan's): `{budget, rate_limits}`;
    /// null: nothing.
    #[schema(value_type = Option<Object>)]
    gateway_quota: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct SubscriptionOut {
    /// The provider's status: `active`, `trialing`, `past_due`, `canceled`, ...
    status: Option<String>,
    current_period_end: Option<DateTime<Utc>>,
    /// The subscription ends with the period (the plan stays until then).
    cancel_at_period_end: bool,
    /// Past due since; the plan drops to free when the grace period ends (`grace_ends_at`).
    past_due_since: Option<DateTime<Utc>>,
    grace_ends_at: Option<DateTime<Utc>>,
}

/// The organization with its plan's terms and its subscription.
async fn out(state: &AppState, conn: &mut AsyncPgConnection, org: orgs::Organization) -> ApiResult<OrganizationOut> {
    let stored = orgs::gateway_quota(conn, org.id).await?.and_then(|(_, q)| orgs::decode_gateway_quota(q));
    let quota = stored.or_else(|| state.cfg.gateway_quota.get(&org.plan).filter(|q| !q.is_empty()).cloned());
    let grace = chrono::Duration::days(i64::from(state.cfg.billing.grace_days));
    let subscription =
        billing::account(conn, org.id).await?.filter(|a| a.subscription_status.is_some()).map(|a| SubscriptionOut {
            grace_ends_at: a.past_due_since.map(|t| t + grace),
            status: a.subscription_status,
            current_period_end: a.current_period_end,
            cancel_at_period_end: a.cancel_at_period_end,
            past_due_since: a.past_due_since,
        });
    let mut o = OrganizationOut::from(org);
    o.plan_terms = PlanTerms {
        name: state.cfg.plans.get(&o.plan).name,
        seats: state.cfg.plans.seats(&o.plan),
        sso: gw_shared::sso::plan_allows_sso(&o.plan),
        gateway_quota: quota.map(|q| serde_json::to_value(q).unwrap_or(Value::Null)),
    };
    o.subscription = subscription;
    o.billing_mode = if state.cfg.billing.airgap {
        "operator"
    } else if state.billing.is_some() {
        "self_serve"
    } else {
        "unconfigured"
    };
    Ok(o)
}

impl From<orgs::Organization> for OrganizationOut {
    fn from(org: orgs::Organization) -> Self {
        OrganizationOut {
            id: org.id,
            name: org.name,
            plan: org.plan,
            data_residency: DataResidency { region: org.data_residency_region },
            metadata: org.metadata,
            budget: org.budget.and_then(|v| serde_json::from_value(v).ok()),
            rate_limits: org.rate_limits.and_then(|v| serde_json::from_value(v).ok()),
            log_bodies: org.log_bodies,
            require_totp: org.require_totp,
            plan_terms: PlanTerms { name: String::new(), seats: None, sso: false, gateway_quota: None },
            subscription: None,
            billing_mode: "unconfigured",
            created_at: org.created_at,
            updated_at: org.updated_at,
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateOrganization {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    data_residency: Option<DataResidency>,
    /// Replaces the metadata: a JSON object of at most 64 keys and 16 KiB.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// A budget for the whole organization, or null to remove it.
    #[serde(default, deserialize_with = "crate::validate::double_option")]
    #[schema(value_type = Option<Budget>)]
    budget: Option<Option<Budget>>,
    /// Rate limits for the whole organization, or null to remove them.
    #[serde(default, deserialize_with = "crate::validate::double_option")]
    #[schema(value_type = Option<RateLimits>)]
    rate_limits: Option<Option<RateLimits>>,
    /// Keep request and response bodies (after redaction) in the audit log.
    #[serde(default)]
    log_bodies: Option<bool>,
    /// Require a second factor of every member signing in with a password (owners only).
    #[serde(default)]
    require_totp: Option<bool>,
}

/// The caller's organization.
#[utoipa::path(operation_id = "get_organization", tag = "organizations", responses((status = 200, body = OrganizationOut), Errors))]
#[get("/organizations/current")]
pub async fn current(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let org = orgs::find(&mut conn, session.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    Ok(HttpResponse::Ok().json(out(&state, &mut conn, org).await?))
}

/// Update the organization's name, data-residency region, metadata, budget or rate limits
/// (absent fields stay as they are). The body `GET` answers may be sent back: `id` and `plan`
/// as they are, `created_at`, `updated_at`, `plan_terms`, `subscription` and `billing_mode` ignored.
#[utoipa::path(operation_id = "update_organization", tag = "organizations", request_body = UpdateOrganization,
    responses((status = 200, body = OrganizationOut), Errors))]
#[patch("/organizations/current")]
pub async fn update(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<Value>,
) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let org = orgs::find(&mut conn, session.org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    let fixed = [
        Fixed::new("id", org.id, "it names the organization"),
        Fixed::new("plan", &org.plan, "the plan changes through billing"),
    ];
    let ignored = ["created_at", "updated_at", "plan_terms", "subscription", "billing_mode"];
    let b: UpdateOrganization = read_only::writable(body.into_inner(), &fixed, &ignored)?;
    let name = b.name.as_deref().map(|n| validate::text("name", n, 200)).transpose()?;
    let region = match b.data_residency {
        Some(d) if REGIONS.contains(&d.region.as_str()) => Some(d.region),
        Some(_) => {
            return Err(ApiError::field("data_residency.region", format!("must be one of {}", REGIONS.join(", "))))
        }
        None => None,
    };
    let metadata = b.metadata.map(|m| validate::metadata("metadata", m)).transpose()?;
    let budget = b.budget.map(|o| o.map(validate::budget).transpose()).transpose()?;
    let rate_limits = b.rate_limits.map(|o| o.map(validate::rate_limits).transpose()).transpose()?;
    let changed: Vec<&str> = [
        ("name", name.is_some()),
        ("data_residency", region.is_some()),
        ("metadata", metadata.is_some()),
        ("budget", budget.is_some()),
        ("rate_limits", rate_limits.is_some()),
        ("log_bodies", b.log_bodies.is_some()),
        ("require_totp", b.require_totp.is_some()),
    ]
    .into_iter()
    .filter_map(|(f, set)| set.then_some(f))
    .collect();
    if changed.is_empty() {
        return Err(ApiError::Validation(
            "nothing to update: send name, data_residency, metadata, budget, rate_limits, log_bodies or require_totp"
                .into(),
        ));
    }
    if b.require_totp.is_some() && session.role != gw_shared::roles::Role::Owner {
        return Err(ApiError::Forbidden("only an owner changes require_totp".into()));
    }
    // The proxies cache limits, body logging and the residency region together.
    let limits_changed = budget.is_some() || rate_limits.is_some() || b.log_bodies.is_some() || region.is_some();
    let change = orgs::Change {
        name,
        data_residency_region: region,
        metadata,
        budget,
        rate_limits,
        log_bodies: b.log_bodies,
        require_totp: b.require_totp,
    };
    let trail = trail::Trail::of(&session, &req);
    // The change, its trail row and (when the proxies cache what changed) their invalidation
    // commit together.
    let (org, logged) = conn
        .transaction(async |conn| {
            let org = orgs::update(conn, session.org_id, &change).await?.ok_or(ApiError::NotFound("organization"))?;
            let entry = Entry {
                action: "organization.update",
                resource_type: "organization",
                resource_id: Some(org.id.to_string()),
                detail: json!({"changed": changed}),
            };
            trail.record(conn, entry).await?;
            let logged = if limits_changed {
                invalidations::record_all(conn, [Invalidation::Org { org_id: org.id }]).await?
            } else {
                Vec::new()
            };
            Ok::<_, ApiError>((org, logged))
        })
        .await?;
    state.announce(&logged, format_args!("the change of organization {}", org.id)).await;
    Ok(HttpResponse::Ok().json(out(&state, &mut conn, org).await?))
}
