//! Webhook deliveries: claimed by the relay with a lease of their own (`claimed_until`; no
//! connection is held while a receiver answers), every attempt recorded, listed with their
//! attempts, retried by hand, and pruned after the retention. Every query that serves an
//! organization takes its `org_id`. The hand-over from the outbox is `webhook_fanout`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::{json, Value};
use uuid::Uuid;

use super::schema::{webhook_attempts, webhook_deliveries};
use crate::error::Result;

/// Automatic attempts a delivery gets in all (the first one included).
pub const MAX_ATTEMPTS: i32 = 3;

/// How long after its `n`th failed automatic attempt a delivery is due again: 5 minutes after
/// the first, 10 after the second (exponential backoff).
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
    /// Every attempt, automatic or by hand.
    pub attempts: i32,
    pub auto_attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub claimed_until: Option<DateTime<Utc>>,
    pub coalesce_key: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = webhook_attempts)]
pub struct Attempt {
    pub delivery_id: Uuid,
    pub attempted_at: DateTime<Utc>,
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    pub error: Option<String>,
    pub response_body: Option<String>,
    pub manual: bool,
}

/// One attempt as recorded.
pub struct NewAttempt<'a> {
    pub attempted_at: DateTime<Utc>,
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    pub error: Option<&'a str>,
    pub response_body: Option<&'a str>,
    pub manual: bool,
}

/// Claims up to `limit` deliveries due by `now`, each leased until `now + lease`.
pub async fn claim_due(
    conn: &mut AsyncPgConnection,
    now: DateTime<Utc>,
    limit: i64,
    lease: chrono::Duration,
) -> Result<Vec<Delivery>> {
    conn.transaction(async |conn| {
        let ids: Vec<Uuid> = webhook_deliveries::table
            .filter(webhook_deliveries::status.eq("pending"))
            .filter(webhook_deliveries::next_attempt_at.le(now))
            .filter(webhook_deliveries::claimed_until.is_null().or(webhook_deliveries::claimed_until.lt(now)))
            .order(webhook_deliveries::next_attempt_at.asc())
            .limit(limit)
            .select(webhook_deliveries::id)
            .for_update()
            .skip_locked()
            .load(conn)
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok::<_, crate::Error>(
            diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq_any(&ids)))
                .set(webhook_deliveries::claimed_until.eq(now + lease))
                .returning(Delivery::as_returning())
                .get_results(conn)
                .await?,
        )
    })
    .await
}

/// What claiming one delivery by hand found.
pub enum Claim {
    Claimed(Box<Delivery>),
    /// An attempt at it is under way.
    InFlight,
    Missing,
}

/// Claims one delivery of `org_id` for an attempt now, whatever its status, unless an attempt at
/// it is under way.
pub async fn claim_one(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    now: DateTime<Utc>,
    lease: chrono::Duration,
) -> Result<Claim> {
    let claimed: Option<Delivery> = diesel::update(
        webhook_deliveries::table
            .filter(webhook_deliveries::org_id.eq(org_id))
            .filter(webhook_deliveries::id.eq(id))
            .filter(webhook_deliveries::claimed_until.is_null().or(webhook_deliveries::claimed_until.lt(now))),
    )
    .set(webhook_deliveries::claimed_until.eq(now + lease))
    .returning(Delivery::as_returning())
    .get_result(conn)
    .await
    .optional()?;
    if let Some(d) = claimed {
        return Ok(Claim::Claimed(Box::new(d)));
    }
    let exists = webhook_deliveries::table
        .filter(webhook_deliveries::org_id.eq(org_id))
        .filter(webhook_deliveries::id.eq(id))
        .count()
        .get_result::<i64>(conn)
        .await?
        > 0;
    Ok(if exists { Claim::InFlight } else { Claim::Missing })
}

/// Where an attempt leaves a delivery: `(status, auto_attempts, next_attempt_at)`. An automatic
/// attempt that fails is retried on the schedule until the last, then the delivery is `failed`.
/// One by hand that fails leaves a pending delivery's schedule as it was; any other is `failed`.
pub fn outcome(d: &Delivery, a: &NewAttempt<'_>, ok: bool) -> (&'static str, i32, DateTime<Utc>) {
    let auto = d.auto_attempts + i32::from(!a.manual);
    if ok {
        ("succeeded", auto, d.next_attempt_at)
    } else if a.manual {
        if d.status == "pending" {
            ("pending", auto, d.next_attempt_at)
        } else {
            ("failed", auto, d.next_attempt_at)
        }
    } else if auto >= MAX_ATTEMPTS {
        ("failed", auto, a.attempted_at)
    } else {
        ("pending", auto, a.attempted_at + retry_after(auto))
    }
}

/// Records an attempt and where it leaves the delivery, releasing the claim.
pub async fn record(conn: &mut AsyncPgConnection, d: &Delivery, a: &NewAttempt<'_>, ok: bool) -> Result<Delivery> {
    let (status, auto, next) = outcome(d, a, ok);
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
                webhook_attempts::manual.eq(a.manual),
            ))
            .execute(conn)
            .await?;
        Ok::<_, crate::Error>(
            diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq(d.id)))
                .set((
                    webhook_deliveries::status.eq(status),
                    webhook_deliveries::attempts.eq(webhook_deliveries::attempts + 1),
                    webhook_deliveries::auto_attempts.eq(auto),
                    webhook_deliveries::next_attempt_at.eq(next),
                    webhook_deliveries::claimed_until.eq(None::<DateTime<Utc>>),
                    webhook_deliveries::updated_at.eq(a.attempted_at),
                ))
                .returning(Delivery::as_returning())
                .get_result(conn)
                .await?,
        )
    })
    .await
}

/// Gives a claimed delivery back untried (its endpoint had no free slot).
pub async fn release(conn: &mut AsyncPgConnection, id: Uuid) -> Result<()> {
    diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq(id)))
        .set(webhook_deliveries::claimed_until.eq(None::<DateTime<Utc>>))
        .execute(conn)
        .await?;
    Ok(())
}

/// A delivery made directly (a test event for one endpoint), due at `now`.
pub async fn insert_direct(
    conn: &mut AsyncPgConnection,
    endpoint_id: Uuid,
    event: &crate::limits::events::NewEvent,
    now: DateTime<Utc>,
) -> Result<Delivery> {
    let body = json!({"type": event.event_type, "timestamp": event.created_at, "data": event.payload});
    Ok(diesel::insert_into(webhook_deliveries::table)
        .values((
            webhook_deliveries::id.eq(crate::ids::new_id()),
            webhook_deliveries::org_id.eq(event.org_id),
            webhook_deliveries::endpoint_id.eq(endpoint_id),
            webhook_deliveries::event_id.eq(event.id),
            webhook_deliveries::event_type.eq(event.event_type),
            webhook_deliveries::body.eq(body),
            webhook_deliveries::next_attempt_at.eq(now),
            webhook_deliveries::created_at.eq(now),
        ))
        .returning(Delivery::as_returning())
        .get_result(conn)
        .await?)
}

/// What a history page is narrowed to.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub endpoint_id: Option<Uuid>,
    pub event_type: Option<String>,
    pub status: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

/// A page of an organization's deliveries, newest first (ids are UUIDv7).
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    f: &Filter,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Delivery>> {
    let mut q = webhook_deliveries::table.filter(webhook_deliveries::org_id.eq(org_id)).into_boxed();
    if let Some(e) = f.endpoint_id {
        q = q.filter(webhook_deliveries::endpoint_id.eq(e));
    }
    if let Some(t) = &f.event_type {
        q = q.filter(webhook_deliveries::event_type.eq(t.clone()));
    }
    if let Some(s) = &f.status {
        q = q.filter(webhook_deliveries::status.eq(s.clone()));
    }
    if let Some(t) = f.since {
        q = q.filter(webhook_deliveries::created_at.ge(t));
    }
    if let Some(t) = f.until {
        q = q.filter(webhook_deliveries::created_at.lt(t));
    }
    if let Some(b) = before {
        q = q.filter(webhook_deliveries::id.lt(b));
    }
    Ok(q.order(webhook_deliveries::id.desc()).limit(limit).select(Delivery::as_select()).load(conn).await?)
}

/// Every attempt at `ids` (deliveries of `org_id`), oldest first.
pub async fn attempts_of(conn: &mut AsyncPgConnection, org_id: Uuid, ids: &[Uuid]) -> Result<Vec<Attempt>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(webhook_attempts::table
        .filter(webhook_attempts::org_id.eq(org_id))
        .filter(webhook_attempts::delivery_id.eq_any(ids))
        .order(webhook_attempts::id.asc())
        .select(Attempt::as_select())
        .load(conn)
        .await?)
}

/// Deletes up to `limit` finished deliveries (and their attempts) made before `before`; returns
/// how many. Pending ones stay whatever their age.
pub async fn prune(conn: &mut AsyncPgConnection, before: DateTime<Utc>, limit: i64) -> Result<usize> {
    let old: Vec<Uuid> = webhook_deliveries::table
        .filter(webhook_deliveries::status.ne("pending"))
        .filter(webhook_deliveries::created_at.lt(before))
        .select(webhook_deliveries::id)
        .limit(limit)
        .load(conn)
        .await?;
    if old.is_empty() {
        return Ok(0);
    }
    Ok(diesel::delete(webhook_deliveries::table.filter(webhook_deliveries::id.eq_any(&old))).execute(conn).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(status: &str, auto: i32) -> Delivery {
        let at = Utc::now();
        Delivery {
            id: Uuid::nil(),
            org_id: Uuid::nil(),
            endpoint_id: Uuid::nil(),
            event_id: Uuid::nil(),
            event_type: "webhook.test".into(),
            body: json!({}),
            status: status.into(),
            attempts: auto,
            auto_attempts: auto,
            next_attempt_at: at,
            claimed_until: None,
            coalesce_key: None,
            created_at: at,
            updated_at: at,
        }
    }

    fn attempt(at: DateTime<Utc>, manual: bool) -> NewAttempt<'static> {
        NewAttempt { attempted_at: at, status_code: Some(500), latency_ms: 1, error: None, response_body: None, manual }
    }

    #[test]
    fn retries_back_off_exponentially() {
        assert_eq!(retry_after(1), chrono::Duration::minutes(5));
        assert_eq!(retry_after(2), chrono::Duration::minutes(10));
    }

    #[test]
    fn three_automatic_failures_fail_a_delivery_on_the_schedule() {
        let t0: DateTime<Utc> = "2026-11-27T19:00:00Z".parse().unwrap();
        let d = delivery("pending", 0);
        assert_eq!(outcome(&d, &attempt(t0, false), false), ("pending", 1, t0 + chrono::Duration::minutes(5)));
        let d = delivery("pending", 1);
        let t1 = t0 + chrono::Duration::minutes(5);
        assert_eq!(outcome(&d, &attempt(t1, false), false), ("pending", 2, t1 + chrono::Duration::minutes(10)));
        let d = delivery("pending", 2);
        let t2 = t1 + chrono::Duration::minutes(10);
        assert_eq!(outcome(&d, &attempt(t2, false), false), ("failed", 3, t2));
        assert_eq!(outcome(&d, &attempt(t2, false), true).0, "succeeded");
    }

    #[test]
    fn an_attempt_by_hand_never_moves_the_schedule() {
        let t: DateTime<Utc> = "2026-11-27T19:00:00Z".parse().unwrap();
        let pending = delivery("pending", 1);
        let (status, auto, next) = outcome(&pending, &attempt(t, true), false);
        assert_eq!((status, auto, next), ("pending", 1, pending.next_attempt_at));
        assert_eq!(outcome(&delivery("failed", 3), &attempt(t, true), false).0, "failed");
        assert_eq!(outcome(&delivery("dropped", 0), &attempt(t, true), false).0, "failed");
        let (status, auto, _) = outcome(&delivery("failed", 3), &attempt(t, true), true);
        assert_eq!((status, auto), ("succeeded", 3));
    }
}
