//! The route catalog as the control plane reads and writes it. Reads answer the version in force
//! (the file's, as version 0, under `routing.routes = "file"`). A write runs under the catalog's
//! advisory lock in one transaction: the newest version is read, changed, checked whole exactly
//! as a proxy would build it (a fault is refused with its path, nothing half-applied), stored as
//! the next version with its trail entry, and announced to every proxy once committed.

pub mod docs;

use actix_web::HttpRequest;
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::config::{Config, RouteError, Routes, RoutesSource};
use gw_shared::db::{invalidations, route_catalog};
use gw_shared::providers::Registry;
use gw_shared::redis::Invalidation;
use gw_shared::routing::RouteTable;
use serde_json::json;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{Entry, Trail};

/// The change a seed from the file is recorded with.
pub const SEED_CHANGE: &str = "seed from the configuration file";

/// The catalog in force.
pub struct Current {
    pub version: i64,
    pub routes: Routes,
    pub change: String,
    pub actor_user_id: Option<Uuid>,
    pub created_at: Option<DateTime<Utc>>,
}

impl From<route_catalog::Version> for Current {
    fn from(v: route_catalog::Version) -> Self {
        Current {
            version: v.version,
            routes: v.routes,
            change: v.change,
            actor_user_id: v.actor_user_id,
            created_at: Some(v.created_at),
        }
    }
}

/// The catalog in force: the database's newest version, or the file's.
pub async fn current(state: &AppState, conn: &mut AsyncPgConnection) -> ApiResult<Current> {
    if state.cfg.routing.routes == RoutesSource::Database {
        if let Some(v) = route_catalog::latest(conn).await? {
            return Ok(v.into());
        }
    }
    Ok(Current {
        version: 0,
        routes: state.cfg.routes(),
        change: "the configuration file".into(),
        actor_user_id: None,
        created_at: None,
    })
}

/// The routes in force (model allow-lists, provider keys and reconciliation check against them).
pub async fn routes(state: &AppState, conn: &mut AsyncPgConnection) -> ApiResult<Routes> {
    Ok(current(state, conn).await?.routes)
}

/// A catalog fault as the API reports it: the field at its path in the catalog document.
pub fn refused(e: RouteError) -> ApiError {
    ApiError::field(e.path, e.message)
}

/// Checks `routes` exactly as a proxy builds them (gw-admin knows the built-in adapter kinds).
pub fn check(cfg: &Config, routes: &Routes) -> ApiResult<()> {
    RouteTable::build(cfg, routes, &Registry::builtin(), &|_| None, None).map(|_| ()).map_err(refused)
}

/// A write's expectation of the version it changes (`If-Match`), when the client sent one.
pub fn if_match(req: &HttpRequest) -> ApiResult<Option<i64>> {
    let Some(v) = req.headers().get(actix_web::http::header::IF_MATCH) else { return Ok(None) };
    let text = v.to_str().unwrap_or_default().trim().trim_start_matches("W/").trim_matches('"');
    text.parse::<i64>()
        .map(Some)
        .map_err(|_| ApiError::field("If-Match", "must be a catalog version as the ETag header gives it"))
}

/// The `ETag` of a catalog version.
pub fn etag(version: i64) -> (&'static str, String) {
    ("ETag", format!("\"{version}\""))
}

/// What one write does to the catalog.
pub struct Change<'a> {
    /// `<resource>.<verb>`, e.g. `gateway_model.create`; also the trail entry's action.
    pub action: &'a str,
    pub resource_type: &'a str,
    /// The model or provider name (and deployment id) changed.
    pub resource: String,
    /// Whether the change replaces the whole catalog (a restore): it then works even when the
    /// newest version cannot be read.
    pub replaces: bool,
}

impl<'a> Change<'a> {
    /// A change to one resource of the catalog.
    pub fn edit(action: &'a str, resource_type: &'a str, resource: impl Into<String>) -> Self {
        Change { action, resource_type, resource: resource.into(), replaces: false }
    }
}

/// Applies `edit` to the newest version and stores the result as the next one; answers what
/// `edit` returned and the new version.
pub async fn write<T: Send>(
    state: &AppState,
    session: &Session,
    req: &HttpRequest,
    change: Change<'_>,
    edit: impl FnOnce(&mut Routes) -> ApiResult<T> + Send,
) -> ApiResult<(T, i64)> {
    if state.cfg.routing.routes != RoutesSource::Database {
        return Err(ApiError::Conflict(
            "routes come from the configuration file (routing.routes = \"file\"): edit it and send SIGHUP to the \
             proxies, or set routing.routes = \"database\" to manage them here"
                .into(),
        ));
    }
    let expected = if_match(req)?;
    let trail = Trail::of(session, req);
    let actor = session.user_id;
    let cfg = &state.cfg;
    let summary = format!("{} {}", change.action, change.resource);
    let mut conn = state.conn().await?;
    let (out, version, logged) = conn
        .transaction::<_, ApiError, _>(async |conn| {
            route_catalog::lock(conn).await?;
            let mut number = route_catalog::latest_version(conn).await?;
            if number == 0 {
                route_catalog::insert(conn, 1, &cfg.routes().with_ids(), SEED_CHANGE, None).await?;
                number = 1;
            }
            if let Some(e) = expected {
                if e != number {
                    return Err(ApiError::Conflict(format!(
                        "the catalog is at version {number}, not {e}: read it again and retry"
                    )));
                }
            }
            let mut routes = match route_catalog::get(conn, number).await {
                Ok(Some(v)) => v.routes,
                Ok(None) => return Err(ApiError::Internal(format!("catalog version {number} vanished"))),
                Err(_) if change.replaces => Routes::default(),
                Err(e) => {
                    log::error!("route catalog version {number} cannot be read: {e}");
                    return Err(ApiError::Conflict(format!(
                        "catalog version {number} cannot be read: restore a good version first"
                    )));
                }
            };
            let out = edit(&mut routes)?;
            routes.validate_gateway().map_err(refused)?;
            check(cfg, &routes)?;
            let version = number + 1;
            route_catalog::insert(conn, version, &routes, &summary, Some(actor)).await?;
            let entry = Entry {
                action: change.action,
                resource_type: change.resource_type,
                resource_id: Some(change.resource.clone()),
                detail: json!({"catalog_version": version}),
            };
            trail.record(conn, entry).await?;
            let logged = invalidations::record_all(conn, [Invalidation::Routes { version }]).await?;
            Ok((out, version, logged))
        })
        .await?;
    log::info!("route catalog version {version}: {summary}");
    state.announce(&logged, format_args!("route catalog version {version}")).await;
    Ok((out, version))
}

/// Under `routing.routes = "database"`, writes the file's routes as version 1 when the catalog
/// is empty (gw-admin serve at start; proxies do the same).
pub async fn seed(cfg: &Config, conn: &mut AsyncPgConnection) -> gw_shared::error::Result<()> {
    if cfg.routing.routes == RoutesSource::Database {
        route_catalog::seed(conn, &cfg.routes().with_ids(), SEED_CHANGE).await?;
    }
    Ok(())
}
