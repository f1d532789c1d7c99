//! Provider keys: an organization's own credentials for an upstream provider, sealed with the
//! master keyring (AES-256-GCM, bound to the organization and the record). Listing never reads
//! the ciphertext; only the proxy's lookup and the re-encryption job do.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::schema::provider_keys;
use crate::crypto::Keyring;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Queryable, Selectable, Serialize)]
#[diesel(table_name = provider_keys)]
pub struct ProviderKey {
    pub id: Uuid,
    pub org_id: Uuid,
    pub provider: String,
    pub name: String,
    pub secret_hint: String,
    /// The master key's version that sealed the secret (not the key's own version).
    pub key_version: i16,
    /// The key's own version: 1 when added, one more per rotation.
    pub version: i32,
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub rotated_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// Until when the secret a rotation replaced may still be sent (a refused new one is retried
    /// with it); `None`: no overlap.
    pub previous_expires_at: Option<DateTime<Utc>>,
}

/// A live key as the proxy caches it (in Redis too): still sealed.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Serialize, Deserialize)]
#[diesel(table_name = provider_keys)]
pub struct SealedKey {
    pub id: Uuid,
    pub provider: String,
    pub key_version: i16,
    pub secret_ciphertext: Vec<u8>,
    /// The replaced secret during a rotation's overlap, sealed, with its master key version and
    /// the end of the overlap.
    #[serde(default)]
    pub previous_ciphertext: Option<Vec<u8>>,
    #[serde(default)]
    pub previous_key_version: Option<i16>,
    #[serde(default)]
    pub previous_expires_at: Option<DateTime<Utc>>,
}

/// An organization's live provider keys, one per provider at most.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrgProviderKeys {
    pub keys: Vec<SealedKey>,
}

impl OrgProviderKeys {
    pub fn for_provider(&self, provider: &str) -> Option<&SealedKey> {
        self.keys.iter().find(|k| k.provider == provider)
    }
}

/// Associated data binding a ciphertext to its organization and record, so a sealed secret
/// copied into another row (or tenant) does not open.
pub fn aad(org_id: Uuid, key_id: Uuid) -> Vec<u8> {
    format!("gw:provider_key:{org_id}:{key_id}").into_bytes()
}

impl SealedKey {
    pub fn open(&self, ring: &Keyring, org_id: Uuid) -> Result<String> {
        let plain = ring.open(self.key_version, &self.secret_ciphertext, &aad(org_id, self.id))?;
        String::from_utf8(plain).map_err(|_| Error::Crypto("provider key is not UTF-8".into()))
    }

    /// The replaced secret, opened, while the rotation's overlap lasts at `now`.
    pub fn open_previous(&self, ring: &Keyring, org_id: Uuid, now: DateTime<Utc>) -> Option<Result<String>> {
        let (Some(sealed), Some(version), Some(until)) =
            (&self.previous_ciphertext, self.previous_key_version, self.previous_expires_at)
        else {
            return None;
        };
        if until <= now {
            return None;
        }
        let plain = match ring.open(version, sealed, &aad(org_id, self.id)) {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        Some(String::from_utf8(plain).map_err(|_| Error::Crypto("provider key is not UTF-8".into())))
    }
}

/// What a listing may show of a secret: at most a short prefix and the last four characters.
pub fn hint(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    let n = chars.len();
    let tail: String = chars[n.saturating_sub(4)..].iter().collect();
    if n >= 16 {
        let head: String = chars[..3].iter().collect();
        format!("{head}…{tail}")
    } else if n >= 8 {
        format!("…{tail}")
    } else {
        "…".into()
    }
}

pub struct NewKey<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub provider: &'a str,
    pub name: &'a str,
    pub secret: &'a str,
    pub created_by: Option<Uuid>,
}

/// Inserts a key; a live key for the same provider makes this fail with a unique violation.
pub async fn insert(conn: &mut AsyncPgConnection, ring: &Keyring, new: &NewKey<'_>) -> Result<ProviderKey> {
    let (version, sealed) = ring.seal(new.secret.as_bytes(), &aad(new.org_id, new.id))?;
    Ok(diesel::insert_into(provider_keys::table)
        .values((
            provider_keys::id.eq(new.id),
            provider_keys::org_id.eq(new.org_id),
            provider_keys::provider.eq(new.provider),
            provider_keys::name.eq(new.name),
            provider_keys::secret_ciphertext.eq(sealed),
            provider_keys::secret_hint.eq(hint(new.secret)),
            provider_keys::key_version.eq(version),
            provider_keys::created_by.eq(new.created_by),
        ))
        .returning(ProviderKey::as_returning())
        .get_result(conn)
        .await?)
}

/// One page of an org's keys, newest first (ids are UUIDv7).
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<ProviderKey>> {
    let mut q = provider_keys::table.filter(provider_keys::org_id.eq(org_id)).into_boxed();
    if let Some(before) = before {
        q = q.filter(provider_keys::id.lt(before));
    }
    Ok(q.order(provider_keys::id.desc()).limit(limit).select(ProviderKey::as_select()).load(conn).await?)
}

pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<ProviderKey>> {
    Ok(provider_keys::table
        .filter(provider_keys::org_id.eq(org_id))
        .filter(provider_keys::id.eq(id))
        .select(ProviderKey::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Renames a live key.
pub async fn rename(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid, name: &str) -> Result<Option<ProviderKey>> {
    Ok(diesel::update(
        provider_keys::table
            .filter(provider_keys::org_id.eq(org_id))
            .filter(provider_keys::id.eq(id))
            .filter(provider_keys::revoked_at.is_null()),
    )
    .set((provider_keys::name.eq(name), provider_keys::updated_at.eq(Utc::now())))
    .returning(ProviderKey::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

/// Replaces a live key's secret: from the commit on, every lookup reads the new one. With an
/// `overlap`, the replaced secret stays as the previous one until then (any earlier previous
/// one is dropped: a second rotation ends the first's overlap).
pub async fn rotate(
    conn: &mut AsyncPgConnection,
    ring: &Keyring,
    org_id: Uuid,
    id: Uuid,
    secret: &str,
    overlap: chrono::Duration,
) -> Result<Option<ProviderKey>> {
    let (version, sealed) = ring.seal(secret.as_bytes(), &aad(org_id, id))?;
    let now = Utc::now();
    let keep = overlap > chrono::Duration::zero();
    // SET reads the row as it was: the previous secret is the one being replaced.
    let previous = (
        provider_keys::previous_ciphertext.eq(diesel::dsl::case_when(
            diesel::dsl::sql::<diesel::sql_types::Bool>(if keep { "true" } else { "false" }),
            provider_keys::secret_ciphertext.nullable(),
        )),
        provider_keys::previous_key_version.eq(diesel::dsl::case_when(
            diesel::dsl::sql::<diesel::sql_types::Bool>(if keep { "true" } else { "false" }),
            provider_keys::key_version.nullable(),
        )),
        provider_keys::previous_expires_at.eq(keep.then(|| now + overlap)),
    );
    Ok(diesel::update(
        provider_keys::table
            .filter(provider_keys::org_id.eq(org_id))
            .filter(provider_keys::id.eq(id))
            .filter(provider_keys::revoked_at.is_null()),
    )
    .set((
        provider_keys::secret_ciphertext.eq(sealed),
        provider_keys::key_version.eq(version),
        provider_keys::secret_hint.eq(hint(secret)),
        provider_keys::version.eq(provider_keys::version + 1),
        provider_keys::rotated_at.eq(now),
        provider_keys::updated_at.eq(now),
        previous,
    ))
    .returning(ProviderKey::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

/// Revokes a live key; `None` when there was none to revoke.
pub async fn revoke(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<ProviderKey>> {
    let now = Utc::now();
    Ok(diesel::update(
        provider_keys::table
            .filter(provider_keys::org_id.eq(org_id))
            .filter(provider_keys::id.eq(id))
            .filter(provider_keys::revoked_at.is_null()),
    )
    .set((
        provider_keys::revoked_at.eq(now),
        provider_keys::updated_at.eq(now),
        provider_keys::previous_ciphertext.eq(None::<Vec<u8>>),
        provider_keys::previous_key_version.eq(None::<i16>),
        provider_keys::previous_expires_at.eq(None::<DateTime<Utc>>),
    ))
    .returning(ProviderKey::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

/// The live keys of an organization, sealed (the proxy's lookup).
pub async fn live_for_org(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<OrgProviderKeys> {
    let keys = provider_keys::table
        .filter(provider_keys::org_id.eq(org_id))
        .filter(provider_keys::revoked_at.is_null())
        .order(provider_keys::id.asc())
        .select(SealedKey::as_select())
        .load(conn)
        .await?;
    Ok(OrgProviderKeys { keys })
}

/// Re-seals every key sealed under an older master key with the current one; returns the ids
/// changed, by organization (their caches must be invalidated). A row changed meanwhile (rotated)
/// is left alone: it is already on the current key.
pub async fn reencrypt(conn: &mut AsyncPgConnection, ring: &Keyring) -> Result<Vec<(Uuid, Uuid)>> {
    let current = ring.current_version();
    let old: Vec<(Uuid, Uuid, i16, Vec<u8>)> = provider_keys::table
        .filter(provider_keys::key_version.ne(current))
        .select((
            provider_keys::id,
            provider_keys::org_id,
            provider_keys::key_version,
            provider_keys::secret_ciphertext,
        ))
        .load(conn)
        .await?;
    let mut changed = Vec::with_capacity(old.len());
    for (id, org_id, version, sealed) in old {
        let plain = ring.open(version, &sealed, &aad(org_id, id))?;
        let (v, resealed) = ring.seal(&plain, &aad(org_id, id))?;
        let n = diesel::update(
            provider_keys::table
                .filter(provider_keys::id.eq(id))
                .filter(provider_keys::org_id.eq(org_id))
                .filter(provider_keys::key_version.eq(version))
                .filter(provider_keys::secret_ciphertext.eq(&sealed)),
        )
        // A rotation's overlap ends here: its previous secret may be sealed under the old key.
        .set((
            provider_keys::secret_ciphertext.eq(resealed),
            provider_keys::key_version.eq(v),
            provider_keys::previous_ciphertext.eq(None::<Vec<u8>>),
            provider_keys::previous_key_version.eq(None::<i16>),
            provider_keys::previous_expires_at.eq(None::<DateTime<Utc>>),
        ))
        .execute(conn)
        .await?;
        if n == 1 {
            changed.push((org_id, id));
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_show_at_most_a_prefix_and_four_characters() {
        assert_eq!(hint("sk-ant-api03-abcdefghijklmnop-WXYZ"), "sk-…WXYZ");
        assert_eq!(hint("12345678"), "…5678");
        assert_eq!(hint("short"), "…");
        assert_eq!(hint(""), "…");
        let h = hint("sk-ant-api03-verysecretmiddle-WXYZ");
        assert!(!h.contains("verysecret"));
    }

    #[test]
    fn sealed_keys_open_only_for_their_org() {
        let ring = Keyring::new(1, crate::crypto::EncryptionKey::generate(), Default::default());
        let (org, id) = (Uuid::now_v7(), Uuid::now_v7());
        let (v, ct) = ring.seal(b"sk-secret", &aad(org, id)).unwrap();
        let (pv, pct) = ring.seal(b"sk-before", &aad(org, id)).unwrap();
        let now = Utc::now();
        let mut k = SealedKey {
            id,
            provider: "p".into(),
            key_version: v,
            secret_ciphertext: ct,
            previous_ciphertext: Some(pct),
            previous_key_version: Some(pv),
            previous_expires_at: Some(now + chrono::Duration::seconds(5)),
        };
        assert_eq!(k.open(&ring, org).unwrap(), "sk-secret");
        assert!(k.open(&ring, Uuid::now_v7()).is_err());
        assert_eq!(k.open_previous(&ring, org, now).unwrap().unwrap(), "sk-before");
        assert!(k.open_previous(&ring, Uuid::now_v7(), now).unwrap().is_err());
        assert!(k.open_previous(&ring, org, now + chrono::Duration::seconds(5)).is_none(), "the overlap ended");
        k.previous_ciphertext = None;
        assert!(k.open_previous(&ring, org, now).is_none());
        let keys = OrgProviderKeys { keys: vec![k] };
        assert!(keys.for_provider("p").is_some() && keys.for_provider("q").is_none());
    }
}
