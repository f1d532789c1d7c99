//! Subscription billing: what the billing provider's webhooks prove and say. The provider is
//! Stripe first (`docs/billing.md`).

pub mod stripe_signature;
