//! Teams: their settings, their members and the API keys issued to them. A deleted team keeps
//! its row (`deleted_at` set) so audit rows and revoked keys still name it. Every query takes the
//! `org_id` and filters on it.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::upsert::excluded;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;
use uuid::Uuid;

use super::schema::{api_keys, org_memberships, team_members, teams, users};
use crate::error::Result;
use crate::limits::settings::ScopeLimits;

/// Team roles: a `lead` or a plain `member`.
pub const TEAM_ROLES: &[&str] = &["lead", "member"];

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = teams)]
pub struct Team {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub metadata: Value,
    pub created_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
    /// Models the team may use; `None`: every model.
    pub allowed_models: Option<Vec<String>>,
    pub description: String,
    pub default_policies: Vec<String>,
    pub budget: Option<Value>,
    pub rate_limits: Option<Value>,
    pub updated_at: DateTime<Utc>,
    /// Policies every request of the team gets, which `x-gw-policy` cannot switch off.
    pub mandatory_policies: Vec<String>,
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = teams)]
pub struct NewTeam {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub description: String,
    pub metadata: Value,
    pub default_policies: Vec<String>,
    pub mandatory_policies: Vec<String>,
    pub budget: Option<Value>,
    pub rate_limits: Option<Value>,
    pub allowed_models: Option<Vec<String>>,
}

/// What an update sets: `None` leaves a field as it is; `Some(None)` clears a nullable one.
#[derive(Debug, Default, Clone, AsChangeset)]
#[diesel(table_name = teams)]
pub struct TeamChange {
    pub name: Option<String>,
    pub description: Option<String>,
    pub metadata: Option<Value>,
    pub default_policies: Option<Vec<String>>,
    pub mandatory_policies: Option<Vec<String>>,
    pub budget: Option<Option<Value>>,
    pub rate_limits: Option<Option<Value>>,
    pub allowed_models: Option<Option<Vec<String>>>,
}

/// Whether `team_id` is a live team of `org_id`.
pub async fn exists_in_org(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid) -> Result<bool> {
    let n: i64 = teams::table
        .filter(teams::org_id.eq(org_id))
        .filter(teams::id.eq(team_id))
        .filter(teams::deleted_at.is_null())
        .count()
        .get_result(conn)
        .await?;
    Ok(n > 0)
}

/// Whether `user_id` belongs to live team `team_id` of `org_id`.
pub async fn is_member(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid, user_id: Uuid) -> Result<bool> {
    let n: i64 = team_members::table
        .inner_join(teams::table.on(teams::id.eq(team_members::team_id)))
        .filter(team_members::org_id.eq(org_id))
        .filter(team_members::team_id.eq(team_id))
        .filter(team_members::user_id.eq(user_id))
        .filter(teams::deleted_at.is_null())
        .count()
        .get_result(conn)
        .await?;
    Ok(n > 0)
}

/// A team that exists and is not deleted, as the proxy needs it (and caches it).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LiveTeam {
    pub org_id: Uuid,
    pub team_id: Uuid,
    /// For messages that name the team (empty in a Redis copy written before it existed).
    #[serde(default)]
    pub name: String,
    /// Models the team may use; `None`: every model.
    #[serde(default)]
    pub allowed_models: Option<Vec<String>>,
    /// The team's budget and rate limits.
    #[serde(default)]
    pub limits: ScopeLimits,
    /// Policies every request of the team gets, after the organization's.
    #[serde(default)]
    pub default_policies: Vec<String>,
    /// Policies every request of the team gets that `x-gw-policy: -name` cannot switch off.
    #[serde(default)]
    pub mandatory_policies: Vec<String>,
}

/// A live team: its model allow-list, limits and default policies.
pub async fn live(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid) -> Result<Option<LiveTeam>> {
    let row = teams::table
        .filter(teams::org_id.eq(org_id))
        .filter(teams::id.eq(team_id))
        .filter(teams::deleted_at.is_null())
        .select((
            teams::name,
            teams::allowed_models,
            (teams::budget, teams::rate_limits),
            teams::default_policies,
            teams::mandatory_policies,
        ))
        .first::<(String, Option<Vec<String>>, ScopeLimits, Vec<String>, Vec<String>)>(conn)
        .await
        .optional()?;
    Ok(row.map(|(name, allowed_models, limits, default_policies, mandatory_policies)| LiveTeam {
        org_id,
        team_id,
        name,
        allowed_models,
        limits,
        default_policies,
        mandatory_policies,
    }))
}

/// Sets a team's model allow-list (`None`: every model).
pub async fn set_allowed_models(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Uuid,
    models: Option<&[String]>,
) -> Result<bool> {
    let n = diesel::update(teams::table.filter(teams::org_id.eq(org_id)).filter(teams::id.eq(team_id)))
        .set(teams::allowed_models.eq(models))
        .execute(conn)
        .await?;
    Ok(n == 1)
}

/// Inserts a team with default settings (tests and fixtures; the API uses [`create`]).
pub async fn insert(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid, name: &str) -> Result<()> {
    diesel::insert_into(teams::table)
        .values((teams::id.eq(team_id), teams::org_id.eq(org_id), teams::name.eq(name)))
        .execute(conn)
        .await?;
    Ok(())
}

/// Inserts a team; a live team of the same org with the same name (case-insensitively) is a
/// unique violation.
pub async fn create(conn: &mut AsyncPgConnection, new: NewTeam) -> Result<Team> {
    Ok(diesel::insert_into(teams::table).values(new).returning(Team::as_returning()).get_result(conn).await?)
}

/// A live team of `org_id`.
pub async fn find_live(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid) -> Result<Option<Team>> {
    Ok(teams::table
        .filter(teams::org_id.eq(org_id))
        .filter(teams::id.eq(team_id))
        .filter(teams::deleted_at.is_null())
        .select(Team::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// A live team of `org_id`, its row locked until the transaction ends (deletion).
pub async fn find_live_for_update(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid) -> Result<Option<Team>> {
    Ok(teams::table
        .filter(teams::org_id.eq(org_id))
        .filter(teams::id.eq(team_id))
        .filter(teams::deleted_at.is_null())
        .select(Team::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?)
}

/// The `%…%` pattern of a case-insensitive substring match, wildcards in `s` escaped.
fn contains_pattern(s: &str) -> String {
    let escaped = s.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    format!("%{escaped}%")
}

/// One page of an org's live teams, newest first (ids are UUIDv7, so `id < before` is "older
/// than"); `name_contains` filters case-insensitively.
pub async fn list_live(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    name_contains: Option<&str>,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Team>> {
    let mut q = teams::table.filter(teams::org_id.eq(org_id)).filter(teams::deleted_at.is_null()).into_boxed();
    if let Some(name) = name_contains {
        q = q.filter(teams::name.ilike(contains_pattern(name)));
    }
    if let Some(before) = before {
        q = q.filter(teams::id.lt(before));
    }
    Ok(q.order(teams::id.desc()).limit(limit).select(Team::as_select()).load(conn).await?)
}

/// Updates a live team; `None` when there is no such live team. A name taken by another live
/// team is a unique violation.
pub async fn update(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Uuid,
    change: &TeamChange,
) -> Result<Option<Team>> {
    Ok(diesel::update(
        teams::table.filter(teams::org_id.eq(org_id)).filter(teams::id.eq(team_id)).filter(teams::deleted_at.is_null()),
    )
    .set((change, teams::updated_at.eq(Utc::now())))
    .returning(Team::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

/// Soft-deletes a live team and removes its members; `false` when there is no such live team.
/// Its API keys are the caller's business ([`revoke_keys_of_team`]) and must be done first.
pub async fn soft_delete(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid) -> Result<bool> {
    diesel::delete(
        team_members::table.filter(team_members::org_id.eq(org_id)).filter(team_members::team_id.eq(team_id)),
    )
    .execute(conn)
    .await?;
    let now = Utc::now();
    let n = diesel::update(
        teams::table.filter(teams::org_id.eq(org_id)).filter(teams::id.eq(team_id)).filter(teams::deleted_at.is_null()),
    )
    .set((teams::deleted_at.eq(now), teams::updated_at.eq(now)))
    .execute(conn)
    .await?;
    Ok(n == 1)
}

pub async fn member_count(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid) -> Result<i64> {
    Ok(team_members::table
        .filter(team_members::org_id.eq(org_id))
        .filter(team_members::team_id.eq(team_id))
        .count()
        .get_result(conn)
        .await?)
}

/// Member counts of several teams at once (a list page); teams without members are absent.
pub async fn member_counts(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_ids: &[Uuid],
) -> Result<HashMap<Uuid, i64>> {
    if team_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(Uuid, i64)> = team_members::table
        .filter(team_members::org_id.eq(org_id))
        .filter(team_members::team_id.eq_any(team_ids))
        .group_by(team_members::team_id)
        .select((team_members::team_id, diesel::dsl::count_star()))
        .load(conn)
        .await?;
    Ok(rows.into_iter().collect())
}

/// A member of a team as the team endpoints show it.
#[derive(Debug, Clone, Queryable)]
pub struct TeamMember {
    pub user_id: Uuid,
    pub email: String,
    pub name: String,
    /// `lead` or `member`.
    pub team_role: String,
    /// The user's role in the organization.
    pub org_role: String,
    pub added_at: DateTime<Utc>,
}

type TeamMemberColumns =
    (users::id, users::email, users::name, team_members::role, org_memberships::role, team_members::created_at);
const TEAM_MEMBER_COLUMNS: TeamMemberColumns =
    (users::id, users::email, users::name, team_members::role, org_memberships::role, team_members::created_at);

/// Adds a member of the organization to a team with `role`, or sets the role of one already in
/// it. The caller checks that the team is live and the user a member of `org_id`.
pub async fn add_member(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Uuid,
    user_id: Uuid,
    role: &str,
) -> Result<()> {
    diesel::insert_into(team_members::table)
        .values((
            team_members::org_id.eq(org_id),
            team_members::team_id.eq(team_id),
            team_members::user_id.eq(user_id),
            team_members::role.eq(role),
        ))
        .on_conflict((team_members::team_id, team_members::user_id))
        .do_update()
        .set(team_members::role.eq(excluded(team_members::role)))
        .execute(conn)
        .await?;
    Ok(())
}

/// Adds a user to a team as a `member` unless already in it (whatever the role it has there).
pub async fn ensure_member(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid, user_id: Uuid) -> Result<()> {
    diesel::insert_into(team_members::table)
        .values((
            team_members::org_id.eq(org_id),
            team_members::team_id.eq(team_id),
            team_members::user_id.eq(user_id),
            team_members::role.eq("member"),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    Ok(())
}

/// Removes a user from a team; `false` when not in it.
pub async fn remove_member(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid, user_id: Uuid) -> Result<bool> {
    let n = diesel::delete(
        team_members::table
            .filter(team_members::org_id.eq(org_id))
            .filter(team_members::team_id.eq(team_id))
            .filter(team_members::user_id.eq(user_id)),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// One page of a team's members, by user id descending (UUIDv7: newest accounts first).
pub async fn list_members(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Uuid,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<TeamMember>> {
    let mut q = team_members::table
        .inner_join(users::table)
        .inner_join(org_memberships::table.on(
            org_memberships::org_id.eq(team_members::org_id).and(org_memberships::user_id.eq(team_members::user_id)),
        ))
        .filter(team_members::org_id.eq(org_id))
        .filter(team_members::team_id.eq(team_id))
        .into_boxed();
    if let Some(before) = before {
        q = q.filter(users::id.lt(before));
    }
    Ok(q.order(users::id.desc()).limit(limit).select(TEAM_MEMBER_COLUMNS).load(conn).await?)
}

/// One member of a team.
pub async fn find_member(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Uuid,
    user_id: Uuid,
) -> Result<Option<TeamMember>> {
    Ok(team_members::table
        .inner_join(users::table)
        .inner_join(org_memberships::table.on(
            org_memberships::org_id.eq(team_members::org_id).and(org_memberships::user_id.eq(team_members::user_id)),
        ))
        .filter(team_members::org_id.eq(org_id))
        .filter(team_members::team_id.eq(team_id))
        .filter(team_members::user_id.eq(user_id))
        .select(TEAM_MEMBER_COLUMNS)
        .first(conn)
        .await
        .optional()?)
}

/// The live teams of `org_id` a user belongs to, newest first.
pub async fn ids_of_member(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid) -> Result<Vec<Uuid>> {
    Ok(team_members::table
        .inner_join(teams::table.on(teams::id.eq(team_members::team_id)))
        .filter(team_members::org_id.eq(org_id))
        .filter(team_members::user_id.eq(user_id))
        .filter(teams::deleted_at.is_null())
        .order(teams::id.desc())
        .select(team_members::team_id)
        .load(conn)
        .await?)
}

/// The team's live API keys (not revoked, not expired): id and hash (the current secret's).
pub async fn live_keys_of_team(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Uuid,
) -> Result<Vec<(Uuid, Vec<u8>)>> {
    Ok(api_keys::table
        .filter(api_keys::org_id.eq(org_id))
        .filter(api_keys::team_id.eq(team_id))
        .filter(api_keys::revoked_at.is_null())
        .filter(api_keys::expires_at.is_null().or(api_keys::expires_at.gt(Utc::now())))
        .select((api_keys::id, api_keys::key_hash))
        .load(conn)
        .await?)
}

/// Revokes every key of the team not yet revoked (expired ones too, so none can be revived by
/// a later change of its expiry); returns their ids and hashes, the hashes to invalidate the
/// proxies' caches once committed.
pub async fn revoke_keys_of_team(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    team_id: Uuid,
) -> Result<Vec<(Uuid, Vec<u8>)>> {
    let now = Utc::now();
    Ok(diesel::update(
        api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::team_id.eq(team_id))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set((api_keys::revoked_at.eq(now), api_keys::updated_at.eq(now)))
    .returning((api_keys::id, api_keys::key_hash, api_keys::previous_key_hash))
    .get_results::<(Uuid, Vec<u8>, Option<Vec<u8>>)>(conn)
    .await?
    .into_iter()
    // A secret still in a regeneration's grace is a second hash of the same key.
    .flat_map(|(id, hash, previous)| std::iter::once((id, hash)).chain(previous.map(|p| (id, p))))
    .collect())
}

/// The names of `ids` among the organization's teams, deleted ones included (their spend is still
/// reported).
pub async fn names(conn: &mut AsyncPgConnection, org_id: Uuid, ids: &[Uuid]) -> Result<HashMap<Uuid, String>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(Uuid, String)> = teams::table
        .filter(teams::org_id.eq(org_id))
        .filter(teams::id.eq_any(ids))
        .select((teams::id, teams::name))
        .load(conn)
        .await?;
    Ok(rows.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_patterns_escape_wildcards() {
        assert_eq!(contains_pattern("a_b%c\\"), "%a\\_b\\%c\\\\%");
        assert_eq!(contains_pattern("ops"), "%ops%");
    }
}
