//! The audit record: what one request did, built by the proxy from its per-request context and
//! written behind the request.

pub mod chain;
pub mod detail;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::db::schema::audit_logs;

#[derive(Debug, Clone, Default, PartialEq, Insertable, Queryable, Selectable, Serialize, Deserialize)]
#[diesel(table_name = audit_logs)]
pub struct AuditRecord {
    /// The request id (`x-gw-request-id`), a UUIDv7.
    pub id: Uuid,
    pub org_id: Uuid,
    pub team_id: Option<Uuid>,
    pub api_key_id: Option<Uuid>,
    pub endpoint: String,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub upstream_model: Option<String>,
    pub status_code: i32,
    pub error_type: Option<String>,
    pub stream: bool,
    pub prompt_tokens: i32,
    pub completion_tokens: i32,
    pub total_tokens: i32,
    pub cost_usd: Decimal,
    pub latency_ms: i32,
    pub upstream_latency_ms: Option<i32>,
    pub ttft_ms: Option<i32>,
    pub cache_status: String,
    pub policy_action: Option<String>,
    pub attempts: i32,
    pub created_at: DateTime<Utc>,
    pub cached_tokens: i32,
    pub reasoning_tokens: i32,
    pub cache_creation_tokens: i32,
    /// Every upstream attempt ([`detail::Attempt`]s), as written.
    pub routing: serde_json::Value,
    /// Every policy decision ([`detail::Decision`]s), as written.
    pub policy: serde_json::Value,
    /// On a cache hit: what the cached answer cost when it was produced (this request cost 0).
    pub cache_saved_usd: Decimal,
    /// On an L3 hit: the prompt's cosine similarity to the cached one.
    pub cache_similarity: Option<f32>,
    /// The deployment (region) of the provider that answered.
    pub deployment: Option<String>,
    /// The gateway's own share of the time to the response header, in microseconds.
    pub overhead_us: Option<i32>,
    pub client_ip: Option<ipnet::IpNet>,
    /// [`user_agent_id`] of the caller's `User-Agent`; the string itself is kept once in
    /// `audit_user_agents`.
    pub user_agent_id: Option<i64>,
    /// Bodies, only when the organization turns body logging on, and after redaction.
    pub request_body: Option<String>,
    pub response_body: Option<String>,
    /// How tokens and cost were settled: `usage` (the upstream's report) or `estimate`; `None`
    /// when nothing reached an upstream.
    pub settled_by: Option<String>,
    /// The prompt template (and its version) the request rendered.
    #[serde(default)]
    pub template_id: Option<Uuid>,
    #[serde(default)]
    pub template_version: Option<i32>,
    /// The experiment the request took part in, and the variant it was assigned.
    #[serde(default)]
    pub experiment_id: Option<Uuid>,
    #[serde(default)]
    pub experiment_variant: Option<String>,
    /// `playground` for a playground comparison's call; `None` for the API.
    #[serde(default)]
    pub origin: Option<String>,
    /// The organization's hash chain, filled in by the writer as the row is appended.
    pub chain_seq: Option<i64>,
    pub prev_hash: Option<Vec<u8>>,
    pub row_hash: Option<Vec<u8>>,
}

/// What travels from a request to the writer: the row, and the caller's `User-Agent` for the
/// dictionary the row references.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub record: AuditRecord,
    pub user_agent: Option<String>,
}

/// A `User-Agent` as the audit log references it: the first 8 bytes of its SHA-256, so every
/// proxy derives the same id without asking Postgres.
pub fn user_agent_id(ua: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(ua.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    i64::from_be_bytes(b)
}

/// Milliseconds as the audit columns hold them, saturating rather than wrapping.
pub fn ms_i32(d: std::time::Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

pub fn tokens_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
