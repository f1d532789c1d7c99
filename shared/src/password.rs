//! Password hashing with argon2id (the crate's defaults: m=19 MiB, t=2, p=1, as OWASP suggests).

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{Output, ParamsString, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};

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

// argon2id needs ~19 MiB of working memory per hash. Allocating it per hash made glibc keep
// ~155 MiB per hashing thread (freed blocks stay in the thread's arena); each thread instead
// keeps one buffer and reuses it, so memory stays at threads x 19 MiB.
thread_local! {
    static BLOCKS: std::cell::RefCell<Vec<Block>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn with_blocks<T>(count: usize, f: impl FnOnce(&mut [Block]) -> T) -> T {
    BLOCKS.with(|cell| {
        let mut blocks = cell.borrow_mut();
        if blocks.len() < count {
            blocks.resize(count, Block::default());
        }
        f(&mut blocks[..count])
    })
}

fn crypto(e: impl std::fmt::Display) -> Error {
    Error::Crypto(format!("password hashing failed: {e}"))
}

/// An argon2id PHC string (`$argon2id$v=19$m=19456,t=2,p=1$salt$hash`) of `password`.
pub fn hash_password(password: &str) -> Result<String> {
    let argon = Argon2::default();
    let params = argon.params().clone();
    let salt = SaltString::generate(&mut OsRng);
    let mut salt_buf = [0u8; 64];
    let salt_bytes = salt.as_salt().decode_b64(&mut salt_buf).map_err(crypto)?;
    let len = params.output_len().unwrap_or(Params::DEFAULT_OUTPUT_LEN);
    let output = with_blocks(params.block_count(), |blocks| {
        Output::init_with(len, |out| {
            argon.hash_password_into_with_memory(password.as_bytes(), salt_bytes, out, &mut *blocks).map_err(Into::into)
        })
    })
    .map_err(crypto)?;
    let phc = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(&params).map_err(crypto)?,
        salt: Some(salt.as_salt()),
        hash: Some(output),
    };
    Ok(phc.to_string())
}

/// Whether `password` matches the PHC string `phc`, with the parameters the string names; the
/// final comparison is `Output`'s constant-time one.
pub fn verify_password(password: &str, phc: &str) -> bool {
    verify(password, phc).unwrap_or(false)
}

fn verify(password: &str, phc: &str) -> std::result::Result<bool, String> {
    let parsed = PasswordHash::new(phc).map_err(|e| e.to_string())?;
    let algorithm = Algorithm::try_from(parsed.algorithm).map_err(|e| e.to_string())?;
    let version = parsed.version.map(Version::try_from).transpose().map_err(|e| e.to_string())?.unwrap_or_default();
    let params = Params::try_from(&parsed).map_err(|e| e.to_string())?;
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return Ok(false);
    };
    let mut salt_buf = [0u8; 64];
    let salt_bytes = salt.decode_b64(&mut salt_buf).map_err(|e| e.to_string())?;
    let argon = Argon2::new(algorithm, version, params.clone());
    let mut out = vec![0u8; expected.len()];
    with_blocks(params.block_count(), |blocks| {
        argon.hash_password_into_with_memory(password.as_bytes(), salt_bytes, &mut out, &mut *blocks)
    })
    .map_err(|e| e.to_string())?;
    Ok(Output::new(&out).map_err(|e| e.to_string())? == expected)
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
    fn hashes_are_standard_phc_strings() {
        use argon2::password_hash::{PasswordHasher, PasswordVerifier};
        // Ours verify with the crate's own verifier, and the crate's with ours.
        let ours = hash_password("correct horse").unwrap();
        let parsed = PasswordHash::new(&ours).unwrap();
        assert!(Argon2::default().verify_password(b"correct horse", &parsed).is_ok());
        let salt = SaltString::generate(&mut OsRng);
        let theirs = Argon2::default().hash_password(b"battery staple", &salt).unwrap().to_string();
        assert!(verify_password("battery staple", &theirs));
        assert!(!verify_password("battery stapler", &theirs));
        // Other parameters named by the string are honoured.
        let light = Argon2::new(Algorithm::Argon2id, Version::V0x13, Params::new(1024, 1, 1, None).unwrap());
        let light = light.hash_password(b"pw pw pw pw", &salt).unwrap().to_string();
        assert!(verify_password("pw pw pw pw", &light));
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
