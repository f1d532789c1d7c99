//! Webhook deliveries: the events outbox fanned out to subscribed endpoints, claimed by the relay
//! with a lease (no connection is held while a receiver answers), and every attempt recorded.
//! Every query that serves an organization takes its `org_id`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::{json, Value};
use uuid::Uuid;

use super::schema::{events, webhook_attempts, webhook_deliveries, webhook_endpoints};
use crate::error::Result;

/// Attempts a delivery gets in all (the first one included).
pub const MAX_ATTEMPTS: i32 = 3;

/// How long after a failed attempt the next one is due: 5 minutes after the first, 10 after the
/// second (exponential).
pub fn retry_after(failed_attempts: i32) -> chrono::Duration {
    chrono::Duration::minutes(5 * (1_i64 << (failed_attempts.clamp(1, 10) - 1)))
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = webhook_deliveries)]
pub struct Delivery {
    pub id: Uuid,
    pub org_id: Uuid,
    pub endpoint_id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    pub body: Value,
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One attempt as recorded.
pub struct NewAttempt<'a> {
    pub attempted_at: DateTime<Utc>,
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    pub error: Option<&'a str>,
    pub response_body: Option<&'a str>,
}

/// Hands up to `limit` outbox events to the relay: one delivery per enabled endpoint of the
/// event's organization subscribed to its type (the body: the Standard Webhooks envelope), the
/// event marked handed over, all in one transaction. Returns how many events were handed over.
pub async fn fan_out(conn: &mut AsyncPgConnection, limit: i64) -> Result<usize> {
    conn.transaction(async |conn| {
        let batch: Vec<(Uuid, Uuid, String, Value, DateTime<Utc>)> = events::table
            .filter(events::delivered_at.is_null())
            .order(events::created_at.asc())
            .limit(limit)
            .select((events::id, events::org_id, events::event_type, events::payload, events::created_at))
            .for_update()
            .skip_locked()
            .load(conn)
            .await?;
        for (event_id, org_id, event_type, payload, created_at) in &batch {
            let endpoints: Vec<Uuid> = webhook_endpoints::table
                .filter(webhook_endpoints::org_id.eq(org_id))
                .filter(webhook_endpoints::enabled.eq(true))
                .filter(webhook_endpoints::event_types.contains(vec![event_type.clone()]))
                .select(webhook_endpoints::id)
                .load(conn)
                .await?;
            let body = json!({"type": event_type, "timestamp": created_at, "data": payload});
            let rows: Vec<_> = endpoints
                .iter()
                .map(|endpoint_id| {
                    (
                        webhook_deliveries::id.eq(crate::ids::new_id()),
                        webhook_deliveries::org_id.eq(org_id),
                        webhook_deliveries::endpoint_id.eq(endpoint_id),
                        webhook_deliveries::event_id.eq(event_id),
                        webhook_deliveries::event_type.eq(event_type),
                        webhook_deliveries::body.eq(&body),
                    )
                })
                .collect();
            if !rows.is_empty() {
                diesel::insert_into(webhook_deliveries::table)
                    .values(rows)
                    .on_conflict_do_nothing()
                    .execute(conn)
                    .await?;
            }
        }
        let ids: Vec<Uuid> = batch.iter().map(|b| b.0).collect();
        if !ids.is_empty() {
            diesel::update(events::table.filter(events::id.eq_any(&ids)))
                .set(events::delivered_at.eq(Utc::now()))
                .execute(conn)
                .await?;
        }
        Ok::<_, crate::Error>(batch.len())
    })
    .await
}

/// Claims up to `limit` due deliveries, leased until `lease` from now.
pub async fn claim_due(conn: &mut AsyncPgConnection, limit: i64, lease: chrono::Duration) -> Result<Vec<Delivery>> {
    conn.transaction(async |conn| {
        let rows: Vec<Delivery> = webhook_deliveries::table
            .filter(webhook_deliveries::status.eq("pending"))
            .filter(webhook_deliveries::next_attempt_at.le(Utc::now()))
            .order(webhook_deliveries::next_attempt_at.asc())
            .limit(limit)
            .select(Delivery::as_select())
            .for_update()
            .skip_locked()
            .load(conn)
            .await?;
        let ids: Vec<Uuid> = rows.iter().map(|d| d.id).collect();
        if !ids.is_empty() {
            diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq_any(&ids)))
                .set(webhook_deliveries::next_attempt_at.eq(Utc::now() + lease))
                .execute(conn)
                .await?;
        }
        Ok::<_, crate::Error>(rows)
    })
    .await
}

/// Records an attempt and its consequence: `succeeded`, due again later, or `failed` after the
/// last attempt.
pub async fn record(conn: &mut AsyncPgConnection, d: &Delivery, a: &NewAttempt<'_>, ok: bool) -> Result<()> {
    let attempts = d.attempts + 1;
    let (status, next) = if ok {
        ("succeeded", a.attempted_at)
    } else if attempts >= MAX_ATTEMPTS {
        ("failed", a.attempted_at)
    } else {
        ("pending", a.attempted_at + retry_after(attempts))
    };
    conn.transaction(async |conn| {
        diesel::insert_into(webhook_attempts::table)
            .values((
                webhook_attempts::delivery_id.eq(d.id),
                webhook_attempts::org_id.eq(d.org_id),
                webhook_attempts::attempted_at.eq(a.attempted_at),
                webhook_attempts::status_code.eq(a.status_code),
                webhook_attempts::latency_ms.eq(a.latency_ms),
                webhook_attempts::error.eq(a.error),
                webhook_attempts::response_body.eq(a.response_body),
            ))
            .execute(conn)
            .await?;
        diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq(d.id)))
            .set((
                webhook_deliveries::status.eq(status),
                webhook_deliveries::attempts.eq(attempts),
                webhook_deliveries::next_attempt_at.eq(next),
                webhook_deliveries::updated_at.eq(Utc::now()),
            ))
            .execute(conn)
            .await?;
        Ok::<_, crate::Error>(())
    })
    .await
}

/// Puts a claimed delivery back, due at once (its endpoint had no free slot).
pub async fn release(conn: &mut AsyncPgConnection, id: Uuid) -> Result<()> {
    diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq(id)))
        .set(webhook_deliveries::next_attempt_at.eq(Utc::now()))
        .execute(conn)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially() {
        assert_eq!(retry_after(1), chrono::Duration::minutes(5));
        assert_eq!(retry_after(2), chrono::Duration::minutes(10));
    }
}
