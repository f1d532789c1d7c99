//! Account operations both the HTTP handlers and the `gw-admin bootstrap` command perform.

use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use uuid::Uuid;

use crate::db::api_keys::{self, ApiKey, NewApiKey};
use crate::db::orgs::{self, NewOrganization, Organization};
use crate::db::users::{self, NewUser, User};
use crate::error::Result;
use crate::ids::new_id;
use crate::keys::generate_api_key;
use crate::password::hash_password_blocking;

pub const ROLE_OWNER: &str = "owner";
pub const ROLE_ADMIN: &str = "admin";
pub const ROLE_MEMBER: &str = "member";

/// Permission strings an API key may carry.
pub const KNOWN_PERMISSIONS: &[&str] = &["proxy:llm"];
pub const DEFAULT_PERMISSION: &str = "proxy:llm";

/// Creates an organization and its owner in one transaction. The password is hashed before the
/// transaction opens, so the (deliberately slow) hash never holds a database lock.
pub async fn create_org_with_owner(
    conn: &mut AsyncPgConnection,
    email: &str,
    name: &str,
    password: &str,
    org_name: &str,
) -> Result<(Organization, User)> {
    let hash = hash_password_blocking(password.to_string()).await?;
    conn.transaction(async |conn| {
        let org = orgs::insert(conn, &NewOrganization { id: new_id(), name: org_name }).await?;
        let user = users::insert(conn, &NewUser { id: new_id(), email, name, password_hash: Some(&hash) }).await?;
        users::add_membership(conn, org.id, user.id, ROLE_OWNER).await?;
        Ok((org, user))
    })
    .await
}

/// Issues a key; the secret in the result is the only copy that will ever exist.
/// What a new API key may do and for whom.
#[derive(Debug, Clone, Copy)]
pub struct KeySpec<'a> {
    pub org_id: Uuid,
    pub team_id: Option<Uuid>,
    pub name: &'a str,
    pub permissions: &'a [String],
    /// Models the key may use; `None`: every model.
    pub allowed_models: Option<&'a [String]>,
    pub created_by: Option<Uuid>,
    pub expires_at: Option<DateTime<Utc>>,
}

pub async fn issue_api_key(conn: &mut AsyncPgConnection, spec: KeySpec<'_>) -> Result<(ApiKey, String)> {
    let k = generate_api_key();
    let row = api_keys::insert(
        conn,
        &NewApiKey {
            id: new_id(),
            org_id: spec.org_id,
            team_id: spec.team_id,
            name: spec.name,
            key_prefix: &k.prefix,
            key_hash: &k.hash,
            permissions: spec.permissions,
            allowed_models: spec.allowed_models,
            created_by: spec.created_by,
            expires_at: spec.expires_at,
        },
    )
    .await?;
    Ok((row, k.secret))
}
