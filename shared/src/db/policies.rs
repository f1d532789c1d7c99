//! Policy documents and their versions (`policy_versions`): the organization's document, and the
//! history of each team's default policies as the policy endpoints set them. A save locks the
//! organization's row, so versions are numbered without gaps or races.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::schema::{organizations, policy_versions, teams};
use crate::error::Result;

/// The organization's policy in force, as the proxy caches it (compiled there per version).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredPolicy {
    pub version: i64,
    pub document: Value,
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = policy_versions)]
pub struct VersionRow {
    pub id: i64,
    pub org_id: Uuid,
    pub team_id: Option<Uuid>,
    pub version: i32,
    pub document: Value,
    pub source: String,
    pub actor_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

/// The organization's document in force; `None` when it never saved one.
pub async fn current(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Option<StoredPolicy>> {
    let row: Option<(i32, Value)> = policy_versions::table
        .filter(policy_versions::org_id.eq(org_id))
        .filter(policy_versions::team_id.is_null())
        .order(policy_versions::version.desc())
        .select((policy_versions::version, policy_versions::document))
        .first(conn)
        .await
        .optional()?;
    Ok(row.map(|(version, document)| StoredPolicy { version: i64::from(version), document }))
}

/// The newest version row of a scope (the organization's with `team_id` None).
pub async fn latest(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Option<Uuid>) -> Result<Option<VersionRow>> {
    let mut q = policy_versions::table.filter(policy_versions::org_id.eq(org_id)).into_boxed();
    q = match team_id {
        Some(t) => q.filter(policy_versions::team_id.eq(t)),
        None => q.filter(policy_versions::team_id.is_null()),
    };
    Ok(q.order(policy_versions::version.desc()).select(VersionRow::as_select()).first(conn).await.optional()?)
}

/// Locks the organization's row for the rest of the transaction: one policy save at a time.
pub async fn lock_org(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<bool> {
    let n: Option<Uuid> = organizations::table
        .filter(organizations::id.eq(org_id))
        .select(organizations::id)
        .for_update()
        .first(conn)
        .await
        .optional()?;
    Ok(n.is_some())
}

/// Appends a version to a scope (call inside a transaction, after [`lock_org`]).
pub async fn append(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Option<Uuid>,
    document: &Value,
    source: &str,
    actor_id: Option<Uuid>,
) -> Result<VersionRow> {
    let next = latest(conn, org_id, team_id).await?.map_or(1, |r| r.version + 1);
    Ok(diesel::insert_into(policy_versions::table)
        .values((
            policy_versions::org_id.eq(org_id),
            policy_versions::team_id.eq(team_id),
            policy_versions::version.eq(next),
            policy_versions::document.eq(document),
            policy_versions::source.eq(source),
            policy_versions::actor_id.eq(actor_id),
        ))
        .returning(VersionRow::as_returning())
        .get_result(conn)
        .await?)
}

/// One version of a scope.
pub async fn version(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Option<Uuid>,
    version: i32,
) -> Result<Option<VersionRow>> {
    let mut q = policy_versions::table
        .filter(policy_versions::org_id.eq(org_id))
        .filter(policy_versions::version.eq(version))
        .into_boxed();
    q = match team_id {
        Some(t) => q.filter(policy_versions::team_id.eq(t)),
        None => q.filter(policy_versions::team_id.is_null()),
    };
    Ok(q.select(VersionRow::as_select()).first(conn).await.optional()?)
}

/// A scope's versions, newest first, below `before` (a version number) when given.
pub async fn history(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Option<Uuid>,
    before: Option<i32>,
    limit: i64,
) -> Result<Vec<VersionRow>> {
    let mut q = policy_versions::table.filter(policy_versions::org_id.eq(org_id)).into_boxed();
    q = match team_id {
        Some(t) => q.filter(policy_versions::team_id.eq(t)),
        None => q.filter(policy_versions::team_id.is_null()),
    };
    if let Some(b) = before {
        q = q.filter(policy_versions::version.lt(b));
    }
    Ok(q.order(policy_versions::version.desc()).limit(limit).select(VersionRow::as_select()).load(conn).await?)
}

/// Live teams whose default or mandatory policies name any of `names`, with the names they use.
pub async fn teams_using(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    names: &[String],
) -> Result<Vec<(Uuid, String, Vec<String>)>> {
    if names.is_empty() {
        return Ok(vec![]);
    }
    Ok(teams::table
        .filter(teams::org_id.eq(org_id))
        .filter(teams::deleted_at.is_null())
        .filter(teams::default_policies.overlaps_with(names).or(teams::mandatory_policies.overlaps_with(names)))
        .select((teams::id, teams::name, teams::default_policies, teams::mandatory_policies))
        .load::<(Uuid, String, Vec<String>, Vec<String>)>(conn)
        .await?
        .into_iter()
        .map(|(id, name, mut used, mandatory)| {
            used.extend(mandatory);
            (id, name, used)
        })
        .collect())
}

/// A live team's default policies; `None` when no such team.
pub async fn team_defaults(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid) -> Result<Option<Vec<String>>> {
    Ok(teams::table
        .filter(teams::org_id.eq(org_id))
        .filter(teams::id.eq(team_id))
        .filter(teams::deleted_at.is_null())
        .select(teams::default_policies)
        .first(conn)
        .await
        .optional()?)
}

pub async fn set_team_defaults(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Uuid,
    names: &[String],
) -> Result<bool> {
    let n = diesel::update(
        teams::table.filter(teams::org_id.eq(org_id)).filter(teams::id.eq(team_id)).filter(teams::deleted_at.is_null()),
    )
    .set((teams::default_policies.eq(names), teams::updated_at.eq(Utc::now())))
    .execute(conn)
    .await?;
    Ok(n > 0)
}
