//! The response cache's logic, free of I/O: request keying (`key`), the stored entry (`entry`),
//! streams gathered into one response and replayed as chunks (`stream`), the settings an
//! organization and its teams choose and a request's own directives (`settings`), local
//! embeddings for the semantic tier (`embed`) and the check that a near prompt asks the same
//! question (`verify`), and the per-organization byte budget of L2 (`l2_budget`, a Redis
//! script). The proxy owns the tiers themselves.

pub mod embed;
pub mod entry;
pub mod key;
pub mod l2_budget;
pub mod settings;
pub mod stream;
pub mod verify;

/// Which cache tier answered (`x-gw-cache`), or why none was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheStatus {
    /// The request was not looked up: caching is off for it, it said `no-cache`/`no-store`, or
    /// its endpoint is not cached.
    #[default]
    Bypass,
    /// Looked up in every tier that is on; none had it.
    Miss,
    L1,
    L2,
    L3,
}

impl CacheStatus {
    pub fn label(self) -> &'static str {
        match self {
            CacheStatus::Bypass => "bypass",
            CacheStatus::Miss => "miss",
            CacheStatus::L1 => "L1",
            CacheStatus::L2 => "L2",
            CacheStatus::L3 => "L3",
        }
    }

    pub fn is_hit(self) -> bool {
        matches!(self, CacheStatus::L1 | CacheStatus::L2 | CacheStatus::L3)
    }
}
