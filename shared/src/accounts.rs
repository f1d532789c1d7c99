//! Account operations both the HTTP handlers and the `gw-admin bootstrap` command perform.

use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use uuid::Uuid;

use crate::db::api_keys::{self, ApiKey, NewApiKey};
use crate::db::orgs::{self, NewOrganization, Organization};
use crate::db::users::{self, NewUser, User};
use crate::email::Email;
use crate::error::Result;
use crate::ids::new_id;
use crate::keys::generate_api_key;

pub const ROLE_OWNER: &str = "owner";
pub const ROLE_ADMIN: &str = "admin";
pub const ROLE_MEMBER: &str = "member";

/// Permission strings an API key may carry (`docs/api.md`, "Permissions"): `proxy:llm` is
/// every proxy endpoint; the others are one endpoint each.
pub const KNOWN_PERMISSIONS: &[&str] =
    &[PERM_LLM, PERM_CHAT, PERM_EMBEDDINGS, PERM_MODELS, PERM_MESSAGES, PERM_RESPONSES];
pub const PERM_LLM: &str = "proxy:llm";
pub const PERM_CHAT: &str = "proxy:chat";
pub const PERM_EMBEDDINGS: &str = "proxy:embeddings";
pub const PERM_MODELS: &str = "proxy:models";
/// Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`).
pub const PERM_MESSAGES: &str = "proxy:messages";
/// OpenAI's Responses API (`/v1/responses`).
pub const PERM_RESPONSES: &str = "proxy:responses";
pub const DEFAULT_PERMISSION: &str = PERM_LLM;

/// Whether a key's permissions allow an endpoint's scope (`proxy:chat`, `proxy:embeddings`,
/// `proxy:models`): `proxy:llm` allows them all.
pub fn permits(permissions: &[String], scope: &str) -> bool {
    permissions.iter().any(|p| p == PERM_LLM || p == scope)
}

/// Creates an organization and its owner in one transaction. The caller hashes the password
/// first, without holding a database connection: argon2id is deliberately slow.
pub async fn create_org_with_owner(
    conn: &mut AsyncPgConnection,
    email: &Email,
    name: &str,
    password_hash: &str,
    org_name: &str,
) -> Result<(Organization, User)> {
    conn.transaction(async |conn| {
        let org = orgs::insert(conn, &NewOrganization { id: new_id(), name: org_name }).await?;
        let new = NewUser {
            id: new_id(),
            email: &email.display,
            email_normalized: &email.normalized,
            name,
            password_hash: Some(password_hash),
        };
        let user = users::insert(conn, &new).await?;
        users::add_membership(conn, org.id, user.id, ROLE_OWNER).await?;
        let m = crate::webhooks::payloads::MemberFacts { user_id: user.id, email: &user.email, role: ROLE_OWNER };
        crate::db::events::emit(conn, crate::webhooks::payloads::member_added(org.id, &m, None, "signup")).await?;
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
    /// The key's own budget and rate limits (validated JSON).
    pub budget: Option<&'a serde_json::Value>,
    pub rate_limits: Option<&'a serde_json::Value>,
}

pub async fn issue_api_key(conn: &mut AsyncPgConnection, spec: KeySpec<'_>) -> Result<(ApiKey, String)> {
    use diesel_async::AsyncConnection;
    // The key and its `api_key.created` event commit together.
    conn.transaction(async |conn| issue_api_key_tx(conn, spec).await).await
}

async fn issue_api_key_tx(conn: &mut AsyncPgConnection, spec: KeySpec<'_>) -> Result<(ApiKey, String)> {
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
            budget: spec.budget,
            rate_limits: spec.rate_limits,
            kind: api_keys::KIND_STANDARD,
        },
    )
    .await?;
    let facts = crate::webhooks::payloads::KeyFacts {
        id: row.id,
        name: &row.name,
        prefix: &row.key_prefix,
        team_id: row.team_id,
    };
    crate::db::events::emit(conn, crate::webhooks::payloads::api_key_created(row.org_id, &facts, spec.created_by))
        .await?;
    Ok((row, k.secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes() {
        let llm = vec![PERM_LLM.to_string()];
        let chat = vec![PERM_CHAT.to_string()];
        assert!(permits(&llm, PERM_CHAT) && permits(&llm, PERM_EMBEDDINGS) && permits(&llm, PERM_MODELS));
        assert!(permits(&chat, PERM_CHAT));
        assert!(!permits(&chat, PERM_EMBEDDINGS) && !permits(&chat, PERM_MODELS));
        assert!(!permits(&[], PERM_CHAT));
    }
}
