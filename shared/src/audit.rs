//! The audit record: what one request did, built by the proxy from its per-request context and
//! written behind the request.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use uuid::Uuid;

use crate::db::schema::audit_logs;

#[derive(Debug, Clone, PartialEq, Insertable, Queryable, Selectable, Serialize)]
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
    /// Every upstream attempt: provider, model, outcome, status, latency.
    pub routing: serde_json::Value,
    /// Every policy decision: policy, guardrail, action, reason (never the matched values).
    pub policy: serde_json::Value,
    /// On a cache hit: what the cached answer cost when it was produced (this request cost 0).
    pub cache_saved_usd: Decimal,
    /// On an L3 hit: the prompt's cosine similarity to the cached one.
    pub cache_similarity: Option<f32>,
}

/// Milliseconds as the audit columns hold them, saturating rather than wrapping.
pub fn ms_i32(d: std::time::Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

pub fn tokens_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
