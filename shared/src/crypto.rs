//! Encryption at rest for provider keys: AES-256-GCM with a random 96-bit nonce per secret,
//! bound by associated data to the record it belongs to so a ciphertext cannot be replayed
//! into another tenant's row.

use aes_gcm::aead::{Aead, KeyInit, OsRng, Payload};
use aes_gcm::{AeadCore, Aes256Gcm, Key, Nonce};
use base64::Engine;

use crate::error::{Error, Result};

const NONCE_LEN: usize = 12;

#[derive(Clone)]
pub struct EncryptionKey(Key<Aes256Gcm>);

impl EncryptionKey {
    /// Parses a standard-base64 32-byte key (as `GW_ENCRYPTION_KEY` holds it).
    pub fn from_base64(text: &str) -> Result<Self> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| Error::Config("GW_ENCRYPTION_KEY is not valid base64".into()))?;
        let bytes: [u8; 32] =
            bytes.try_into().map_err(|_| Error::Config("GW_ENCRYPTION_KEY must decode to 32 bytes".into()))?;
        Ok(Self(Key::<Aes256Gcm>::from(bytes)))
    }

    /// A key derived from a high-entropy bearer secret (HKDF-SHA256, `purpose` as info): what
    /// only the holder of that secret can open, such as the successor of a rotated refresh
    /// token kept for the grace window.
    pub fn derive_from_secret(secret: &[u8], purpose: &[u8]) -> Result<Self> {
        let mut okm = [0u8; 32];
        hkdf::Hkdf::<sha2::Sha256>::new(None, secret)
            .expand(purpose, &mut okm)
            .map_err(|_| Error::Crypto("key derivation failed".into()))?;
        Ok(Self(Key::<Aes256Gcm>::from(okm)))
    }

    pub fn generate() -> Self {
        Self(Aes256Gcm::generate_key(OsRng))
    }

    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.0[..])
    }

    /// Returns `nonce || ciphertext || tag`.
    pub fn encrypt(&self, plaintext: &[u8], aad: &[u8]) -> Result<Vec<u8>> {
        let cipher = Aes256Gcm::new(&self.0);
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let ct = cipher
            .encrypt(&nonce, Payload { msg: plaintext, aad })
            .map_err(|_| Error::Crypto("encryption failed".into()))?;
        let mut out = Vec::with_capacity(NONCE_LEN + ct.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    pub fn decrypt(&self, sealed: &[u8], aad: &[u8]) -> Result<Vec<u8>> {
        if sealed.len() < NONCE_LEN + 16 {
            return Err(Error::Crypto("ciphertext too short".into()));
        }
        let (nonce, ct) = sealed.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| Error::Crypto("bad nonce".into()))?;
        Aes256Gcm::new(&self.0)
            .decrypt(&Nonce::from(nonce), Payload { msg: ct, aad })
            .map_err(|_| Error::Crypto("decryption failed (wrong key or tampered data)".into()))
    }
}

/// The master keys: the current one seals new secrets, older ones (by version) still open what
/// they sealed until `gw-admin reencrypt` has moved every row to the current version.
#[derive(Clone)]
pub struct Keyring {
    current: i16,
    keys: std::collections::HashMap<i16, EncryptionKey>,
}

impl Keyring {
    pub fn new(current: i16, key: EncryptionKey, older: std::collections::HashMap<i16, EncryptionKey>) -> Self {
        let mut keys = older;
        keys.insert(current, key);
        Self { current, keys }
    }

    pub fn current_version(&self) -> i16 {
        self.current
    }

    pub fn get(&self, version: i16) -> Option<&EncryptionKey> {
        self.keys.get(&version)
    }

    /// Seals with the current key; returns its version with the ciphertext.
    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Result<(i16, Vec<u8>)> {
        let key = self.get(self.current).ok_or_else(|| Error::Crypto("no current key".into()))?;
        Ok((self.current, key.encrypt(plaintext, aad)?))
    }

    pub fn open(&self, version: i16, sealed: &[u8], aad: &[u8]) -> Result<Vec<u8>> {
        let key = self
            .get(version)
            .ok_or_else(|| Error::Crypto(format!("master key version {version} is not configured")))?;
        key.decrypt(sealed, aad)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn keyring_opens_old_versions_and_seals_with_the_current() {
        let old = EncryptionKey::generate();
        let sealed_old = old.encrypt(b"s", b"a").unwrap();
        let ring = Keyring::new(2, EncryptionKey::generate(), [(1, old)].into_iter().collect());
        assert_eq!(ring.open(1, &sealed_old, b"a").unwrap(), b"s");
        let (v, sealed) = ring.seal(b"t", b"a").unwrap();
        assert_eq!(v, 2);
        assert_eq!(ring.open(2, &sealed, b"a").unwrap(), b"t");
        assert!(ring.open(1, &sealed, b"a").is_err());
        assert!(ring.open(3, &sealed, b"a").is_err());
    }

    use super::*;

    #[test]
    fn round_trips_and_binds_aad() {
        let key = EncryptionKey::generate();
        let sealed = key.encrypt(b"sk-provider-secret", b"org-1").unwrap();
        assert_ne!(&sealed[NONCE_LEN..], b"sk-provider-secret");
        assert_eq!(key.decrypt(&sealed, b"org-1").unwrap(), b"sk-provider-secret");
        assert!(key.decrypt(&sealed, b"org-2").is_err());
        let other = EncryptionKey::generate();
        assert!(other.decrypt(&sealed, b"org-1").is_err());
    }

    #[test]
    fn nonces_differ() {
        let key = EncryptionKey::generate();
        assert_ne!(key.encrypt(b"x", b"").unwrap(), key.encrypt(b"x", b"").unwrap());
    }

    #[test]
    fn base64_round_trip_and_length_check() {
        let key = EncryptionKey::generate();
        let again = EncryptionKey::from_base64(&key.to_base64()).unwrap();
        let sealed = key.encrypt(b"v", b"a").unwrap();
        assert_eq!(again.decrypt(&sealed, b"a").unwrap(), b"v");
        assert!(EncryptionKey::from_base64("c2hvcnQ=").is_err());
    }
}
