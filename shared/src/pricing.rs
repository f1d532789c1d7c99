//! Cost maths: exact decimal USD from token counts and per-million-token prices.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// USD per million tokens. Cached input, cache writes and reasoning default to the plain input
/// and output prices when a provider does not price them apart.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    #[serde(with = "rust_decimal::serde::str")]
    pub input_per_mtok: Decimal,
    #[serde(with = "rust_decimal::serde::str")]
    pub output_per_mtok: Decimal,
    #[serde(default, with = "rust_decimal::serde::str_option", skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<Decimal>,
    #[serde(default, with = "rust_decimal::serde::str_option", skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<Decimal>,
    #[serde(default, with = "rust_decimal::serde::str_option", skip_serializing_if = "Option::is_none")]
    pub reasoning_per_mtok: Option<Decimal>,
    /// Prices under other service tiers (`priority`, `flex`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tiers: BTreeMap<String, TierPrice>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TierPrice {
    #[serde(with = "rust_decimal::serde::str")]
    pub input_per_mtok: Decimal,
    #[serde(with = "rust_decimal::serde::str")]
    pub output_per_mtok: Decimal,
    #[serde(default, with = "rust_decimal::serde::str_option", skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<Decimal>,
}

/// Token counts as reported by the upstream (or computed by the mock provider).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Of the prompt tokens, how many the provider served from its prompt cache.
    pub cached_tokens: u32,
    /// Of the completion tokens, how many were spent on reasoning.
    pub reasoning_tokens: u32,
    /// Of the prompt tokens, how many were written to the provider's prompt cache (Anthropic
    /// prices these above plain input).
    pub cache_creation_tokens: u32,
    /// The service tier the upstream says served the request (priced differently by some).
    pub tier: ServiceTier,
}

/// Provider service tiers that change the price.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ServiceTier {
    #[default]
    Standard,
    Priority,
    Flex,
}

impl ServiceTier {
    /// From the `service_tier` an upstream reports (`default`, `auto`, `priority`, `flex`, ...).
    pub fn from_reported(s: &str) -> Self {
        match s {
            "priority" => ServiceTier::Priority,
            "flex" => ServiceTier::Flex,
            _ => ServiceTier::Standard,
        }
    }
}

impl TokenUsage {
    pub fn total(&self) -> u32 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// Adds another attempt's tokens (a request billed for more than one attempt); the tier is
    /// the later one's.
    pub fn add(&mut self, other: TokenUsage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.saturating_add(other.completion_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.cache_creation_tokens = self.cache_creation_tokens.saturating_add(other.cache_creation_tokens);
        self.tier = other.tier;
    }
}

const PER: Decimal = Decimal::from_parts(1_000_000, 0, 0, false, 0);

/// Exact cost in USD, prices per million tokens. Prompt tokens served from the provider's cache
/// and those written to it, and completion tokens spent on reasoning, are priced apart when the
/// provider prices them apart; a service tier with its own prices replaces the standard ones.
pub fn cost_usd(price: &ModelPrice, usage: TokenUsage) -> Decimal {
    let tier = match usage.tier {
        ServiceTier::Standard => None,
        ServiceTier::Priority => price.tiers.get("priority"),
        ServiceTier::Flex => price.tiers.get("flex"),
    };
    let (input, output, cached) = match tier {
        Some(t) => (t.input_per_mtok, t.output_per_mtok, t.cached_input_per_mtok.or(price.cached_input_per_mtok)),
        None => (price.input_per_mtok, price.output_per_mtok, price.cached_input_per_mtok),
    };
    let cached_tokens = usage.cached_tokens.min(usage.prompt_tokens);
    let written = usage.cache_creation_tokens.min(usage.prompt_tokens - cached_tokens);
    let plain_in = usage.prompt_tokens - cached_tokens - written;
    let reasoning = usage.reasoning_tokens.min(usage.completion_tokens);
    let plain_out = usage.completion_tokens - reasoning;
    let sum = Decimal::from(plain_in) * input
        + Decimal::from(cached_tokens) * cached.unwrap_or(input)
        + Decimal::from(written) * price.cache_write_per_mtok.unwrap_or(input)
        + Decimal::from(plain_out) * output
        + Decimal::from(reasoning) * price.reasoning_per_mtok.unwrap_or(output);
    (sum / PER).normalize()
}

/// The `x-gw-cost-usd` header value: plain decimal notation, no exponent, no trailing zeros
/// (`0`, `0.000105`, `12.5`), at most 10 decimal places like the audit column.
pub fn format_cost(cost: Decimal) -> String {
    let mut c = cost.round_dp(10).normalize();
    if c.is_zero() {
        c = Decimal::ZERO;
    }
    c.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn price(i: &str, o: &str) -> ModelPrice {
        ModelPrice {
            input_per_mtok: Decimal::from_str(i).unwrap(),
            output_per_mtok: Decimal::from_str(o).unwrap(),
            ..Default::default()
        }
    }

    fn dec(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn cached_written_and_reasoning_tokens_use_their_prices() {
        let mut p = price("3", "15");
        p.cached_input_per_mtok = Some(dec("0.3"));
        p.cache_write_per_mtok = Some(dec("3.75"));
        p.reasoning_per_mtok = Some(dec("20"));
        let u = TokenUsage {
            prompt_tokens: 1000,
            cached_tokens: 600,
            cache_creation_tokens: 100,
            completion_tokens: 50,
            reasoning_tokens: 30,
            ..Default::default()
        };
        // 300*3 + 600*0.3 + 100*3.75 + 20*15 + 30*20 = 900 + 180 + 375 + 300 + 600 = 2355 per 1e6
        assert_eq!(cost_usd(&p, u), dec("0.002355"));
        // Without separate prices the same tokens cost the plain rates.
        let plain = price("3", "15");
        assert_eq!(cost_usd(&plain, u), dec("0.00375"));
        // Counts a provider reports inconsistently never make the cost negative or overflow.
        let odd = TokenUsage {
            prompt_tokens: 5,
            cached_tokens: 9,
            cache_creation_tokens: 9,
            completion_tokens: 1,
            reasoning_tokens: 7,
            ..Default::default()
        };
        assert_eq!(cost_usd(&p, odd), (dec("5") * dec("0.3") + dec("20")) / PER);
    }

    #[test]
    fn service_tiers_use_their_prices() {
        let mut p = price("1.25", "10");
        p.tiers.insert(
            "priority".into(),
            TierPrice { input_per_mtok: dec("2.5"), output_per_mtok: dec("20"), cached_input_per_mtok: None },
        );
        let u = TokenUsage { prompt_tokens: 1_000_000, completion_tokens: 0, ..Default::default() };
        assert_eq!(cost_usd(&p, u), dec("1.25"));
        assert_eq!(cost_usd(&p, TokenUsage { tier: ServiceTier::Priority, ..u }), dec("2.5"));
        // A tier the model has no prices for is billed at the standard rate.
        assert_eq!(cost_usd(&p, TokenUsage { tier: ServiceTier::Flex, ..u }), dec("1.25"));
        assert_eq!(ServiceTier::from_reported("priority"), ServiceTier::Priority);
        assert_eq!(ServiceTier::from_reported("default"), ServiceTier::Standard);
    }

    /// Every catalog entry: cost equals each token class times its price, exactly.
    #[test]
    fn whole_catalog_costs_are_exact() {
        let catalog = crate::catalog::Catalog::builtin().unwrap();
        let usages = [
            TokenUsage { prompt_tokens: 1, completion_tokens: 1, ..Default::default() },
            TokenUsage {
                prompt_tokens: 123_457,
                completion_tokens: 9_999,
                cached_tokens: 100_000,
                reasoning_tokens: 4_321,
                ..Default::default()
            },
            TokenUsage {
                prompt_tokens: 2_000,
                completion_tokens: 10,
                cached_tokens: 500,
                cache_creation_tokens: 700,
                ..Default::default()
            },
            TokenUsage {
                prompt_tokens: u32::MAX,
                completion_tokens: u32::MAX,
                cached_tokens: u32::MAX / 2,
                reasoning_tokens: 77,
                ..Default::default()
            },
        ];
        let mut checked = 0;
        for (name, entry) in &catalog.models {
            let p = ModelPrice::from(&entry.price);
            for u in usages {
                let cached = Decimal::from(u.cached_tokens);
                let written = Decimal::from(u.cache_creation_tokens);
                let reasoning = Decimal::from(u.reasoning_tokens);
                let expect = (Decimal::from(u.prompt_tokens) - cached - written) * p.input_per_mtok
                    + cached * p.cached_input_per_mtok.unwrap_or(p.input_per_mtok)
                    + written * p.cache_write_per_mtok.unwrap_or(p.input_per_mtok)
                    + (Decimal::from(u.completion_tokens) - reasoning) * p.output_per_mtok
                    + reasoning * p.reasoning_per_mtok.unwrap_or(p.output_per_mtok);
                assert_eq!(cost_usd(&p, u), (expect / PER).normalize(), "{name} {u:?}");
                assert!(cost_usd(&p, u) >= Decimal::ZERO, "{name}");
            }
            checked += 1;
        }
        assert!(checked >= 100, "{checked}");
    }

    #[test]
    fn exact_cost() {
        let p = price("0.15", "0.60");
        let u = TokenUsage { prompt_tokens: 100, completion_tokens: 150, ..Default::default() };
        // 100 * 0.15 / 1e6 + 150 * 0.60 / 1e6 = 0.000015 + 0.00009
        assert_eq!(cost_usd(&p, u), Decimal::from_str("0.000105").unwrap());
        assert_eq!(format_cost(cost_usd(&p, u)), "0.000105");
    }

    #[test]
    fn zero_and_large() {
        let p = price("2.5", "10");
        assert_eq!(format_cost(cost_usd(&p, TokenUsage::default())), "0");
        let u = TokenUsage { prompt_tokens: u32::MAX, completion_tokens: u32::MAX, ..Default::default() };
        let c = cost_usd(&p, u);
        assert_eq!(c, Decimal::from(u32::MAX) * Decimal::from_str("12.5").unwrap() / PER);
        assert!(!format_cost(c).contains('e'));
    }

    #[test]
    fn tiny_prices_keep_precision() {
        let p = price("0.0375", "0");
        let u = TokenUsage { prompt_tokens: 1, completion_tokens: 0, ..Default::default() };
        assert_eq!(format_cost(cost_usd(&p, u)), "0.0000000375");
    }

    #[test]
    fn cost_is_additive() {
        // Property: cost of (a + b) tokens equals cost(a) + cost(b), for a spread of values.
        let p = price("0.15", "0.6");
        for a in [0u32, 1, 7, 999, 123_456] {
            for b in [0u32, 3, 1000, 77_777] {
                let ua = TokenUsage { prompt_tokens: a, completion_tokens: b, ..Default::default() };
                let ub = TokenUsage { prompt_tokens: b, completion_tokens: a, ..Default::default() };
                let sum = TokenUsage { prompt_tokens: a + b, completion_tokens: a + b, ..Default::default() };
                assert_eq!(cost_usd(&p, ua) + cost_usd(&p, ub), cost_usd(&p, sum));
            }
        }
    }
}
