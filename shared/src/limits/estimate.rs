//! What a request may cost before it is made: its token estimate (for tokens-per-minute limits,
//! OpenAI's own rule of thumb: four bytes a token) and its maximum possible cost (for budget
//! reservations, an upper bound: no tokenizer makes more tokens than bytes, plus chat framing).

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use serde_json::Value;

use crate::openai::{ChatRequest, EmbeddingsRequest};
use crate::pricing::ModelPrice;

/// Tokens OpenAI's chat format adds per message, and per request (the reply's priming).
const PER_MESSAGE: u64 = 4;
const PER_REQUEST: u64 = 3;
/// An image costs at most this many prompt tokens (OpenAI's high-detail tiles top out near 1,100,
/// Anthropic's near 1,600), whatever the size of its URL or data.
const PER_IMAGE: u64 = 2_000;

/// A request's size, as far as limits care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Estimate {
    /// Prompt tokens, estimated.
    pub prompt_tokens: u64,
    /// Prompt tokens, at most.
    pub prompt_tokens_max: u64,
    /// Completion tokens, at most: `max_completion_tokens` (or `max_tokens`) times `n`, else the
    /// configured default.
    pub completion_tokens_max: u64,
}

impl Estimate {
    /// The tokens a tokens-per-minute window counts at admission.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens_max)
    }
}

/// Bytes of text in a value, images counted at their token ceiling (as bytes, 1:1).
fn text_bytes(v: &Value, images: &mut u64) -> u64 {
    match v {
        Value::String(s) => s.len() as u64,
        Value::Array(a) => a.iter().map(|x| text_bytes(x, images)).sum(),
        Value::Object(o) => {
            if matches!(o.get("type").and_then(Value::as_str), Some("image_url" | "image")) {
                *images += 1;
                return 0;
            }
            o.iter().map(|(k, x)| k.len() as u64 + text_bytes(x, images)).sum()
        }
        Value::Number(_) => 8,
        Value::Bool(_) | Value::Null => 1,
    }
}

pub fn chat(req: &ChatRequest, default_max_tokens: u64) -> Estimate {
    let body = req.body();
    let mut images = 0;
    let messages = req.messages();
    let mut bytes: u64 = messages.iter().map(|m| text_bytes(m, &mut images)).sum();
    for extra in ["tools", "functions", "response_format", "tool_choice", "prediction"] {
        if let Some(v) = body.get(extra) {
            bytes += text_bytes(v, &mut images);
        }
    }
    let framing = PER_MESSAGE * messages.len() as u64 + PER_REQUEST;
    let image_tokens = images * PER_IMAGE;
    let n = body.get("n").and_then(Value::as_u64).unwrap_or(1).max(1);
    let limit = body
        .get("max_completion_tokens")
        .and_then(Value::as_u64)
        .or_else(|| body.get("max_tokens").and_then(Value::as_u64))
        .unwrap_or(default_max_tokens);
    Estimate {
        prompt_tokens: bytes.div_ceil(4) + framing + image_tokens,
        prompt_tokens_max: bytes + framing + image_tokens,
        completion_tokens_max: limit.saturating_mul(n),
    }
}

pub fn embeddings(req: &EmbeddingsRequest) -> Estimate {
    let (estimate, max) = match req.texts() {
        Some(texts) => {
            let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
            (bytes.div_ceil(4), bytes)
        }
        None => {
            let n = req.token_count();
            (n, n)
        }
    };
    Estimate { prompt_tokens: estimate, prompt_tokens_max: max, completion_tokens_max: 0 }
}

/// The completion tokens a budget reserves for one choice of a request that sets no limit of its
/// own, and the limit gw then sends the upstream, if any. When the catalog knows every
/// deployment's maximum output, the reservation is the largest of them and the request goes
/// out as the client sent it: no answer can outgrow it. Otherwise gw cannot bound the answer from
/// the catalog, so it caps it at what it reserves: `default_max_tokens`, or less when a known
/// maximum is smaller (a limit above a model's maximum is an error at most providers).
pub fn completion_reservation(maxima: &[Option<u64>], default_max_tokens: u64) -> (u64, Option<u64>) {
    let known = maxima.iter().flatten().copied();
    if !maxima.is_empty() && maxima.iter().all(Option::is_some) {
        return (known.max().unwrap_or(default_max_tokens), None);
    }
    let cap = known.fold(default_max_tokens, u64::min).max(1);
    (cap, Some(cap))
}

/// The highest prices any of `prices` may charge per input and per output token (per million),
/// over their tiers, cache writes and reasoning.
pub fn ceiling<'a>(prices: impl IntoIterator<Item = &'a ModelPrice>) -> (Decimal, Decimal) {
    let mut input = Decimal::ZERO;
    let mut output = Decimal::ZERO;
    for p in prices {
        let ins = [Some(p.input_per_mtok), p.cache_write_per_mtok, p.cached_input_per_mtok]
            .into_iter()
            .flatten()
            .chain(p.tiers.values().map(|t| t.input_per_mtok));
        let outs = [Some(p.output_per_mtok), p.reasoning_per_mtok]
            .into_iter()
            .flatten()
            .chain(p.tiers.values().map(|t| t.output_per_mtok));
        input = ins.fold(input, Decimal::max);
        output = outs.fold(output, Decimal::max);
    }
    (input, output)
}

/// Nano-dollars in `usd`, rounded up (a counter never under-counts spend).
pub fn nanos(usd: Decimal) -> i64 {
    (usd * Decimal::from(1_000_000_000)).ceil().to_i64().unwrap_or(i64::MAX)
}

/// The most the request can cost, in nano-dollars, at the given price ceiling.
pub fn max_cost_nanos(e: &Estimate, (input, output): (Decimal, Decimal)) -> i64 {
    let per_million = Decimal::from(e.prompt_tokens_max) * input + Decimal::from(e.completion_tokens_max) * output;
    // Per million tokens → dollars → nano-dollars: times 1000.
    (per_million * Decimal::from(1000)).ceil().to_i64().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::pricing::TierPrice;
    use crate::pricing::{cost_usd, TokenUsage};

    fn chat_req(v: Value) -> ChatRequest {
        ChatRequest::parse(v.to_string().as_bytes()).unwrap()
    }

    fn price(input: &str, output: &str) -> ModelPrice {
        ModelPrice {
            input_per_mtok: input.parse().unwrap(),
            output_per_mtok: output.parse().unwrap(),
            cached_input_per_mtok: None,
            cache_write_per_mtok: None,
            reasoning_per_mtok: None,
            tiers: BTreeMap::new(),
        }
    }

    #[test]
    fn chat_estimates_count_text_framing_images_and_n() {
        let r = chat_req(json!({"model": "m", "messages": [
            {"role": "user", "content": "hello there, how are you?"},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}
        ], "max_tokens": 100, "n": 2}));
        let e = chat(&r, 4096);
        assert_eq!(e.completion_tokens_max, 200);
        assert!(e.prompt_tokens_max >= 25 + 2 * PER_MESSAGE + PER_REQUEST + PER_IMAGE);
        assert!(e.prompt_tokens < e.prompt_tokens_max);
        assert_eq!(
            chat(&chat_req(json!({"model": "m", "messages": [{"role": "user", "content": "x"}]})), 64)
                .completion_tokens_max,
            64
        );
        let r = chat_req(json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 5, "max_completion_tokens": 7}));
        assert_eq!(chat(&r, 64).completion_tokens_max, 7);
    }

    #[test]
    fn the_maximum_bounds_the_real_cost() {
        let p = price("2.5", "10");
        let r = chat_req(json!({"model": "m", "messages": [{"role": "user", "content": "one two three four"}],
            "max_tokens": 10}));
        let e = chat(&r, 4096);
        // Any tokenizer: at most a token per byte, plus framing; at most max_tokens out.
        let worst =
            TokenUsage { prompt_tokens: e.prompt_tokens_max as u32, completion_tokens: 10, ..Default::default() };
        assert!(nanos(cost_usd(&p, worst)) <= max_cost_nanos(&e, ceiling([&p])));
    }

    #[test]
    fn ceilings_take_the_dearest_price_of_every_deployment_and_tier() {
        let mut a = price("1", "2");
        a.tiers.insert(
            "priority".into(),
            TierPrice {
                input_per_mtok: "3".parse().unwrap(),
                output_per_mtok: "4".parse().unwrap(),
                cached_input_per_mtok: None,
            },
        );
        let mut b = price("0.5", "8");
        b.cache_write_per_mtok = Some("5".parse().unwrap());
        assert_eq!(ceiling([&a, &b]), ("5".parse().unwrap(), "8".parse().unwrap()));
    }

    #[test]
    fn reservations_cover_every_deployment_or_cap_the_request() {
        assert_eq!(completion_reservation(&[Some(16_384), Some(8_192)], 4_096), (16_384, None));
        assert_eq!(completion_reservation(&[Some(16_384), None], 4_096), (4_096, Some(4_096)));
        assert_eq!(completion_reservation(&[Some(2_048), None], 4_096), (2_048, Some(2_048)));
        assert_eq!(completion_reservation(&[None], 4_096), (4_096, Some(4_096)));
        assert_eq!(completion_reservation(&[], 4_096), (4_096, Some(4_096)));
    }

    #[test]
    fn nanos_round_up() {
        assert_eq!(nanos("0.0000000001".parse().unwrap()), 1);
        assert_eq!(nanos("1.5".parse().unwrap()), 1_500_000_000);
        assert_eq!(nanos(Decimal::ZERO), 0);
        let e = Estimate { prompt_tokens: 0, prompt_tokens_max: 1_000_000, completion_tokens_max: 0 };
        assert_eq!(max_cost_nanos(&e, ("0.15".parse().unwrap(), Decimal::ZERO)), 150_000_000);
    }
}
