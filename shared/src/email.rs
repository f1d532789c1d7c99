//! The one form of an e-mail address that identifies an account: Unicode NFKC, then Unicode
//! lower case, on every path that stores or looks up an address (registration, login, invites,
//! SSO). `Ä@x.de` and `ä@x.de` are one account; so are the full-width and ASCII spellings.

use unicode_normalization::UnicodeNormalization;

/// The longest address accepted (RFC 5321 path limit).
pub const MAX_EMAIL_LEN: usize = 254;

/// Why an address was refused; the message never echoes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmailError {
    Control,
    Shape,
}

impl std::fmt::Display for EmailError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EmailError::Control => "email must not contain control characters",
            EmailError::Shape => "email must be a valid e-mail address",
        })
    }
}

/// The address as typed (trimmed) and its normalized form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email {
    pub display: String,
    pub normalized: String,
}

pub fn normalize(raw: &str) -> String {
    raw.trim().nfkc().collect::<String>().to_lowercase()
}

/// Checks an address: no control characters, one `@` with something on each side, a dotted
/// domain, no whitespace, at most [`MAX_EMAIL_LEN`] bytes once normalized.
pub fn parse(raw: &str) -> Result<Email, EmailError> {
    let display = raw.trim();
    if display.chars().any(char::is_control) {
        return Err(EmailError::Control);
    }
    let normalized = normalize(display);
    if normalized.len() > MAX_EMAIL_LEN || normalized.chars().any(char::is_whitespace) {
        return Err(EmailError::Shape);
    }
    let (local, domain) = normalized.split_once('@').ok_or(EmailError::Shape)?;
    if local.is_empty()
        || domain.contains('@')
        || !domain.contains('.')
        || domain.starts_with('.')
        || domain.ends_with('.')
        || domain.contains("..")
    {
        return Err(EmailError::Shape);
    }
    Ok(Email { display: display.to_string(), normalized })
}

/// The domain part of a normalized address.
pub fn domain(normalized: &str) -> Option<&str> {
    normalized.rsplit_once('@').map(|(_, d)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_form_for_case_and_compatibility_variants() {
        assert_eq!(normalize(" Ärger@Example.DE "), "ärger@example.de");
        assert_eq!(normalize("ÄRGER@example.de"), normalize("ärger@example.de"));
        // Full-width letters fold to ASCII under NFKC.
        assert_eq!(normalize("ＡＢＣ@example.com"), "abc@example.com");
        // A decomposed umlaut and the precomposed one are the same address.
        assert_eq!(normalize("a\u{0308}@x.de"), normalize("\u{e4}@x.de"));
        assert_eq!(parse("İ@x.de").map(|e| e.normalized.chars().count() > 0), Ok(true));
    }

    #[test]
    fn shapes() {
        assert_eq!(parse(" a@b.co ").map(|e| e.display), Ok("a@b.co".into()));
        for bad in ["", "a", "a@b", "@b.co", "a@@b.co", "a b@c.co", "a@.co", "a@b.", "a@b..co"] {
            assert_eq!(parse(bad), Err(EmailError::Shape), "{bad}");
        }
        assert_eq!(parse("a\u{0}@b.co"), Err(EmailError::Control));
        assert_eq!(parse("a@b.co\u{7}"), Err(EmailError::Control));
        assert_eq!(domain("x@corp.example"), Some("corp.example"));
    }
}
