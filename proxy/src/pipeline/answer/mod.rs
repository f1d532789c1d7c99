//! The answer step: every answer the client gets is finished here, whatever its source: an
//! upstream's plain answer ([`plain`]), an upstream's stream ([`stream`]) or a cache replay
//! ([`replay`]). Only here does usage become cost (`bill`), do output guardrails run over every
//! text-bearing field and record their decisions (`guard`), is what the cache keeps decided
//! (`keep`), and are headers and body written (`write`, which errors and `/v1/models` use too).
//! The route step picks a deployment, makes the exchange and hands the answer over.

mod bill;
mod count;
mod guard;
mod keep;
mod plain;
mod replay;
mod stream;
mod write;

use gw_shared::openai::{ChatRequest, EmbeddingsRequest};
use gw_shared::routing::Deployment;

pub use count::count_tokens;
pub use plain::plain;
pub use replay::replay;
pub use stream::{stream, StreamIn};
pub use write::{error, json};

/// Charges an attempt whose answer is an error to gw (a `failed` response) but reports what the
/// upstream spent on it: billed all the same.
pub fn charge_reported(
    gw: &crate::state::Gateway,
    ctx: &mut crate::ctx::RequestCtx,
    dep: &Deployment,
    usage: gw_shared::pricing::TokenUsage,
) {
    bill::charge(gw, ctx, dep, usage, crate::ctx::SettledBy::Usage);
}

/// The request an upstream answer belongs to, for sizing its prompt when the upstream does not
/// say what it billed.
#[derive(Clone, Copy)]
pub enum Prompt<'a> {
    Chat(&'a ChatRequest),
    Embeddings(&'a EmbeddingsRequest),
}

/// Where an upstream answer comes from.
pub struct Upstream<'a> {
    pub dep: &'a Deployment,
    pub prompt: Prompt<'a>,
}
