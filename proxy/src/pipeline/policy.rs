//! The policy step: the organization's mandatory and default policies, the team's defaults and
//! the ones `x-gw-policy` names run over the request's texts, in that order. Redaction rewrites
//! the request before any upstream sees it; a block answers 400 (`content_policy_violation`) at
//! once; a guardrail that fails internally fails closed unless its policy says otherwise. The
//! answer's guard (output redaction, restoring placeholders) is prepared here for the route step.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use gw_shared::db::policies::{self, StoredPolicy};
use gw_shared::db::DbPool;
use gw_shared::headers;
use gw_shared::limits::events::NewEvent;
use gw_shared::openai::chat::ChatCompletion;
use gw_shared::policy::engine::{run_input, OutputGuard, PolicySet, RequestFacts, Segment, Stop};
use gw_shared::policy::spec::OrgPolicy;
use gw_shared::policy::vault::Vault;
use gw_shared::policy::PolicyAction;
use pingora::proxy::Session;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::gateway::Gateway;
use crate::lookup::{LookupError, Source};

/// An organization's policy document, cached like keys and teams (compiled per version below).
pub struct PolicySource {
    pub db: DbPool,
}

#[async_trait]
impl Source for PolicySource {
    type Key = Uuid;
    type Value = StoredPolicy;

    fn name(&self) -> &'static str {
        "policy"
    }

    fn redis_key(&self, org_id: &Uuid) -> String {
        gw_shared::redis::policy_cache_key(*org_id)
    }

    async fn load(&self, org_id: &Uuid) -> Result<Option<StoredPolicy>, String> {
        let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
        policies::current(&mut conn, *org_id).await.map_err(|e| e.to_string())
    }
}

/// Compiled policy sets by organization and version: compiling (patterns, automata) happens
/// once per version per process.
pub type Compiled = moka::sync::Cache<(Uuid, i64), Arc<PolicySet>>;

pub fn compiled_cache() -> Compiled {
    moka::sync::Cache::builder().max_capacity(10_000).build()
}

pub const POLICY_BLOCKED: &str = "policy.blocked";

async fn policy_set(gw: &Gateway, org_id: Uuid) -> Result<Arc<PolicySet>, ProxyError> {
    let stored = match gw.policies.get(&org_id, &|| true).await {
        Ok(s) => s,
        // Which policies are mandatory is unknown: fail closed.
        Err(LookupError::Unavailable | LookupError::NotAllowed) => return Err(ProxyError::PolicyUnavailable),
    };
    let Some(stored) = stored else {
        return Ok(gw.compiled.get_with((org_id, 0), || Arc::new(PolicySet::empty())));
    };
    Ok(gw.compiled.get_with((org_id, stored.version), || {
        match serde_json::from_value::<OrgPolicy>(stored.document.clone()) {
            Ok(doc) => Arc::new(PolicySet::compile(stored.version, &doc)),
            Err(e) => {
                log::error!("organization {org_id}: policy version {} does not parse: {e}", stored.version);
                Arc::new(PolicySet::unreadable(stored.version, e.to_string()))
            }
        }
    }))
}

pub async fn run(gw: &Gateway, session: &Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    let Some(key) = ctx.key.clone() else { return Err(ProxyError::MissingAuth) };
    let started = Instant::now();
    let set = policy_set(gw, key.org_id).await?;
    let header = match session.req_header().headers.get(headers::POLICY) {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| ProxyError::PolicyHeader("the value is not visible ASCII".into()))?),
    };
    let team: &[String] = ctx.team.as_ref().map(|t| t.default_policies.as_slice()).unwrap_or_default();
    let applied = set.resolve(team, header).map_err(|e| ProxyError::PolicyHeader(e.to_string()))?;
    if applied.is_empty() {
        return Ok(());
    }
    let mut vault = Vault::new();
    let model = ctx.model.clone().unwrap_or_default();
    // The prompt's size: the limits step's estimate, else counted only when a guardrail reads it.
    let known = ctx.estimate.map(|e| e.prompt_tokens);
    let counts = applied.iter().any(|p| p.counts_tokens());
    let outcome = if let Some(req) = ctx.request.as_mut() {
        let prompt_tokens = match (known, counts) {
            (Some(t), _) => t,
            (None, true) => gw_shared::limits::estimate::chat(req, 0).prompt_tokens,
            (None, false) => 0,
        };
        let mut texts = req.texts_mut();
        let mut segs: Vec<Segment> = texts.iter_mut().map(|(user, text)| Segment { user: *user, text }).collect();
        run_input(&applied, &mut segs, &RequestFacts { model: &model, prompt_tokens }, &mut vault)
    } else if let Some(req) = ctx.embeddings.as_mut() {
        let prompt_tokens = match (known, counts) {
            (Some(t), _) => t,
            (None, true) => gw_shared::limits::estimate::embeddings(req).prompt_tokens,
            (None, false) => 0,
        };
        let outcome = match req.texts_mut() {
            Some(texts) => {
                let mut segs: Vec<Segment> = texts.iter_mut().map(|text| Segment { user: true, text }).collect();
                run_input(&applied, &mut segs, &RequestFacts { model: &model, prompt_tokens }, &mut vault)
            }
            None => run_input(&applied, &mut [], &RequestFacts { model: &model, prompt_tokens }, &mut vault),
        };
        req.sync_body();
        outcome
    } else {
        return Err(ProxyError::Internal("policy step without a parsed request".into()));
    };
    for kind in &outcome.failures {
        gw.metrics.policy_guardrail_errors.with_label_values(&[kind]).inc();
    }
    for d in &outcome.decisions {
        gw.metrics.policy_decisions.with_label_values(&[d.guardrail, d.action.label(), d.stage.label()]).inc();
    }
    ctx.policy.extend(outcome.decisions);
    gw.metrics.policy_step.observe(started.elapsed().as_secs_f64());
    match outcome.stop {
        None => {
            if ctx.request.is_some() {
                ctx.output_guard = OutputGuard::new(&applied, vault);
            }
            Ok(())
        }
        Some(Stop::Blocked { policy, guardrail, reason }) => {
            blocked_event(gw, ctx, &policy, guardrail, &reason);
            Err(ProxyError::PolicyBlocked { policy, reason })
        }
        Some(Stop::Failed { policy, guardrail }) => {
            blocked_event(gw, ctx, &policy, guardrail, "a guardrail failed and its policy fails closed");
            Err(ProxyError::GuardrailFailed { policy })
        }
    }
}

/// `policy.blocked` for the outbox: who, which policy and why (never the request's text).
pub fn blocked_event(gw: &Gateway, ctx: &RequestCtx, policy: &str, guardrail: &str, reason: &str) {
    let Some(key) = ctx.key.as_ref() else { return };
    let entities: serde_json::Map<String, serde_json::Value> = ctx
        .policy
        .iter()
        .filter(|d| d.action == PolicyAction::Blocked)
        .flat_map(|d| d.entities.iter().map(|(k, n)| (k.clone(), json!(n))))
        .collect();
    gw.limiter.emit(NewEvent {
        id: gw_shared::ids::new_id(),
        org_id: key.org_id,
        event_type: POLICY_BLOCKED,
        dedupe_key: format!("{POLICY_BLOCKED}:{}", ctx.request_id),
        payload: json!({
            "type": POLICY_BLOCKED,
            "organization_id": key.org_id,
            "request_id": ctx.request_id,
            "team_id": ctx.team_id,
            "api_key_id": key.id,
            "model": ctx.model,
            "policy": policy,
            "guardrail": guardrail,
            "reason": reason,
            "entities": entities,
        }),
        created_at: chrono::Utc::now(),
    });
}

/// Just the texts of an answer, borrowed where they need no unescaping: most answers come out
/// of the guard unchanged and then go out as they came, without a full parse and serialization.
#[derive(Deserialize)]
struct Texts<'a> {
    #[serde(borrow, default)]
    choices: Vec<TextChoice<'a>>,
}

#[derive(Deserialize)]
struct TextChoice<'a> {
    #[serde(borrow, default)]
    message: Option<TextMessage<'a>>,
}

#[derive(Deserialize)]
struct TextMessage<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
}

/// A complete answer through the output guardrails: every choice's content redacted (and the
/// caller's values restored where the policy says). An answer that cannot be read cannot be
/// checked, so it does not go out.
pub fn guard_completion(
    gw: &Gateway,
    ctx: &mut RequestCtx,
    mut guard: OutputGuard,
    body: &Bytes,
) -> Result<Bytes, ProxyError> {
    let unreadable = |e: serde_json::Error| {
        log::error!("request {}: the answer could not be read for the output guardrails: {e}", ctx.request_id);
        ProxyError::GuardrailFailed { policy: "output".into() }
    };
    let texts: Texts = serde_json::from_slice(body).map_err(unreadable)?;
    let mut guarded: Vec<Option<String>> = Vec::with_capacity(texts.choices.len());
    let mut changed = false;
    let mut result = Ok(());
    for choice in &texts.choices {
        let Some(text) = choice.message.as_ref().and_then(|m| m.content.as_deref()) else {
            guarded.push(None);
            continue;
        };
        match guard.text(text) {
            Ok(t) => {
                changed |= t != text;
                guarded.push(Some(t));
            }
            Err(b) => {
                result = Err(b);
                break;
            }
        }
    }
    for d in guard.decisions() {
        gw.metrics.policy_decisions.with_label_values(&[d.guardrail, d.action.label(), d.stage.label()]).inc();
        ctx.policy.push(d);
    }
    if let Err(b) = result {
        blocked_event(gw, ctx, &b.policy, b.guardrail, &b.reason);
        return Err(ProxyError::PolicyBlocked { policy: b.policy, reason: b.reason });
    }
    if !changed {
        return Ok(body.clone());
    }
    let mut completion: ChatCompletion = serde_json::from_slice(body).map_err(unreadable)?;
    for (choice, text) in completion.choices.iter_mut().zip(guarded) {
        if text.is_some() {
            choice.message.content = text;
        }
    }
    serde_json::to_vec(&completion).map(Bytes::from).map_err(|e| ProxyError::internal("guarded answer", e))
}
