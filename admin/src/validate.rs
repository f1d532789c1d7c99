//! Input validation shared by handlers. Failures name the field (`ApiError::Field`).

use gw_shared::email::{self, Email};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// Trimmed, non-empty, at most `max` characters, no control characters.
pub fn text(field: &str, value: &str, max: usize) -> ApiResult<String> {
    let v = value.trim();
    if v.is_empty() {
        return Err(ApiError::field(field, "must not be empty"));
    }
    if v.chars().count() > max {
        return Err(ApiError::field(field, format!("must be at most {max} characters")));
    }
    if v.chars().any(char::is_control) {
        return Err(ApiError::field(field, "must not contain control characters"));
    }
    Ok(v.to_string())
}

/// Like [`text`] but may be empty (a description).
pub fn optional_text(field: &str, value: &str, max: usize) -> ApiResult<String> {
    if value.trim().is_empty() {
        return Ok(String::new());
    }
    text(field, value, max)
}

/// A plausible e-mail address, with its normalized form (see `gw_shared::email`).
pub fn email(field: &str, value: &str) -> ApiResult<Email> {
    email::parse(value).map_err(|e| ApiError::field(field, e.to_string().trim_start_matches("email ").to_string()))
}

/// For `#[serde(default, deserialize_with = "crate::validate::double_option")]`: `Some(None)`
/// for an explicit JSON null (clear the field), `None` when the field is absent (leave it).
pub fn double_option<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    <Option<T> as serde::Deserialize>::deserialize(d).map(Some)
}

/// Most characters of a stored secret (a provider key, an SSO client secret).
pub const MAX_SECRET_CHARS: usize = 4096;

/// A secret to store: surrounding whitespace (a pasted newline) dropped, then 1 to 4096
/// characters without control characters. Messages never echo it.
pub fn secret(field: &str, value: &str) -> ApiResult<String> {
    let v = value.trim();
    if v.is_empty() {
        return Err(ApiError::field(field, "must not be empty"));
    }
    if v.chars().count() > MAX_SECRET_CHARS {
        return Err(ApiError::field(field, format!("must be at most {MAX_SECRET_CHARS} characters")));
    }
    if v.chars().any(char::is_control) {
        return Err(ApiError::field(field, "must not contain control characters"));
    }
    Ok(v.to_string())
}

/// Most entries a model allow-list may have.
pub const MAX_MODELS: usize = 100;

/// A model allow-list (of a key or a team) as stored: every entry a configured model name or
/// alias, duplicates dropped (first occurrence kept, so the caller's order holds).
pub fn models(routes: &gw_shared::config::Routes, requested: Vec<String>) -> ApiResult<Vec<String>> {
    if requested.len() > MAX_MODELS {
        return Err(ApiError::field("models", format!("must have at most {MAX_MODELS} entries")));
    }
    let known = |m: &str| routes.knows_model(m);
    let mut out: Vec<String> = Vec::with_capacity(requested.len());
    for m in requested {
        if !known(&m) {
            return Err(ApiError::field(
                "models",
                format!("unknown model {m:?}: each entry must be a configured model name or alias"),
            ));
        }
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(out)
}

/// Most bytes of free-form JSON metadata a resource may carry.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// Free-form metadata: a JSON object of at most 64 keys and 16 KiB, no control characters in
/// keys.
pub fn metadata(field: &str, value: Value) -> ApiResult<Value> {
    let Value::Object(map) = &value else {
        return Err(ApiError::field(field, "must be a JSON object"));
    };
    if map.len() > 64 {
        return Err(ApiError::field(field, "must have at most 64 keys"));
    }
    if map.keys().any(|k| k.is_empty() || k.chars().count() > 100 || k.chars().any(char::is_control)) {
        return Err(ApiError::field(field, "keys must be 1 to 100 characters without control characters"));
    }
    let size = serde_json::to_vec(&value).map(|v| v.len()).unwrap_or(usize::MAX);
    if size > MAX_METADATA_BYTES {
        return Err(ApiError::field(field, format!("must be at most {MAX_METADATA_BYTES} bytes of JSON")));
    }
    Ok(value)
}

/// A budget as stored, validated.
pub fn budget(b: gw_shared::limits::settings::Budget) -> ApiResult<Value> {
    b.validate("budget").map_err(|p| ApiError::field(p.field, p.message))?;
    serde_json::to_value(&b).map_err(|e| ApiError::Internal(format!("cannot encode a budget: {e}")))
}

/// Rate limits as stored, validated.
pub fn rate_limits(r: gw_shared::limits::settings::RateLimits) -> ApiResult<Value> {
    r.validate("rate_limits").map_err(|p| ApiError::field(p.field, p.message))?;
    serde_json::to_value(&r).map_err(|e| ApiError::Internal(format!("cannot encode rate limits: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails() {
        assert_eq!(email("email", " A@b.co ").ok().map(|e| e.normalized), Some("a@b.co".into()));
        for bad in ["", "a", "a@b", "@b.co", "a@@b.co", "a b@c.co", "a@.co", "a@b.", "a\u{0}@b.co"] {
            assert!(matches!(email("email", bad), Err(ApiError::Field { .. })), "{bad}");
        }
    }

    #[test]
    fn texts() {
        assert_eq!(text("n", "  x ", 3).ok().as_deref(), Some("x"));
        assert!(text("n", "   ", 3).is_err());
        assert!(text("n", "abcd", 3).is_err());
        assert!(text("n", "a\u{0}b", 3).is_err());
        assert_eq!(optional_text("d", "  ", 3).ok().as_deref(), Some(""));
    }

    #[test]
    fn metadata_is_bounded() {
        assert!(metadata("m", serde_json::json!({"a": 1})).is_ok());
        assert!(metadata("m", serde_json::json!([1])).is_err());
        assert!(metadata("m", serde_json::json!({"a": "x".repeat(MAX_METADATA_BYTES)})).is_err());
        assert!(metadata("m", serde_json::json!({"": 1})).is_err());
    }
}
