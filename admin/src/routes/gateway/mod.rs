//! The gateway's route catalog, for the gateway operator (a role above organizations, see
//! `docs/routes.md`): the catalog in force and its versions (read, restore), its providers and
//! its models with their deployments. Every response carries the catalog version as `ETag`; a
//! write may send `If-Match` with the version it read and is refused (409) if another write came
//! first. Writes are refused (409) while routes come from the configuration file. Also each
//! organization's quota on the gateway's own provider credentials (`quota`).

pub mod models;
pub mod providers;
pub mod quota;

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use gw_shared::config::{Routes, RoutesSource};
use gw_shared::db::route_catalog;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::{self, CursorPage};
use crate::route_catalog::docs::{self, ModelDoc, ProviderDoc};
use crate::route_catalog::{self as catalog, Change};
use crate::session::Session;
use crate::state::AppState;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(current)
        .service(versions)
        .service(get_version)
        .service(restore)
        .configure(providers::routes)
        .configure(models::routes)
        .configure(quota::routes);
}

/// A catalog version whole.
#[derive(Serialize, ToSchema)]
pub struct RoutesOut {
    /// 0: the configuration file's routes (no version stored yet, or `routing.routes = "file"`).
    version: i64,
    /// `database` (managed here) or `file`.
    source: &'static str,
    /// What made this version, e.g. `gateway_model.create gpt-4.1`.
    change: String,
    actor_user_id: Option<Uuid>,
    created_at: Option<DateTime<Utc>>,
    providers: Vec<ProviderDoc>,
    models: Vec<ModelDoc>,
}

fn source(state: &AppState) -> &'static str {
    match state.cfg.routing.routes {
        RoutesSource::File => "file",
        RoutesSource::Database => "database",
    }
}

fn routes_out(state: &AppState, c: catalog::Current) -> ApiResult<RoutesOut> {
    Ok(RoutesOut {
        version: c.version,
        source: source(state),
        change: c.change,
        actor_user_id: c.actor_user_id,
        created_at: c.created_at,
        providers: c.routes.providers.iter().map(docs::provider_out).collect::<ApiResult<_>>()?,
        models: c.routes.models.iter().map(docs::model_out).collect::<ApiResult<_>>()?,
    })
}

/// One version in the history (its content through `GET .../versions/{version}`).
#[derive(Serialize, ToSchema)]
pub struct VersionOut {
    version: i64,
    change: String,
    actor_user_id: Option<Uuid>,
    created_at: DateTime<Utc>,
}

/// A page of providers or models (in catalog order) or versions (newest first).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// 1 to 200; default 50.
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// The route catalog in force: every provider and model, with the version.
#[utoipa::path(operation_id = "get_gateway_routes", tag = "gateway", responses((status = 200, body = RoutesOut), Errors))]
#[get("/gateway/routes")]
pub async fn current(state: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let c = catalog::current(&state, &mut conn).await?;
    let number = c.version;
    Ok(HttpResponse::Ok().insert_header(catalog::etag(number)).json(routes_out(&state, c)?))
}

/// The catalog's versions, newest first.
#[utoipa::path(operation_id = "list_gateway_route_versions", tag = "gateway", params(ListQuery), responses((status = 200, body = CursorPage<VersionOut>), Errors))]
#[get("/gateway/routes/versions")]
pub async fn versions(state: web::Data<AppState>, q: crate::body::Query<ListQuery>) -> ApiResult<HttpResponse> {
    let limit = pagination::limit(q.limit)?;
    let before = match q.cursor.as_deref() {
        None => None,
        Some(c) => Some(c.parse::<i64>().map_err(|_| ApiError::field("cursor", "must be a next_cursor of this list"))?),
    };
    let mut conn = state.conn().await?;
    let rows = route_catalog::list(&mut conn, before, limit + 1).await?;
    let page = CursorPage::from_rows(
        rows,
        limit,
        |v| v.version.to_string(),
        |v| VersionOut {
            version: v.version,
            change: v.change,
            actor_user_id: v.actor_user_id,
            created_at: v.created_at,
        },
    );
    Ok(HttpResponse::Ok().json(page))
}

/// One version of the catalog, whole.
#[utoipa::path(operation_id = "get_gateway_route_version", tag = "gateway", params(("version" = i64, Path, description = "The catalog version")), responses((status = 200, body = RoutesOut), Errors))]
#[get("/gateway/routes/versions/{version}")]
pub async fn get_version(state: web::Data<AppState>, number: web::Path<i64>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let v = route_catalog::get(&mut conn, number.into_inner()).await?.ok_or(ApiError::NotFound("catalog version"))?;
    let number = v.version;
    Ok(HttpResponse::Ok().insert_header(catalog::etag(number)).json(routes_out(&state, v.into())?))
}

/// Puts an earlier version back in force, as a new version (the history is never rewritten).
#[utoipa::path(operation_id = "restore_gateway_route_version", tag = "gateway", params(("version" = i64, Path, description = "The catalog version to restore")), responses((status = 200, body = RoutesOut), Errors))]
#[post("/gateway/routes/versions/{version}/restore")]
pub async fn restore(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    number: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let number = number.into_inner();
    let old: Routes = {
        let mut conn = state.conn().await?;
        route_catalog::get(&mut conn, number).await?.ok_or(ApiError::NotFound("catalog version"))?.routes
    };
    let change = Change {
        action: "gateway_routes.restore",
        resource_type: "gateway_routes",
        resource: number.to_string(),
        replaces: true,
    };
    let (_, new_version) = catalog::write(&state, &session, &req, change, |routes| {
        *routes = old;
        Ok(())
    })
    .await?;
    let mut conn = state.conn().await?;
    let v = route_catalog::get(&mut conn, new_version).await?.ok_or(ApiError::NotFound("catalog version"))?;
    Ok(HttpResponse::Ok().insert_header(catalog::etag(new_version)).json(routes_out(&state, v.into())?))
}

/// The page of `items` after `cursor` (a name of the list), in catalog order.
pub fn page_by_name<T, O>(
    items: &[T],
    name: impl Fn(&T) -> &str,
    limit: Option<i64>,
    cursor: Option<&str>,
    out: impl Fn(&T) -> ApiResult<O>,
) -> ApiResult<CursorPage<O>> {
    let limit = pagination::limit(limit)?;
    let start = match cursor {
        None => 0,
        Some(c) => items.iter().position(|i| name(i) == c).map(|p| p + 1).ok_or_else(|| {
            ApiError::field("cursor", "must be a next_cursor of this list (the item it names was removed)")
        })?,
    };
    let rest = items.get(start..).unwrap_or_default();
    let n = usize::try_from(limit).unwrap_or(usize::MAX).min(rest.len());
    let data = rest[..n].iter().map(&out).collect::<ApiResult<Vec<O>>>()?;
    let next_cursor = if rest.len() > n { rest.get(n.wrapping_sub(1)).map(|i| name(i).to_string()) } else { None };
    Ok(CursorPage { data, next_cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_by_name_follow_the_catalog_order() {
        let items = ["a", "b", "c"];
        let p = page_by_name(&items, |s| s, Some(2), None, |s| Ok(s.to_string())).unwrap();
        assert_eq!(p.data, ["a", "b"]);
        assert_eq!(p.next_cursor.as_deref(), Some("b"));
        let p = page_by_name(&items, |s| s, Some(2), Some("b"), |s| Ok(s.to_string())).unwrap();
        assert_eq!(p.data, ["c"]);
        assert_eq!(p.next_cursor, None);
        assert!(page_by_name(&items, |s| s, Some(2), Some("zz"), |s| Ok(s.to_string())).is_err());
    }
}
