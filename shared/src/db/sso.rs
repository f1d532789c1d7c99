//! SSO connections: an organization's OpenID Connect identity provider, the e-mail domains that
//! sign in through it, and how its groups map to roles and teams. The client secret is sealed
//! with the master keyring (AES-256-GCM) and bound to the organization and the connection, like
//! provider keys. A connection claims its e-mail domains (`sso_domains`, kept in step with
//! `sso_connections.email_domains` in the same transaction); a claim is active only once a DNS
//! TXT record proved it, and one connection across all organizations may hold a proven domain.
//! Identities (connection, issuer, subject) are linked to accounts in `sso_identities`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::Value;
use uuid::Uuid;

use super::schema::{org_memberships, sso_connections, sso_domains, sso_identities};
use super::users::Membership;
use crate::crypto::Keyring;
use crate::error::{Error, Result};

/// A connection row, secret still sealed.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = sso_connections)]
pub struct Connection {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub issuer: String,
    pub client_id: String,
    pub client_secret_sealed: Vec<u8>,
    pub key_version: i16,
    pub email_domains: Vec<String>,
    pub groups_claim: String,
    /// `{"group": "admin" | "member" | "viewer"}` (`crate::sso::role_mapping_from_json`).
    pub role_mapping: Value,
    /// `{"group": ["team id", ...]}` (`crate::sso::team_mapping_from_json`).
    pub team_mapping: Value,
    pub default_role: String,
    pub enabled: bool,
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Associated data binding a sealed client secret to its organization and connection, so a
/// ciphertext copied into another row (or tenant) does not open.
pub fn aad(org_id: Uuid, connection_id: Uuid) -> Vec<u8> {
    format!("gw:sso_connection:{org_id}:{connection_id}").into_bytes()
}

/// Seals a client secret for a connection; returns the key version with the ciphertext.
pub fn seal_secret(ring: &Keyring, org_id: Uuid, connection_id: Uuid, secret: &str) -> Result<(i16, Vec<u8>)> {
    ring.seal(secret.as_bytes(), &aad(org_id, connection_id))
}

impl Connection {
    /// The client secret in the clear (only the token exchange needs it).
    pub fn client_secret(&self, ring: &Keyring) -> Result<String> {
        let plain = ring.open(self.key_version, &self.client_secret_sealed, &aad(self.org_id, self.id))?;
        String::from_utf8(plain).map_err(|_| Error::Crypto("SSO client secret is not UTF-8".into()))
    }
}

pub struct NewConnection<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: &'a str,
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub client_secret: &'a str,
    /// Normalized (`crate::sso::normalize_domain`), without duplicates, at least one.
    pub email_domains: &'a [String],
    pub groups_claim: &'a str,
    pub role_mapping: &'a Value,
    pub team_mapping: &'a Value,
    pub default_role: &'a str,
    pub enabled: bool,
    pub created_by: Option<Uuid>,
}

/// A fresh verification token for a domain claim: published in DNS, so not a secret; it only
/// tells this claim from another organization's.
fn verification_token() -> String {
    use rand::distributions::Alphanumeric;
    use rand::Rng;
    rand::rngs::OsRng.sample_iter(&Alphanumeric).take(32).map(char::from).collect()
}

async fn insert_domains(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    connection_id: Uuid,
    domains: &[String],
) -> Result<()> {
    for domain in domains {
        diesel::insert_into(sso_domains::table)
            .values((
                sso_domains::domain.eq(domain.as_str()),
                sso_domains::connection_id.eq(connection_id),
                sso_domains::org_id.eq(org_id),
                sso_domains::verification_token.eq(verification_token()),
            ))
            .on_conflict_do_nothing()
            .execute(conn)
            .await?;
    }
    Ok(())
}

/// A connection's claim on an e-mail domain.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = sso_domains)]
pub struct DomainClaim {
    pub domain: String,
    pub connection_id: Uuid,
    pub org_id: Uuid,
    pub verification_token: String,
    pub verified_at: Option<DateTime<Utc>>,
    pub checked_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// The claims of a connection, by domain.
pub async fn domains(conn: &mut AsyncPgConnection, org_id: Uuid, connection_id: Uuid) -> Result<Vec<DomainClaim>> {
    Ok(sso_domains::table
        .filter(sso_domains::org_id.eq(org_id))
        .filter(sso_domains::connection_id.eq(connection_id))
        .order(sso_domains::domain.asc())
        .select(DomainClaim::as_select())
        .load(conn)
        .await?)
}

/// The claims of several connections of an organization (a page of them).
pub async fn domains_of(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    connection_ids: &[Uuid],
) -> Result<Vec<DomainClaim>> {
    Ok(sso_domains::table
        .filter(sso_domains::org_id.eq(org_id))
        .filter(sso_domains::connection_id.eq_any(connection_ids))
        .order(sso_domains::domain.asc())
        .select(DomainClaim::as_select())
        .load(conn)
        .await?)
}

/// Records a DNS check of a claim: proven (`verified`) or not. Proving a domain another
/// connection has proven meanwhile fails with a unique violation.
pub async fn record_check(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    connection_id: Uuid,
    domain: &str,
    verified: bool,
) -> Result<Option<DomainClaim>> {
    let now = Utc::now();
    let target = sso_domains::table
        .filter(sso_domains::org_id.eq(org_id))
        .filter(sso_domains::connection_id.eq(connection_id))
        .filter(sso_domains::domain.eq(domain));
    let row = if verified {
        diesel::update(target)
            .set((
                sso_domains::checked_at.eq(now),
                sso_domains::verified_at.eq(diesel::dsl::sql::<
                    diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>,
                >("coalesce(verified_at, now())")),
            ))
            .returning(DomainClaim::as_returning())
            .get_result(conn)
            .await
            .optional()?
    } else {
        diesel::update(target)
            .set(sso_domains::checked_at.eq(now))
            .returning(DomainClaim::as_returning())
            .get_result(conn)
            .await
            .optional()?
    };
    Ok(row)
}

/// Inserts a connection and its domain claims (unproven) in one transaction.
pub async fn insert(conn: &mut AsyncPgConnection, ring: &Keyring, new: &NewConnection<'_>) -> Result<Connection> {
    let (version, sealed) = seal_secret(ring, new.org_id, new.id, new.client_secret)?;
    conn.transaction(async |conn| {
        let row = diesel::insert_into(sso_connections::table)
            .values((
                sso_connections::id.eq(new.id),
                sso_connections::org_id.eq(new.org_id),
                sso_connections::name.eq(new.name),
                sso_connections::issuer.eq(new.issuer),
                sso_connections::client_id.eq(new.client_id),
                sso_connections::client_secret_sealed.eq(&sealed),
                sso_connections::key_version.eq(version),
                sso_connections::email_domains.eq(new.email_domains),
                sso_connections::groups_claim.eq(new.groups_claim),
                sso_connections::role_mapping.eq(new.role_mapping),
                sso_connections::team_mapping.eq(new.team_mapping),
                sso_connections::default_role.eq(new.default_role),
                sso_connections::enabled.eq(new.enabled),
                sso_connections::created_by.eq(new.created_by),
            ))
            .returning(Connection::as_returning())
            .get_result(conn)
            .await?;
        insert_domains(conn, new.org_id, new.id, new.email_domains).await?;
        Ok::<Connection, Error>(row)
    })
    .await
}

/// One page of an organization's connections, newest first (ids are UUIDv7).
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Connection>> {
    let mut q = sso_connections::table.filter(sso_connections::org_id.eq(org_id)).into_boxed();
    if let Some(before) = before {
        q = q.filter(sso_connections::id.lt(before));
    }
    Ok(q.order(sso_connections::id.desc()).limit(limit).select(Connection::as_select()).load(conn).await?)
}

/// A connection of an organization.
pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<Connection>> {
    Ok(sso_connections::table
        .filter(sso_connections::org_id.eq(org_id))
        .filter(sso_connections::id.eq(id))
        .select(Connection::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// A connection by id alone, whatever its organization (sign-in, which has no session yet).
pub async fn find_by_id(conn: &mut AsyncPgConnection, id: Uuid) -> Result<Option<Connection>> {
    Ok(sso_connections::table
        .filter(sso_connections::id.eq(id))
        .select(Connection::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The connection an e-mail domain (normalized) signs in through, across organizations: the one
/// that proved it.
pub async fn find_by_domain(conn: &mut AsyncPgConnection, domain: &str) -> Result<Option<Connection>> {
    let id: Option<Uuid> = sso_domains::table
        .filter(sso_domains::domain.eq(domain))
        .filter(sso_domains::verified_at.is_not_null())
        .select(sso_domains::connection_id)
        .first(conn)
        .await
        .optional()?;
    match id {
        Some(id) => find_by_id(conn, id).await,
        None => Ok(None),
    }
}

/// Whether a connection holds a proven claim on a domain.
pub async fn domain_proven(conn: &mut AsyncPgConnection, connection_id: Uuid, domain: &str) -> Result<bool> {
    Ok(diesel::select(diesel::dsl::exists(
        sso_domains::table
            .filter(sso_domains::connection_id.eq(connection_id))
            .filter(sso_domains::domain.eq(domain))
            .filter(sso_domains::verified_at.is_not_null()),
    ))
    .get_result(conn)
    .await?)
}

/// The proven domain of another connection among `domains`, if any: a connection may claim it
/// but never prove it while that one holds it.
pub async fn domain_taken(
    conn: &mut AsyncPgConnection,
    domains: &[String],
    except: Option<Uuid>,
) -> Result<Option<String>> {
    let mut q = sso_domains::table
        .filter(sso_domains::domain.eq_any(domains))
        .filter(sso_domains::verified_at.is_not_null())
        .into_boxed();
    if let Some(except) = except {
        q = q.filter(sso_domains::connection_id.ne(except));
    }
    Ok(q.select(sso_domains::domain).first(conn).await.optional()?)
}

/// What an update changes; `None` leaves a field as it is. `client_secret` is the new secret in
/// the clear (sealed here); `email_domains` replaces the whole list.
#[derive(Debug, Default, Clone)]
pub struct Change {
    pub name: Option<String>,
    pub issuer: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub email_domains: Option<Vec<String>>,
    pub groups_claim: Option<String>,
    pub role_mapping: Option<Value>,
    pub team_mapping: Option<Value>,
    pub default_role: Option<String>,
    pub enabled: Option<bool>,
}

#[derive(AsChangeset)]
#[diesel(table_name = sso_connections)]
struct Changes {
    name: Option<String>,
    issuer: Option<String>,
    client_id: Option<String>,
    client_secret_sealed: Option<Vec<u8>>,
    key_version: Option<i16>,
    email_domains: Option<Vec<String>>,
    groups_claim: Option<String>,
    role_mapping: Option<Value>,
    team_mapping: Option<Value>,
    default_role: Option<String>,
    enabled: Option<bool>,
    updated_at: DateTime<Utc>,
}

/// Applies a change to a connection of an organization, replacing its domain claims when they
/// change (a kept domain keeps its proof; a changed issuer unproves nothing, but identities are
/// matched with the issuer, so old links stop matching), in one transaction; `None` when there
/// is no such connection.
pub async fn update(
    conn: &mut AsyncPgConnection,
    ring: &Keyring,
    org_id: Uuid,
    id: Uuid,
    change: &Change,
) -> Result<Option<Connection>> {
    let sealed = match change.client_secret.as_deref() {
        Some(secret) => Some(seal_secret(ring, org_id, id, secret)?),
        None => None,
    };
    let changes = Changes {
        name: change.name.clone(),
        issuer: change.issuer.clone(),
        client_id: change.client_id.clone(),
        key_version: sealed.as_ref().map(|(v, _)| *v),
        client_secret_sealed: sealed.map(|(_, s)| s),
        email_domains: change.email_domains.clone(),
        groups_claim: change.groups_claim.clone(),
        role_mapping: change.role_mapping.clone(),
        team_mapping: change.team_mapping.clone(),
        default_role: change.default_role.clone(),
        enabled: change.enabled,
        updated_at: Utc::now(),
    };
    conn.transaction(async |conn| {
        let row: Option<Connection> = diesel::update(
            sso_connections::table.filter(sso_connections::org_id.eq(org_id)).filter(sso_connections::id.eq(id)),
        )
        .set(&changes)
        .returning(Connection::as_returning())
        .get_result(conn)
        .await
        .optional()?;
        let Some(row) = row else {
            return Ok::<Option<Connection>, Error>(None);
        };
        if let Some(domains) = change.email_domains.as_deref() {
            diesel::delete(
                sso_domains::table
                    .filter(sso_domains::connection_id.eq(id))
                    .filter(sso_domains::domain.ne_all(domains)),
            )
            .execute(conn)
            .await?;
            insert_domains(conn, org_id, id, domains).await?;
        }
        Ok(Some(row))
    })
    .await
}

/// Deletes a connection of an organization (its domains go with it); returns what was deleted.
pub async fn delete(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<Connection>> {
    Ok(diesel::delete(
        sso_connections::table.filter(sso_connections::org_id.eq(org_id)).filter(sso_connections::id.eq(id)),
    )
    .returning(Connection::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

/// Re-seals every client secret sealed under an older master key with the current one (part of
/// `gw-admin reencrypt`); returns how many changed. A row changed meanwhile (a new secret) is
/// left alone: it is already on the current key.
pub async fn reencrypt(conn: &mut AsyncPgConnection, ring: &Keyring) -> Result<usize> {
    let current = ring.current_version();
    let old: Vec<(Uuid, Uuid, i16, Vec<u8>)> = sso_connections::table
        .filter(sso_connections::key_version.ne(current))
        .select((
            sso_connections::id,
            sso_connections::org_id,
            sso_connections::key_version,
            sso_connections::client_secret_sealed,
        ))
        .load(conn)
        .await?;
    let mut changed = 0;
    for (id, org_id, version, sealed) in old {
        let plain = ring.open(version, &sealed, &aad(org_id, id))?;
        let (v, resealed) = ring.seal(&plain, &aad(org_id, id))?;
        changed += diesel::update(
            sso_connections::table
                .filter(sso_connections::id.eq(id))
                .filter(sso_connections::org_id.eq(org_id))
                .filter(sso_connections::key_version.eq(version))
                .filter(sso_connections::client_secret_sealed.eq(&sealed)),
        )
        .set((sso_connections::client_secret_sealed.eq(resealed), sso_connections::key_version.eq(v)))
        .execute(conn)
        .await?;
    }
    Ok(changed)
}

/// Makes a user a member of an organization with `role` unless already one (whatever role it has
/// there); returns the membership as it now is and whether it was just added. Two first sign-ins
/// of one user at once both succeed.
pub async fn ensure_membership(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    user_id: Uuid,
    role: &str,
) -> Result<(Membership, bool)> {
    let added = diesel::insert_into(org_memberships::table)
        .values((
            org_memberships::org_id.eq(org_id),
            org_memberships::user_id.eq(user_id),
            org_memberships::role.eq(role),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    let membership = org_memberships::table
        .filter(org_memberships::org_id.eq(org_id))
        .filter(org_memberships::user_id.eq(user_id))
        .select(Membership::as_select())
        .first(conn)
        .await?;
    Ok((membership, added == 1))
}

/// An identity provider's user linked to an account.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = sso_identities)]
pub struct Identity {
    pub id: Uuid,
    pub org_id: Uuid,
    pub connection_id: Uuid,
    pub issuer: String,
    pub subject: String,
    pub user_id: Uuid,
    pub linked_by: String,
    pub created_at: DateTime<Utc>,
    pub last_sign_in_at: DateTime<Utc>,
}

/// The account linked to (connection, issuer, subject), if any; marks the sign-in.
pub async fn identity(
    conn: &mut AsyncPgConnection,
    connection_id: Uuid,
    issuer: &str,
    subject: &str,
) -> Result<Option<Identity>> {
    Ok(diesel::update(
        sso_identities::table
            .filter(sso_identities::connection_id.eq(connection_id))
            .filter(sso_identities::issuer.eq(issuer))
            .filter(sso_identities::subject.eq(subject)),
    )
    .set(sso_identities::last_sign_in_at.eq(Utc::now()))
    .returning(Identity::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

pub struct NewIdentity<'a> {
    pub org_id: Uuid,
    pub connection_id: Uuid,
    pub issuer: &'a str,
    pub subject: &'a str,
    pub user_id: Uuid,
    /// `provisioned` or `password`.
    pub linked_by: &'a str,
}

/// Links an identity to an account. Fails with a unique violation when the identity is linked
/// already, or the account has another identity at this connection.
pub async fn link(conn: &mut AsyncPgConnection, id: Uuid, new: &NewIdentity<'_>) -> Result<()> {
    diesel::insert_into(sso_identities::table)
        .values((
            sso_identities::id.eq(id),
            sso_identities::org_id.eq(new.org_id),
            sso_identities::connection_id.eq(new.connection_id),
            sso_identities::issuer.eq(new.issuer),
            sso_identities::subject.eq(new.subject),
            sso_identities::user_id.eq(new.user_id),
            sso_identities::linked_by.eq(new.linked_by),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::EncryptionKey;

    fn connection(ring: &Keyring, org_id: Uuid, id: Uuid, secret: &str) -> Connection {
        let (key_version, client_secret_sealed) = seal_secret(ring, org_id, id, secret).unwrap();
        Connection {
            id,
            org_id,
            name: "idp".into(),
            issuer: "https://idp.example.com".into(),
            client_id: "gw".into(),
            client_secret_sealed,
            key_version,
            email_domains: vec!["example.com".into()],
            groups_claim: "groups".into(),
            role_mapping: serde_json::json!({}),
            team_mapping: serde_json::json!({}),
            default_role: "member".into(),
            enabled: true,
            created_by: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    #[test]
    fn secrets_open_only_for_their_connection_and_org() {
        let ring = Keyring::new(1, EncryptionKey::generate(), Default::default());
        let (org, id) = (Uuid::now_v7(), Uuid::now_v7());
        let c = connection(&ring, org, id, "client-secret");
        assert_ne!(c.client_secret_sealed, b"client-secret");
        assert_eq!(c.client_secret(&ring).unwrap(), "client-secret");
        let moved = Connection { org_id: Uuid::now_v7(), ..c.clone() };
        assert!(moved.client_secret(&ring).is_err());
        let copied = Connection { id: Uuid::now_v7(), ..c.clone() };
        assert!(copied.client_secret(&ring).is_err());
        let other_ring = Keyring::new(1, EncryptionKey::generate(), Default::default());
        assert!(c.client_secret(&other_ring).is_err());
    }
}
