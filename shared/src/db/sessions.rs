//! Sign-in sessions: one per login, the family of every refresh token that login rotates into.
//! A session ends at its absolute `expires_at` or when revoked; the admin API checks it (and
//! re-reads the member's role) on every authenticated request, so logout, reuse detection and
//! removal from the organization take effect at once, not when the access token expires.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::{org_memberships, refresh_tokens, sessions};
use crate::error::Result;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = sessions)]
pub struct Session {
    pub id: Uuid,
    pub user_id: Uuid,
    pub org_id: Uuid,
    pub method: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// `full`, or `totp_enrollment`: a password sign-in into an organization that requires a
    /// second factor, by a user without one, good only for enrolling it.
    pub scope: String,
}

pub async fn insert(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    user_id: Uuid,
    org_id: Uuid,
    method: &str,
    scope: &str,
    expires_at: DateTime<Utc>,
) -> Result<()> {
    diesel::insert_into(sessions::table)
        .values((
            sessions::id.eq(id),
            sessions::user_id.eq(user_id),
            sessions::org_id.eq(org_id),
            sessions::method.eq(method),
            sessions::scope.eq(scope),
            sessions::expires_at.eq(expires_at),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn find(conn: &mut AsyncPgConnection, id: Uuid) -> Result<Option<Session>> {
    Ok(sessions::table.filter(sessions::id.eq(id)).select(Session::as_select()).first(conn).await.optional()?)
}

/// The member's current role and the session's scope when session `id` of `user_id` in
/// `org_id` is live (not revoked, not past its absolute lifetime) and the user is still a
/// member; `None` otherwise.
pub async fn live_role(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    user_id: Uuid,
    org_id: Uuid,
) -> Result<Option<(String, String)>> {
    Ok(sessions::table
        .inner_join(
            org_memberships::table
                .on(org_memberships::org_id.eq(sessions::org_id).and(org_memberships::user_id.eq(sessions::user_id))),
        )
        .filter(sessions::id.eq(id))
        .filter(sessions::user_id.eq(user_id))
        .filter(sessions::org_id.eq(org_id))
        .filter(sessions::revoked_at.is_null())
        .filter(sessions::expires_at.gt(Utc::now()))
        .select((org_memberships::role, sessions::scope))
        .first(conn)
        .await
        .optional()?)
}

/// Sets what a session may do (`full` once a second factor is enrolled).
pub async fn set_scope(conn: &mut AsyncPgConnection, id: Uuid, scope: &str) -> Result<()> {
    diesel::update(sessions::table.filter(sessions::id.eq(id))).set(sessions::scope.eq(scope)).execute(conn).await?;
    Ok(())
}

/// Revokes a session and every refresh token of it.
pub async fn revoke(conn: &mut AsyncPgConnection, id: Uuid) -> Result<()> {
    let ended = end(conn, sessions::id.eq(id)).await?;
    revoke_tokens(conn, &ended).await
}

/// Revokes every session of a user in one organization (removed from it, or role lowered).
pub async fn revoke_for_member(conn: &mut AsyncPgConnection, org_id: Uuid, user_id: Uuid) -> Result<usize> {
    let ended = end(conn, sessions::org_id.eq(org_id).and(sessions::user_id.eq(user_id))).await?;
    revoke_tokens(conn, &ended).await?;
    Ok(ended.len())
}

/// Revokes every session of a user but one (a password change keeps the session that made it).
pub async fn revoke_others(conn: &mut AsyncPgConnection, user_id: Uuid, keep: Uuid) -> Result<usize> {
    let ended = end(conn, sessions::user_id.eq(user_id).and(sessions::id.ne(keep))).await?;
    revoke_tokens(conn, &ended).await?;
    Ok(ended.len())
}

/// Revokes every session of a user, in every organization.
pub async fn revoke_all_for_user(conn: &mut AsyncPgConnection, user_id: Uuid) -> Result<usize> {
    let ended = end(conn, sessions::user_id.eq(user_id)).await?;
    revoke_tokens(conn, &ended).await?;
    Ok(ended.len())
}

/// Marks the live sessions matching `which` revoked; returns their ids.
async fn end<P>(conn: &mut AsyncPgConnection, which: P) -> Result<Vec<Uuid>>
where
    P: diesel::expression::BoxableExpression<sessions::table, diesel::pg::Pg, SqlType = diesel::sql_types::Bool>
        + Send
        + 'static,
{
    Ok(diesel::update(sessions::table)
        .filter(which)
        .filter(sessions::revoked_at.is_null())
        .set(sessions::revoked_at.eq(Utc::now()))
        .returning(sessions::id)
        .get_results(conn)
        .await?)
}

/// Revokes the live refresh tokens of the given sessions.
async fn revoke_tokens(conn: &mut AsyncPgConnection, sessions: &[Uuid]) -> Result<()> {
    if sessions.is_empty() {
        return Ok(());
    }
    diesel::update(
        refresh_tokens::table
            .filter(refresh_tokens::family_id.eq_any(sessions))
            .filter(refresh_tokens::revoked_at.is_null()),
    )
    .set(refresh_tokens::revoked_at.eq(Utc::now()))
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes sessions and refresh tokens that ended more than `grace` ago; returns the rows
/// deleted (refresh tokens, sessions).
pub async fn prune(conn: &mut AsyncPgConnection, grace: chrono::Duration) -> Result<(usize, usize)> {
    let before = Utc::now() - grace;
    let tokens =
        diesel::delete(refresh_tokens::table.filter(refresh_tokens::expires_at.lt(before))).execute(conn).await?;
    let gone =
        diesel::delete(sessions::table.filter(sessions::expires_at.lt(before).or(sessions::revoked_at.lt(before))))
            .execute(conn)
            .await?;
    let orphans = diesel::delete(refresh_tokens::table.filter(diesel::dsl::not(diesel::dsl::exists(
        sessions::table.filter(sessions::id.eq(refresh_tokens::family_id)),
    ))))
    .execute(conn)
    .await?;
    Ok((tokens + orphans, gone))
}
