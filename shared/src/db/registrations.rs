//! Sign-ups waiting for e-mail confirmation, and the outbox of mail to send.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::{email_outbox, pending_registrations};
use crate::error::Result;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = pending_registrations)]
pub struct Pending {
    pub id: Uuid,
    pub email: String,
    pub email_normalized: String,
    pub name: String,
    pub org_name: String,
    pub password_hash: String,
    pub token_hash: Vec<u8>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

pub async fn insert(conn: &mut AsyncPgConnection, p: &Pending) -> Result<()> {
    diesel::insert_into(pending_registrations::table).values(p).execute(conn).await?;
    Ok(())
}

/// The live (not completed, not expired) sign-up of a token digest.
pub async fn find_live(conn: &mut AsyncPgConnection, token_hash: &[u8]) -> Result<Option<Pending>> {
    Ok(pending_registrations::table
        .filter(pending_registrations::token_hash.eq(token_hash))
        .filter(pending_registrations::completed_at.is_null())
        .filter(pending_registrations::expires_at.gt(Utc::now()))
        .select(Pending::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// [`find_live`], locked for completion.
pub async fn find_live_for_update(conn: &mut AsyncPgConnection, token_hash: &[u8]) -> Result<Option<Pending>> {
    Ok(pending_registrations::table
        .filter(pending_registrations::token_hash.eq(token_hash))
        .filter(pending_registrations::completed_at.is_null())
        .filter(pending_registrations::expires_at.gt(Utc::now()))
        .select(Pending::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()?)
}

pub async fn complete(conn: &mut AsyncPgConnection, id: Uuid) -> Result<()> {
    diesel::update(pending_registrations::table.filter(pending_registrations::id.eq(id)))
        .set(pending_registrations::completed_at.eq(Utc::now()))
        .execute(conn)
        .await?;
    Ok(())
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = email_outbox)]
pub struct Mail {
    pub id: Uuid,
    pub to_address: String,
    pub kind: String,
    pub subject: String,
    pub body: String,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
}

pub async fn enqueue(conn: &mut AsyncPgConnection, mail: &Mail) -> Result<()> {
    diesel::insert_into(email_outbox::table).values(mail).execute(conn).await?;
    Ok(())
}

/// Claims up to `limit` messages due for delivery: each is leased to this relay until `lease`
/// from now (another relay takes it only after that), in one short transaction, so no database
/// connection is held while mail is sent. Returns each with its attempts so far.
pub async fn claim_due(conn: &mut AsyncPgConnection, limit: i64, lease: chrono::Duration) -> Result<Vec<(Mail, i32)>> {
    use diesel_async::AsyncConnection;
    conn.transaction(async |conn| {
        let rows: Vec<(Mail, i32)> = email_outbox::table
            .filter(email_outbox::sent_at.is_null())
            .filter(email_outbox::failed_at.is_null())
            .filter(email_outbox::next_attempt_at.le(Utc::now()))
            .order(email_outbox::next_attempt_at.asc())
            .limit(limit)
            .select((Mail::as_select(), email_outbox::attempts))
            .for_update()
            .skip_locked()
            .load(conn)
            .await?;
        let ids: Vec<Uuid> = rows.iter().map(|(m, _)| m.id).collect();
        if !ids.is_empty() {
            diesel::update(email_outbox::table.filter(email_outbox::id.eq_any(&ids)))
                .set(email_outbox::next_attempt_at.eq(Utc::now() + lease))
                .execute(conn)
                .await?;
        }
        Ok::<_, crate::Error>(rows)
    })
    .await
}

pub async fn mark_sent(conn: &mut AsyncPgConnection, id: Uuid) -> Result<()> {
    diesel::update(email_outbox::table.filter(email_outbox::id.eq(id)))
        .set((
            email_outbox::sent_at.eq(Utc::now()),
            email_outbox::attempts.eq(email_outbox::attempts + 1),
            email_outbox::last_error.eq(None::<String>),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// Records a failed attempt: retried at `next` or, when `give_up`, never again.
pub async fn mark_attempt_failed(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    error: &str,
    next: DateTime<Utc>,
    give_up: bool,
) -> Result<()> {
    let failed_at = give_up.then(Utc::now);
    diesel::update(email_outbox::table.filter(email_outbox::id.eq(id)))
        .set((
            email_outbox::attempts.eq(email_outbox::attempts + 1),
            email_outbox::next_attempt_at.eq(next),
            email_outbox::last_error.eq(error),
            email_outbox::failed_at.eq(failed_at),
        ))
        .execute(conn)
        .await?;
    Ok(())
}
