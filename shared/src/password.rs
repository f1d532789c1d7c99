//! Password hashing with argon2id (the crate's defaults: m=19 MiB, t=2, p=1, as OWASP suggests).

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use crate::error::{Error, Result};

/// NIST SP 800-63B: length over composition rules, and no password found in breach lists.
pub const MIN_PASSWORD_LEN: usize = 12;
/// Bounds the work an attacker can make us do per login attempt.
pub const MAX_PASSWORD_LEN: usize = 1024;

/// Passwords that appear at the top of every breach corpus (lower-cased), refused outright.
const COMMON: &[&str] = &[
    "123456789012",
    "password1234",
    "passwordpassword",
    "qwertyuiopas",
    "111111111111",
    "aaaaaaaaaaaa",
    "password123!",
    "iloveyou1234",
    "administrator",
    "letmeinletmein",
    "qwerty123456",
    "1234567890ab",
    "welcome12345",
    "changemechangeme",
    "abc123abc123",
    "passw0rd1234",
    "p@ssw0rd1234",
    "123123123123",
];

/// Why a new password is refused (the message never echoes it): too short or too long, too few
/// distinct characters, a well-known password, or containing the account's e-mail name.
pub fn check_rules(password: &str, email_local: &str) -> std::result::Result<(), String> {
    let n = password.chars().count();
    if n < MIN_PASSWORD_LEN || password.len() > MAX_PASSWORD_LEN {
        return Err(format!("must be {MIN_PASSWORD_LEN} to {MAX_PASSWORD_LEN} characters long"));
    }
    if password.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    let mut distinct: Vec<char> = password.chars().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 5 {
        return Err("must use at least 5 different characters".into());
    }
    let lower = password.to_lowercase();
    if COMMON.contains(&lower.as_str()) {
        return Err("is a well-known password; choose another".into());
    }
    let local = email_local.to_lowercase();
    if local.chars().count() >= 4 && lower.contains(&local) {
        return Err("must not contain your e-mail name".into());
    }
    Ok(())
}

pub fn hash_password(password: &str) -> Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| Error::Crypto(format!("password hashing failed: {e}")))
}

pub fn verify_password(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok(),
        Err(_) => false,
    }
}

/// [`hash_password`] on the blocking pool: argon2id is deliberately slow and must not stall an
/// async worker.
pub async fn hash_password_blocking(password: String) -> Result<String> {
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|e| Error::Crypto(format!("password hashing task failed: {e}")))?
}

/// [`verify_password`] on the blocking pool.
pub async fn verify_password_blocking(password: String, phc: String) -> bool {
    tokio::task::spawn_blocking(move || verify_password(&password, &phc)).await.unwrap_or(false)
}

/// A valid hash of a random password, verified against when the user does not exist so that
/// "no such user" and "wrong password" take the same time.
pub fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_password("gw-dummy-password-for-timing").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert!(check_rules("correct horse battery", "alice").is_ok());
        assert!(check_rules("short", "a").is_err());
        assert!(check_rules("aaaaaaaaaaaaaaa", "a").is_err());
        assert!(check_rules("Password1234", "a").is_err());
        assert!(check_rules("alice-in-wonderland", "alice").is_err());
        assert!(check_rules("tab\there is bad", "x").is_err());
        assert!(check_rules(&"ab1cd".repeat(300), "x").is_err());
    }

    #[test]
    fn hash_and_verify() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("wrong horse", &h));
        assert!(!verify_password("x", "not-a-phc-string"));
        assert!(!verify_password("x", dummy_hash()));
    }
}
