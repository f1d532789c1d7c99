//! Budgets and rate limits: settings, periods, request estimates, the plan of one request's
//! checks, the shared Redis scripts and the replica's fallback limiter. Plain logic; the proxy's
//! limits step and the management API drive it.

pub mod deployment_caps;
pub mod estimate;
pub mod events;
pub mod local;
pub mod narrowing;
pub mod period;
pub mod plan;
pub mod script;
pub mod settings;
pub mod slots;

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
