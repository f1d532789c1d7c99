//! Header names of the `/v1` surface, defined once.

pub const REQUEST_ID: &str = "x-gw-request-id";
pub const PROVIDER: &str = "x-gw-provider";
pub const MODEL: &str = "x-gw-model";
pub const COST_USD: &str = "x-gw-cost-usd";
pub const LATENCY_MS: &str = "x-gw-latency-ms";
pub const TTFT_MS: &str = "x-gw-ttft-ms";
pub const CACHE: &str = "x-gw-cache";
/// On an L3 hit: the cosine similarity of the prompt to the cached one (`0.9731`).
pub const CACHE_SIMILARITY: &str = "x-gw-cache-similarity";
pub const POLICY_ACTION: &str = "x-gw-policy-action";
pub const POLICY_REASON: &str = "x-gw-policy-reason";

/// Request header naming the team to attribute cost to.
pub const TEAM: &str = "x-gw-team";
/// Request header listing guardrail policies to apply.
pub const POLICY: &str = "x-gw-policy";
/// Request header: seconds the answer may stay cached (overrides the configured TTL).
pub const CACHE_TTL: &str = "x-gw-cache-ttl";

/// Request header: the key experiments assign variants by when the body has no `user`.
pub const EXPERIMENT_KEY: &str = "x-gw-experiment-key";
/// The experiment a request took part in, and its variant.
pub const EXPERIMENT: &str = "x-gw-experiment";
pub const EXPERIMENT_VARIANT: &str = "x-gw-experiment-variant";
/// The prompt template a request rendered, and its version.
pub const PROMPT_TEMPLATE: &str = "x-gw-prompt-template";
pub const PROMPT_TEMPLATE_VERSION: &str = "x-gw-prompt-template-version";

/// Value of `x-gw-policy-action` / `-reason` when no policy acted.
pub const POLICY_NONE: &str = "none";
