//! Webhooks: the catalog of event types an endpoint may subscribe to, and signing secrets in the
//! Standard Webhooks format (`whsec_` and the base64 of 32 random bytes). Delivery itself is the
//! admin's relay; see `docs/webhooks.md`.

use base64::Engine;
use rand::rngs::OsRng;
use rand::RngCore;

/// Every event type gw delivers (`docs/webhooks.md` has each one's schema and an example).
pub const EVENT_TYPES: &[&str] = &[
    "budget.threshold_crossed",
    "budget.exceeded",
    "policy.blocked",
    "api_key.created",
    "api_key.revoked",
    "api_key.expired",
    "provider_key.rotated",
    "provider_key.revoked",
    "member.added",
    "member.removed",
    "reconcile.discrepancy",
    "audit.chain_broken",
    "webhook.test",
];

/// The prefix of a Standard Webhooks signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new signing secret: `whsec_` and 32 random bytes in standard base64.
pub fn generate_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    format!("{SECRET_PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// What a secret is sealed with besides the master key: the endpoint it belongs to.
pub fn secret_aad(org_id: uuid::Uuid, endpoint_id: uuid::Uuid) -> Vec<u8> {
    format!("gw:webhook_secret:{org_id}:{endpoint_id}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_standard_webhooks_secrets_and_differ() {
        let (a, b) = (generate_secret(), generate_secret());
        assert_ne!(a, b);
        let raw = base64::engine::general_purpose::STANDARD.decode(a.trim_start_matches(SECRET_PREFIX)).unwrap();
        assert!(a.starts_with(SECRET_PREFIX) && raw.len() == 32);
    }

    #[test]
    fn event_types_are_unique_and_dotted() {
        let mut seen = std::collections::BTreeSet::new();
        for t in EVENT_TYPES {
            assert!(seen.insert(*t), "{t} twice");
            assert!(t.split('.').count() == 2, "{t}");
        }
    }
}
