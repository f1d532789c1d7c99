//! An upstream's complete (non-streamed) answer: billed from its usage (an estimate when it
//! reported none), through the output guardrails, offered to the cache, written.

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
) -> Result<(), ProxyError> {
    let Completion { body, usage } = completion;
    match usage {
        Some(u) => bill::charge(gw, ctx, up.dep, u, SettledBy::Usage),
        None => bill::charge_estimate(gw, ctx, up, None, gw_shared::providers::text_bytes(&body)),
    };
    let sent = match up.prompt {
        Prompt::Chat(_) => guard::completion(gw, ctx, body.clone())?,
        Prompt::Embeddings(_) => body.clone(),
    };
    if let Some(u) = usage {
        keep::plain(gw, ctx, up.dep, body, u).await;
    }
    write::json(session, ctx, 200, sent, Vec::new()).await
}
