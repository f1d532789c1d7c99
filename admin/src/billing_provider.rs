//! The billing provider behind one trait, Stripe first: a customer per organization, a Checkout
//! Session for a plan's price, a billing-portal session. The provider's address and key are the
//! operator's (`[billing] api_base`, `STRIPE_SECRET_KEY`), never a tenant's, so calls go out
//! directly with a timeout; in air-gapped mode there is no provider at all and nothing is called.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use gw_shared::config::BillingConfig;
use serde_json::Value;
use uuid::Uuid;

/// Why the provider gave no answer gw can use (never with the key in it).
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("could not reach the billing provider: {0}")]
    Unreachable(String),
    #[error("the billing provider answered {status}: {message}")]
    Refused {
        status: u16,
        /// The provider's error code (Stripe's `error.code`), when it gave one.
        code: Option<String>,
        message: String,
    },
    #[error("the billing provider's answer lacks {0}")]
    Malformed(&'static str),
}

type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, ProviderError>> + Send + 'a>>;

/// A hosted page the customer is sent to.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub url: String,
}

pub trait BillingProvider: Send + Sync {
    /// Creates the organization's customer (once: the request is idempotent per organization).
    fn create_customer<'a>(&'a self, org_id: Uuid, email: &'a str, name: &'a str) -> Answer<'a, String>;
    /// A Checkout Session subscribing `customer` to `price`.
    fn checkout<'a>(&'a self, c: &'a Checkout<'a>) -> Answer<'a, Session>;
    /// A billing-portal session for `customer`, back to `return_url`.
    fn portal<'a>(&'a self, customer: &'a str, return_url: &'a str) -> Answer<'a, Session>;
    /// Reports usage to a meter; `identifier` makes it count once however often it is sent.
    /// Answers the identifier the provider recorded.
    fn meter_event<'a>(&'a self, m: &'a MeterEvent<'a>) -> Answer<'a, String>;
}

pub struct MeterEvent<'a> {
    pub event_name: &'a str,
    pub customer: &'a str,
    pub value: i64,
    pub identifier: &'a str,
    pub timestamp: i64,
}

pub struct Checkout<'a> {
    pub org_id: Uuid,
    pub customer: &'a str,
    pub price: &'a str,
    pub success_url: &'a str,
    pub cancel_url: &'a str,
}

pub struct Stripe {
    client: reqwest::Client,
    base: String,
    key: String,
}

impl Stripe {
    /// The provider the config names; `None` in air-gapped mode or without `STRIPE_SECRET_KEY`.
    pub fn from_config(cfg: &BillingConfig) -> Result<Option<Stripe>, reqwest::Error> {
        let Some(key) = cfg.secret_key.clone().filter(|_| !cfg.airgap) else {
            return Ok(None);
        };
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(20))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Some(Stripe { client, base: cfg.api_base.trim_end_matches('/').to_string(), key }))
    }

    async fn post(
        &self,
        path: &str,
        idempotency: Option<String>,
        form: &[(&str, &str)],
    ) -> Result<Value, ProviderError> {
        let mut req = self.client.post(format!("{}{path}", self.base)).bearer_auth(&self.key).form(form);
        if let Some(k) = idempotency {
            req = req.header("Idempotency-Key", k);
        }
        let r = req.send().await.map_err(|e| ProviderError::Unreachable(without_url(&e)))?;
        let status = r.status().as_u16();
        let body: Value = r.json().await.map_err(|_| ProviderError::Malformed("a JSON body"))?;
        if !(200..300).contains(&status) {
            let message = body.pointer("/error/message").and_then(Value::as_str).unwrap_or("no message");
            let code = body.pointer("/error/code").and_then(Value::as_str).map(|c| c.chars().take(100).collect());
            return Err(ProviderError::Refused { status, code, message: message.chars().take(300).collect() });
        }
        Ok(body)
    }
}

fn without_url(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "no answer in time".into()
    } else if e.is_connect() {
        "could not connect".into()
    } else {
        "the request failed".into()
    }
}

fn session(v: &Value) -> Result<Session, ProviderError> {
    let text = |k: &'static str| v.get(k).and_then(Value::as_str).map(String::from).ok_or(ProviderError::Malformed(k));
    Ok(Session { id: text("id")?, url: text("url")? })
}

impl BillingProvider for Stripe {
    fn create_customer<'a>(&'a self, org_id: Uuid, email: &'a str, name: &'a str) -> Answer<'a, String> {
        Box::pin(async move {
            let org = org_id.to_string();
            let form = [("email", email), ("name", name), ("metadata[gw_org_id]", org.as_str())];
            let v = self.post("/v1/customers", Some(format!("gw-customer-{org_id}")), &form).await?;
            v.get("id").and_then(Value::as_str).map(String::from).ok_or(ProviderError::Malformed("id"))
        })
    }

    fn checkout<'a>(&'a self, c: &'a Checkout<'a>) -> Answer<'a, Session> {
        Box::pin(async move {
            let org = c.org_id.to_string();
            let form = [
                ("mode", "subscription"),
                ("customer", c.customer),
                ("line_items[0][price]", c.price),
                ("line_items[0][quantity]", "1"),
                ("success_url", c.success_url),
                ("cancel_url", c.cancel_url),
                ("client_reference_id", org.as_str()),
                ("subscription_data[metadata][gw_org_id]", org.as_str()),
            ];
            session(&self.post("/v1/checkout/sessions", None, &form).await?)
        })
    }

    fn portal<'a>(&'a self, customer: &'a str, return_url: &'a str) -> Answer<'a, Session> {
        Box::pin(async move {
            let form = [("customer", customer), ("return_url", return_url)];
            session(&self.post("/v1/billing_portal/sessions", None, &form).await?)
        })
    }

    fn meter_event<'a>(&'a self, m: &'a MeterEvent<'a>) -> Answer<'a, String> {
        Box::pin(async move {
            let (value, timestamp) = (m.value.to_string(), m.timestamp.to_string());
            let form = [
                ("event_name", m.event_name),
                ("payload[stripe_customer_id]", m.customer),
                ("payload[value]", value.as_str()),
                ("identifier", m.identifier),
                ("timestamp", timestamp.as_str()),
            ];
            // The identifier is the idempotency key too: a send repeated within Stripe's window
            // gets the first answer back instead of an error.
            let v = self.post("/v1/billing/meter_events", Some(m.identifier.to_string()), &form).await?;
            v.get("identifier").and_then(Value::as_str).map(String::from).ok_or(ProviderError::Malformed("identifier"))
        })
    }
}
