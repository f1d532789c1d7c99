//! Header names of the `/v1` surface, defined once.

pub const REQUEST_ID: &str = "x-gw-request-id";
pub const PROVIDER: &str = "x-gw-provider";
pub const MODEL: &str = "x-gw-model";
pub const COST_USD: &str = "x-gw-cost-usd";
pub const LATENCY_MS: &str = "x-gw-latency-ms";
pub const TTFT_MS: &str = "x-gw-ttft-ms";
pub const CACHE: &str = "x-gw-cache";
pub const POLICY_ACTION: &str = "x-gw-policy-action";
pub const POLICY_REASON: &str = "x-gw-policy-reason";

/// Request header naming the team to attribute cost to.
pub const TEAM: &str = "x-gw-team";
/// Request header listing guardrail policies to apply.
pub const POLICY: &str = "x-gw-policy";

/// Value of `x-gw-cache` when no cache tier answered.
pub const CACHE_MISS: &str = "miss";
/// Value of `x-gw-policy-action` / `-reason` when no policy acted.
pub const POLICY_NONE: &str = "none";
