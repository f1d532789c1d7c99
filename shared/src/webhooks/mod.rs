//! Webhooks: the catalog of event types an endpoint may subscribe to, and signing secrets in the
//! Standard Webhooks format (`whsec_` and the base64 of 32 random bytes). Delivery itself is the
//! admin's relay; see `docs/webhooks.md`.

use base64::Engine;
use rand::rngs::OsRng;
use rand::RngCore;

pub mod coalesce;
pub mod payloads;

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
    "billing.subscription_updated",
    "usage.sync_failed",
    "experiment.completed",
    "webhook.test",
];

/// What an owner or admin may choose to receive by e-mail, and the event types each covers.
pub const ALERT_CATEGORIES: &[(&str, &[&str])] = &[
    (
        "budget",
        &[
            "budget.threshold_crossed",
            "budget.exceeded",
            "reconcile.discrepancy",
            "billing.subscription_updated",
            "usage.sync_failed",
        ],
    ),
    (
        "security",
        &[
            "api_key.created",
            "api_key.revoked",
            "api_key.expired",
            "provider_key.rotated",
            "provider_key.revoked",
            "member.added",
            "member.removed",
            "audit.chain_broken",
        ],
    ),
];

/// The e-mail category an event type belongs to, if any.
pub fn alert_category(event_type: &str) -> Option<&'static str> {
    ALERT_CATEGORIES.iter().find(|(_, types)| types.contains(&event_type)).map(|(c, _)| *c)
}

/// The text of an alert e-mail: what happened, and the event's data as a webhook would carry it.
pub fn alert_text(event_type: &str, data: &serde_json::Value) -> String {
    let pretty = serde_json::to_string_pretty(data).unwrap_or_default();
    format!(
        "A {event_type} event happened in your gw organization.\n\n{pretty}\n\nYou receive these because you chose \
         {} alerts by e-mail (PUT /api/v1/me/alerts).\n",
        alert_category(event_type).unwrap_or("these")
    )
}

/// The prefix of a Standard Webhooks signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new signing secret: `whsec_` and 32 random bytes in standard base64.
pub fn generate_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    format!("{SECRET_PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Why a secret cannot sign.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not a webhook signing secret (whsec_ and base64)")]
pub struct BadSecret;

/// The `webhook-signature` header's value for one message: `v1,` and the base64 HMAC-SHA256,
/// keyed with the secret's bytes, of `{id}.{timestamp}.{body}` (Standard Webhooks).
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Result<String, BadSecret> {
    use hmac::{Hmac, Mac};
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret))
        .map_err(|_| BadSecret)?;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).map_err(|_| BadSecret)?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Ok(format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())))
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
    fn signatures_match_the_reference_library() {
        // Computed by `standardwebhooks` 1.1.0 (PyPI): Webhook(secret).sign(id, timestamp, body).
        let sig = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig.as_deref(), Ok("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
        assert_eq!(sign("whsec_not base64!", "m", 1, b"{}"), Err(BadSecret));
        // Any change to what is signed changes the signature.
        let s = |id: &str, ts: i64, body: &[u8]| sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", id, ts, body).unwrap();
        let base = s("m", 1, b"{}");
        assert_ne!(base, s("n", 1, b"{}"));
        assert_ne!(base, s("m", 2, b"{}"));
        assert_ne!(base, s("m", 1, b"{ }"));
    }

    #[test]
    fn alert_categories_name_catalog_events_once() {
        let mut seen = std::collections::BTreeSet::new();
        for (_, types) in ALERT_CATEGORIES {
            for t in *types {
                assert!(EVENT_TYPES.contains(t), "{t}");
                assert!(seen.insert(*t), "{t} twice");
            }
        }
        assert_eq!(alert_category("budget.exceeded"), Some("budget"));
        assert_eq!(alert_category("member.removed"), Some("security"));
        assert_eq!(alert_category("policy.blocked"), None);
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
