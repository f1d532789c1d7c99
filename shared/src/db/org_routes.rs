//! An organization's own route catalog (`org_routes`): its providers (each with one of its
//! provider keys) and models, in the gateway catalog's format. Every save appends a version under
//! the organization row's lock; the newest is in force.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::schema::org_routes as r;
use crate::config::Routes;
use crate::error::{Error, Result};

/// The organization's routes in force, as the proxy caches them (built there per version).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredOrgRoutes {
    pub version: i32,
    pub routes: Routes,
    pub actor_user_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

/// The newest version; `None` when the organization never saved one.
pub async fn current(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Option<StoredOrgRoutes>> {
    let row: Option<(i32, serde_json::Value, Option<Uuid>, DateTime<Utc>)> = r::table
        .filter(r::org_id.eq(org_id))
        .order(r::version.desc())
        .select((r::version, r::routes, r::actor_user_id, r::created_at))
        .first(conn)
        .await
        .optional()?;
    row.map(|(version, routes, actor_user_id, created_at)| {
        let routes = serde_json::from_value(routes)
            .map_err(|e| Error::Invalid(format!("routes version {version} of org {org_id} do not read: {e}")))?;
        Ok(StoredOrgRoutes { version, routes, actor_user_id, created_at })
    })
    .transpose()
}

/// Appends `routes` as the next version (inside a transaction holding the organization row's
/// lock, `policies::lock_org`); answers its number.
pub async fn append(conn: &mut AsyncPgConnection, org_id: Uuid, routes: &Routes, actor: Option<Uuid>) -> Result<i32> {
    let latest: Option<i32> =
        r::table.filter(r::org_id.eq(org_id)).select(diesel::dsl::max(r::version)).first(conn).await?;
    let version = latest.unwrap_or(0) + 1;
    let json = serde_json::to_value(routes).map_err(|e| Error::Invalid(format!("org routes: {e}")))?;
    diesel::insert_into(r::table)
        .values((r::org_id.eq(org_id), r::version.eq(version), r::routes.eq(json), r::actor_user_id.eq(actor)))
        .execute(conn)
        .await?;
    Ok(version)
}
