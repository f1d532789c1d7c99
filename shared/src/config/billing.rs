//! The `[billing]` table: the billing provider (Stripe's API and webhook scheme) and which of
//! its prices sells which plan. Secrets come from the environment only: `STRIPE_SECRET_KEY`, and
//! `STRIPE_WEBHOOK_SECRET` (comma-separated during a rotation: each may sign). `AIRGAP_MODE=true`
//! turns every call to the provider off (`docs/billing.md`).

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BillingConfig {
    /// The provider's API base URL.
    pub api_base: String,
    /// The provider's price id for each plan sold (`growth`, `enterprise`): a subscription to a
    /// price named here puts its organization on that plan.
    pub prices: BTreeMap<String, String>,
    /// Days a subscription may stay past due (a renewal payment failed) before its organization
    /// drops to the free plan.
    pub grace_days: u32,
    /// How often the leader looks for subscriptions whose grace is over.
    pub grace_check_secs: u64,
    /// The metered plans: what each one's usage is billed by (`docs/billing.md`). A plan not
    /// named here sends no usage.
    pub meters: BTreeMap<String, MeterConfig>,
    /// How often the leader syncs usage (each completed hour is sent once; runs between only
    /// catch up, retry and adjust).
    pub usage_sync_secs: u64,
    /// How long after an hour ends its usage is sent (requests still finishing, proxies still
    /// flushing); what arrives later is sent as an adjustment.
    pub usage_settle_secs: u64,
    /// The first retry of a failed send waits this long, doubling each try up to an hour.
    pub usage_retry_secs: u64,
    /// Sends of one hour's usage before it is given up and `usage.sync_failed` emitted.
    pub usage_max_attempts: u32,
    #[serde(skip)]
    pub secret_key: Option<String>,
    #[serde(skip)]
    pub webhook_secrets: Vec<String>,
    /// `AIRGAP_MODE=true`: billing is handled outside the platform; gw never calls the provider.
    #[serde(skip)]
    pub airgap: bool,
}

impl Default for BillingConfig {
    fn default() -> Self {
        Self {
            api_base: "https://api.stripe.com".into(),
            prices: BTreeMap::new(),
            grace_days: 7,
            grace_check_secs: 300,
            meters: BTreeMap::new(),
            usage_sync_secs: 60,
            usage_settle_secs: 300,
            usage_retry_secs: 60,
            usage_max_attempts: 8,
            secret_key: None,
            webhook_secrets: Vec::new(),
            airgap: false,
        }
    }
}

/// What a metered plan's usage is billed by: the provider's meter (`event_name`) and what gw
/// counts into it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeterConfig {
    /// The provider's meter event name (Stripe: at most 100 characters).
    pub event_name: String,
    pub usage: crate::billing::meter::Usage,
}

impl BillingConfig {
    pub fn validate(&self) -> Result<(), String> {
        for (plan, m) in &self.meters {
            if !matches!(plan.as_str(), "free" | "growth" | "enterprise") {
                return Err(format!("billing.meters.{plan}: not a plan (free, growth, enterprise)"));
            }
            let name_ok = !m.event_name.is_empty()
                && m.event_name.len() <= 100
                && m.event_name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b));
            if !name_ok {
                return Err(format!(
                    "billing.meters.{plan}.event_name: 1 to 100 letters, digits and _ - . : (the provider's meter)"
                ));
            }
        }
        if self.usage_sync_secs == 0 || self.usage_retry_secs == 0 || self.usage_max_attempts == 0 {
            return Err("billing.usage_sync_secs, usage_retry_secs and usage_max_attempts must be positive".into());
        }
        Ok(())
    }

    /// The plan a price sells, if any.
    pub fn plan_of_price(&self, price: &str) -> Option<&str> {
        self.prices.iter().find(|(_, p)| p.as_str() == price).map(|(plan, _)| plan.as_str())
    }
}

impl std::fmt::Debug for BillingConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BillingConfig")
            .field("api_base", &self.api_base)
            .field("prices", &self.prices)
            .field("grace_days", &self.grace_days)
            .field("meters", &self.meters)
            .field("secret_key", &self.secret_key.as_ref().map(|_| "<set>"))
            .field("webhook_secrets", &self.webhook_secrets.len())
            .field("airgap", &self.airgap)
            .finish()
    }
}
