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
            secret_key: None,
            webhook_secrets: Vec::new(),
            airgap: false,
        }
    }
}

impl BillingConfig {
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
            .field("secret_key", &self.secret_key.as_ref().map(|_| "<set>"))
            .field("webhook_secrets", &self.webhook_secrets.len())
            .field("airgap", &self.airgap)
            .finish()
    }
}
