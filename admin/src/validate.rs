//! Input validation shared by handlers.

use crate::error::{ApiError, ApiResult};

/// Trimmed, non-empty, at most `max` characters, no control characters.
pub fn text(field: &str, value: &str, max: usize) -> ApiResult<String> {
    let v = value.trim();
    if v.is_empty() {
        return Err(ApiError::Validation(format!("{field} must not be empty")));
    }
    if v.chars().count() > max {
        return Err(ApiError::Validation(format!("{field} must be at most {max} characters")));
    }
    if v.chars().any(char::is_control) {
        return Err(ApiError::Validation(format!("{field} must not contain control characters")));
    }
    Ok(v.to_string())
}

/// A plausible e-mail address: one `@`, something on each side, a dot in the domain, no spaces.
pub fn email(value: &str) -> ApiResult<String> {
    let v = value.trim();
    let bad = || ApiError::Validation("email must be a valid e-mail address".into());
    if v.len() > 254 || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad());
    }
    let (local, domain) = v.split_once('@').ok_or_else(bad)?;
    if local.is_empty()
        || domain.contains('@')
        || !domain.contains('.')
        || domain.starts_with('.')
        || domain.ends_with('.')
    {
        return Err(bad());
    }
    Ok(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails() {
        assert_eq!(email(" a@b.co ").ok().as_deref(), Some("a@b.co"));
        for bad in ["", "a", "a@b", "@b.co", "a@@b.co", "a b@c.co", "a@.co", "a@b."] {
            assert!(email(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn texts() {
        assert_eq!(text("n", "  x ", 3).ok().as_deref(), Some("x"));
        assert!(text("n", "   ", 3).is_err());
        assert!(text("n", "abcd", 3).is_err());
        assert!(text("n", "a\u{0}b", 3).is_err());
    }
}
