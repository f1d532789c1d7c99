//! Seats: the people an organization's plan lets it have (`[plans.<plan>] seats`). Members take
//! one each (service accounts none), and so do pending invites, so an invite cannot be accepted
//! into a seat someone else took meanwhile.

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz, Uuid as SqlUuid};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, QueryableByName)]
pub struct Taken {
    /// People who are members (service accounts excluded).
    #[diesel(sql_type = BigInt)]
    pub members: i64,
    /// Invites neither accepted, revoked nor expired at `now`.
    #[diesel(sql_type = BigInt)]
    pub pending_invites: i64,
}

/// The seats taken in `org_id`, with the organization's row locked until the transaction ends,
/// so two invites or sign-ins at once cannot both take the last seat. A pending invite to
/// `except_invitee` (a normalized address about to be re-invited) is not counted.
pub async fn taken_locked(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    now: DateTime<Utc>,
    except_invitee: Option<&str>,
) -> Result<Taken> {
    Ok(diesel::sql_query(
        "WITH locked AS (SELECT id FROM organizations WHERE id = $1 FOR UPDATE) \
         SELECT (SELECT count(*) FROM org_memberships m JOIN users u ON u.id = m.user_id \
                 WHERE m.org_id = (SELECT id FROM locked) AND u.kind <> 'service') AS members, \
                (SELECT count(*) FROM invites WHERE org_id = (SELECT id FROM locked) AND accepted_at IS NULL \
                 AND revoked_at IS NULL AND expires_at > $2 \
                 AND ($3::text IS NULL OR email_normalized <> $3)) AS pending_invites",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<Timestamptz, _>(now)
    .bind::<Nullable<Text>, _>(except_invitee)
    .get_result(conn)
    .await?)
}
