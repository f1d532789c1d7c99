//! An upstream's complete (non-streamed) answer: billed from its usage (an estimate when it
//! reported none), through the output guardrails, offered to the cache, written. A passed-through
//! Messages answer (`raw`) goes out as the deployment sent it; its translation is what is billed
//! and cached.

use gw_shared::providers::Completion;

use super::{bill, guard, keep, write, Prompt, Upstream};
use crate::ctx::{RequestCtx, SettledBy};
use crate::error::ProxyError;
use crate::state::Gateway;
use pingora::proxy::Session;

pub async fn plain(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut RequestCtx,
    up: &Upstream<'_>,
    completion: Completion,
    raw: Option<bytes::Bytes>,
) -> Result<(), ProxyError> {
    let Completion { body, usage } = completion;
    match usage {
        Some(u) => bill::charge(gw, ctx, up.dep, u, SettledBy::Usage),
        None => bill::charge_estimate(gw, ctx, up, None, gw_shared::providers::text_bytes(&body)),
    };
    let sent = match (up.prompt, raw) {
        (_, Some(raw)) => {
            if let Some(trace) = ctx.trace.as_deref_mut() {
                trace.note_finish_reasons(&body);
            }
            raw
        }
        (Prompt::Chat(_), None) => guard::completion(gw, ctx, body.clone())?,
        (Prompt::Embeddings(_), None) => body.clone(),
    };
    if let Some(u) = usage {
        keep::plain(gw, ctx, up.dep, body, u).await;
    }
    write::json(session, ctx, 200, sent, Vec::new()).await
}
