//! Invites: an address asked to join an organization with a role (and teams). Only the SHA-256
//! of the invite token is stored; the token is shown once, when the invite is created. An invite
//! is accepted once, and never after it expired or was revoked.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::invites;
use crate::error::Result;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = invites)]
pub struct Invite {
    pub id: Uuid,
    pub org_id: Uuid,
    /// The address as typed.
    pub email: String,
    /// `gw_shared::email::normalize(email)`: what identifies the account.
    pub email_normalized: String,
    pub role: String,
    pub team_ids: Vec<Uuid>,
    pub token_hash: Vec<u8>,
    pub invited_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub accepted_at: Option<DateTime<Utc>>,
    pub accepted_by: Option<Uuid>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Where an invite stands, computed from its columns and the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pending,
    Accepted,
    Revoked,
    Expired,
}

impl Status {
    pub const ALL: [Status; 4] = [Status::Pending, Status::Accepted, Status::Revoked, Status::Expired];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Accepted => "accepted",
            Status::Revoked => "revoked",
            Status::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl Invite {
    /// Accepted wins over revoked, revoked over expired.
    pub fn status(&self, now: DateTime<Utc>) -> Status {
        if self.accepted_at.is_some() {
            Status::Accepted
        } else if self.revoked_at.is_some() {
            Status::Revoked
        } else if self.expires_at <= now {
            Status::Expired
        } else {
            Status::Pending
        }
    }
}

#[derive(Debug, Insertable)]
#[diesel(table_name = invites)]
pub struct NewInvite<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub email: &'a str,
    pub email_normalized: &'a str,
    pub role: &'a str,
    pub team_ids: &'a [Uuid],
    pub token_hash: &'a [u8],
    pub invited_by: Option<Uuid>,
    pub expires_at: DateTime<Utc>,
}

pub async fn insert(conn: &mut AsyncPgConnection, new: &NewInvite<'_>) -> Result<Invite> {
    Ok(diesel::insert_into(invites::table).values(new).returning(Invite::as_returning()).get_result(conn).await?)
}

/// One page of an org's invites, newest first; `status` filters when given.
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    status: Option<Status>,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Invite>> {
    let now = Utc::now();
    let mut q = invites::table.filter(invites::org_id.eq(org_id)).into_boxed();
    match status {
        Some(Status::Accepted) => q = q.filter(invites::accepted_at.is_not_null()),
        Some(Status::Revoked) => {
            q = q.filter(invites::accepted_at.is_null()).filter(invites::revoked_at.is_not_null());
        }
        Some(Status::Expired) => {
            q = q
                .filter(invites::accepted_at.is_null())
                .filter(invites::revoked_at.is_null())
                .filter(invites::expires_at.le(now));
        }
        Some(Status::Pending) => {
            q = q
                .filter(invites::accepted_at.is_null())
                .filter(invites::revoked_at.is_null())
                .filter(invites::expires_at.gt(now));
        }
        None => {}
    }
    if let Some(before) = before {
        q = q.filter(invites::id.lt(before));
    }
    Ok(q.order(invites::id.desc()).limit(limit).select(Invite::as_select()).load(conn).await?)
}

pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<Invite>> {
    Ok(invites::table
        .filter(invites::org_id.eq(org_id))
        .filter(invites::id.eq(id))
        .select(Invite::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The invite a token names, across all organizations (the token is the credential).
pub async fn find_by_hash(conn: &mut AsyncPgConnection, token_hash: &[u8]) -> Result<Option<Invite>> {
    Ok(invites::table
        .filter(invites::token_hash.eq(token_hash))
        .select(Invite::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// [`find_by_hash`], the row locked until the transaction ends (two acceptances at once: one
/// wins, the other sees it accepted).
pub async fn find_by_hash_for_update(conn: &mut AsyncPgConnection, token_hash: &[u8]) -> Result<Option<Invite>> {
    Ok(invites::table
        .filter(invites::token_hash.eq(token_hash))
        .select(Invite::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?)
}

/// Revokes an invite not yet accepted nor revoked; `false` otherwise (or when there is none).
pub async fn revoke(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<bool> {
    let n = diesel::update(
        invites::table
            .filter(invites::org_id.eq(org_id))
            .filter(invites::id.eq(id))
            .filter(invites::accepted_at.is_null())
            .filter(invites::revoked_at.is_null()),
    )
    .set(invites::revoked_at.eq(Utc::now()))
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Revokes every invite of `org_id` to `email_normalized` not yet accepted nor revoked; returns
/// their ids (a new invite to the address replaces them).
pub async fn revoke_pending_to(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    email_normalized: &str,
) -> Result<Vec<Uuid>> {
    Ok(diesel::update(
        invites::table
            .filter(invites::org_id.eq(org_id))
            .filter(invites::email_normalized.eq(email_normalized))
            .filter(invites::accepted_at.is_null())
            .filter(invites::revoked_at.is_null()),
    )
    .set(invites::revoked_at.eq(Utc::now()))
    .returning(invites::id)
    .get_results(conn)
    .await?)
}

/// Marks an invite accepted by `user_id`; `false` when it was already accepted or revoked.
pub async fn mark_accepted(conn: &mut AsyncPgConnection, id: Uuid, user_id: Uuid) -> Result<bool> {
    let n = diesel::update(
        invites::table
            .filter(invites::id.eq(id))
            .filter(invites::accepted_at.is_null())
            .filter(invites::revoked_at.is_null()),
    )
    .set((invites::accepted_at.eq(Utc::now()), invites::accepted_by.eq(user_id)))
    .execute(conn)
    .await?;
    Ok(n == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invite(expires_in: i64) -> Invite {
        let now = Utc::now();
        Invite {
            id: Uuid::now_v7(),
            org_id: Uuid::now_v7(),
            email: "a@b.co".into(),
            email_normalized: "a@b.co".into(),
            role: "member".into(),
            team_ids: Vec::new(),
            token_hash: vec![0; 32],
            invited_by: None,
            created_at: now,
            expires_at: now + chrono::Duration::seconds(expires_in),
            accepted_at: None,
            accepted_by: None,
            revoked_at: None,
        }
    }

    #[test]
    fn status_from_columns() {
        let now = Utc::now();
        assert_eq!(invite(60).status(now), Status::Pending);
        assert_eq!(invite(-60).status(now), Status::Expired);
        let mut i = invite(-60);
        i.revoked_at = Some(now);
        assert_eq!(i.status(now), Status::Revoked);
        i.accepted_at = Some(now);
        assert_eq!(i.status(now), Status::Accepted);
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        assert_eq!(Status::parse("open"), None);
    }
}
