//! Each organization's audit rows form a hash chain: a row's hash covers its predecessor's hash,
//! its position and every column it holds, so removing, inserting or editing any row breaks
//! every link after it. Writers append under a lock on the organization's chain head
//! (`audit_chain_heads`); exports recompute the chain from what Postgres returns.
//!
//! The hashed form is built from values as Postgres gives them back: timestamps in
//! microseconds, decimals rounded to the column's 10 places, JSON in the canonical form of
//! [`crate::cache::key::canonical`] (members sorted, numbers written one way), so a row read
//! back hashes exactly as it did when written.

use rust_decimal::{Decimal, RoundingStrategy};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::AuditRecord;

/// The predecessor of an organization's first row.
pub const GENESIS: [u8; 32] = [0; 32];

const VERSION: &[u8] = b"gw-audit-chain-v1\n";

/// A decimal as a NUMERIC(20, 10) column holds it (PostgreSQL rounds half away from zero).
fn numeric(d: Decimal) -> String {
    d.round_dp_with_strategy(10, RoundingStrategy::MidpointAwayFromZero).normalize().to_string()
}

/// The hashed form of a row's content (not its chain fields).
pub fn content(r: &AuditRecord) -> Vec<u8> {
    let mut fields = json!([
        r.id,
        r.org_id,
        r.team_id,
        r.api_key_id,
        r.endpoint,
        r.model,
        r.provider,
        r.upstream_model,
        r.status_code,
        r.error_type,
        r.stream,
        r.prompt_tokens,
        r.completion_tokens,
        r.total_tokens,
        numeric(r.cost_usd),
        r.latency_ms,
        r.upstream_latency_ms,
        r.ttft_ms,
        r.cache_status,
        r.policy_action,
        r.attempts,
        r.created_at.timestamp_micros(),
        r.cached_tokens,
        r.reasoning_tokens,
        r.routing,
        r.policy,
        r.cache_creation_tokens,
        numeric(r.cache_saved_usd),
        r.cache_similarity.map(f32::to_bits),
        r.deployment,
        r.overhead_us,
        r.client_ip.map(|ip| ip.to_string()),
        r.user_agent_id,
        r.request_body,
        r.response_body,
    ]);
    // Added after rows were first hashed: present only when set, so earlier rows hash as before.
    if let (Some(s), Some(all)) = (&r.settled_by, fields.as_array_mut()) {
        all.push(json!(s));
    }
    let mut out = Vec::with_capacity(512);
    crate::cache::key::canonical(&fields, &mut out);
    out
}

/// The hash of the row at `seq` whose predecessor hashed to `prev`.
pub fn link(prev: &[u8], seq: i64, r: &AuditRecord) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(VERSION);
    h.update((prev.len() as u32).to_be_bytes());
    h.update(prev);
    h.update(seq.to_be_bytes());
    h.update(content(r));
    h.finalize().into()
}

/// Appends `rows` (one organization's, in order) to a chain whose head is `(seq, hash)`:
/// fills their chain fields and returns the new head.
pub fn append(head: (i64, Vec<u8>), rows: &mut [&mut AuditRecord]) -> (i64, Vec<u8>) {
    let (mut seq, mut prev) = head;
    for r in rows.iter_mut() {
        seq += 1;
        let hash = link(&prev, seq, r).to_vec();
        r.chain_seq = Some(seq);
        r.prev_hash = Some(std::mem::replace(&mut prev, hash.clone()));
        r.row_hash = Some(hash);
    }
    (seq, prev)
}

/// What is wrong with one link, found while walking a chain.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum Break {
    /// Rows between two links are missing (deleted).
    Missing { after_seq: i64, before_seq: i64, before_log_id: uuid::Uuid },
    /// The row's content no longer hashes to its stored hash (edited).
    Altered { seq: i64, log_id: uuid::Uuid },
    /// The row's stored predecessor hash is not its predecessor's hash (a link replaced).
    Relinked { seq: i64, log_id: uuid::Uuid },
    /// A row that carries no chain fields.
    Unchained { log_id: uuid::Uuid },
    /// Rows after the last one checked are missing: the next position is gone although the
    /// chain's head is further on.
    MissingAfter { after_seq: i64, head_seq: i64 },
    /// The chain's head does not match its last row (rows removed from the end, or the head
    /// itself altered).
    HeadMismatch { head_seq: i64 },
}

/// Walks a chain in `seq` order, one row at a time, remembering only the previous link.
#[derive(Debug, Default)]
pub struct Verifier {
    prev: Option<(i64, Vec<u8>)>,
    pub checked: u64,
    pub breaks: Vec<Break>,
    /// Breaks past this many are counted, not kept.
    pub more_breaks: u64,
}

const MAX_BREAKS: usize = 100;

impl Verifier {
    /// Starts after a known link (the row before the first one checked), if any.
    pub fn after(prev: Option<(i64, Vec<u8>)>) -> Self {
        Self { prev, ..Self::default() }
    }

    fn flag(&mut self, b: Break) {
        if self.breaks.len() < MAX_BREAKS {
            self.breaks.push(b);
        } else {
            self.more_breaks += 1;
        }
    }

    pub fn check(&mut self, r: &AuditRecord) {
        self.checked += 1;
        let (Some(seq), Some(prev_hash), Some(hash)) = (r.chain_seq, r.prev_hash.as_ref(), r.row_hash.as_ref()) else {
            self.flag(Break::Unchained { log_id: r.id });
            return;
        };
        match &self.prev {
            Some((p_seq, p_hash)) => {
                if seq != p_seq + 1 {
                    self.flag(Break::Missing { after_seq: *p_seq, before_seq: seq, before_log_id: r.id });
                } else if p_hash != prev_hash {
                    self.flag(Break::Relinked { seq, log_id: r.id });
                }
            }
            // The organization's first row follows the genesis hash.
            None if seq == 1 && prev_hash.as_slice() != GENESIS => self.flag(Break::Relinked { seq, log_id: r.id }),
            None => {}
        }
        if link(prev_hash, seq, r).as_slice() != hash.as_slice() {
            self.flag(Break::Altered { seq, log_id: r.id });
        }
        self.prev = Some((seq, hash.clone()));
    }

    /// Records a break found outside [`Verifier::check`] (at the chain's ends).
    pub fn report(&mut self, b: Break) {
        self.flag(b);
    }

    pub fn last(&self) -> Option<&(i64, Vec<u8>)> {
        self.prev.as_ref()
    }

    pub fn verified(&self) -> bool {
        self.breaks.is_empty() && self.more_breaks == 0
    }
}

#[cfg(test)]
mod tests;
