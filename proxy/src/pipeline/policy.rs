//! The policy step: the request's policies (chosen by the resolve step) run over every text the
//! upstream will see, in order. Redaction rewrites the request before any upstream sees it; a
//! block answers 400 (`content_policy_violation`) at once; a guardrail that fails internally fails
//! closed unless its policy says otherwise. The answer's guard (output redaction, restoring
//! placeholders) is prepared here for the answer step.
//!
//! What a guard cannot vouch for is refused while nothing has been spent: `logprobs` (its tokens
//! spell the answer's values out again) and audio output (speech cannot be redacted) under an
//! output guardrail, and token-array embeddings input under a guardrail that reads the input's
//! text (gw has no tokenizer to read it with).

use std::time::Instant;

use gw_shared::openai::ChatRequest;
use gw_shared::policy::engine::{run_input, OutputGuard, RequestFacts, Segment, Stop};
use gw_shared::policy::vault::Vault;
use serde_json::Value;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::state::Gateway;

pub fn run(gw: &Gateway, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    if ctx.applied.is_empty() {
        return Ok(());
    }
    let started = Instant::now();
    let applied = std::mem::take(&mut ctx.applied);
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
            None if applied.iter().any(|p| p.reads_input_text()) => {
                ctx.applied = applied;
                return Err(ProxyError::BadRequest {
                    message: "Token-array 'input' cannot be checked by this request's guardrails (they read text): \
                              send the input as text."
                        .into(),
                    param: Some("input".into()),
                });
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
    let result = match outcome.stop {
        None => match ctx.request.as_ref() {
            Some(req) => {
                let guard = OutputGuard::new(&applied, vault);
                match guard.as_ref().filter(|g| g.scans()).map(|_| unguardable(req)) {
                    Some(Err(e)) => Err(e),
                    _ => {
                        ctx.output_guard = guard;
                        Ok(())
                    }
                }
            }
            None => Ok(()),
        },
        // The `policy.blocked` event is emitted once, in the logging step, from the decisions.
        Some(Stop::Blocked { policy, reason, .. }) => Err(ProxyError::PolicyBlocked { policy, reason }),
        Some(Stop::Failed { policy, .. }) => Err(ProxyError::GuardrailFailed { policy }),
    };
    ctx.applied = applied;
    result
}

/// What an output guardrail cannot redact, refused with the parameter that asked for it.
fn unguardable(req: &ChatRequest) -> Result<(), ProxyError> {
    let body = req.body();
    let set = |name: &str| body.get(name).is_some_and(|v| !v.is_null() && *v != Value::Bool(false));
    if set("logprobs") || set("top_logprobs") {
        return Err(ProxyError::BadRequest {
            message: "'logprobs' is not available on requests an output guardrail applies to: token log \
                      probabilities would show the values the guardrail redacts."
                .into(),
            param: Some("logprobs".into()),
        });
    }
    let audio =
        body.get("modalities").and_then(Value::as_array).is_some_and(|m| m.iter().any(|v| v.as_str() == Some("audio")));
    if audio {
        return Err(ProxyError::BadRequest {
            message: "Audio output is not available on requests an output guardrail applies to: speech cannot be \
                      redacted."
                .into(),
            param: Some("modalities".into()),
        });
    }
    Ok(())
}
