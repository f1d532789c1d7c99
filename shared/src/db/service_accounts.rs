//! Service accounts: credentials for automation (CI, infrastructure as code) on the management
//! API. Each is a user of kind `service` with a membership in one organization (its role, never
//! owner), one token stored as prefix + SHA-256, optional operation scopes, an optional expiry,
//! and its last use. Revoking ends it at once; it never signs in with a password and its token
//! is refused on `/v1`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::{org_memberships, service_accounts, users};
use crate::error::{Error, Result};

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = service_accounts)]
pub struct ServiceAccount {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub role: String,
    pub scopes: Vec<String>,
    pub token_prefix: String,
    pub token_hash: Vec<u8>,
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

pub struct NewServiceAccount<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: &'a str,
    pub role: &'a str,
    pub scopes: &'a [String],
    pub token_prefix: &'a str,
    pub token_hash: &'a [u8],
    pub created_by: Option<Uuid>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Creates the account's user, membership and token row in one transaction.
pub async fn insert(conn: &mut AsyncPgConnection, new: &NewServiceAccount<'_>) -> Result<ServiceAccount> {
    conn.transaction(async |conn| {
        // An address nobody can receive mail at or sign up with (`.invalid` is reserved).
        let email = format!("sa-{}@service-accounts.invalid", new.id);
        diesel::insert_into(users::table)
            .values((
                users::id.eq(new.id),
                users::email.eq(&email),
                users::email_normalized.eq(&email),
                users::name.eq(new.name),
                users::kind.eq("service"),
            ))
            .execute(conn)
            .await?;
        diesel::insert_into(org_memberships::table)
            .values((
                org_memberships::org_id.eq(new.org_id),
                org_memberships::user_id.eq(new.id),
                org_memberships::role.eq(new.role),
            ))
            .execute(conn)
            .await?;
        let row = diesel::insert_into(service_accounts::table)
            .values((
                service_accounts::id.eq(new.id),
                service_accounts::org_id.eq(new.org_id),
                service_accounts::name.eq(new.name),
                service_accounts::role.eq(new.role),
                service_accounts::scopes.eq(new.scopes),
                service_accounts::token_prefix.eq(new.token_prefix),
                service_accounts::token_hash.eq(new.token_hash),
                service_accounts::created_by.eq(new.created_by),
                service_accounts::expires_at.eq(new.expires_at),
            ))
            .returning(ServiceAccount::as_returning())
            .get_result(conn)
            .await?;
        Ok::<_, Error>(row)
    })
    .await
}

/// One page of an organization's service accounts, newest first.
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<ServiceAccount>> {
    let mut q = service_accounts::table.filter(service_accounts::org_id.eq(org_id)).into_boxed();
    if let Some(before) = before {
        q = q.filter(service_accounts::id.lt(before));
    }
    Ok(q.order(service_accounts::id.desc()).limit(limit).select(ServiceAccount::as_select()).load(conn).await?)
}

pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<ServiceAccount>> {
    Ok(service_accounts::table
        .filter(service_accounts::org_id.eq(org_id))
        .filter(service_accounts::id.eq(id))
        .select(ServiceAccount::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The live account of a token (not revoked, not expired), its role read from its membership
/// now; marks its use (at most once a minute, so a busy pipeline does not write per request).
pub async fn authenticate(conn: &mut AsyncPgConnection, token_hash: &[u8]) -> Result<Option<(ServiceAccount, String)>> {
    let now = Utc::now();
    let found: Option<(ServiceAccount, String)> = service_accounts::table
        .inner_join(org_memberships::table.on(
            org_memberships::org_id.eq(service_accounts::org_id).and(org_memberships::user_id.eq(service_accounts::id)),
        ))
        .filter(service_accounts::token_hash.eq(token_hash))
        .filter(service_accounts::revoked_at.is_null())
        .filter(service_accounts::expires_at.is_null().or(service_accounts::expires_at.gt(now)))
        .select((ServiceAccount::as_select(), org_memberships::role))
        .first(conn)
        .await
        .optional()?;
    if let Some((sa, _)) = &found {
        if sa.last_used_at.is_none_or(|t| now - t > chrono::Duration::seconds(60)) {
            diesel::update(service_accounts::table.filter(service_accounts::id.eq(sa.id)))
                .set(service_accounts::last_used_at.eq(now))
                .execute(conn)
                .await?;
        }
    }
    Ok(found)
}

/// Revokes an account: its token stops at once and its membership ends. Returns it as it was.
pub async fn revoke(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<ServiceAccount>> {
    conn.transaction(async |conn| {
        let row: Option<ServiceAccount> = diesel::update(
            service_accounts::table
                .filter(service_accounts::org_id.eq(org_id))
                .filter(service_accounts::id.eq(id))
                .filter(service_accounts::revoked_at.is_null()),
        )
        .set(service_accounts::revoked_at.eq(Utc::now()))
        .returning(ServiceAccount::as_returning())
        .get_result(conn)
        .await
        .optional()?;
        if row.is_some() {
            diesel::delete(
                org_memberships::table
                    .filter(org_memberships::org_id.eq(org_id))
                    .filter(org_memberships::user_id.eq(id)),
            )
            .execute(conn)
            .await?;
        }
        Ok::<_, Error>(row)
    })
    .await
}
