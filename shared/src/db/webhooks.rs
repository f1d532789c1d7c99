//! Webhook endpoints: an organization's receivers, their subscriptions and sealed signing
//! secrets. Every query takes the `org_id` and filters on it.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::webhook_endpoints;
use crate::crypto::Keyring;
use crate::error::Result;
use crate::webhooks::secret_aad;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = webhook_endpoints)]
pub struct Endpoint {
    pub id: Uuid,
    pub org_id: Uuid,
    pub url: String,
    pub description: String,
    pub event_types: Vec<String>,
    pub enabled: bool,
    pub secret_ciphertext: Vec<u8>,
    pub key_version: i16,
    pub previous_expires_at: Option<DateTime<Utc>>,
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

pub struct NewEndpoint<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub url: &'a str,
    pub description: &'a str,
    pub event_types: &'a [String],
    pub enabled: bool,
    pub secret: &'a str,
    pub created_by: Option<Uuid>,
}

/// What an update sets: `None` leaves a field as it is.
#[derive(Debug, Default, Clone, AsChangeset)]
#[diesel(table_name = webhook_endpoints)]
pub struct EndpointChange {
    pub url: Option<String>,
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub enabled: Option<bool>,
}

pub async fn count(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<i64> {
    Ok(webhook_endpoints::table.filter(webhook_endpoints::org_id.eq(org_id)).count().get_result(conn).await?)
}

pub async fn insert(conn: &mut AsyncPgConnection, ring: &Keyring, new: NewEndpoint<'_>) -> Result<Endpoint> {
    let (version, sealed) = ring.seal(new.secret.as_bytes(), &secret_aad(new.org_id, new.id))?;
    Ok(diesel::insert_into(webhook_endpoints::table)
        .values((
            webhook_endpoints::id.eq(new.id),
            webhook_endpoints::org_id.eq(new.org_id),
            webhook_endpoints::url.eq(new.url),
            webhook_endpoints::description.eq(new.description),
            webhook_endpoints::event_types.eq(new.event_types),
            webhook_endpoints::enabled.eq(new.enabled),
            webhook_endpoints::secret_ciphertext.eq(sealed),
            webhook_endpoints::key_version.eq(version),
            webhook_endpoints::created_by.eq(new.created_by),
        ))
        .returning(Endpoint::as_returning())
        .get_result(conn)
        .await?)
}

/// A page of the organization's endpoints, newest first.
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Endpoint>> {
    let mut q = webhook_endpoints::table.filter(webhook_endpoints::org_id.eq(org_id)).into_boxed();
    if let Some(before) = before {
        q = q.filter(webhook_endpoints::id.lt(before));
    }
    Ok(q.order(webhook_endpoints::id.desc()).limit(limit).select(Endpoint::as_select()).load(conn).await?)
}

pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<Endpoint>> {
    Ok(webhook_endpoints::table
        .filter(webhook_endpoints::org_id.eq(org_id))
        .filter(webhook_endpoints::id.eq(id))
        .select(Endpoint::as_select())
        .first(conn)
        .await
        .optional()?)
}

pub async fn update(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    change: &EndpointChange,
) -> Result<Option<Endpoint>> {
    Ok(diesel::update(
        webhook_endpoints::table.filter(webhook_endpoints::org_id.eq(org_id)).filter(webhook_endpoints::id.eq(id)),
    )
    .set((change, webhook_endpoints::updated_at.eq(Utc::now())))
    .returning(Endpoint::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

/// A new secret; the current one signs too until `previous_until`.
pub async fn rotate(
    conn: &mut AsyncPgConnection,
    ring: &Keyring,
    org_id: Uuid,
    id: Uuid,
    secret: &str,
    previous_until: DateTime<Utc>,
) -> Result<Option<Endpoint>> {
    let (version, sealed) = ring.seal(secret.as_bytes(), &secret_aad(org_id, id))?;
    Ok(diesel::update(
        webhook_endpoints::table.filter(webhook_endpoints::org_id.eq(org_id)).filter(webhook_endpoints::id.eq(id)),
    )
    .set((
        webhook_endpoints::previous_ciphertext.eq(webhook_endpoints::secret_ciphertext.nullable()),
        webhook_endpoints::previous_key_version.eq(webhook_endpoints::key_version.nullable()),
        webhook_endpoints::previous_expires_at.eq(previous_until),
        webhook_endpoints::secret_ciphertext.eq(sealed),
        webhook_endpoints::key_version.eq(version),
        webhook_endpoints::updated_at.eq(Utc::now()),
    ))
    .returning(Endpoint::as_returning())
    .get_result(conn)
    .await
    .optional()?)
}

pub async fn delete(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<bool> {
    let n = diesel::delete(
        webhook_endpoints::table.filter(webhook_endpoints::org_id.eq(org_id)).filter(webhook_endpoints::id.eq(id)),
    )
    .execute(conn)
    .await?;
    Ok(n > 0)
}

/// Where and how to deliver to an endpoint: its URL, whether it is enabled, and the secrets that
/// sign (the current one, then the one a rotation replaced while its overlap lasts), opened.
pub struct Target {
    pub url: String,
    pub enabled: bool,
    pub secrets: Vec<String>,
}

type Sealed = (String, bool, Vec<u8>, i16, Option<Vec<u8>>, Option<i16>, Option<DateTime<Utc>>);

pub async fn target(conn: &mut AsyncPgConnection, ring: &Keyring, org_id: Uuid, id: Uuid) -> Result<Option<Target>> {
    let row: Option<Sealed> = webhook_endpoints::table
        .filter(webhook_endpoints::org_id.eq(org_id))
        .filter(webhook_endpoints::id.eq(id))
        .select((
            webhook_endpoints::url,
            webhook_endpoints::enabled,
            webhook_endpoints::secret_ciphertext,
            webhook_endpoints::key_version,
            webhook_endpoints::previous_ciphertext,
            webhook_endpoints::previous_key_version,
            webhook_endpoints::previous_expires_at,
        ))
        .first(conn)
        .await
        .optional()?;
    let Some((url, enabled, sealed, version, prev, prev_version, prev_until)) = row else { return Ok(None) };
    let aad = secret_aad(org_id, id);
    let open = |v: i16, s: &[u8]| -> Result<String> {
        let bytes = ring.open(v, s, &aad)?;
        String::from_utf8(bytes).map_err(|_| crate::Error::Crypto("a webhook secret is not text".into()))
    };
    let mut secrets = vec![open(version, &sealed)?];
    if let (Some(p), Some(v), Some(until)) = (prev, prev_version, prev_until) {
        if until > Utc::now() {
            secrets.push(open(v, &p)?);
        }
    }
    Ok(Some(Target { url, enabled, secrets }))
}
