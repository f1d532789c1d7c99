//! The output guardrails over an answer, and the decisions they make. Every text-bearing field is
//! covered (content, refusal, tool-call arguments, audio transcripts; `logprobs` are dropped):
//! `gw_shared::policy::answer` for a whole answer, `gw_shared::policy::stream` for chunks.

use bytes::Bytes;
use gw_shared::policy::answer::{guard_completion, AnswerGuardError};
use gw_shared::policy::stream::GuardedStream;
use gw_shared::policy::PolicyDecision;
use gw_shared::providers::{ChunkFilter, StreamSink};

use crate::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::state::Gateway;

/// A whole chat answer through the request's output guard, if it has one. An answer that cannot
/// be read cannot be checked, so it does not go out.
pub fn completion(gw: &Gateway, ctx: &mut RequestCtx, body: Bytes) -> Result<Bytes, ProxyError> {
    let Some(mut guard) = ctx.output_guard.clone() else { return Ok(body) };
    let result = guard_completion(&mut guard, &body);
    record(gw, ctx, guard.decisions());
    match result {
        Ok(None) => Ok(body),
        Ok(Some(guarded)) => Ok(guarded),
        Err(AnswerGuardError::Blocked(b)) => Err(ProxyError::PolicyBlocked { policy: b.policy, reason: b.reason }),
        Err(AnswerGuardError::Unreadable(why)) => {
            log::error!("request {}: the answer could not be read for the output guardrails: {why}", ctx.request_id);
            Err(ProxyError::GuardrailFailed { policy: "output".into() })
        }
    }
}

/// A sink for a stream's chunks, through the request's output guard if it has one.
pub fn sink(ctx: &RequestCtx) -> StreamSink {
    match ctx.output_guard.clone() {
        Some(g) => StreamSink::filtered(Box::new(GuardedStream::new(g)) as Box<dyn ChunkFilter>),
        None => StreamSink::new(),
    }
}

/// The stream guard's decisions, once its stream is over.
pub fn stream_decisions(gw: &Gateway, ctx: &mut RequestCtx, sink: &StreamSink) {
    record(gw, ctx, sink.decisions());
}

fn record(gw: &Gateway, ctx: &mut RequestCtx, decisions: Vec<PolicyDecision>) {
    for d in decisions {
        gw.metrics.policy_decisions.with_label_values(&[d.guardrail, d.action.label(), d.stage.label()]).inc();
        ctx.policy.push(d);
    }
}

/// The error that ends an answer the output guardrails stopped (its decision is recorded).
pub fn blocked(sink: &mut StreamSink) -> ProxyError {
    match sink.blocked.take() {
        Some(b) => ProxyError::PolicyBlocked { policy: b.policy, reason: b.reason },
        None => ProxyError::PolicyBlocked { policy: String::new(), reason: "the answer was blocked".into() },
    }
}
