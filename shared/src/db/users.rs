//! Users and their organization memberships.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::lower;
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

pub async fn find_by_email(conn: &mut AsyncPgConnection, email: &str) -> Result<Option<User>> {
    Ok(users::table
        .filter(lower(users::email).eq(email.to_lowercase()))
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
