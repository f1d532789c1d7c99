//! The second factor: TOTP (RFC 6238: SHA-1, 6 digits, 30-second steps, one step of clock
//! drift either way) with single-use recovery codes. The secret is sealed with the master
//! keyring and bound to its user; a code's time step is recorded when accepted, so a code
//! works once. Recovery codes are stored as SHA-256 and each works once.

use gw_shared::db::users::{self, User};
use rand::Rng;
use totp_rs::{Algorithm, Secret, TOTP};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

const STEP_SECS: u64 = 30;
const DIGITS: usize = 6;
/// Recovery codes issued at once.
pub const RECOVERY_CODES: usize = 10;

fn totp(secret: Vec<u8>, issuer: &str, account: &str) -> ApiResult<TOTP> {
    TOTP::new(Algorithm::SHA1, DIGITS, 1, STEP_SECS, secret, Some(issuer.to_string()), account.to_string())
        .map_err(|e| ApiError::Internal(format!("TOTP: {e}")))
}

/// A new secret: 160 random bits, as RFC 4226 recommends.
pub fn new_secret() -> Vec<u8> {
    let bytes: [u8; 20] = rand::rngs::OsRng.gen();
    bytes.to_vec()
}

/// What an authenticator app is given: the base32 secret and the `otpauth://` URI.
pub fn enrollment(state: &AppState, secret: &[u8], account: &str) -> ApiResult<(String, String)> {
    let t = totp(secret.to_vec(), &state.cfg.admin.totp_issuer, account)?;
    Ok((Secret::Raw(secret.to_vec()).to_encoded().to_string(), t.get_url()))
}

/// The user's TOTP secret in the clear.
pub fn secret_of(state: &AppState, user: &User) -> ApiResult<Vec<u8>> {
    let (Some(sealed), Some(version)) = (user.totp_secret_sealed.as_deref(), user.totp_key_version) else {
        return Err(ApiError::Validation(
            "no second factor is being enrolled: start with POST /auth/totp/setup".into(),
        ));
    };
    let ring = state.keyring("a second factor needs")?;
    Ok(ring.open(version, sealed, &users::totp_aad(user.id))?)
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The time step a code belongs to (now, or one step either side), if it is right.
pub fn code_step(secret: &[u8], code: &str, now_secs: u64) -> Option<i64> {
    let code: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    if code.len() != DIGITS || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let t = TOTP::new_unchecked(Algorithm::SHA1, DIGITS, 1, STEP_SECS, secret.to_vec(), None, String::new());
    let now = now_secs / STEP_SECS;
    [now.saturating_sub(1), now, now + 1]
        .into_iter()
        .find(|step| same(&t.generate(step * STEP_SECS), &code))
        .and_then(|step| i64::try_from(step).ok())
}

fn now_secs() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0)
}

/// Checks a TOTP code against the user's secret and spends its time step; `false` when wrong
/// or already used.
pub async fn accept_code(state: &AppState, user: &User, code: &str) -> ApiResult<bool> {
    let secret = secret_of(state, user)?;
    let Some(step) = code_step(&secret, code, now_secs()) else {
        return Ok(false);
    };
    let mut conn = state.conn().await?;
    Ok(users::accept_totp_step(&mut conn, user.id, step).await?)
}

/// A recovery code as printed (`xxxxx-xxxxx`, lowercase base32 letters and digits), and its
/// stored hash.
pub fn new_recovery_codes() -> Vec<(String, [u8; 32])> {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyz23456789";
    let mut rng = rand::rngs::OsRng;
    (0..RECOVERY_CODES)
        .map(|_| {
            let raw: String = (0..10).map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())])).collect();
            let code = format!("{}-{}", &raw[..5], &raw[5..]);
            let hash = recovery_hash(&code);
            (code, hash)
        })
        .collect()
}

/// The hash of a recovery code as typed (case, spaces and dashes do not matter).
pub fn recovery_hash(code: &str) -> [u8; 32] {
    let canonical: String =
        code.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect();
    let canonical = if canonical.len() == 10 { format!("{}-{}", &canonical[..5], &canonical[5..]) } else { canonical };
    gw_shared::keys::hash_secret(&canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_belongs_to_its_step_and_its_neighbours_only() {
        let secret = new_secret();
        let t = TOTP::new_unchecked(Algorithm::SHA1, DIGITS, 1, STEP_SECS, secret.clone(), None, String::new());
        let now = 1_800_000_000u64;
        let code = t.generate(now);
        let step = i64::try_from(now / STEP_SECS).unwrap();
        assert_eq!(code_step(&secret, &code, now), Some(step));
        assert_eq!(code_step(&secret, &code, now + STEP_SECS), Some(step), "one step of drift");
        assert_eq!(code_step(&secret, &code, now + 3 * STEP_SECS), None);
        assert_eq!(code_step(&secret, "12345", now), None);
        assert_eq!(code_step(&secret, "abcdef", now), None);
        assert_eq!(code_step(&new_secret(), &code, now), None, "another secret");
    }

    #[test]
    fn recovery_codes_are_distinct_and_typed_loosely() {
        let codes = new_recovery_codes();
        assert_eq!(codes.len(), RECOVERY_CODES);
        let (code, hash) = &codes[0];
        assert_eq!(code.len(), 11);
        assert_eq!(recovery_hash(&code.to_uppercase()), *hash);
        assert_eq!(recovery_hash(&code.replace('-', " ")), *hash);
        assert_ne!(codes[0].1, codes[1].1);
    }
}
