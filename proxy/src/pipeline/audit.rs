//! The audit step: the request's audit row, derived from the context like the headers are.

use gw_shared::audit::detail::{self, Attempt, Decision, CREDENTIAL_GATEWAY, CREDENTIAL_ORGANIZATION};
use gw_shared::audit::{ms_i32, tokens_i32, user_agent_id, AuditEntry, AuditRecord};

use crate::ctx::{AttemptOutcome, RequestCtx};

/// Longest client-supplied string kept in the audit row.
const MAX_AUDIT_TEXT: usize = 256;

/// Client text as the audit row may hold it: no NUL (Postgres TEXT refuses it), bounded length.
pub fn audit_text(s: &str) -> String {
    s.chars().filter(|c| *c != '\0').take(MAX_AUDIT_TEXT).collect()
}

/// A body as the audit row keeps it: at most `max` bytes (cut on a character boundary and
/// marked), no NUL.
pub fn audit_body(body: &str, max: usize) -> String {
    let clean: std::borrow::Cow<str> = if body.contains('\0') { body.replace('\0', "").into() } else { body.into() };
    if clean.len() <= max {
        return clean.into_owned();
    }
    let mut cut = max;
    while !clean.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…[truncated {} bytes]", &clean[..cut], clean.len() - cut)
}

/// The request body after input policies (what went upstream), when bodies are logged.
fn request_body(ctx: &RequestCtx, max: usize) -> Option<String> {
    if !ctx.log_bodies {
        return None;
    }
    if let Some(kept) = &ctx.logged_request {
        return Some(kept.clone());
    }
    let body = match (&ctx.request, &ctx.embeddings) {
        (Some(r), _) => serde_json::to_string(r.body()).ok()?,
        (None, Some(e)) => serde_json::to_string(e.body()).ok()?,
        (None, None) => return None,
    };
    Some(audit_body(&body, max))
}

/// Keeps the request body for the audit row before the route step takes the request out of the
/// context for its attempts: the row is built (and journaled) as the answer's end goes out,
/// while the request is still out.
pub fn keep_request_body(ctx: &mut RequestCtx, max: usize) {
    if ctx.log_bodies && ctx.logged_request.is_none() {
        ctx.logged_request = request_body(ctx, max);
    }
}

/// The audit entry, for requests that authenticated (others belong to no tenant).
pub fn record(ctx: &RequestCtx, max_body: usize) -> Option<AuditEntry> {
    let key = ctx.key.as_ref()?;
    let last = ctx.last_attempt().filter(|_| !ctx.answered_by_gw);
    let routing: Vec<Attempt> = ctx
        .attempts
        .iter()
        .map(|a| Attempt {
            provider: a.provider.to_string(),
            model: a.upstream_model.to_string(),
            outcome: a.outcome.label().to_string(),
            error: match a.outcome {
                AttemptOutcome::Answered => None,
                AttemptOutcome::Retryable(e) | AttemptOutcome::Failed(e) => Some(e.to_string()),
            },
            status: a.status,
            latency_ms: a.latency.map(ms_i32),
            region: a.region.as_deref().map(str::to_string),
            credential: if a.org_key { CREDENTIAL_ORGANIZATION } else { CREDENTIAL_GATEWAY }.to_string(),
        })
        .collect();
    let policy: Vec<Decision> = ctx
        .policy
        .iter()
        .map(|d| Decision {
            policy: d.policy.to_string(),
            guardrail: d.guardrail.to_string(),
            action: d.action.label().to_string(),
            stage: Some(d.stage.label().to_string()),
            reason: Some(d.reason.to_string()),
            entities: d.entities.iter().map(|(k, n)| (k.clone(), *n as u64)).collect(),
        })
        .collect();
    let record = AuditRecord {
        id: ctx.request_id,
        org_id: key.org_id,
        team_id: ctx.team_id,
        api_key_id: Some(key.id),
        endpoint: ctx.endpoint.map(|e| e.path()).unwrap_or("unknown").to_string(),
        model: ctx.model.as_deref().map(audit_text),
        provider: match &ctx.cached_from {
            Some((provider, _)) => Some(provider.to_string()),
            None => last.map(|a| a.provider.to_string()),
        },
        upstream_model: match &ctx.cached_from {
            Some((_, model)) => Some(model.to_string()),
            None => last.map(|a| a.upstream_model.to_string()),
        },
        status_code: i32::from(ctx.status),
        error_type: ctx.error.map(str::to_string),
        stream: ctx.stream,
        prompt_tokens: tokens_i32(ctx.usage.prompt_tokens),
        completion_tokens: tokens_i32(ctx.usage.completion_tokens),
        total_tokens: tokens_i32(ctx.usage.total()),
        cost_usd: ctx.cost,
        latency_ms: ms_i32(ctx.started.elapsed()),
        upstream_latency_ms: last.and_then(|a| a.latency).map(ms_i32),
        ttft_ms: ctx.ttft.map(ms_i32),
        cache_status: ctx.cache.label().to_string(),
        policy_action: ctx.policy_verdict().map(|d| d.action.label().to_string()),
        attempts: i32::try_from(ctx.attempts.len()).unwrap_or(i32::MAX),
        created_at: ctx.created_at,
        cached_tokens: tokens_i32(ctx.usage.cached_tokens),
        reasoning_tokens: tokens_i32(ctx.usage.reasoning_tokens),
        cache_creation_tokens: tokens_i32(ctx.usage.cache_creation_tokens),
        routing: detail::column(&routing),
        policy: detail::column(&policy),
        cache_saved_usd: ctx.cache_saved,
        cache_similarity: ctx.cache_similarity,
        deployment: last.and_then(|a| a.region.as_deref()).map(str::to_string),
        overhead_us: ctx.overhead().map(|d| i32::try_from(d.as_micros()).unwrap_or(i32::MAX)),
        client_ip: ctx.client_ip.map(ipnet::IpNet::from),
        user_agent_id: ctx.user_agent.as_deref().map(user_agent_id),
        request_body: request_body(ctx, max_body),
        response_body: ctx.response_body.as_deref().map(|b| audit_body(b, max_body)),
        settled_by: ctx.settled_by.map(|s| s.label().to_string()),
        template_id: ctx.template.map(|(t, _)| t),
        template_version: ctx.template.map(|(_, v)| v),
        experiment_id: ctx.experiment.as_ref().map(|(e, _)| *e),
        experiment_variant: ctx.experiment.as_ref().map(|(_, v)| v.to_string()),
        origin: (key.kind == gw_shared::db::api_keys::KIND_PLAYGROUND).then(|| "playground".to_string()),
        chain_seq: None,
        prev_hash: None,
        row_hash: None,
    };
    Some(AuditEntry { record, user_agent: ctx.user_agent.clone() })
}

/// Whether a row built at the answer's end still says how the request ended (its last write did
/// not fail, which would change its status, error and the attempt's outcome).
pub fn unchanged_since(row: &AuditEntry, ctx: &RequestCtx) -> bool {
    row.record.status_code == i32::from(ctx.status) && row.record.error_type.as_deref() == ctx.error
}

/// A row built at the answer's end, with the timings as they are now (the last write's time,
/// and an in-process attempt's time known once it returned).
pub fn refresh_timings(row: &mut AuditEntry, ctx: &RequestCtx) {
    row.record.latency_ms = ms_i32(ctx.started.elapsed());
    row.record.overhead_us = ctx.overhead().map(|d| i32::try_from(d.as_micros()).unwrap_or(i32::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_text_strips_nul_and_bounds_length() {
        assert_eq!(audit_text("a\0b"), "ab");
        assert_eq!(audit_text(&"x".repeat(10_000)).len(), MAX_AUDIT_TEXT);
    }

    #[test]
    fn audit_body_cuts_on_a_character_boundary_and_says_so() {
        assert_eq!(audit_body("{\"a\":1}", 100), "{\"a\":1}");
        let cut = audit_body("ééé", 3);
        assert_eq!(cut, "é…[truncated 4 bytes]");
        assert_eq!(audit_body("a\0b", 10), "ab");
    }
}
