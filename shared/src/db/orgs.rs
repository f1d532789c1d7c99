//! Organizations.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::schema::organizations;
use crate::error::Result;
use crate::limits::settings::ScopeLimits;

#[derive(Debug, Clone, Queryable, Selectable, Serialize)]
#[diesel(table_name = organizations)]
pub struct Organization {
    pub id: Uuid,
    pub name: String,
    pub plan: String,
    pub data_residency_region: String,
    pub metadata: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub budget: Option<serde_json::Value>,
    pub rate_limits: Option<serde_json::Value>,
    pub log_bodies: bool,
    /// Members must sign in with a second factor (TOTP); one without gets a session good only
    /// for enrolling it.
    pub require_totp: bool,
}

/// What the proxy caches of an organization: its limits, and whether its audit rows keep
/// request and response bodies. A cached copy from before `log_bodies` existed decodes as off.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OrgSettings {
    #[serde(flatten)]
    pub limits: ScopeLimits,
    #[serde(default)]
    pub log_bodies: bool,
    /// The organization's data-residency region: its requests go only to deployments of that
    /// region or of none. A cached copy from before it existed decodes as none (and is replaced
    /// within the cache's TTL).
    #[serde(default)]
    pub region: Option<String>,
    /// The organization's plan (which `[gateway_quota]` entry applies).
    #[serde(default)]
    pub plan: Option<String>,
    /// The operator's override of the plan's quota on the gateway's credentials, if any.
    #[serde(default)]
    pub gateway_quota: Option<ScopeLimits>,
}

/// An override of the gateway-credentials quota as stored, decoded. One that no longer decodes
/// (written by another version) is logged and ignored: the plan's quota applies.
pub fn decode_gateway_quota(v: Option<Value>) -> Option<ScopeLimits> {
    match serde_json::from_value(v?) {
        Ok(q) => Some(q),
        Err(e) => {
            log::error!("ignoring a stored gateway quota that does not decode: {e}");
            None
        }
    }
}

/// The organization's plan and the operator's quota override (`None`: no such organization).
pub async fn gateway_quota(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Option<(String, Option<Value>)>> {
    Ok(organizations::table
        .filter(organizations::id.eq(org_id))
        .select((organizations::plan, organizations::gateway_quota))
        .first(conn)
        .await
        .optional()?)
}

/// Sets (or, with `None`, removes) the operator's quota override; false when no such organization.
pub async fn set_gateway_quota(conn: &mut AsyncPgConnection, org_id: Uuid, quota: Option<&Value>) -> Result<bool> {
    let n = diesel::update(organizations::table.filter(organizations::id.eq(org_id)))
        .set((organizations::gateway_quota.eq(quota), organizations::updated_at.eq(chrono::Utc::now())))
        .execute(conn)
        .await?;
    Ok(n > 0)
}

/// An organization's limits and audit settings (`None`: no such organization).
pub async fn settings(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Option<OrgSettings>> {
    let row: Option<(ScopeLimits, bool, String, String, Option<Value>)> = organizations::table
        .filter(organizations::id.eq(org_id))
        .select((
            (organizations::budget, organizations::rate_limits),
            organizations::log_bodies,
            organizations::data_residency_region,
            organizations::plan,
            organizations::gateway_quota,
        ))
        .first(conn)
        .await
        .optional()?;
    Ok(row.map(|(limits, log_bodies, region, plan, quota)| OrgSettings {
        limits,
        log_bodies,
        region: Some(region),
        plan: Some(plan),
        gateway_quota: decode_gateway_quota(quota),
    }))
}

#[derive(Debug, Insertable)]
#[diesel(table_name = organizations)]
pub struct NewOrganization<'a> {
    pub id: Uuid,
    pub name: &'a str,
}

pub async fn insert(conn: &mut AsyncPgConnection, new: &NewOrganization<'_>) -> Result<Organization> {
    Ok(diesel::insert_into(organizations::table)
        .values(new)
        .returning(Organization::as_returning())
        .get_result(conn)
        .await?)
}

/// An organization's own budget and rate limits (`None`: no such organization).
pub async fn limits(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Option<ScopeLimits>> {
    Ok(organizations::table
        .filter(organizations::id.eq(org_id))
        .select((organizations::budget, organizations::rate_limits))
        .first::<ScopeLimits>(conn)
        .await
        .optional()?)
}

pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Option<Organization>> {
    Ok(organizations::table
        .filter(organizations::id.eq(org_id))
        .select(Organization::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The fields an update sets; `None` leaves one as it is.
#[derive(Debug, Default, AsChangeset)]
#[diesel(table_name = organizations)]
pub struct Change {
    pub name: Option<String>,
    pub data_residency_region: Option<String>,
    pub metadata: Option<serde_json::Value>,
    pub budget: Option<Option<serde_json::Value>>,
    pub rate_limits: Option<Option<serde_json::Value>>,
    pub log_bodies: Option<bool>,
    pub require_totp: Option<bool>,
}

pub async fn update(conn: &mut AsyncPgConnection, org_id: Uuid, change: &Change) -> Result<Option<Organization>> {
    Ok(diesel::update(organizations::table.filter(organizations::id.eq(org_id)))
        .set((change, organizations::updated_at.eq(Utc::now())))
        .returning(Organization::as_returning())
        .get_result(conn)
        .await
        .optional()?)
}
