//! The outbox handed to the webhook relay: each event becomes one delivery per enabled endpoint
//! of its organization subscribed to its type, and one e-mail per owner or admin who chose its
//! category, all in one transaction with the event marked handed over. An endpoint gets the
//! events that happened after it was registered. One relay at a time does
//! this (an advisory lock), so the per-endpoint counts below are exact:
//! - an endpoint with [`MAX_QUEUED`] deliveries pending gets further ones as `dropped` (kept in
//!   its history, retryable by hand, never attempted on their own);
//! - past [`coalesce::COALESCE_AFTER`] `policy.blocked` deliveries to an endpoint in a minute, the
//!   rest of the minute's blocks are counted into one summary delivery (`webhooks::coalesce`).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::{json, Value};
use uuid::Uuid;

use super::schema::{email_outbox, events, org_memberships, users, webhook_deliveries, webhook_endpoints};
use crate::error::Result;
use crate::webhooks::{alert_category, coalesce};

/// Deliveries an endpoint may have pending before new ones are dropped.
pub const MAX_QUEUED: i64 = 10_000;
/// `pg_try_advisory_xact_lock` key of the fan-out ("gwwhfan").
const FAN_OUT_LOCK: i64 = 0x0067_7777_6866_616e;
/// Rows per insert statement (well under Postgres's bind-parameter limit).
const INSERT_CHUNK: usize = 1000;

/// What one hand-over did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FanOut {
    pub events: usize,
    pub deliveries: usize,
    /// Blocks counted into summaries instead of a delivery each.
    pub coalesced: usize,
    pub dropped: usize,
    pub mails: usize,
}

type OutboxRow = (Uuid, Uuid, String, Value, DateTime<Utc>);

/// Hands up to `limit` outbox events over, as of `now` (the relay's clock). Nothing when another
/// relay is doing it.
pub async fn fan_out(conn: &mut AsyncPgConnection, now: DateTime<Utc>, limit: i64) -> Result<FanOut> {
    conn.transaction(async |conn| {
        if !super::try_leader_lock(conn, FAN_OUT_LOCK).await? {
            return Ok(FanOut::default());
        }
        let batch: Vec<OutboxRow> = events::table
            .filter(events::delivered_at.is_null())
            .order(events::created_at.asc())
            .limit(limit)
            .select((events::id, events::org_id, events::event_type, events::payload, events::created_at))
            .for_update()
            .skip_locked()
            .load(conn)
            .await?;
        if batch.is_empty() {
            return Ok(FanOut::default());
        }
        let orgs: Vec<Uuid> = batch.iter().map(|e| e.1).collect::<HashSet<_>>().into_iter().collect();
        let mut report = deliveries(conn, &batch, &orgs, now).await?;
        report.mails = mails(conn, &batch, &orgs, now).await?;
        let ids: Vec<Uuid> = batch.iter().map(|b| b.0).collect();
        diesel::update(events::table.filter(events::id.eq_any(&ids)))
            .set(events::delivered_at.eq(now))
            .execute(conn)
            .await?;
        report.events = batch.len();
        Ok::<_, crate::Error>(report)
    })
    .await
}

struct Endpoint {
    id: Uuid,
    org_id: Uuid,
    types: Vec<String>,
    created_at: DateTime<Utc>,
}

async fn deliveries(
    conn: &mut AsyncPgConnection,
    batch: &[OutboxRow],
    orgs: &[Uuid],
    now: DateTime<Utc>,
) -> Result<FanOut> {
    let endpoints: Vec<Endpoint> = webhook_endpoints::table
        .filter(webhook_endpoints::org_id.eq_any(orgs))
        .filter(webhook_endpoints::enabled.eq(true))
        .select((
            webhook_endpoints::id,
            webhook_endpoints::org_id,
            webhook_endpoints::event_types,
            webhook_endpoints::created_at,
        ))
        .load::<(Uuid, Uuid, Vec<String>, DateTime<Utc>)>(conn)
        .await?
        .into_iter()
        .map(|(id, org_id, types, created_at)| Endpoint { id, org_id, types, created_at })
        .collect();
    let mut report = FanOut::default();
    if endpoints.is_empty() {
        return Ok(report);
    }
    let ids: Vec<Uuid> = endpoints.iter().map(|e| e.id).collect();
    let mut queued: HashMap<Uuid, i64> = webhook_deliveries::table
        .filter(webhook_deliveries::endpoint_id.eq_any(&ids))
        .filter(webhook_deliveries::status.eq("pending"))
        .group_by(webhook_deliveries::endpoint_id)
        .select((webhook_deliveries::endpoint_id, diesel::dsl::count_star()))
        .load::<(Uuid, i64)>(conn)
        .await?
        .into_iter()
        .collect();
    let window = coalesce::window(now);
    let mut blocks_this_minute: HashMap<Uuid, i64> = webhook_deliveries::table
        .filter(webhook_deliveries::endpoint_id.eq_any(&ids))
        .filter(webhook_deliveries::event_type.eq("policy.blocked"))
        .filter(webhook_deliveries::coalesce_key.is_null())
        .filter(webhook_deliveries::created_at.ge(window.0))
        .group_by(webhook_deliveries::endpoint_id)
        .select((webhook_deliveries::endpoint_id, diesel::dsl::count_star()))
        .load::<(Uuid, i64)>(conn)
        .await?
        .into_iter()
        .collect();

    let mut rows = Vec::new();
    let mut summaries: HashMap<Uuid, (Uuid, Vec<&Value>)> = HashMap::new();
    for (event_id, org_id, event_type, payload, created_at) in batch {
        // An endpoint gets the events that happened once it was registered.
        let subscribed =
            |e: &&Endpoint| e.org_id == *org_id && e.types.contains(event_type) && e.created_at <= *created_at;
        for ep in endpoints.iter().filter(subscribed) {
            if event_type == "policy.blocked" {
                let n = blocks_this_minute.entry(ep.id).or_default();
                if *n >= coalesce::COALESCE_AFTER {
                    summaries.entry(ep.id).or_insert_with(|| (*org_id, Vec::new())).1.push(payload);
                    report.coalesced += 1;
                    continue;
                }
                *n += 1;
            }
            let q = queued.entry(ep.id).or_default();
            let status = if *q >= MAX_QUEUED {
                report.dropped += 1;
                "dropped"
            } else {
                *q += 1;
                report.deliveries += 1;
                "pending"
            };
            let body = json!({"type": event_type, "timestamp": created_at, "data": payload});
            rows.push((
                webhook_deliveries::id.eq(crate::ids::new_id()),
                webhook_deliveries::org_id.eq(*org_id),
                webhook_deliveries::endpoint_id.eq(ep.id),
                webhook_deliveries::event_id.eq(*event_id),
                webhook_deliveries::event_type.eq(event_type.clone()),
                webhook_deliveries::body.eq(body),
                webhook_deliveries::status.eq(status),
                webhook_deliveries::next_attempt_at.eq(now),
                webhook_deliveries::created_at.eq(now),
            ));
        }
    }
    for chunk in rows.chunks(INSERT_CHUNK) {
        diesel::insert_into(webhook_deliveries::table).values(chunk).on_conflict_do_nothing().execute(conn).await?;
    }
    for (endpoint_id, (org_id, blocks)) in summaries {
        summarize(conn, endpoint_id, org_id, window, &blocks, now).await?;
        report.deliveries += 1;
    }
    Ok(report)
}

/// Counts `blocks` into the endpoint's summary of the minute (made if new, due when the minute
/// ends). A summary already being attempted is left alone and the blocks go into a summary of
/// their own, due at once: none is lost.
async fn summarize(
    conn: &mut AsyncPgConnection,
    endpoint_id: Uuid,
    org_id: Uuid,
    window: (DateTime<Utc>, DateTime<Utc>),
    blocks: &[&Value],
    now: DateTime<Utc>,
) -> Result<()> {
    let key = coalesce::key(window.0);
    let open: Option<(Uuid, Value)> = webhook_deliveries::table
        .filter(webhook_deliveries::endpoint_id.eq(endpoint_id))
        .filter(webhook_deliveries::coalesce_key.eq(&key))
        .filter(webhook_deliveries::attempts.eq(0))
        .filter(webhook_deliveries::claimed_until.is_null())
        .select((webhook_deliveries::id, webhook_deliveries::body))
        .for_update()
        .first(conn)
        .await
        .optional()?;
    if let Some((id, mut body)) = open {
        for b in blocks {
            coalesce::add(&mut body["data"], b);
        }
        diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq(id)))
            .set((webhook_deliveries::body.eq(body), webhook_deliveries::updated_at.eq(now)))
            .execute(conn)
            .await?;
        return Ok(());
    }
    let taken = webhook_deliveries::table
        .filter(webhook_deliveries::endpoint_id.eq(endpoint_id))
        .filter(webhook_deliveries::coalesce_key.eq(&key))
        .count()
        .get_result::<i64>(conn)
        .await?
        > 0;
    let mut data = coalesce::empty(org_id, window);
    for b in blocks {
        coalesce::add(&mut data, b);
    }
    // A late part of a minute whose summary is already out: a summary of its own, keyed apart.
    let (key, due) = if taken { (format!("{key}:{}", crate::ids::new_id()), now) } else { (key, window.1) };
    let event_id = crate::ids::new_id();
    let body = json!({"type": "policy.blocked", "timestamp": now, "data": data});
    diesel::insert_into(webhook_deliveries::table)
        .values((
            webhook_deliveries::id.eq(crate::ids::new_id()),
            webhook_deliveries::org_id.eq(org_id),
            webhook_deliveries::endpoint_id.eq(endpoint_id),
            webhook_deliveries::event_id.eq(event_id),
            webhook_deliveries::event_type.eq("policy.blocked"),
            webhook_deliveries::body.eq(body),
            webhook_deliveries::next_attempt_at.eq(due),
            webhook_deliveries::created_at.eq(now),
            webhook_deliveries::coalesce_key.eq(key),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// Queues the alert e-mails of the batch: each event of a category (`budget`, `security`) to
/// every owner and admin of its organization who chose that category.
async fn mails(conn: &mut AsyncPgConnection, batch: &[OutboxRow], orgs: &[Uuid], now: DateTime<Utc>) -> Result<usize> {
    if !batch.iter().any(|e| alert_category(&e.2).is_some()) {
        return Ok(0);
    }
    let people: Vec<(Uuid, String, Vec<String>)> = org_memberships::table
        .inner_join(users::table)
        .filter(org_memberships::org_id.eq_any(orgs))
        .filter(org_memberships::role.eq_any(["owner", "admin"]))
        .filter(users::kind.eq("person"))
        .filter(org_memberships::alert_emails.ne(Vec::<String>::new()))
        .select((org_memberships::org_id, users::email, org_memberships::alert_emails))
        .load(conn)
        .await?;
    let mut out = Vec::new();
    for (_, org_id, event_type, payload, _) in batch {
        let Some(category) = alert_category(event_type) else { continue };
        for (_, email, _) in people.iter().filter(|(o, _, c)| o == org_id && c.iter().any(|c| c == category)) {
            out.push((
                email_outbox::id.eq(crate::ids::new_id()),
                email_outbox::to_address.eq(email.clone()),
                email_outbox::kind.eq("alert"),
                email_outbox::subject.eq(format!("gw alert: {event_type}")),
                email_outbox::body.eq(crate::webhooks::alert_text(event_type, payload)),
                email_outbox::created_at.eq(now),
            ));
        }
    }
    for chunk in out.chunks(INSERT_CHUNK) {
        diesel::insert_into(email_outbox::table).values(chunk).execute(conn).await?;
    }
    Ok(out.len())
}
