//! Response cache: the tiers (the cache itself arrives with its issue).

/// Which cache tier answered (`x-gw-cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheStatus {
    #[default]
    Miss,
    L1,
    L2,
    L3,
}

impl CacheStatus {
    pub fn label(self) -> &'static str {
        match self {
            CacheStatus::Miss => "miss",
            CacheStatus::L1 => "L1",
            CacheStatus::L2 => "L2",
            CacheStatus::L3 => "L3",
        }
    }
}
