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
use sha2::{Digest, Sha256};

use super::AuditRecord;

/// The predecessor of an organization's first row.
pub const GENESIS: [u8; 32] = [0; 32];

const VERSION: &[u8] = b"gw-audit-chain-v1\n";

/// A decimal as a NUMERIC(20, 10) column holds it (PostgreSQL rounds half away from zero).
fn numeric(d: Decimal) -> String {
    d.round_dp_with_strategy(10, RoundingStrategy::MidpointAwayFromZero).normalize().to_string()
}

/// The hashed form of a row's content (not its chain fields): a JSON array of its columns in
/// the canonical form, written field by field (no `serde_json::Value` built per row: the
/// writer hashes every row on the proxy's core).
pub fn content(r: &AuditRecord) -> Vec<u8> {
    let mut c = Canon::with_capacity(512 + r.request_body.as_ref().map_or(0, String::len));
    c.uuid(Some(r.id));
    c.uuid(Some(r.org_id));
    c.uuid(r.team_id);
    c.uuid(r.api_key_id);
    c.str(Some(&r.endpoint));
    c.str(r.model.as_deref());
    c.str(r.provider.as_deref());
    c.str(r.upstream_model.as_deref());
    c.int(Some(r.status_code));
    c.str(r.error_type.as_deref());
    c.bool(r.stream);
    c.int(Some(r.prompt_tokens));
    c.int(Some(r.completion_tokens));
    c.int(Some(r.total_tokens));
    c.str(Some(&numeric(r.cost_usd)));
    c.int(Some(r.latency_ms));
    c.int(r.upstream_latency_ms);
    c.int(r.ttft_ms);
    c.str(Some(&r.cache_status));
    c.str(r.policy_action.as_deref());
    c.int(Some(r.attempts));
    c.int(Some(r.created_at.timestamp_micros()));
    c.int(Some(r.cached_tokens));
    c.int(Some(r.reasoning_tokens));
    c.value(&r.routing);
    c.value(&r.policy);
    c.int(Some(r.cache_creation_tokens));
    c.str(Some(&numeric(r.cache_saved_usd)));
    c.int(r.cache_similarity.map(f32::to_bits));
    c.str(r.deployment.as_deref());
    c.int(r.overhead_us);
    c.str(r.client_ip.map(|ip| ip.to_string()).as_deref());
    c.int(r.user_agent_id);
    c.str(r.request_body.as_deref());
    c.str(r.response_body.as_deref());
    // Added after rows were first hashed: present only when set, so earlier rows hash as before.
    // The later columns follow `settled_by` (then written even when absent) only when one of
    // them is set: a row's array length says which form it has.
    let later = r.template_id.is_some()
        || r.template_version.is_some()
        || r.experiment_id.is_some()
        || r.experiment_variant.is_some()
        || r.origin.is_some();
    if later {
        c.str(r.settled_by.as_deref());
        c.uuid(r.template_id);
        c.int(r.template_version);
        c.uuid(r.experiment_id);
        c.str(r.experiment_variant.as_deref());
        c.str(r.origin.as_deref());
    } else if let Some(s) = &r.settled_by {
        c.str(Some(s));
    }
    c.finish()
}

/// Writes the canonical JSON array of [`content`] one element at a time: `null` for an absent
/// value, integers in decimal, strings escaped as `serde_json` escapes them, JSON values through
/// [`crate::cache::key::canonical`].
struct Canon {
    out: Vec<u8>,
}

impl Canon {
    fn with_capacity(n: usize) -> Self {
        let mut out = Vec::with_capacity(n);
        out.push(b'[');
        Self { out }
    }

    fn next(&mut self) {
        if self.out.len() > 1 {
            self.out.push(b',');
        }
    }

    fn int<I: itoa::Integer>(&mut self, i: Option<I>) {
        self.next();
        match i {
            Some(i) => self.out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes()),
            None => self.out.extend_from_slice(b"null"),
        }
    }

    fn bool(&mut self, b: bool) {
        self.next();
        self.out.extend_from_slice(if b { b"true" } else { b"false" });
    }

    fn str(&mut self, s: Option<&str>) {
        self.next();
        match s {
            Some(s) => {
                // Writing into memory cannot fail.
                let _ = serde_json::to_writer(&mut self.out, s);
            }
            None => self.out.extend_from_slice(b"null"),
        }
    }

    fn uuid(&mut self, id: Option<uuid::Uuid>) {
        self.next();
        match id {
            Some(id) => {
                self.out.push(b'"');
                self.out.extend_from_slice(id.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()).as_bytes());
                self.out.push(b'"');
            }
            None => self.out.extend_from_slice(b"null"),
        }
    }

    fn value(&mut self, v: &serde_json::Value) {
        self.next();
        crate::cache::key::canonical(v, &mut self.out);
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.push(b']');
        self.out
    }
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
