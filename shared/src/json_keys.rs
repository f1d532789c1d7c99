//! Whether a JSON text names a key twice in one object. gw reads such a body with the last of
//! the two winning; a body passed on to an upstream as it came must not be read differently
//! there (a parser keeping the first would see fields gw never checked), so it is passed on only
//! when every object's keys are unique, and re-written from gw's reading otherwise.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// Any JSON value, refused when an object in it repeats a key.
struct Unique;

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        while seq.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key) {
                return Err(de::Error::custom("a key appears twice"));
            }
            map.next_value::<Unique>()?;
        }
        Ok(Unique)
    }
}

/// True when `json` is a JSON text whose objects each name every key once.
pub fn keys_unique(json: &[u8]) -> bool {
    serde_json::from_slice::<Unique>(json).is_ok()
}

#[cfg(test)]
mod tests {
    use super::keys_unique;

    #[test]
    fn a_repeated_key_anywhere_is_found() {
        assert!(keys_unique(br#"{"a":1,"b":[{"a":2},{"a":3}],"c":{"d":null,"e":"a"}}"#));
        assert!(!keys_unique(br#"{"tools":[{"type":"web_search"}],"tools":[]}"#));
        assert!(!keys_unique(br#"{"tools":[{"type":"function","type":"web_search"}]}"#));
        assert!(!keys_unique(br#"{"a":{"b":1,"b":2}}"#));
        // Escapes name the same key.
        assert!(!keys_unique(br#"{"model":"a","mod\u0065l":"b"}"#));
        assert!(!keys_unique(b"{not json"));
    }
}
