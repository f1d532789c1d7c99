//! Rate-limit state as the `x-ratelimit-*` headers report it (the limiter arrives with its
//! issue).

use std::time::Duration;

/// One rate-limit window as the `x-ratelimit-*` headers report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitWindow {
    pub limit: u64,
    pub remaining: u64,
    pub reset: Duration,
}

/// The limits that applied to the request, when any did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitState {
    pub requests: Option<LimitWindow>,
    pub tokens: Option<LimitWindow>,
}
