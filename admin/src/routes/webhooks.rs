//! Webhook endpoints: the organization's receivers of governance events. Admins register, change,
//! delete them and rotate their signing secrets; every member may read them. A URL must be
//! `https://` (unless the operator allows plain HTTP) and reach a public address (checked after
//! resolving the name, through the one outbound guard); the signing secret (`whsec_...`, the
//! Standard Webhooks format) is shown once, when it is made, and stored sealed with the master
//! keyring. See `docs/webhooks.md`.

use actix_web::{delete, get, patch, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Duration, Utc};
use gw_shared::db::webhooks::{self, Endpoint, EndpointChange, NewEndpoint};
use gw_shared::ids::new_id;
use gw_shared::webhooks::{generate_secret, EVENT_TYPES};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::{self, Page, PageQuery};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{self, Entry};
use crate::validate;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list)
        .service(create)
        .service(get)
        .service(update)
        .service(remove)
        .service(rotate_secret)
        .service(send_test);
}

/// Endpoints one organization may register.
const MAX_ENDPOINTS: i64 = 20;
const MAX_URL_CHARS: usize = 2048;
const MAX_DESCRIPTION_CHARS: usize = 500;
/// How long the secret a rotation replaced keeps signing (beside the new one).
const ROTATION_OVERLAP_HOURS: i64 = 24;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// `https://` URL of a public address, at most 2048 characters.
    url: String,
    /// At most 500 characters.
    #[serde(default)]
    description: Option<String>,
    /// Event types delivered to it (`docs/webhooks.md`), at least one.
    event_types: Vec<String>,
    /// Default true.
    #[serde(default)]
    enabled: Option<bool>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateWebhook {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    event_types: Option<Vec<String>>,
    #[serde(default)]
    enabled: Option<bool>,
}

/// An endpoint as the API shows it: never its secret (only when made, in [`WebhookSecretOut`]).
#[derive(Serialize, ToSchema)]
pub struct WebhookOut {
    id: Uuid,
    url: String,
    description: String,
    event_types: Vec<String>,
    enabled: bool,
    /// Until when the secret the last rotation replaced still signs, beside the current one;
    /// null when there is no overlap.
    previous_secret_valid_until: Option<DateTime<Utc>>,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<Endpoint> for WebhookOut {
    fn from(e: Endpoint) -> Self {
        WebhookOut {
            id: e.id,
            url: e.url,
            description: e.description,
            event_types: e.event_types,
            enabled: e.enabled,
            previous_secret_valid_until: e.previous_expires_at.filter(|t| *t > Utc::now()),
            created_by: e.created_by,
            created_at: e.created_at,
            updated_at: e.updated_at,
        }
    }
}

/// An endpoint with its signing secret: answered once, when the secret is made.
#[derive(Serialize, ToSchema)]
pub struct WebhookSecretOut {
    #[serde(flatten)]
    endpoint: WebhookOut,
    /// `whsec_` and base64: verify deliveries with it (Standard Webhooks). Not shown again.
    secret: String,
}

async fn url(state: &AppState, url: &str) -> ApiResult<String> {
    let url = validate::text("url", url, MAX_URL_CHARS)?;
    let parsed = state
        .outbound
        .check_destination(&url, state.cfg.admin.webhooks_allow_http)
        .await
        .map_err(|why| ApiError::field("url", why))?;
    Ok(parsed.to_string())
}

fn event_types(requested: Vec<String>) -> ApiResult<Vec<String>> {
    if requested.is_empty() {
        return Err(ApiError::field("event_types", "must name at least one event type"));
    }
    let mut out: Vec<String> = Vec::with_capacity(requested.len());
    for t in requested {
        if !EVENT_TYPES.contains(&t.as_str()) {
            return Err(ApiError::field(
                "event_types",
                format!(
                    "unknown event type {:?}; known: {}",
                    gw_shared::openai::validate::echo(&t),
                    EVENT_TYPES.join(", ")
                ),
            ));
        }
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(out)
}

fn description(d: Option<&str>) -> ApiResult<String> {
    validate::optional_text("description", d.unwrap_or_default(), MAX_DESCRIPTION_CHARS)
}

/// The organization's webhook endpoints, newest first.
#[utoipa::path(operation_id = "list_webhooks", tag = "webhooks", params(PageQuery),
    responses((status = 200, body = Page<WebhookOut>), Errors))]
#[get("/organizations/current/webhooks")]
pub async fn list(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let limit = pagination::limit(q.limit)?;
    let mut conn = state.conn().await?;
    let rows = webhooks::list(&mut conn, session.org_id, q.cursor, limit + 1).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(rows, limit, |e| e.id, WebhookOut::from)))
}

/// Register an endpoint; the answer carries its signing secret, once.
#[utoipa::path(operation_id = "create_webhook", tag = "webhooks", request_body = CreateWebhook,
    responses((status = 201, body = WebhookSecretOut), Errors))]
#[post("/organizations/current/webhooks")]
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<CreateWebhook>,
) -> ApiResult<HttpResponse> {
    let ring = state.keyring("webhook secrets need")?;
    let b = body.into_inner();
    let description = description(b.description.as_deref())?;
    let types = event_types(b.event_types)?;
    let url = url(&state, &b.url).await?;
    let mut conn = state.conn().await?;
    if webhooks::count(&mut conn, session.org_id).await? >= MAX_ENDPOINTS {
        return Err(ApiError::Conflict(format!("an organization has at most {MAX_ENDPOINTS} webhook endpoints")));
    }
    let secret = generate_secret();
    let new = NewEndpoint {
        id: new_id(),
        org_id: session.org_id,
        url: &url,
        description: &description,
        event_types: &types,
        enabled: b.enabled.unwrap_or(true),
        secret: &secret,
        created_by: Some(session.user_id),
    };
    let row = webhooks::insert(&mut conn, ring, new).await?;
    let entry = Entry {
        action: "webhook.create",
        resource_type: "webhook",
        resource_id: Some(row.id.to_string()),
        detail: json!({"url": row.url, "event_types": row.event_types}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::Created().json(WebhookSecretOut { endpoint: row.into(), secret }))
}

/// One endpoint (never its secret).
#[utoipa::path(operation_id = "get_webhook", tag = "webhooks",
    params(("webhook_id" = Uuid, Path, description = "The endpoint's id")),
    responses((status = 200, body = WebhookOut), Errors))]
#[get("/organizations/current/webhooks/{webhook_id}")]
pub async fn get(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let row = webhooks::find(&mut conn, session.org_id, id.into_inner()).await?.ok_or(ApiError::NotFound("webhook"))?;
    Ok(HttpResponse::Ok().json(WebhookOut::from(row)))
}

/// Change an endpoint's URL, description, event types or whether it is enabled.
#[utoipa::path(operation_id = "update_webhook", tag = "webhooks",
    params(("webhook_id" = Uuid, Path, description = "The endpoint's id")), request_body = UpdateWebhook,
    responses((status = 200, body = WebhookOut), Errors))]
#[patch("/organizations/current/webhooks/{webhook_id}")]
pub async fn update(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
    body: crate::body::Json<UpdateWebhook>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let b = body.into_inner();
    let change = EndpointChange {
        url: match &b.url {
            Some(u) => Some(url(&state, u).await?),
            None => None,
        },
        description: b.description.as_deref().map(|d| description(Some(d))).transpose()?,
        event_types: b.event_types.map(event_types).transpose()?,
        enabled: b.enabled,
    };
    if change.url.is_none() && change.description.is_none() && change.event_types.is_none() && change.enabled.is_none()
    {
        return Err(ApiError::Validation("nothing to update: send url, description, event_types or enabled".into()));
    }
    let mut conn = state.conn().await?;
    let row = webhooks::update(&mut conn, session.org_id, id, &change).await?.ok_or(ApiError::NotFound("webhook"))?;
    let entry = Entry {
        action: "webhook.update",
        resource_type: "webhook",
        resource_id: Some(id.to_string()),
        detail: json!({"url": row.url, "event_types": row.event_types, "enabled": row.enabled}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::Ok().json(WebhookOut::from(row)))
}

/// Delete an endpoint.
#[utoipa::path(operation_id = "delete_webhook", tag = "webhooks",
    params(("webhook_id" = Uuid, Path, description = "The endpoint's id")),
    responses((status = 204, description = "Deleted"), Errors))]
#[delete("/organizations/current/webhooks/{webhook_id}")]
pub async fn remove(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    if !webhooks::delete(&mut conn, session.org_id, id).await? {
        return Err(ApiError::NotFound("webhook"));
    }
    let entry = Entry {
        action: "webhook.delete",
        resource_type: "webhook",
        resource_id: Some(id.to_string()),
        detail: json!({}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// A new signing secret, answered once; the replaced one keeps signing for 24 hours beside it.
#[utoipa::path(operation_id = "rotate_webhook_secret", tag = "webhooks",
    params(("webhook_id" = Uuid, Path, description = "The endpoint's id")),
    responses((status = 200, body = WebhookSecretOut), Errors))]
#[post("/organizations/current/webhooks/{webhook_id}/rotate-secret")]
pub async fn rotate_secret(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let ring = state.keyring("webhook secrets need")?;
    let id = id.into_inner();
    let secret = generate_secret();
    let until = Utc::now() + Duration::hours(ROTATION_OVERLAP_HOURS);
    let mut conn = state.conn().await?;
    let row = webhooks::rotate(&mut conn, ring, session.org_id, id, &secret, until)
        .await?
        .ok_or(ApiError::NotFound("webhook"))?;
    let entry = Entry {
        action: "webhook.rotate_secret",
        resource_type: "webhook",
        resource_id: Some(id.to_string()),
        detail: json!({"previous_valid_until": until}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::Ok().json(WebhookSecretOut { endpoint: row.into(), secret }))
}

/// Send the endpoint a `webhook.test` event (whatever it subscribes to): the answer is the new
/// delivery, attempted by the relay within a second; follow it in the delivery history.
#[utoipa::path(operation_id = "test_webhook", tag = "webhooks",
    params(("webhook_id" = Uuid, Path, description = "The endpoint's id")),
    responses((status = 202, body = super::webhook_deliveries::DeliveryOut), Errors))]
#[post("/organizations/current/webhooks/{webhook_id}/test")]
pub async fn send_test(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    webhooks::find(&mut conn, session.org_id, id).await?.ok_or(ApiError::NotFound("webhook"))?;
    let event = gw_shared::webhooks::payloads::webhook_test(session.org_id, id, Some(session.user_id));
    let delivery = gw_shared::db::webhook_deliveries::insert_direct(&mut conn, id, &event, state.clock.now()).await?;
    let entry = Entry {
        action: "webhook.test",
        resource_type: "webhook",
        resource_id: Some(id.to_string()),
        detail: json!({"delivery_id": delivery.id}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::Accepted().json(super::webhook_deliveries::out(delivery)))
}
