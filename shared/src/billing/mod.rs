//! Subscription billing: what the billing provider's webhooks prove (`stripe_signature`) and
//! say, and the plan an organization is on as a result. The provider is Stripe first
//! (`docs/billing.md`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

pub mod meter;
pub mod stripe_signature;

/// The plan of an organization with no subscription in force.
pub const FREE: &str = "free";

/// An event from the provider, as its webhook delivers it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: String,
    pub event_type: String,
    /// When the provider made it: what orders events that arrive out of order.
    pub created: DateTime<Utc>,
    pub object: Value,
}

/// Why a body is not an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a billing event: {0}")]
pub struct NotAnEvent(pub &'static str);

impl Event {
    pub fn parse(body: &[u8]) -> Result<Event, NotAnEvent> {
        let v: Value = serde_json::from_slice(body).map_err(|_| NotAnEvent("the body is not JSON"))?;
        let id = v.get("id").and_then(Value::as_str).filter(|s| !s.is_empty() && s.len() <= 255);
        let id = id.ok_or(NotAnEvent("no id"))?.to_string();
        let event_type = v.get("type").and_then(Value::as_str).ok_or(NotAnEvent("no type"))?;
        let created = v.get("created").and_then(Value::as_i64).ok_or(NotAnEvent("no created time"))?;
        let created = DateTime::from_timestamp(created, 0).ok_or(NotAnEvent("created is out of range"))?;
        let object = v.pointer("/data/object").cloned().ok_or(NotAnEvent("no data.object"))?;
        Ok(Event { id, event_type: event_type.chars().take(100).collect(), created, object })
    }
}

/// A subscription's state as its events carry it.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    pub id: String,
    pub customer: String,
    /// The provider's: `active`, `trialing`, `past_due`, `unpaid`, `canceled`, `incomplete`,
    /// `incomplete_expired`, `paused`.
    pub status: String,
    /// The price of its first item.
    pub price: Option<String>,
    pub current_period_end: Option<DateTime<Utc>>,
    pub cancel_at_period_end: bool,
    /// `metadata.gw_org_id`, set when gw started the checkout.
    pub org_hint: Option<Uuid>,
}

impl Subscription {
    /// The subscription of a `customer.subscription.*` event (`deleted` ones are `canceled`).
    pub fn from_event(e: &Event) -> Option<Subscription> {
        let o = &e.object;
        let text = |p: &str| o.pointer(p).and_then(Value::as_str).map(String::from);
        let status =
            if e.event_type == "customer.subscription.deleted" { "canceled".to_string() } else { text("/status")? };
        Some(Subscription {
            id: text("/id")?,
            customer: text("/customer")?,
            status,
            price: text("/items/data/0/price/id").or_else(|| text("/plan/id")),
            current_period_end: o
                .get("current_period_end")
                .or_else(|| o.pointer("/items/data/0/current_period_end"))
                .and_then(Value::as_i64)
                .and_then(|t| DateTime::from_timestamp(t, 0)),
            cancel_at_period_end: o.get("cancel_at_period_end").and_then(Value::as_bool).unwrap_or(false),
            org_hint: text("/metadata/gw_org_id").and_then(|s| s.parse().ok()),
        })
    }
}

/// The plan a subscription in `status` to a price selling `sold` (None: a price gw does not sell)
/// puts its organization on. Active and trialing subscriptions, and past-due ones (the
/// provider is still retrying the payment; gw's grace period applies), keep the plan; any other
/// status is the free plan.
pub fn plan_for(status: &str, sold: Option<&str>) -> &'static str {
    let keeps = matches!(status, "active" | "trialing" | "past_due");
    match (keeps, sold) {
        (true, Some("growth")) => "growth",
        (true, Some("enterprise")) => "enterprise",
        _ => FREE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(t: &str, object: Value) -> Event {
        let body = json!({"id": "evt_1", "type": t, "created": 1_700_000_000, "data": {"object": object}});
        Event::parse(body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn events_parse_and_bad_bodies_say_why() {
        let e = event("invoice.paid", json!({"id": "in_1"}));
        assert_eq!(
            (e.id.as_str(), e.event_type.as_str(), e.created.timestamp()),
            ("evt_1", "invoice.paid", 1_700_000_000)
        );
        assert_eq!(Event::parse(b"nope"), Err(NotAnEvent("the body is not JSON")));
        assert_eq!(Event::parse(br#"{"type":"x","created":1,"data":{"object":{}}}"#), Err(NotAnEvent("no id")));
        assert_eq!(Event::parse(br#"{"id":"e","type":"x","data":{"object":{}}}"#), Err(NotAnEvent("no created time")));
        assert_eq!(Event::parse(br#"{"id":"e","type":"x","created":1}"#), Err(NotAnEvent("no data.object")));
    }

    #[test]
    fn a_subscription_reads_its_price_period_and_organization() {
        let org = Uuid::now_v7();
        let o = json!({"id": "sub_1", "customer": "cus_1", "status": "active", "cancel_at_period_end": true,
                       "current_period_end": 1_700_086_400, "metadata": {"gw_org_id": org.to_string()},
                       "items": {"data": [{"price": {"id": "price_growth"}}]}});
        let s = Subscription::from_event(&event("customer.subscription.updated", o.clone())).unwrap();
        assert_eq!(s.price.as_deref(), Some("price_growth"));
        assert_eq!(s.org_hint, Some(org));
        assert!(s.cancel_at_period_end);
        assert_eq!(s.current_period_end.unwrap().timestamp(), 1_700_086_400);
        let gone = Subscription::from_event(&event("customer.subscription.deleted", o)).unwrap();
        assert_eq!(gone.status, "canceled");
        assert_eq!(Subscription::from_event(&event("customer.subscription.updated", json!({"id": "sub_1"}))), None);
    }

    #[test]
    fn only_subscriptions_in_force_to_a_sold_price_keep_a_plan() {
        assert_eq!(plan_for("active", Some("growth")), "growth");
        assert_eq!(plan_for("trialing", Some("enterprise")), "enterprise");
        assert_eq!(plan_for("past_due", Some("growth")), "growth");
        for status in ["canceled", "unpaid", "incomplete", "incomplete_expired", "paused"] {
            assert_eq!(plan_for(status, Some("growth")), FREE, "{status}");
        }
        assert_eq!(plan_for("active", None), FREE);
        assert_eq!(plan_for("active", Some("platinum")), FREE);
    }
}
