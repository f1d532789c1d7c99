//! What `GET` answers can be sent back: a `PATCH` (or `PUT`) body may carry the resource's
//! read-only fields as `GET` gave them. Fields that identify or describe the resource (`id`,
//! `plan`, `key_prefix`, ...) must still hold the current value (anything else is a 400 naming
//! the field: a client trying to change it learns it cannot); figures the server derives
//! (`spend`, `member_count`, timestamps) are dropped whatever they say, since they move on
//! between the `GET` and the `PATCH`.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

/// A read-only field that must keep its value: its name, the current value, and how it does
/// change (named in the error).
pub struct Fixed<'a> {
    pub field: &'a str,
    pub current: Value,
    pub how: &'a str,
}

impl<'a> Fixed<'a> {
    pub fn new(field: &'a str, current: impl serde::Serialize, how: &'a str) -> Self {
        Fixed { field, current: serde_json::to_value(current).unwrap_or(Value::Null), how }
    }
}

/// `body` without its read-only fields, read as `T`.
pub fn writable<T: DeserializeOwned>(body: Value, fixed: &[Fixed], derived: &[&str]) -> ApiResult<T> {
    let Value::Object(mut fields) = body else {
        return Err(ApiError::Validation("the body must be a JSON object".into()));
    };
    strip(&mut fields, fixed, derived)?;
    crate::decode::json(Value::Object(fields))
}

fn strip(fields: &mut Map<String, Value>, fixed: &[Fixed], derived: &[&str]) -> ApiResult<()> {
    for f in fixed {
        if let Some(v) = fields.remove(f.field) {
            if v != f.current {
                return Err(ApiError::field(f.field, format!("is read-only: {}", f.how)));
            }
        }
    }
    for d in derived {
        fields.remove(*d);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Change {
        name: Option<String>,
    }

    #[test]
    fn read_only_fields_come_back_unchanged_or_are_refused() {
        let fixed = [Fixed::new("id", "k1", "it names the key")];
        let c: Change = writable(json!({"id": "k1", "name": "n", "spend": {"x": 1}}), &fixed, &["spend"]).unwrap();
        assert_eq!(c.name.as_deref(), Some("n"));
        match writable::<Change>(json!({"id": "k2"}), &fixed, &[]) {
            Err(ApiError::Field { field, message }) => {
                assert_eq!(field, "id");
                assert!(message.contains("names the key"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(writable::<Change>(json!({"member_count": 1}), &fixed, &[]).is_err());
    }
}
