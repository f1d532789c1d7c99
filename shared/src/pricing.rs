//! Cost maths: exact decimal USD from token counts and per-million-token prices.

use rust_decimal::Decimal;

use crate::config::ModelPrice;

/// Token counts as reported by the upstream (or computed by the mock provider).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Of the prompt tokens, how many the provider served from its prompt cache.
    pub cached_tokens: u32,
    /// Of the completion tokens, how many were spent on reasoning.
    pub reasoning_tokens: u32,
}

impl TokenUsage {
    pub fn total(&self) -> u32 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

const PER: Decimal = Decimal::from_parts(1_000_000, 0, 0, false, 0);

/// Exact cost in USD: `prompt * input + completion * output`, prices per million tokens.
pub fn cost_usd(price: &ModelPrice, usage: TokenUsage) -> Decimal {
    let input = Decimal::from(usage.prompt_tokens) * price.input_per_mtok;
    let output = Decimal::from(usage.completion_tokens) * price.output_per_mtok;
    ((input + output) / PER).normalize()
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
        ModelPrice { input_per_mtok: Decimal::from_str(i).unwrap(), output_per_mtok: Decimal::from_str(o).unwrap() }
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
