//! The catalog's providers: list, add, read, change, remove (refused while a model uses it).

use actix_web::{delete, get, patch, post, web, HttpRequest, HttpResponse};
use utoipa_actix_web::service_config::ServiceConfig;

use super::ListQuery;
use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::CursorPage;
use crate::route_catalog::docs::{self, ProviderDoc, ProviderPatch};
use crate::route_catalog::{self as catalog, Change};
use crate::session::Session;
use crate::state::AppState;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list).service(create).service(get).service(update).service(remove);
}

/// The catalog's providers, in catalog order.
#[utoipa::path(operation_id = "list_gateway_providers", tag = "gateway", params(ListQuery), responses((status = 200, body = CursorPage<ProviderDoc>), Errors))]
#[get("/gateway/providers")]
pub async fn list(state: web::Data<AppState>, q: crate::body::Query<ListQuery>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let c = catalog::current(&state, &mut conn).await?;
    let page = super::page_by_name(&c.routes.providers, |p| &p.name, q.limit, q.cursor.as_deref(), docs::provider_out)?;
    Ok(HttpResponse::Ok().insert_header(catalog::etag(c.version)).json(page))
}

/// Add a provider.
#[utoipa::path(operation_id = "create_gateway_provider", tag = "gateway", request_body = ProviderDoc, responses((status = 201, body = ProviderDoc), Errors))]
#[post("/gateway/providers")]
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<ProviderDoc>,
) -> ApiResult<HttpResponse> {
    let provider = docs::provider_in(&body)?;
    let name = provider.name.clone();
    let change = Change::edit("gateway_provider.create", "gateway_provider", name.clone());
    let (out, version) = catalog::write(&state, &session, &req, change, |routes| {
        if routes.provider(&name).is_some() {
            return Err(ApiError::Conflict(format!("provider {name:?} exists: change it with PATCH")));
        }
        let out = docs::provider_out(&provider)?;
        routes.providers.push(provider);
        Ok(out)
    })
    .await?;
    Ok(HttpResponse::Created().insert_header(catalog::etag(version)).json(out))
}

/// One provider.
#[utoipa::path(operation_id = "get_gateway_provider", tag = "gateway", params(("name" = String, Path, description = "The provider's name")), responses((status = 200, body = ProviderDoc), Errors))]
#[get("/gateway/providers/{name}")]
pub async fn get(state: web::Data<AppState>, name: web::Path<String>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let c = catalog::current(&state, &mut conn).await?;
    let p = c.routes.provider(&name).ok_or(ApiError::NotFound("provider"))?;
    Ok(HttpResponse::Ok().insert_header(catalog::etag(c.version)).json(docs::provider_out(p)?))
}

/// Change a provider: fields sent replace, `null` clears. Its deployments follow at once.
#[utoipa::path(operation_id = "update_gateway_provider", tag = "gateway", params(("name" = String, Path, description = "The provider's name")), request_body = ProviderPatch, responses((status = 200, body = ProviderDoc), Errors))]
#[patch("/gateway/providers/{name}")]
pub async fn update(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    name: web::Path<String>,
    body: crate::body::Json<ProviderPatch>,
) -> ApiResult<HttpResponse> {
    let name = name.into_inner();
    let patch = body.into_inner();
    let change = Change::edit("gateway_provider.update", "gateway_provider", name.clone());
    let (out, version) = catalog::write(&state, &session, &req, change, |routes| {
        let p = routes.providers.iter_mut().find(|p| p.name == name).ok_or(ApiError::NotFound("provider"))?;
        *p = docs::merged("provider", &*p, &patch)?;
        docs::provider_out(p)
    })
    .await?;
    Ok(HttpResponse::Ok().insert_header(catalog::etag(version)).json(out))
}

/// Remove a provider no deployment uses.
#[utoipa::path(operation_id = "delete_gateway_provider", tag = "gateway", params(("name" = String, Path, description = "The provider's name")), responses((status = 204, description = "Removed"), Errors))]
#[delete("/gateway/providers/{name}")]
pub async fn remove(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    name: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let name = name.into_inner();
    let change = Change::edit("gateway_provider.delete", "gateway_provider", name.clone());
    let (_, version) = catalog::write(&state, &session, &req, change, |routes| {
        let at = routes.providers.iter().position(|p| p.name == name).ok_or(ApiError::NotFound("provider"))?;
        let users: Vec<&str> = routes
            .models
            .iter()
            .filter(|m| m.deployments.iter().any(|d| d.provider == name))
            .map(|m| m.name.as_str())
            .collect();
        if !users.is_empty() {
            return Err(ApiError::Conflict(format!(
                "provider {name:?} serves models {}: remove or move their deployments first",
                users.join(", ")
            )));
        }
        routes.providers.remove(at);
        Ok(())
    })
    .await?;
    Ok(HttpResponse::NoContent().insert_header(catalog::etag(version)).finish())
}
