//! The catalog's models and their deployments: list, add, read, change, remove a model (refused
//! while another falls back on it); add, change, remove a deployment.

use actix_web::{delete, get, patch, post, web, HttpRequest, HttpResponse};
use gw_shared::config::{give_id, ModelConfig, Routes};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use super::ListQuery;
use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::CursorPage;
use crate::route_catalog::docs::{self, DeploymentDoc, DeploymentPatch, ModelDoc, ModelPatch};
use crate::route_catalog::{self as catalog, Change};
use crate::session::Session;
use crate::state::AppState;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list)
        .service(create)
        .service(get)
        .service(update)
        .service(remove)
        .service(add_deployment)
        .service(update_deployment)
        .service(remove_deployment);
}

/// The model named `name` (its name or an alias).
fn model_mut<'a>(routes: &'a mut Routes, name: &str) -> ApiResult<&'a mut ModelConfig> {
    let i = routes.model(name).map(|(i, _)| i).ok_or(ApiError::NotFound("model"))?;
    routes.models.get_mut(i).ok_or(ApiError::NotFound("model"))
}

/// The catalog's models, in catalog order.
#[utoipa::path(operation_id = "list_gateway_models", tag = "gateway", params(ListQuery), responses((status = 200, body = CursorPage<ModelDoc>), Errors))]
#[get("/gateway/models")]
pub async fn list(state: web::Data<AppState>, q: crate::body::Query<ListQuery>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let c = catalog::current(&state, &mut conn).await?;
    let page = super::page_by_name(&c.routes.models, |m| &m.name, q.limit, q.cursor.as_deref(), docs::model_out)?;
    Ok(HttpResponse::Ok().insert_header(catalog::etag(c.version)).json(page))
}

/// Add a model with its deployments; proxies serve it within a second.
#[utoipa::path(operation_id = "create_gateway_model", tag = "gateway", request_body = ModelDoc, responses((status = 201, body = ModelDoc), Errors))]
#[post("/gateway/models")]
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<ModelDoc>,
) -> ApiResult<HttpResponse> {
    let mut model = docs::model_in(&body)?;
    model.deployments.iter_mut().for_each(give_id);
    let name = model.name.clone();
    let change = Change::edit("gateway_model.create", "gateway_model", name.clone());
    let (out, version) = catalog::write(&state, &session, &req, change, |routes| {
        if let Some((_, taken)) = std::iter::once(&model.name).chain(&model.aliases).find_map(|n| routes.model(n)) {
            return Err(ApiError::Conflict(format!(
                "model {:?} already answers to one of these names: change it with PATCH",
                taken.name
            )));
        }
        let out = docs::model_out(&model)?;
        routes.models.push(model);
        Ok(out)
    })
    .await?;
    Ok(HttpResponse::Created().insert_header(catalog::etag(version)).json(out))
}

/// One model (by its name or an alias).
#[utoipa::path(operation_id = "get_gateway_model", tag = "gateway", params(("name" = String, Path, description = "The model's name or an alias")), responses((status = 200, body = ModelDoc), Errors))]
#[get("/gateway/models/{name}")]
pub async fn get(state: web::Data<AppState>, name: web::Path<String>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let c = catalog::current(&state, &mut conn).await?;
    let (_, m) = c.routes.model(&name).ok_or(ApiError::NotFound("model"))?;
    Ok(HttpResponse::Ok().insert_header(catalog::etag(c.version)).json(docs::model_out(m)?))
}

/// Change a model's settings: fields sent replace the stored ones.
#[utoipa::path(operation_id = "update_gateway_model", tag = "gateway", params(("name" = String, Path, description = "The model's name or an alias")), request_body = ModelPatch, responses((status = 200, body = ModelDoc), Errors))]
#[patch("/gateway/models/{name}")]
pub async fn update(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    name: web::Path<String>,
    body: crate::body::Json<ModelPatch>,
) -> ApiResult<HttpResponse> {
    let name = name.into_inner();
    let patch = body.into_inner();
    let change = Change::edit("gateway_model.update", "gateway_model", name.clone());
    let (out, version) = catalog::write(&state, &session, &req, change, |routes| {
        let m = model_mut(routes, &name)?;
        *m = docs::merged("model", &*m, &patch)?;
        docs::model_out(m)
    })
    .await?;
    Ok(HttpResponse::Ok().insert_header(catalog::etag(version)).json(out))
}

/// Remove a model; clients naming it get 404 from every proxy within a second.
#[utoipa::path(operation_id = "delete_gateway_model", tag = "gateway", params(("name" = String, Path, description = "The model's name or an alias")), responses((status = 204, description = "Removed"), Errors))]
#[delete("/gateway/models/{name}")]
pub async fn remove(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    name: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let name = name.into_inner();
    let change = Change::edit("gateway_model.delete", "gateway_model", name.clone());
    let (_, version) = catalog::write(&state, &session, &req, change, |routes| {
        let (at, m) = routes.model(&name).ok_or(ApiError::NotFound("model"))?;
        let names: Vec<&String> = std::iter::once(&m.name).chain(&m.aliases).collect();
        let dependents: Vec<&str> = routes
            .models
            .iter()
            .filter(|o| o.fallbacks.iter().any(|f| names.contains(&f)))
            .map(|o| o.name.as_str())
            .collect();
        if !dependents.is_empty() {
            return Err(ApiError::Conflict(format!(
                "models {} fall back on {:?}: change their fallbacks first",
                dependents.join(", "),
                m.name
            )));
        }
        routes.models.remove(at);
        Ok(())
    })
    .await?;
    Ok(HttpResponse::NoContent().insert_header(catalog::etag(version)).finish())
}

/// Add a deployment to a model.
#[utoipa::path(operation_id = "create_gateway_deployment", tag = "gateway", params(("name" = String, Path, description = "The model's name or an alias")), request_body = DeploymentDoc, responses((status = 201, body = DeploymentDoc), Errors))]
#[post("/gateway/models/{name}/deployments")]
pub async fn add_deployment(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    name: web::Path<String>,
    body: crate::body::Json<DeploymentDoc>,
) -> ApiResult<HttpResponse> {
    let name = name.into_inner();
    let mut d = docs::deployment_in(&body)?;
    give_id(&mut d);
    let change = Change::edit("gateway_deployment.create", "gateway_model", name.clone());
    let (out, version) = catalog::write(&state, &session, &req, change, |routes| {
        let m = model_mut(routes, &name)?;
        let out = docs::deployment_out(&d)?;
        m.deployments.push(d);
        Ok(out)
    })
    .await?;
    Ok(HttpResponse::Created().insert_header(catalog::etag(version)).json(out))
}

/// Change a deployment (a weight, a cap, its provider): requests under way finish where they
/// started.
#[utoipa::path(operation_id = "update_gateway_deployment", tag = "gateway", params(("name" = String, Path, description = "The model's name or an alias"), ("deployment_id" = Uuid, Path, description = "The deployment's id")), request_body = DeploymentPatch, responses((status = 200, body = DeploymentDoc), Errors))]
#[patch("/gateway/models/{name}/deployments/{deployment_id}")]
pub async fn update_deployment(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<(String, Uuid)>,
    body: crate::body::Json<DeploymentPatch>,
) -> ApiResult<HttpResponse> {
    let (name, id) = path.into_inner();
    let patch = body.into_inner();
    let change = Change::edit("gateway_deployment.update", "gateway_model", format!("{name}/{id}"));
    let (out, version) = catalog::write(&state, &session, &req, change, |routes| {
        let m = model_mut(routes, &name)?;
        let d = m.deployments.iter_mut().find(|d| d.id == Some(id)).ok_or(ApiError::NotFound("deployment"))?;
        *d = docs::merged("deployment", &*d, &patch)?;
        docs::deployment_out(d)
    })
    .await?;
    Ok(HttpResponse::Ok().insert_header(catalog::etag(version)).json(out))
}

/// Remove a deployment (a model keeps at least one).
#[utoipa::path(operation_id = "delete_gateway_deployment", tag = "gateway", params(("name" = String, Path, description = "The model's name or an alias"), ("deployment_id" = Uuid, Path, description = "The deployment's id")), responses((status = 204, description = "Removed"), Errors))]
#[delete("/gateway/models/{name}/deployments/{deployment_id}")]
pub async fn remove_deployment(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<(String, Uuid)>,
) -> ApiResult<HttpResponse> {
    let (name, id) = path.into_inner();
    let change = Change::edit("gateway_deployment.delete", "gateway_model", format!("{name}/{id}"));
    let (_, version) = catalog::write(&state, &session, &req, change, |routes| {
        let m = model_mut(routes, &name)?;
        let at = m.deployments.iter().position(|d| d.id == Some(id)).ok_or(ApiError::NotFound("deployment"))?;
        if m.deployments.len() == 1 {
            return Err(ApiError::Conflict(format!(
                "deployment {id} is the last of model {:?}: add another first, or remove the model",
                m.name
            )));
        }
        m.deployments.remove(at);
        Ok(())
    })
    .await?;
    Ok(HttpResponse::NoContent().insert_header(catalog::etag(version)).finish())
}
