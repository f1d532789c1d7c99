//! Money on the wire: US dollars as decimal strings (`"0.00003411"`), in every body gw answers,
//! so no amount passes through a binary float. Field names end in `_usd`: `cost_usd` for one
//! request, `spend_usd` for a sum over requests, `amount_usd` for a budget. Inputs accept a
//! string or, for clients that send numbers, a JSON number read through its decimal text.

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

const NANOS_PER_USD: i64 = 1_000_000_000;

/// Nano-dollars (the unit of the shared counters) as dollars.
pub fn from_nanos(nanos: i64) -> Decimal {
    Decimal::new(nanos, 9).normalize()
}

/// Dollars as nano-dollars, rounded half away from zero; `None` past `i64`.
pub fn to_nanos(usd: Decimal) -> Option<i64> {
    usd.checked_mul(Decimal::from(NANOS_PER_USD))?
        .round_dp_with_strategy(0, rust_decimal::RoundingStrategy::MidpointAwayFromZero)
        .to_i64()
}

/// The wire text of an amount: no trailing zeros (`"1.5"`, `"0"`).
pub fn text(usd: Decimal) -> String {
    usd.normalize().to_string()
}

/// `#[serde(with = "gw_shared::money::usd")]` for a `Decimal` field.
pub mod usd {
    use std::fmt;

    use rust_decimal::Decimal;
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Decimal, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::text(*v))
    }

    struct Usd;

    impl Visitor<'_> for Usd {
        type Value = Decimal;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an amount of US dollars, as a decimal string like \"12.50\"")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Decimal, E> {
            v.trim().parse::<Decimal>().map_err(|_| E::custom("must be a decimal amount of US dollars, like \"12.50\""))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Decimal, E> {
            Ok(Decimal::from(v))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Decimal, E> {
            Ok(Decimal::from(v))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Decimal, E> {
            // The shortest text that reads back as `v` is what the client wrote (`0.1`, not
            // 0.1000000000000000055...).
            self.visit_str(&v.to_string())
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
        d.deserialize_any(Usd)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct M {
        #[serde(with = "usd")]
        amount_usd: Decimal,
    }

    #[test]
    fn amounts_read_from_strings_and_numbers_and_write_as_strings() {
        for (input, text) in [(r#""12.50""#, "12.5"), ("0.1", "0.1"), ("100", "100"), ("1e-9", "0.000000001")] {
            let m: M = serde_json::from_str(&format!(r#"{{"amount_usd": {input}}}"#)).unwrap();
            assert_eq!(serde_json::to_value(&m).unwrap()["amount_usd"], text, "{input}");
        }
        assert!(serde_json::from_str::<M>(r#"{"amount_usd": "ten"}"#).is_err());
        assert!(serde_json::from_str::<M>(r#"{"amount_usd": true}"#).is_err());
    }

    #[test]
    fn nanos_convert_exactly() {
        assert_eq!(from_nanos(7_950).to_string(), "0.00000795");
        assert_eq!(from_nanos(0).to_string(), "0");
        assert_eq!(to_nanos("0.1".parse().unwrap()), Some(100_000_000));
        assert_eq!(to_nanos("0.0000000005".parse().unwrap()), Some(1));
        assert_eq!(to_nanos(Decimal::MAX), None);
    }
}
