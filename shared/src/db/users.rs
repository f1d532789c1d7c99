//! Users and their organization memberships.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::{org_memberships, users};
use crate::error::Result;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = users)]
pub struct User {
    pub id: Uuid,
    pub email: String,
    pub name: String,
    pub password_hash: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = users)]
pub struct NewUser<'a> {
    pub id: Uuid,
    pub email: &'a str,
    /// `gw_shared::email::normalize(email)`: what identifies the account.
    pub email_normalized: &'a str,
    pub name: &'a str,
    pub password_hash: Option<&'a str>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = org_memberships)]
pub struct Membership {
    pub org_id: Uuid,
    pub user_id: Uuid,
    pub role: String,
    pub created_at: DateTime<Utc>,
}

pub async fn insert(conn: &mut AsyncPgConnection, new: &NewUser<'_>) -> Result<User> {
    Ok(diesel::insert_into(users::table).values(new).returning(User::as_returning()).get_result(conn).await?)
}

/// The account of an address, in its normalized form (`gw_shared::email::normalize`).
pub async fn find_by_email(conn: &mut AsyncPgConnection, normalized: &str) -> Result<Option<User>> {
    Ok(users::table
        .filter(users::email_normalized.eq(normalized))
        .select(User::as_select())
        .first(conn)
        .await
        .optional()?)
}

pub async fn find(conn: &mut AsyncPgConnection, user_id: Uuid) -> Result<Option<User>> {
    Ok(users::table.filter(users::id.eq(user_id)).select(User::as_select()).first(conn).await.optional()?)
}

pub async fn set_password(conn: &mut AsyncPgConnection, user_id: Uuid, hash: &str) -> Result<()> {
    diesel::update(users::table.filter(users::id.eq(user_id)))
        .set((users::password_hash.eq(hash), users::updated_at.eq(Utc::now())))
        .execute(conn)
        .await?;
    Ok(())
}

/// Removes an account's password (it then signs in only through SSO).
pub async fn clear_password(conn: &mut AsyncPgConnection, user_id: Uuid) -> Result<()> {
    diesel::update(users::table.filter(users::id.eq(user_id)))
        .set((users::password_hash.eq(None::<String>), users::updated_at.eq(Utc::now())))
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn add_membership(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid, role: &str) -> Result<()> {
    diesel::insert_into(org_memberships::table)
        .values((
            org_memberships::org_id.eq(org_id),
            org_memberships::user_id.eq(user_id),
            org_memberships::role.eq(role),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// The user's membership in one organization.
pub async fn membership(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid) -> Result<Option<Membership>> {
    Ok(org_memberships::table
        .filter(org_memberships::org_id.eq(org_id))
        .filter(org_memberships::user_id.eq(user_id))
        .select(Membership::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The organization a user signs in to: their oldest membership.
pub async fn primary_membership(conn: &mut AsyncPgConnection, user_id: Uuid) -> Result<Option<Membership>> {
    Ok(org_memberships::table
        .filter(org_memberships::user_id.eq(user_id))
        .order(org_memberships::created_at.asc())
        .select(Membership::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// A member of an organization as the users endpoints show it.
#[derive(Debug, Clone, Queryable)]
pub struct Member {
    pub id: Uuid,
    pub email: String,
    pub name: String,
    pub role: String,
    pub joined_at: DateTime<Utc>,
}

type MemberColumns = (users::id, users::email, users::name, org_memberships::role, org_memberships::created_at);
const MEMBER_COLUMNS: MemberColumns =
    (users::id, users::email, users::name, org_memberships::role, org_memberships::created_at);

/// One page of an organization's members, by user id descending (ids are UUIDv7: newest
/// first); `role` filters when given.
pub async fn list_members(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    role: Option<&str>,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Member>> {
    let mut q = org_memberships::table.inner_join(users::table).filter(org_memberships::org_id.eq(org_id)).into_boxed();
    if let Some(role) = role {
        q = q.filter(org_memberships::role.eq(role.to_string()));
    }
    if let Some(before) = before {
        q = q.filter(users::id.lt(before));
    }
    Ok(q.order(users::id.desc()).limit(limit).select(MEMBER_COLUMNS).load(conn).await?)
}

pub async fn find_member(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid) -> Result<Option<Member>> {
    Ok(org_memberships::table
        .inner_join(users::table)
        .filter(org_memberships::org_id.eq(org_id))
        .filter(org_memberships::user_id.eq(user_id))
        .select(MEMBER_COLUMNS)
        .first(conn)
        .await
        .optional()?)
}

/// Sets a member's role; `false` when the user is not a member of the organization.
pub async fn set_role(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid, role: &str) -> Result<bool> {
    let n = diesel::update(
        org_memberships::table.filter(org_memberships::org_id.eq(org_id)).filter(org_memberships::user_id.eq(user_id)),
    )
    .set(org_memberships::role.eq(role))
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Removes a user from an organization and its teams; `false` when not a member.
pub async fn remove_membership(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid) -> Result<bool> {
    use super::schema::team_members;
    diesel::delete(
        team_members::table.filter(team_members::org_id.eq(org_id)).filter(team_members::user_id.eq(user_id)),
    )
    .execute(conn)
    .await?;
    let n = diesel::delete(
        org_memberships::table.filter(org_memberships::org_id.eq(org_id)).filter(org_memberships::user_id.eq(user_id)),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Locks the organization's owner memberships and counts them (so two concurrent demotions
/// cannot both leave it without an owner).
pub async fn lock_owners(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<usize> {
    let owners: Vec<Uuid> = org_memberships::table
        .filter(org_memberships::org_id.eq(org_id))
        .filter(org_memberships::role.eq("owner"))
        .select(org_memberships::user_id)
        .for_update()
        .load(conn)
        .await?;
    Ok(owners.len())
}
