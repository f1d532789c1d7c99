//! Password hashing with argon2id (the crate's defaults: m=19 MiB, t=2, p=1, as OWASP suggests).

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use crate::error::{Error, Result};

pub const MIN_PASSWORD_LEN: usize = 8;
/// Bounds the work an attacker can make us do per login attempt.
pub const MAX_PASSWORD_LEN: usize = 1024;

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
    fn hash_and_verify() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("wrong horse", &h));
        assert!(!verify_password("x", "not-a-phc-string"));
        assert!(!verify_password("x", dummy_hash()));
    }
}
