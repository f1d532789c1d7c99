//! An organization's own routes (`/organizations/current/routes`): providers of the kinds the
//! operator allows (`routing.org_provider_kinds`), each authenticated by one of the
//! organization's provider keys and reached at a base URL the guard holds to public addresses,
//! and models deployed on them, visible to this organization alone. One document, replaced whole
//! (`PUT`, optionally naming the version it replaces) and checked exactly as the gateway's
//! catalog, each save a new version.

use actix_web::{get, put, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::AsyncConnection;
use gw_shared::config::{give_id, ProviderConfig, Routes};
use gw_shared::db::{invalidations, org_routes, policies, provider_keys};
use gw_shared::providers::UpstreamUrl;
use gw_shared::redis::Invalidation;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::route_catalog::docs::{self, ModelDoc};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{Entry, Trail};

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(get).service(put);
}

/// Most providers and models one organization may define.
const MAX_PROVIDERS: usize = 16;
const MAX_MODELS: usize = 64;

/// A provider of the organization's own.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrgProviderDoc {
    /// Unique in this document; its deployments name it.
    pub name: String,
    /// One of the kinds the operator allows (`routing.org_provider_kinds`).
    pub kind: String,
    /// HTTPS, on a public address (unless the operator allows private ones).
    pub base_url: String,
    /// A live provider key of this organization, added for this kind (`POST /provider-keys`
    /// with `provider` = the kind).
    pub provider_key_id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// `openai` only: the upstream serves OpenAI's Responses API (see the catalog's providers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub responses_api: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The organization's routes as sent: both lists are required (send empty ones to clear).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutOrgRoutes {
    /// The version this document replaces; a save on another is refused (409).
    #[serde(default)]
    pub version: Option<i32>,
    pub providers: Vec<OrgProviderDoc>,
    pub models: Vec<ModelDoc>,
}

#[derive(Serialize, ToSchema)]
pub struct OrgRoutesOut {
    /// 0 before the first save.
    version: i32,
    providers: Vec<OrgProviderDoc>,
    models: Vec<ModelDoc>,
    actor_user_id: Option<Uuid>,
    updated_at: Option<DateTime<Utc>>,
}

fn out(stored: Option<org_routes::StoredOrgRoutes>) -> ApiResult<OrgRoutesOut> {
    let Some(s) = stored else {
        return Ok(OrgRoutesOut {
            version: 0,
            providers: vec![],
            models: vec![],
            actor_user_id: None,
            updated_at: None,
        });
    };
    let convert = |p: &ProviderConfig| -> ApiResult<OrgProviderDoc> {
        let mut v = serde_json::to_value(p).map_err(|e| ApiError::Internal(e.to_string()))?;
        if let Some(o) = v.as_object_mut() {
            o.remove("health_check");
        }
        serde_json::from_value(v).map_err(|e| ApiError::Internal(format!("stored org provider: {e}")))
    };
    Ok(OrgRoutesOut {
        version: s.version,
        providers: s.routes.providers.iter().map(convert).collect::<ApiResult<_>>()?,
        models: s.routes.models.iter().map(docs::model_out).collect::<ApiResult<_>>()?,
        actor_user_id: s.actor_user_id,
        updated_at: Some(s.created_at),
    })
}

/// The organization's own providers and models (its members see them; keys' secrets never).
#[utoipa::path(operation_id = "get_org_routes", tag = "organizations", responses((status = 200, body = OrgRoutesOut), Errors))]
#[get("/organizations/current/routes")]
pub async fn get(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let stored = org_routes::current(&mut conn, session.org_id).await?;
    Ok(HttpResponse::Ok().json(out(stored)?))
}

/// Replace the organization's own providers and models; every proxy serves them within a
/// second, to this organization alone.
#[utoipa::path(operation_id = "put_org_routes", tag = "organizations", request_body = PutOrgRoutes, responses((status = 200, body = OrgRoutesOut), Errors))]
#[put("/organizations/current/routes")]
pub async fn put(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<PutOrgRoutes>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let kinds = &state.cfg.routing.org_provider_kinds;
    if kinds.is_empty() && !b.providers.is_empty() {
        return Err(ApiError::Forbidden(
            "this gateway does not let organizations add providers of their own (routing.org_provider_kinds)".into(),
        ));
    }
    if b.providers.len() > MAX_PROVIDERS || b.models.len() > MAX_MODELS {
        return Err(ApiError::Validation(format!(
            "at most {MAX_PROVIDERS} providers and {MAX_MODELS} models per organization"
        )));
    }
    let private_ok = state.cfg.routing.org_private_base_urls;
    let mut providers = Vec::with_capacity(b.providers.len());
    for (i, p) in b.providers.iter().enumerate() {
        if !kinds.contains(&p.kind) {
            return Err(ApiError::field(
                format!("providers[{i}].kind"),
                format!("organizations may deploy these kinds: {}", kinds.join(", ")),
            ));
        }
        let url = UpstreamUrl::parse(&p.base_url)
            .map_err(|e| ApiError::field(format!("providers[{i}].base_url"), e.to_string()))?;
        if !private_ok {
            if !url.tls {
                return Err(ApiError::field(format!("providers[{i}].base_url"), "must be an https URL"));
            }
            gw_shared::net_guard::check_host(&url.host, url.port)
                .await
                .map_err(|why| ApiError::field(format!("providers[{i}].base_url"), why))?;
        }
        let mut v = serde_json::to_value(p).map_err(|e| ApiError::Internal(e.to_string()))?;
        if let Some(o) = v.as_object_mut() {
            o.insert("health_check".into(), json!(false));
        }
        let config: ProviderConfig =
            serde_json::from_value(v).map_err(|e| ApiError::field(format!("providers[{i}]"), e.to_string()))?;
        providers.push(config);
    }
    let mut models = Vec::with_capacity(b.models.len());
    for (i, m) in b.models.iter().enumerate() {
        let mut v = serde_json::to_value(m).map_err(|e| ApiError::Internal(e.to_string()))?;
        // Ids shown by GET come back: kept; new deployments get one.
        let mut model: gw_shared::config::ModelConfig =
            serde_json::from_value(v.take()).map_err(|e| ApiError::field(format!("models[{i}]"), e.to_string()))?;
        model.deployments.iter_mut().for_each(give_id);
        models.push(model);
    }
    let routes = Routes { providers, models };
    let gateway = state.routes().await?;
    for (i, m) in routes.models.iter().enumerate() {
        if let Some(n) = std::iter::once(&m.name).chain(&m.aliases).find(|n| gateway.knows_model(n)) {
            return Err(ApiError::field(format!("models[{i}].name"), format!("{n:?} is a model of the gateway's")));
        }
    }
    crate::route_catalog::check(&state.cfg, &routes)?;

    let org_id = session.org_id;
    let trail = Trail::of(&session, &req);
    let actor = session.user_id;
    let mut conn = state.conn().await?;
    let live = provider_keys::live_for_org(&mut conn, org_id).await?;
    for (i, p) in routes.providers.iter().enumerate() {
        let key = p.provider_key_id.and_then(|id| live.keys.iter().find(|k| k.id == id));
        match key {
            None => {
                return Err(ApiError::field(
                    format!("providers[{i}].provider_key_id"),
                    "is not a live provider key of this organization",
                ))
            }
            Some(k) if k.provider != p.kind => {
                return Err(ApiError::field(
                    format!("providers[{i}].provider_key_id"),
                    format!("is a key for {:?}, not for kind {:?}", k.provider, p.kind),
                ))
            }
            Some(_) => {}
        }
    }
    let expected = b.version;
    let count = (routes.providers.len(), routes.models.len());
    let (version, logged) = conn
        .transaction::<_, ApiError, _>(async |conn| {
            policies::lock_org(conn, org_id).await?;
            let current = org_routes::current(conn, org_id).await?.map_or(0, |s| s.version);
            if let Some(e) = expected {
                if e != current {
                    return Err(ApiError::Conflict(format!(
                        "the organization's routes are at version {current}, not {e}: read them again and retry"
                    )));
                }
            }
            let version = org_routes::append(conn, org_id, &routes, Some(actor)).await?;
            let entry = Entry {
                action: "org_routes.update",
                resource_type: "org_routes",
                resource_id: Some(version.to_string()),
                detail: json!({"providers": count.0, "models": count.1}),
            };
            trail.record(conn, entry).await?;
            let logged = invalidations::record_all(conn, [Invalidation::OrgRoutes { org_id }]).await?;
            Ok((version, logged))
        })
        .await?;
    log::info!("routes version {version} of org {org_id} saved");
    state.announce(&logged, format_args!("routes version {version} of org {org_id}")).await;
    let stored = org_routes::current(&mut conn, org_id).await?;
    Ok(HttpResponse::Ok().json(out(stored)?))
}
