//! API keys: only the prefix and the SHA-256 of the secret are stored.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::api_keys;
use crate::error::Result;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = api_keys)]
pub struct ApiKey {
    pub id: Uuid,
    pub org_id: Uuid,
    pub team_id: Option<Uuid>,
    pub name: String,
    pub key_prefix: String,
    pub permissions: Vec<String>,
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub allowed_models: Option<Vec<String>>,
    pub budget: Option<serde_json::Value>,
    pub rate_limits: Option<serde_json::Value>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = api_keys)]
pub struct NewApiKey<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub team_id: Option<Uuid>,
    pub name: &'a str,
    pub key_prefix: &'a str,
    pub key_hash: &'a [u8],
    pub permissions: &'a [String],
    pub allowed_models: Option<&'a [String]>,
    pub created_by: Option<Uuid>,
    pub expires_at: Option<DateTime<Utc>>,
    pub budget: Option<&'a serde_json::Value>,
    pub rate_limits: Option<&'a serde_json::Value>,
}

/// How a key is shown where it is referenced (the request log, the overview): its name and
/// prefix. Revoked keys keep theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLabel {
    pub name: String,
    pub key_prefix: String,
}

/// The labels of an organization's keys among `ids`.
pub async fn labels(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, KeyLabel>> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let rows: Vec<(Uuid, String, String)> = api_keys::table
        .filter(api_keys::org_id.eq(org_id))
        .filter(api_keys::id.eq_any(ids))
        .select((api_keys::id, api_keys::name, api_keys::key_prefix))
        .load(conn)
        .await?;
    Ok(rows.into_iter().map(|(id, name, key_prefix)| (id, KeyLabel { name, key_prefix })).collect())
}

pub async fn insert(conn: &mut AsyncPgConnection, new: &NewApiKey<'_>) -> Result<ApiKey> {
    Ok(diesel::insert_into(api_keys::table).values(new).returning(ApiKey::as_returning()).get_result(conn).await?)
}

/// Which keys a list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Active,
    Revoked,
    Expired,
}

#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub team_id: Option<Uuid>,
    pub created_by: Option<Uuid>,
    pub status: Option<Status>,
    /// Case-insensitive substring of the name.
    pub name: Option<String>,
}

/// One page of an org's keys, newest first. Ids are UUIDv7, so `id < before` is "older than".
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    f: &Filter,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<ApiKey>> {
    let now = Utc::now();
    let mut q = api_keys::table.filter(api_keys::org_id.eq(org_id)).into_boxed();
    if let Some(t) = f.team_id {
        q = q.filter(api_keys::team_id.eq(t));
    }
    if let Some(c) = f.created_by {
        q = q.filter(api_keys::created_by.eq(c));
    }
    if let Some(name) = &f.name {
        let escaped = name.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
        q = q.filter(api_keys::name.ilike(format!("%{escaped}%")));
    }
    match f.status {
        Some(Status::Active) => {
            q = q
                .filter(api_keys::revoked_at.is_null())
                .filter(api_keys::expires_at.is_null().or(api_keys::expires_at.gt(now)))
        }
        Some(Status::Revoked) => q = q.filter(api_keys::revoked_at.is_not_null()),
        Some(Status::Expired) => q = q.filter(api_keys::revoked_at.is_null()).filter(api_keys::expires_at.le(now)),
        None => {}
    }
    if let Some(before) = before {
        q = q.filter(api_keys::id.lt(before));
    }
    Ok(q.order(api_keys::id.desc()).limit(limit).select(ApiKey::as_select()).load(conn).await?)
}

/// What an update sets: `None` leaves a field; `Some(None)` clears a nullable one.
#[derive(Debug, Default, AsChangeset)]
#[diesel(table_name = api_keys)]
pub struct Change {
    pub name: Option<String>,
    pub expires_at: Option<Option<DateTime<Utc>>>,
    pub allowed_models: Option<Option<Vec<String>>>,
    pub budget: Option<Option<serde_json::Value>>,
    pub rate_limits: Option<Option<serde_json::Value>>,
}

/// Updates a live (not revoked) key of `org_id`; returns it and its hash (to invalidate caches).
pub async fn update(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    change: &Change,
) -> Result<Option<(ApiKey, Vec<u8>)>> {
    let row: Option<ApiKey> = diesel::update(
        api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::id.eq(id))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set((change, api_keys::updated_at.eq(Utc::now())))
    .returning(ApiKey::as_returning())
    .get_result(conn)
    .await
    .optional()?;
    let Some(row) = row else {
        return Ok(None);
    };
    let hash: Vec<u8> = api_keys::table.filter(api_keys::id.eq(id)).select(api_keys::key_hash).first(conn).await?;
    Ok(Some((row, hash)))
}

pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<ApiKey>> {
    Ok(api_keys::table
        .filter(api_keys::org_id.eq(org_id))
        .filter(api_keys::id.eq(id))
        .select(ApiKey::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Revokes a key of `org_id`; returns its hash (to invalidate caches) when it was live. A key
/// already revoked keeps its original `revoked_at`.
pub async fn revoke(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<Vec<u8>>> {
    Ok(diesel::update(
        api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::id.eq(id))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set(api_keys::revoked_at.eq(Utc::now()))
    .returning(api_keys::key_hash)
    .get_result(conn)
    .await
    .optional()?)
}

/// What the proxy needs to authorize a request made with a key (also what Redis caches of it).
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, serde::Serialize, serde::Deserialize)]
#[diesel(table_name = api_keys)]
pub struct KeyAuth {
    pub id: Uuid,
    pub org_id: Uuid,
    /// The key's name and prefix, for messages that name it (a Redis copy written before these
    /// fields existed decodes with empty ones, and messages fall back to the id).
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub key_prefix: String,
    pub team_id: Option<Uuid>,
    pub permissions: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// Models the key may use; `None`: every model. A Redis copy written before this field
    /// existed decodes with `None`.
    #[serde(default)]
    pub allowed_models: Option<Vec<String>>,
    /// The key's own budget and rate limits.
    #[serde(default)]
    #[diesel(select_expression = (api_keys::budget, api_keys::rate_limits))]
    #[diesel(select_expression_type = (api_keys::budget, api_keys::rate_limits))]
    pub limits: crate::limits::settings::ScopeLimits,
}

/// Authentication lookup: by digest across all tenants (the digest is the credential).
pub async fn find_by_hash(conn: &mut AsyncPgConnection, hash: &[u8]) -> Result<Option<KeyAuth>> {
    Ok(api_keys::table.filter(api_keys::key_hash.eq(hash)).select(KeyAuth::as_select()).first(conn).await.optional()?)
}

/// Records last use for a batch of keys in one statement (called by the audit flusher, never on
/// the request path). Only moves `last_used_at` forward.
pub async fn touch_last_used(conn: &mut AsyncPgConnection, uses: &[(Uuid, DateTime<Utc>)]) -> Result<usize> {
    use diesel::sql_types::{Array, Timestamptz, Uuid as SqlUuid};
    if uses.is_empty() {
        return Ok(0);
    }
    let (ids, times): (Vec<Uuid>, Vec<DateTime<Utc>>) = uses.iter().copied().unzip();
    Ok(diesel::sql_query(
        "UPDATE api_keys k SET last_used_at = v.ts \
         FROM (SELECT id, max(ts) AS ts FROM unnest($1, $2) AS u(id, ts) GROUP BY id) v \
         WHERE k.id = v.id AND (k.last_used_at IS NULL OR k.last_used_at < v.ts)",
    )
    .bind::<Array<SqlUuid>, _>(ids)
    .bind::<Array<Timestamptz>, _>(times)
    .execute(conn)
    .await?)
}
