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
    /// Until when the secret a regeneration replaced still works.
    pub previous_key_expires_at: Option<DateTime<Utc>>,
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
    /// [`KIND_STANDARD`], or [`KIND_PLAYGROUND`] for a playground comparison's short-lived key.
    pub kind: &'a str,
}

pub use crate::keys::{KIND_PLAYGROUND, KIND_STANDARD};

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
    let mut q =
        api_keys::table.filter(api_keys::org_id.eq(org_id)).filter(api_keys::kind.eq(KIND_STANDARD)).into_boxed();
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
    pub permissions: Option<Vec<String>>,
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
) -> Result<Option<(ApiKey, Vec<Vec<u8>>)>> {
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
    let (hash, previous): (Vec<u8>, Option<Vec<u8>>) = api_keys::table
        .filter(api_keys::id.eq(id))
        .select((api_keys::key_hash, api_keys::previous_key_hash))
        .first(conn)
        .await?;
    Ok(Some((row, std::iter::once(hash).chain(previous).collect())))
}

pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<ApiKey>> {
    Ok(api_keys::table
        .filter(api_keys::org_id.eq(org_id))
        .filter(api_keys::id.eq(id))
        .filter(api_keys::kind.eq(KIND_STANDARD))
        .select(ApiKey::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Revokes a key of `org_id`; returns its hash (to invalidate caches) when it was live. A key
/// already revoked keeps its original `revoked_at`.
/// Revokes a live key; the hashes its secrets had (the current one, and one still in a
/// regeneration's grace), for invalidation. `None` when missing or already revoked.
pub async fn revoke(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<Vec<Vec<u8>>>> {
    let hashes: Option<(Vec<u8>, Option<Vec<u8>>)> = diesel::update(
        api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::id.eq(id))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set(api_keys::revoked_at.eq(Utc::now()))
    .returning((api_keys::key_hash, api_keys::previous_key_hash))
    .get_result(conn)
    .await
    .optional()?;
    Ok(hashes.map(|(h, p)| std::iter::once(h).chain(p).collect()))
}

/// Revokes every live key a user created in an organization (the user is leaving it); returns
/// each key's id and hashes (current and replaced) for the proxies' caches.
pub async fn revoke_created_by(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    user_id: Uuid,
) -> Result<Vec<(Uuid, Vec<Vec<u8>>)>> {
    let rows: Vec<(Uuid, Vec<u8>, Option<Vec<u8>>)> = diesel::update(
        api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::created_by.eq(user_id))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set(api_keys::revoked_at.eq(Utc::now()))
    .returning((api_keys::id, api_keys::key_hash, api_keys::previous_key_hash))
    .get_results(conn)
    .await?;
    Ok(rows.into_iter().map(|(id, h, p)| (id, std::iter::once(h).chain(p).collect())).collect())
}

/// Hands every live key a user created in an organization to another member; returns how many.
pub async fn transfer_created_by(conn: &mut AsyncPgConnection, org_id: Uuid, from: Uuid, to: Uuid) -> Result<usize> {
    Ok(diesel::update(
        api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::created_by.eq(from))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set(api_keys::created_by.eq(to))
    .execute(conn)
    .await?)
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
    /// [`KIND_STANDARD`] or [`KIND_PLAYGROUND`] (the audit row marks a playground call).
    #[serde(default = "standard_kind")]
    pub kind: String,
}

fn standard_kind() -> String {
    KIND_STANDARD.to_string()
}

/// Authentication lookup: by digest across all tenants (the digest is the credential).
/// The key a secret authenticates: its current secret, or the one a regeneration replaced while
/// its grace period lasts (then the key expires, for that secret, when the grace ends).
pub async fn find_by_hash(conn: &mut AsyncPgConnection, hash: &[u8]) -> Result<Option<KeyAuth>> {
    let current = api_keys::table
        .filter(api_keys::key_hash.eq(hash))
        .select(KeyAuth::as_select())
        .first(conn)
        .await
        .optional()?;
    if current.is_some() {
        return Ok(current);
    }
    let previous: Option<(KeyAuth, Option<DateTime<Utc>>)> = api_keys::table
        .filter(api_keys::previous_key_hash.eq(hash))
        .select((KeyAuth::as_select(), api_keys::previous_key_expires_at))
        .first(conn)
        .await
        .optional()?;
    Ok(previous.map(|(mut key, until)| {
        key.expires_at = match (key.expires_at, until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        key
    }))
}

/// A regenerated key's row and the hashes that no longer authenticate it as they did (the
/// replaced secret, or the one an earlier regeneration left in grace), for invalidation.
pub struct Regenerated {
    pub key: ApiKey,
    pub stale_hashes: Vec<Vec<u8>>,
}

/// Gives a live key a new secret (its prefix and hash); the replaced secret keeps working until
/// `grace_until` (`None`: not at all). `None` when the key is missing or revoked.
pub async fn regenerate(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    new_prefix: &str,
    new_hash: &[u8],
    grace_until: Option<DateTime<Utc>>,
) -> Result<Option<Regenerated>> {
    let old: Option<(Vec<u8>, Option<Vec<u8>>)> = api_keys::table
        .filter(api_keys::org_id.eq(org_id))
        .filter(api_keys::id.eq(id))
        .filter(api_keys::revoked_at.is_null())
        .select((api_keys::key_hash, api_keys::previous_key_hash))
        .for_update()
        .first(conn)
        .await
        .optional()?;
    let Some((old_hash, older_hash)) = old else { return Ok(None) };
    let key = diesel::update(api_keys::table.filter(api_keys::org_id.eq(org_id)).filter(api_keys::id.eq(id)))
        .set((
            api_keys::key_prefix.eq(new_prefix),
            api_keys::key_hash.eq(new_hash),
            api_keys::previous_key_hash.eq(grace_until.map(|_| old_hash.clone())),
            api_keys::previous_key_expires_at.eq(grace_until),
            api_keys::updated_at.eq(Utc::now()),
        ))
        .returning(ApiKey::as_returning())
        .get_result(conn)
        .await?;
    Ok(Some(Regenerated { key, stale_hashes: std::iter::once(old_hash).chain(older_hash).collect() }))
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

/// Writes `api_key.expired` for up to `limit` keys whose expiry has passed by `now` and was not
/// announced yet (revoked keys are not announced), marking them announced in the same
/// transaction. Returns how many.
pub async fn announce_expired(conn: &mut AsyncPgConnection, now: DateTime<Utc>, limit: i64) -> Result<usize> {
    use diesel_async::AsyncConnection;
    conn.transaction(async |conn| {
        let due: Vec<Uuid> = api_keys::table
            .filter(api_keys::expires_at.le(now))
            .filter(api_keys::expiry_announced_at.is_null())
            .filter(api_keys::revoked_at.is_null())
            .filter(api_keys::kind.eq(KIND_STANDARD))
            .order(api_keys::expires_at.asc())
            .limit(limit)
            .select(api_keys::id)
            .for_update()
            .skip_locked()
            .load(conn)
            .await?;
        if due.is_empty() {
            return Ok(0);
        }
        type Expired = (Uuid, Uuid, String, String, Option<Uuid>, Option<DateTime<Utc>>);
        let rows: Vec<Expired> = diesel::update(api_keys::table.filter(api_keys::id.eq_any(&due)))
            .set(api_keys::expiry_announced_at.eq(now))
            .returning((
                api_keys::id,
                api_keys::org_id,
                api_keys::name,
                api_keys::key_prefix,
                api_keys::team_id,
                api_keys::expires_at,
            ))
            .get_results(conn)
            .await?;
        let events: Vec<_> = rows
            .iter()
            .map(|(id, org_id, name, prefix, team_id, expires_at)| {
                let key = crate::webhooks::payloads::KeyFacts { id: *id, name, prefix, team_id: *team_id };
                crate::webhooks::payloads::api_key_expired(*org_id, &key, expires_at.unwrap_or(now))
            })
            .collect();
        crate::db::events::insert_new(conn, &events).await?;
        Ok::<_, crate::Error>(rows.len())
    })
    .await
}
