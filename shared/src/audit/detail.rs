//! The audit row's two JSON columns, typed: `routing` (every upstream attempt) and `policy`
//! (every guardrail decision). The proxy writes them through these types and every reader
//! (request log, policy analytics and exports, compliance export) reads them back through them.
//!
//! Stored rows are hashed into the chain exactly as written, so the row keeps its JSON
//! (`AuditRecord::routing`/`policy` stay `serde_json::Value`) and these types only encode and
//! decode it: rows from before a field existed read with its default, and nothing is rewritten.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// One upstream attempt, in the order they were made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Attempt {
    /// The gw provider's name.
    pub provider: String,
    /// The model as the provider names it.
    pub model: String,
    /// `ok`, `retryable_error`, `error` or `client_gone`.
    pub outcome: String,
    /// gw's error code when the attempt failed.
    #[serde(default)]
    pub error: Option<String>,
    /// The upstream's status code, when it answered.
    #[serde(default)]
    pub status: Option<u16>,
    /// Until the upstream's response header, milliseconds.
    #[serde(default)]
    pub latency_ms: Option<i32>,
    /// The deployment's region, when configured.
    #[serde(default)]
    pub region: Option<String>,
    /// Whose provider key served it: `organization` or `gateway`.
    #[serde(default = "gateway")]
    pub credential: String,
}

fn gateway() -> String {
    CREDENTIAL_GATEWAY.into()
}

/// `Attempt::credential` of an organization's own provider key.
pub const CREDENTIAL_ORGANIZATION: &str = "organization";
/// `Attempt::credential` of the gateway's configured key.
pub const CREDENTIAL_GATEWAY: &str = "gateway";

/// One guardrail decision: which policy and guardrail acted, how, and on what kinds of data
/// (entity types and counts, never the matched values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Decision {
    #[serde(default)]
    pub policy: String,
    #[serde(default)]
    pub guardrail: String,
    /// `flagged`, `redacted` or `blocked`.
    #[serde(default)]
    pub action: String,
    /// `input` or `output`; null on rows from before it was recorded.
    #[serde(default)]
    pub stage: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    /// Entity type to count, e.g. `{"EMAIL": 2}`.
    #[serde(default)]
    pub entities: BTreeMap<String, u64>,
}

/// The items of a stored JSON array that read as `T` (anything else, which gw never wrote, is
/// skipped rather than failing the whole row).
fn items<T: serde::de::DeserializeOwned>(v: &Value) -> Vec<T> {
    v.as_array().into_iter().flatten().filter_map(|d| T::deserialize(d).ok()).collect()
}

impl Attempt {
    pub fn list(routing: &Value) -> Vec<Attempt> {
        items(routing)
    }
}

impl Decision {
    pub fn list(policy: &Value) -> Vec<Decision> {
        items(policy)
    }
}

/// The JSON column of a list of attempts or decisions.
pub fn column<T: Serialize>(list: &[T]) -> Value {
    serde_json::to_value(list).unwrap_or_else(|_| Value::Array(Vec::new()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn written_json_keeps_every_key_and_old_rows_read_with_defaults() {
        let a = Attempt {
            provider: "openai".into(),
            model: "gpt".into(),
            outcome: "ok".into(),
            error: None,
            status: Some(200),
            latency_ms: Some(12),
            region: None,
            credential: CREDENTIAL_ORGANIZATION.into(),
        };
        // Nulls stay in: the chain hashes the JSON exactly as the proxy always wrote it.
        assert_eq!(
            column(std::slice::from_ref(&a)),
            json!([{"provider": "openai", "model": "gpt", "outcome": "ok", "error": null, "status": 200,
                "latency_ms": 12, "region": null, "credential": "organization"}])
        );
        assert_eq!(Attempt::list(&column(std::slice::from_ref(&a))), vec![a]);
        let old = json!([{"provider": "p", "model": "m", "outcome": "ok"}, "junk"]);
        assert_eq!(Attempt::list(&old)[0].credential, "gateway");
        let d =
            Decision::list(&json!([{"policy": "pii", "guardrail": "pii", "action": "redacted", "reason": "EMAIL"}]));
        assert_eq!((d[0].stage.as_deref(), d[0].entities.len()), (None, 0));
    }
}
