//! The per-request context: the single record of a request, filled phase by phase; the audit
//! row and the `x-gw-*` headers are both built from it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use gw_shared::audit::{ms_i32, tokens_i32, AuditRecord};
use gw_shared::db::api_keys::KeyAuth;
use gw_shared::headers;
use gw_shared::pricing::TokenUsage;
use rust_decimal::Decimal;
use uuid::Uuid;

pub struct RequestCtx {
    pub request_id: Uuid,
    pub started: Instant,
    pub created_at: DateTime<Utc>,
    pub endpoint: &'static str,
    pub key: Option<Arc<KeyAuth>>,
    pub team_id: Option<Uuid>,
    /// The model the client asked for.
    pub model: Option<String>,
    /// The provider and upstream model of the deployment that answered (or was last tried).
    pub provider: Option<String>,
    pub upstream_model: Option<String>,
    pub stream: bool,
    pub usage: TokenUsage,
    pub cost: Decimal,
    pub status: u16,
    pub error_type: Option<&'static str>,
    pub upstream_latency: Option<Duration>,
    pub ttft: Option<Duration>,
    pub attempts: u32,
    /// Whether the downstream response header has been written.
    pub header_sent: bool,
}

impl RequestCtx {
    pub fn new() -> Self {
        Self {
            request_id: gw_shared::ids::new_id(),
            started: Instant::now(),
            created_at: Utc::now(),
            endpoint: "unknown",
            key: None,
            team_id: None,
            model: None,
            provider: None,
            upstream_model: None,
            stream: false,
            usage: TokenUsage::default(),
            cost: Decimal::ZERO,
            status: 0,
            error_type: None,
            upstream_latency: None,
            ttft: None,
            attempts: 0,
            header_sent: false,
        }
    }

    pub fn provider_header(&self) -> &str {
        self.provider.as_deref().unwrap_or(headers::POLICY_NONE)
    }

    pub fn model_header(&self) -> &str {
        self.upstream_model.as_deref().unwrap_or(headers::POLICY_NONE)
    }

    /// The audit row, for requests that authenticated (others belong to no tenant).
    pub fn audit_record(&self) -> Option<AuditRecord> {
        let key = self.key.as_ref()?;
        Some(AuditRecord {
            id: self.request_id,
            org_id: key.org_id,
            team_id: self.team_id,
            api_key_id: Some(key.id),
            endpoint: self.endpoint.to_string(),
            model: self.model.as_deref().map(audit_text),
            provider: self.provider.clone(),
            upstream_model: self.upstream_model.clone(),
            status_code: i32::from(self.status),
            error_type: self.error_type.map(str::to_string),
            stream: self.stream,
            prompt_tokens: tokens_i32(self.usage.prompt_tokens),
            completion_tokens: tokens_i32(self.usage.completion_tokens),
            total_tokens: tokens_i32(self.usage.total()),
            cost_usd: self.cost,
            latency_ms: ms_i32(self.started.elapsed()),
            upstream_latency_ms: self.upstream_latency.map(ms_i32),
            ttft_ms: self.ttft.map(ms_i32),
            cache_status: headers::CACHE_MISS.to_string(),
            policy_action: None,
            attempts: i32::try_from(self.attempts).unwrap_or(i32::MAX),
            created_at: self.created_at,
        })
    }
}

/// Longest client-supplied string kept in the audit row.
const MAX_AUDIT_TEXT: usize = 256;

/// Client text as the audit row may hold it: no NUL (Postgres TEXT refuses it), bounded length.
pub fn audit_text(s: &str) -> String {
    s.chars().filter(|c| *c != '\0').take(MAX_AUDIT_TEXT).collect()
}

impl Default for RequestCtx {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_text_strips_nul_and_bounds_length() {
        assert_eq!(audit_text("a\0b"), "ab");
        assert_eq!(audit_text(&"x".repeat(10_000)).len(), MAX_AUDIT_TEXT);
    }
}
