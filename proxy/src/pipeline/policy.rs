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
//!
//! The step's work is bounded per request: the input's text times the passes its guardrails make
//! ([`scan_work`]). Up to `policy_inline_scan_work` it runs here, on the request's worker; past it
//! the scan runs in the low-priority scan pool (`crate::scan_pool`), so one tenant's megabyte
//! prompts under hundreds of patterns do not hold the worker other tenants' requests need; past
//! `policy_max_scan_work` the request is refused (413 `policy_scan_too_large`) before any scan.

use std::sync::Arc;
use std::time::Instant;

use gw_shared::openai::{ChatRequest, EmbeddingsRequest};
use gw_shared::policy::engine::{
    run_input, scan_work, CompiledPolicy, InputOutcome, OutputGuard, RequestFacts, Segment, Stop,
};
use gw_shared::policy::vault::Vault;
use serde_json::Value;

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::scan_pool::ScanError;
use crate::state::Gateway;

/// The parsed request the step reads and rewrites, out of the context while a scan has it.
enum Input {
    Chat(ChatRequest),
    Embeddings(EmbeddingsRequest),
}

impl Input {
    fn take(ctx: &mut RequestCtx) -> Option<Input> {
        if let Some(req) = ctx.request.take() {
            return Some(Input::Chat(req));
        }
        ctx.embeddings.take().map(Input::Embeddings)
    }

    fn put_back(self, ctx: &mut RequestCtx) {
        match self {
            Input::Chat(req) => ctx.request = Some(req),
            Input::Embeddings(req) => ctx.embeddings = Some(req),
        }
    }

    /// Bytes of text the guardrails read.
    fn text_bytes(&mut self) -> u64 {
        match self {
            Input::Chat(req) => req.texts_mut().iter().map(|(_, t)| t.len() as u64).sum(),
            Input::Embeddings(req) => req.texts_mut().map_or(0, |t| t.iter().map(|t| t.len() as u64).sum()),
        }
    }
}

/// What a scan needs besides the input (owned: it may run on a pool thread).
struct Scan {
    applied: Vec<Arc<CompiledPolicy>>,
    model: String,
    /// The prompt's size: the limits step's estimate, if it made one.
    known_tokens: Option<u64>,
}

impl Scan {
    fn run(&self, input: &mut Input) -> Result<(InputOutcome, Vault), ProxyError> {
        let mut vault = Vault::new();
        let counts = self.applied.iter().any(|p| p.counts_tokens());
        let outcome = match input {
            Input::Chat(req) => {
                let prompt_tokens = match (self.known_tokens, counts) {
                    (Some(t), _) => t,
                    (None, true) => gw_shared::limits::estimate::chat(req, 0).prompt_tokens,
                    (None, false) => 0,
                };
                let facts = RequestFacts { model: &self.model, prompt_tokens };
                let mut texts = req.texts_mut();
                let mut segs: Vec<Segment> =
                    texts.iter_mut().map(|(user, text)| Segment { user: *user, text }).collect();
                run_input(&self.applied, &mut segs, &facts, &mut vault)
            }
            Input::Embeddings(req) => {
                let prompt_tokens = match (self.known_tokens, counts) {
                    (Some(t), _) => t,
                    (None, true) => gw_shared::limits::estimate::embeddings(req).prompt_tokens,
                    (None, false) => 0,
                };
                let facts = RequestFacts { model: &self.model, prompt_tokens };
                let outcome = match req.texts_mut() {
                    Some(texts) => {
                        let mut segs: Vec<Segment> =
                            texts.iter_mut().map(|text| Segment { user: true, text }).collect();
                        run_input(&self.applied, &mut segs, &facts, &mut vault)
                    }
                    None if self.applied.iter().any(|p| p.reads_input_text()) => {
                        return Err(ProxyError::BadRequest {
                            message: "Token-array 'input' cannot be checked by this request's guardrails (they \
                                      read text): send the input as text."
                                .into(),
                            param: Some("input".into()),
                        });
                    }
                    None => run_input(&self.applied, &mut [], &facts, &mut vault),
                };
                req.sync_body();
                outcome
            }
        };
        Ok((outcome, vault))
    }
}

pub async fn run(gw: &Gateway, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
    if ctx.applied.is_empty() {
        return Ok(());
    }
    let started = Instant::now();
    let Some(mut input) = Input::take(ctx) else {
        return Err(ProxyError::Internal("policy step without a parsed request".into()));
    };
    let scan = Scan {
        applied: ctx.applied.clone(),
        model: ctx.model.clone().unwrap_or_default(),
        known_tokens: ctx.estimate.map(|e| e.prompt_tokens),
    };
    let bytes = input.text_bytes();
    let work = scan_work(&scan.applied, bytes);
    let scanned = if work > gw.scan_budget.max {
        input.put_back(ctx);
        gw.metrics.policy_scans.with_label_values(&["refused"]).inc();
        return Err(ProxyError::PolicyScanTooLarge { bytes, work, budget: gw.scan_budget.max });
    } else if work <= gw.scan_budget.inline {
        let r = scan.run(&mut input);
        input.put_back(ctx);
        r
    } else {
        gw.metrics.policy_scans.with_label_values(&["pool"]).inc();
        let org_id = ctx.key.as_ref().map(|k| k.org_id).unwrap_or_default();
        let job = gw.scan_pool.run(org_id, move || {
            let r = scan.run(&mut input);
            (input, r)
        });
        match ctx.within_deadline(job).await? {
            Ok((input, r)) => {
                input.put_back(ctx);
                r
            }
            Err(ScanError::Busy) => return Err(ProxyError::PolicyScanBusy),
            Err(ScanError::Failed) => return Err(ProxyError::Internal("a policy scan failed".into())),
        }
    };
    let (outcome, vault) = scanned?;
    for kind in &outcome.failures {
        gw.metrics.policy_guardrail_errors.with_label_values(&[kind]).inc();
    }
    for d in &outcome.decisions {
        gw.metrics.policy_decisions.with_label_values(&[d.guardrail, d.action.label(), d.stage.label()]).inc();
    }
    ctx.policy.extend(outcome.decisions);
    gw.metrics.policy_step.observe(started.elapsed().as_secs_f64());
    match outcome.stop {
        None => match ctx.request.as_ref() {
            Some(req) => {
                let guard = OutputGuard::new(&ctx.applied, vault);
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
    }
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
