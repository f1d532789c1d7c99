//! The events outbox: events are written once (a unique dedupe key per organization) and
//! delivered later.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::schema::events;
use crate::error::Result;
use crate::limits::events::NewEvent;

#[derive(Debug, Clone, Queryable, Selectable, Serialize)]
#[diesel(table_name = events)]
pub struct Event {
    pub id: Uuid,
    pub org_id: Uuid,
    pub event_type: String,
    pub dedupe_key: String,
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// Writes the events not written before; returns how many were new.
pub async fn insert_new(conn: &mut AsyncPgConnection, batch: &[NewEvent]) -> Result<usize> {
    if batch.is_empty() {
        return Ok(0);
    }
    let rows: Vec<_> = batch
        .iter()
        .map(|e| {
            (
                events::id.eq(e.id),
                events::org_id.eq(e.org_id),
                events::event_type.eq(e.event_type),
                events::dedupe_key.eq(&e.dedupe_key),
                events::payload.eq(&e.payload),
                events::created_at.eq(e.created_at),
            )
        })
        .collect();
    Ok(diesel::insert_into(events::table)
        .values(rows)
        .on_conflict((events::org_id, events::dedupe_key))
        .do_nothing()
        .execute(conn)
        .await?)
}

/// An organization's events, newest first; `type_prefix` filters (`budget.`).
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    type_prefix: Option<&str>,
    before: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<Event>> {
    let mut q = events::table.filter(events::org_id.eq(org_id)).into_boxed();
    if let Some(p) = type_prefix {
        let escaped = p.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
        q = q.filter(events::event_type.like(format!("{escaped}%")));
    }
    if let Some((at, id)) = before {
        q = q.filter(events::created_at.lt(at).or(events::created_at.eq(at).and(events::id.lt(id))));
    }
    Ok(q.order((events::created_at.desc(), events::id.desc()))
        .limit(limit)
        .select(Event::as_select())
        .load(conn)
        .await?)
}

/// Writes one event (once per its dedupe key), in the caller's transaction.
pub async fn emit(conn: &mut AsyncPgConnection, event: NewEvent) -> Result<()> {
    insert_new(conn, std::slice::from_ref(&event)).await.map(|_| ())
}

/// `api_key.revoked` for each of `ids` (keys of `org_id` the caller just revoked), in its
/// transaction. `reason`: `revoked`, `member_removed`, `service_account_revoked`, `team_deleted`.
pub async fn keys_revoked(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    ids: &[Uuid],
    actor: Option<Uuid>,
    reason: &str,
) -> Result<()> {
    use super::schema::api_keys;
    use crate::webhooks::payloads::{api_key_revoked, KeyFacts};
    if ids.is_empty() {
        return Ok(());
    }
    // A playground comparison's key is never announced (`docs/playground.md`).
    let keys: Vec<(Uuid, String, String, Option<Uuid>)> = api_keys::table
        .filter(api_keys::org_id.eq(org_id))
        .filter(api_keys::id.eq_any(ids))
        .filter(api_keys::kind.eq(crate::keys::KIND_STANDARD))
        .select((api_keys::id, api_keys::name, api_keys::key_prefix, api_keys::team_id))
        .load(conn)
        .await?;
    let batch: Vec<NewEvent> = keys
        .iter()
        .map(|(id, name, prefix, team_id)| {
            api_key_revoked(org_id, &KeyFacts { id: *id, name, prefix, team_id: *team_id }, actor, reason)
        })
        .collect();
    insert_new(conn, &batch).await.map(|_| ())
}
