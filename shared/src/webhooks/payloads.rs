//! The outbox events that changes made through `/api/v1` and the admin's jobs cause, each shaped
//! as `docs/webhook-events.json` says. Callers write them with the change, in its transaction
//! ([`crate::db::events::insert_new`]). (Budget events are `crate::limits::events`; policy blocks
//! are the proxy's.)

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::limits::events::NewEvent;

/// An event of `org_id`, once per `dedupe_key`.
pub fn event(org_id: Uuid, event_type: &'static str, dedupe_key: String, mut payload: Value) -> NewEvent {
    let now = Utc::now();
    if let Some(p) = payload.as_object_mut() {
        p.insert("type".into(), json!(event_type));
        p.insert("organization_id".into(), json!(org_id));
        p.insert("occurred_at".into(), json!(now));
    }
    NewEvent { id: crate::ids::new_id(), org_id, event_type, dedupe_key, payload, created_at: now }
}

/// What the key events say about a key.
pub struct KeyFacts<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub prefix: &'a str,
    pub team_id: Option<Uuid>,
}

impl KeyFacts<'_> {
    fn json(&self, actor: Option<Uuid>) -> Value {
        json!({"api_key_id": self.id, "name": self.name, "prefix": self.prefix, "team_id": self.team_id,
               "actor_user_id": actor})
    }
}

pub fn api_key_created(org_id: Uuid, key: &KeyFacts<'_>, actor: Option<Uuid>) -> NewEvent {
    event(org_id, "api_key.created", format!("api_key.created:{}", key.id), key.json(actor))
}

/// Why a key was revoked: `revoked`, `member_removed`, `service_account_revoked`, `team_deleted`.
pub fn api_key_revoked(org_id: Uuid, key: &KeyFacts<'_>, actor: Option<Uuid>, reason: &str) -> NewEvent {
    let mut p = key.json(actor);
    p["reason"] = json!(reason);
    event(org_id, "api_key.revoked", format!("api_key.revoked:{}", key.id), p)
}

/// No one acted: `actor_user_id` is null.
pub fn api_key_expired(org_id: Uuid, key: &KeyFacts<'_>, at: DateTime<Utc>) -> NewEvent {
    let mut p = key.json(None);
    p["expires_at"] = json!(at);
    event(org_id, "api_key.expired", format!("api_key.expired:{}:{}", key.id, at.timestamp()), p)
}

/// What the provider-key events say about a key.
pub struct ProviderKeyFacts<'a> {
    pub id: Uuid,
    pub provider: &'a str,
    pub name: &'a str,
    pub version: i32,
}

pub fn provider_key_rotated(
    org_id: Uuid,
    key: &ProviderKeyFacts<'_>,
    actor: Option<Uuid>,
    previous_valid_until: Option<DateTime<Utc>>,
) -> NewEvent {
    let p = json!({"provider_key_id": key.id, "provider": key.provider, "name": key.name, "actor_user_id": actor,
                   "version": key.version, "previous_valid_until": previous_valid_until});
    event(org_id, "provider_key.rotated", format!("provider_key.rotated:{}:{}", key.id, key.version), p)
}

pub fn provider_key_revoked(org_id: Uuid, key: &ProviderKeyFacts<'_>, actor: Option<Uuid>) -> NewEvent {
    let p = json!({"provider_key_id": key.id, "provider": key.provider, "name": key.name, "actor_user_id": actor});
    event(org_id, "provider_key.revoked", format!("provider_key.revoked:{}", key.id), p)
}

/// Who joined or left.
pub struct MemberFacts<'a> {
    pub user_id: Uuid,
    pub email: &'a str,
    pub role: &'a str,
}

/// `via`: `invite`, `sso`, `signup`.
pub fn member_added(org_id: Uuid, m: &MemberFacts<'_>, actor: Option<Uuid>, via: &str) -> NewEvent {
    let p = json!({"user_id": m.user_id, "email": m.email, "role": m.role, "actor_user_id": actor, "via": via});
    let key = format!("member.added:{}:{}", m.user_id, crate::ids::new_id());
    event(org_id, "member.added", key, p)
}

/// `keys`: what became of the API keys they created: `revoked`, `transferred`, `none`.
pub fn member_removed(org_id: Uuid, m: &MemberFacts<'_>, actor: Option<Uuid>, keys: &str) -> NewEvent {
    let p = json!({"user_id": m.user_id, "email": m.email, "role": m.role, "actor_user_id": actor, "keys": keys});
    let key = format!("member.removed:{}:{}", m.user_id, crate::ids::new_id());
    event(org_id, "member.removed", key, p)
}

pub fn webhook_test(org_id: Uuid, webhook_id: Uuid, actor: Option<Uuid>) -> NewEvent {
    let p = json!({"webhook_id": webhook_id, "actor_user_id": actor});
    event(org_id, "webhook.test", format!("webhook.test:{}", crate::ids::new_id()), p)
}

/// `problem`: `altered`, `missing`, `relinked`.
pub fn audit_chain_broken(org_id: Uuid, chain: &str, first_bad_id: &str, problem: &str, checked_rows: u64) -> NewEvent {
    let p = json!({"chain": chain, "first_bad_id": first_bad_id, "problem": problem, "checked_rows": checked_rows});
    // One event per break found, however often a walk finds it again.
    event(org_id, "audit.chain_broken", format!("audit.chain_broken:{chain}:{first_bad_id}:{problem}"), p)
}

/// `reconcile.discrepancy` for a run that found differences: both sides' cost over the period
/// and on each day with a difference.
pub fn reconcile_discrepancy(
    org_id: Uuid,
    run_id: Uuid,
    provider: &str,
    period: (chrono::NaiveDate, chrono::NaiveDate),
    logged: &crate::reconcile::Ledger,
    reported: &crate::reconcile::Ledger,
    days: &std::collections::BTreeSet<chrono::NaiveDate>,
) -> NewEvent {
    use rust_decimal::Decimal;
    let cost = |ledger: &crate::reconcile::Ledger, day: Option<chrono::NaiveDate>| -> Decimal {
        ledger.iter().filter(|((_, d), _)| day.is_none_or(|day| *d == day)).map(|(_, u)| u.cost_usd).sum()
    };
    let (gw, theirs) = (cost(logged, None), cost(reported, None));
    let per_day: Vec<Value> = days
        .iter()
        .map(|d| {
            json!({"date": d, "gw_cost_usd": crate::money::text(cost(logged, Some(*d))),
                   "provider_cost_usd": crate::money::text(cost(reported, Some(*d)))})
        })
        .collect();
    let p = json!({"run_id": run_id, "provider": provider, "from": period.0, "to": period.1,
                   "gw_cost_usd": crate::money::text(gw), "provider_cost_usd": crate::money::text(theirs),
                   "difference_usd": crate::money::text(theirs - gw), "days": per_day});
    event(org_id, "reconcile.discrepancy", format!("reconcile.discrepancy:{run_id}"), p)
}

/// `billing.subscription_updated`: `source` is `provider` (its event `provider_event_id` applied),
/// `operator` (`gw-admin plan set`) or `grace_expired` (a past-due subscription's grace ended).
pub struct PlanChange<'a> {
    pub from: &'a str,
    pub to: &'a str,
    pub source: &'a str,
    pub subscription_status: Option<&'a str>,
    pub provider_event_id: Option<&'a str>,
    pub sso_connections_disabled: usize,
}

pub fn subscription_updated(org_id: Uuid, c: &PlanChange<'_>) -> NewEvent {
    let p = json!({"plan_from": c.from, "plan_to": c.to, "source": c.source, "subscription_status": c.subscription_status,
                   "provider_event_id": c.provider_event_id, "sso_connections_disabled": c.sso_connections_disabled});
    let key = match c.provider_event_id {
        Some(id) => format!("billing.subscription_updated:{id}"),
        None => format!("billing.subscription_updated:{}", crate::ids::new_id()),
    };
    event(org_id, "billing.subscription_updated", key, p)
}

/// `usage.sync_failed`: one send of an hour's usage (`revision` 0, or an adjustment) was given up
/// after the configured tries; the ledger keeps it for the operator (`docs/billing.md`).
pub struct SyncFailure<'a> {
    pub usage: &'a str,
    pub event_name: &'a str,
    pub hour: DateTime<Utc>,
    pub revision: i32,
    pub quantity: i64,
    pub attempts: i32,
    pub identifier: &'a str,
    pub error: &'a str,
}

pub fn usage_sync_failed(org_id: Uuid, f: &SyncFailure<'_>) -> NewEvent {
    let hour = f.hour.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let p = json!({"usage": f.usage, "event_name": f.event_name, "hour": hour, "revision": f.revision,
                   "quantity": f.quantity, "attempts": f.attempts, "identifier": f.identifier, "error": f.error});
    event(org_id, "usage.sync_failed", format!("usage.sync_failed:{}", f.identifier), p)
}

/// `experiment.completed`: an experiment ended, with a winner the sequential test declared, at
/// its sample cap without one, or stopped by an operator (`docs/experiments.md`).
pub struct ExperimentEnd<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub metric: &'a str,
    pub reason: &'a str,
    pub winner: Option<&'a str>,
    /// Each variant's name and sample size.
    pub samples: &'a [(String, u64)],
}

pub fn experiment_completed(org_id: Uuid, e: &ExperimentEnd<'_>) -> NewEvent {
    let samples: serde_json::Map<String, Value> = e.samples.iter().map(|(n, c)| (n.clone(), json!(c))).collect();
    let p = json!({"experiment_id": e.id, "name": e.name, "metric": e.metric, "reason": e.reason,
                   "winner": e.winner, "samples": samples});
    event(org_id, "experiment.completed", format!("experiment.completed:{}", e.id), p)
}
