//! API keys and other bearer secrets: generation, display prefix and the SHA-256 digest that is
//! all we store.

use rand::distributions::Alphanumeric;
use rand::rngs::OsRng;
use rand::Rng;
use sha2::{Digest, Sha256};

/// Every key gw issues starts with this.
pub const API_KEY_PREFIX: &str = "sk_live_";
/// Random part: 40 base62 characters, about 238 bits.
const API_KEY_RANDOM_LEN: usize = 40;
/// Characters of the key kept in clear as `key_prefix` (the fixed prefix plus 8 random ones).
pub const DISPLAY_PREFIX_LEN: usize = API_KEY_PREFIX.len() + 8;
/// No bearer secret we issue is longer; anything longer is rejected before hashing.
pub const MAX_BEARER_LEN: usize = 512;

pub type KeyHash = [u8; 32];

/// Every service-account token starts with this: the management API takes it, `/v1` refuses it.
pub const SERVICE_TOKEN_PREFIX: &str = "gw_sa_";
/// Characters of a service-account token kept in clear (the fixed prefix plus 8 random ones).
pub const SERVICE_TOKEN_DISPLAY_LEN: usize = SERVICE_TOKEN_PREFIX.len() + 8;

/// A new service-account token: the secret (shown once), its display prefix and its hash.
pub fn generate_service_token() -> NewApiKey {
    let secret = format!("{SERVICE_TOKEN_PREFIX}{}", random_token(API_KEY_RANDOM_LEN));
    let prefix = secret[..SERVICE_TOKEN_DISPLAY_LEN].to_string();
    let hash = hash_secret(&secret);
    NewApiKey { secret, prefix, hash }
}

/// A freshly generated API key: the secret (shown once) and what we store of it.
pub struct NewApiKey {
    pub secret: String,
    pub prefix: String,
    pub hash: KeyHash,
}

fn random_token(len: usize) -> String {
    OsRng.sample_iter(&Alphanumeric).take(len).map(char::from).collect()
}

pub fn generate_api_key() -> NewApiKey {
    let secret = format!("{API_KEY_PREFIX}{}", random_token(API_KEY_RANDOM_LEN));
    let prefix = secret[..DISPLAY_PREFIX_LEN].to_string();
    let hash = hash_secret(&secret);
    NewApiKey { secret, prefix, hash }
}

/// An opaque refresh token and its digest.
pub fn generate_refresh_token() -> (String, KeyHash) {
    let token = format!("rt_{}", random_token(48));
    let hash = hash_secret(&token);
    (token, hash)
}

pub fn hash_secret(secret: &str) -> KeyHash {
    Sha256::digest(secret.as_bytes()).into()
}

/// Parses `Authorization: Bearer <token>`: returns the token, or `None` when the header is not a
/// well-formed bearer credential.
pub fn parse_bearer(header: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(header).ok()?;
    let (scheme, token) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    if token.is_empty() || token.len() > MAX_BEARER_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    Some(token)
}

/// Whether a bearer token looks like a session JWT (three base64url segments), so both planes can
/// say precisely why they refuse the other plane's credential.
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.split('.').count() == 3
}

/// Kinds of key: the organization's own, listed and managed through `/api/v1/api-keys`.
pub const KIND_STANDARD: &str = "standard";
/// A playground comparison's key: lives for one comparison, never listed, found, announced.
pub const KIND_PLAYGROUND: &str = "playground";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_shape() {
        let k = generate_api_key();
        assert!(k.secret.starts_with(API_KEY_PREFIX));
        assert_eq!(k.secret.len(), API_KEY_PREFIX.len() + API_KEY_RANDOM_LEN);
        assert!(k.secret.starts_with(&k.prefix));
        assert_eq!(k.hash, hash_secret(&k.secret));
        // 40 chars of base62 carry log2(62)*40 ≈ 238 bits: well over the 128 we promise.
        assert!((API_KEY_RANDOM_LEN as f64) * 62f64.log2() >= 128.0);
        assert_ne!(generate_api_key().secret, k.secret);
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(parse_bearer(b"Bearer sk_live_abc"), Some("sk_live_abc"));
        assert_eq!(parse_bearer(b"bearer  tok "), Some("tok"));
        assert_eq!(parse_bearer(b"Basic abc"), None);
        assert_eq!(parse_bearer(b"Bearer"), None);
        assert_eq!(parse_bearer(b"Bearer "), None);
        assert_eq!(parse_bearer(b"Bearer a b"), None);
        assert_eq!(parse_bearer(&[0xff, 0xfe]), None);
        let long = format!("Bearer {}", "a".repeat(MAX_BEARER_LEN + 1));
        assert_eq!(parse_bearer(long.as_bytes()), None);
    }

    #[test]
    fn jwt_detection() {
        assert!(looks_like_jwt("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig"));
        assert!(!looks_like_jwt("sk_live_abc"));
    }
}
