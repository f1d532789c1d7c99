//! Refresh tokens: stored as SHA-256, rotated on every use, grouped in families so that reuse of
//! an already-rotated token revokes the whole family (RFC 6819 §5.2.2.3).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::refresh_tokens;
use crate::error::Result;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = refresh_tokens)]
pub struct RefreshToken {
    pub id: Uuid,
    pub user_id: Uuid,
    pub org_id: Uuid,
    pub family_id: Uuid,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The successor this token was rotated into, sealed with a key only this token derives.
    pub successor_sealed: Option<Vec<u8>>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = refresh_tokens)]
pub struct NewRefreshToken<'a> {
    pub id: Uuid,
    pub user_id: Uuid,
    pub org_id: Uuid,
    pub family_id: Uuid,
    pub token_hash: &'a [u8],
    pub expires_at: DateTime<Utc>,
}

pub async fn insert(conn: &mut AsyncPgConnection, new: &NewRefreshToken<'_>) -> Result<()> {
    diesel::insert_into(refresh_tokens::table).values(new).execute(conn).await?;
    Ok(())
}

/// Locks the token's row for the rotation that follows (two concurrent refreshes with the same
/// token: one wins, the other sees it used).
pub async fn find_for_update(conn: &mut AsyncPgConnection, hash: &[u8]) -> Result<Option<RefreshToken>> {
    Ok(refresh_tokens::table
        .filter(refresh_tokens::token_hash.eq(hash))
        .select(RefreshToken::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?)
}

/// Marks a token rotated, keeping its successor sealed for the grace window.
pub async fn mark_used(conn: &mut AsyncPgConnection, id: Uuid, successor_sealed: &[u8]) -> Result<()> {
    diesel::update(refresh_tokens::table.filter(refresh_tokens::id.eq(id)))
        .set((refresh_tokens::used_at.eq(Utc::now()), refresh_tokens::successor_sealed.eq(successor_sealed)))
        .execute(conn)
        .await?;
    Ok(())
}

/// Whether the token with this digest is live (not used, not revoked, not expired).
pub async fn is_live(conn: &mut AsyncPgConnection, hash: &[u8]) -> Result<bool> {
    let n: i64 = refresh_tokens::table
        .filter(refresh_tokens::token_hash.eq(hash))
        .filter(refresh_tokens::used_at.is_null())
        .filter(refresh_tokens::revoked_at.is_null())
        .filter(refresh_tokens::expires_at.gt(Utc::now()))
        .count()
        .get_result(conn)
        .await?;
    Ok(n > 0)
}
