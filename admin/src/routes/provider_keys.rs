//! Provider keys: an organization's own credentials for an upstream provider. Create (sealed with
//! the master keyring), list and get (only a hint of the secret, never the secret or its
//! ciphertext), rename, rotate (new secret, same id) and revoke. Changes that alter what the proxy
//! sends upstream (create, rotate, revoke) invalidate the proxies' caches once committed.
//!
//! Log lines name the key id, the provider and the organization: never the secret or its hint.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::AsyncPgConnection;
use gw_shared::crypto::Keyring;
use gw_shared::db::provider_keys::{self, NewKey, ProviderKey};
use gw_shared::ids::new_id;
use gw_shared::redis::{invalidate, Invalidation};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{is_unique_violation, ApiError, ApiResult};
use crate::session::Session;
use crate::state::AppState;
use crate::validate;

const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 200;
const MAX_SECRET_CHARS: usize = 4096;
/// The provider kind served in process: it takes no key.
const IN_PROCESS_KIND: &str = "mock";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    provider: String,
    name: String,
    secret: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotateBody {
    secret: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<i64>,
    cursor: Option<Uuid>,
}

/// A provider key as the API shows it: never the secret, never the ciphertext.
#[derive(Serialize)]
struct KeyOut {
    id: Uuid,
    provider: String,
    name: String,
    secret_hint: String,
    key_version: i16,
    status: &'static str,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    rotated_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<ProviderKey> for KeyOut {
    fn from(k: ProviderKey) -> Self {
        KeyOut {
            id: k.id,
            provider: k.provider,
            name: k.name,
            secret_hint: k.secret_hint,
            key_version: k.key_version,
            status: if k.revoked_at.is_some() { "revoked" } else { "active" },
            created_by: k.created_by,
            created_at: k.created_at,
            updated_at: k.updated_at,
            rotated_at: k.rotated_at,
            revoked_at: k.revoked_at,
        }
    }
}

#[derive(Serialize)]
struct Page {
    data: Vec<KeyOut>,
    /// Pass as `cursor` to get the next page; null on the last page.
    next_cursor: Option<Uuid>,
}

/// The master keyring; without it no secret can be sealed.
fn keyring(state: &AppState) -> ApiResult<&Keyring> {
    state.cfg.secrets.keyring.as_ref().ok_or_else(|| {
        log::error!("a provider key was sent but GW_ENCRYPTION_KEY is not set");
        ApiError::Unavailable("provider keys need GW_ENCRYPTION_KEY".into())
    })
}

/// The configured providers an organization may bring a key for (not the in-process ones).
fn keyed_providers(state: &AppState) -> impl Iterator<Item = &str> {
    state.cfg.providers.iter().filter(|p| p.kind != IN_PROCESS_KIND).map(|p| p.name.as_str())
}

fn provider(state: &AppState, requested: &str) -> ApiResult<String> {
    let known = || {
        let names: Vec<&str> = keyed_providers(state).collect();
        if names.is_empty() {
            "none are configured".to_string()
        } else {
            names.join(", ")
        }
    };
    match state.cfg.providers.iter().find(|p| p.name == requested) {
        Some(p) if p.kind != IN_PROCESS_KIND => Ok(p.name.clone()),
        Some(p) => Err(ApiError::Validation(format!(
            "provider {:?} runs in process and takes no key; known providers: {}",
            p.name,
            known()
        ))),
        None => Err(ApiError::Validation(format!("unknown provider {requested:?}; known providers: {}", known()))),
    }
}

/// Surrounding whitespace (a pasted newline) is dropped; the rest must be 1 to 4096 characters
/// without control characters. Messages never echo the secret.
fn secret(value: &str) -> ApiResult<String> {
    let v = value.trim();
    if v.is_empty() {
        return Err(ApiError::Validation("secret must not be empty".into()));
    }
    if v.chars().count() > MAX_SECRET_CHARS {
        return Err(ApiError::Validation(format!("secret must be at most {MAX_SECRET_CHARS} characters")));
    }
    if v.chars().any(char::is_control) {
        return Err(ApiError::Validation("secret must not contain control characters".into()));
    }
    Ok(v.to_string())
}

/// Drops the proxies' copies of an organization's keys. The change is committed: if this fails,
/// the proxies' cache TTL still ends the old value's life, so it is logged, not returned.
async fn invalidate_org(state: &AppState, org_id: Uuid, what: &str, id: Uuid) {
    if let Err(e) = invalidate(&state.redis, &Invalidation::ProviderKeys { org_id }).await {
        log::warn!("could not publish the {what} of provider key {id} in org {org_id}: {e}");
    }
}

/// Why a change to a key of this org found no live key: 409 when it exists but is revoked, 404
/// when it is not this org's (another org's key looks exactly like a missing one).
async fn not_live(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> ApiError {
    match provider_keys::find(conn, org_id, id).await {
        Ok(Some(_)) => ApiError::Conflict("provider key is revoked".into()),
        Ok(None) => ApiError::NotFound("provider key"),
        Err(e) => e.into(),
    }
}

pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    body: web::Json<CreateBody>,
) -> ApiResult<HttpResponse> {
    session.require_admin()?;
    let ring = keyring(&state)?;
    let b = body.into_inner();
    let provider = provider(&state, &b.provider)?;
    let name = validate::text("name", &b.name, 200)?;
    let secret = secret(&b.secret)?;
    let mut conn = state.conn().await?;
    let new = NewKey {
        id: new_id(),
        org_id: session.org_id,
        provider: &provider,
        name: &name,
        secret: &secret,
        created_by: Some(session.user_id),
    };
    let row = match provider_keys::insert(&mut conn, ring, &new).await {
        Ok(row) => row,
        Err(e) if is_unique_violation(&e) => {
            return Err(ApiError::Conflict(format!(
                "this organization already has a live key for provider {provider:?}: rotate or revoke it first"
            )))
        }
        Err(e) => return Err(e.into()),
    };
    log::info!("provider key {} for {} created in org {}", row.id, row.provider, row.org_id);
    invalidate_org(&state, row.org_id, "creation", row.id).await;
    Ok(HttpResponse::Created().json(KeyOut::from(row)))
}

pub async fn list(state: web::Data<AppState>, session: Session, q: web::Query<ListQuery>) -> ApiResult<HttpResponse> {
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::Validation(format!("limit must be between 1 and {MAX_PAGE}")));
    }
    let mut conn = state.conn().await?;
    // One extra row tells whether another page exists.
    let mut rows = provider_keys::list(&mut conn, session.org_id, q.cursor, limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = if more { rows.last().map(|k| k.id) } else { None };
    Ok(HttpResponse::Ok().json(Page { data: rows.into_iter().map(KeyOut::from).collect(), next_cursor }))
}

pub async fn get(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let row = provider_keys::find(&mut conn, session.org_id, id.into_inner())
        .await?
        .ok_or(ApiError::NotFound("provider key"))?;
    Ok(HttpResponse::Ok().json(KeyOut::from(row)))
}

pub async fn rename(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<Uuid>,
    body: web::Json<RenameBody>,
) -> ApiResult<HttpResponse> {
    session.require_admin()?;
    let id = id.into_inner();
    let name = validate::text("name", &body.name, 200)?;
    let mut conn = state.conn().await?;
    // The name is not part of what the proxy caches: no invalidation.
    match provider_keys::rename(&mut conn, session.org_id, id, &name).await? {
        Some(row) => {
            log::info!("provider key {id} for {} renamed in org {}", row.provider, row.org_id);
            Ok(HttpResponse::Ok().json(KeyOut::from(row)))
        }
        None => Err(not_live(&mut conn, session.org_id, id).await),
    }
}

pub async fn rotate(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<Uuid>,
    body: web::Json<RotateBody>,
) -> ApiResult<HttpResponse> {
    session.require_admin()?;
    let ring = keyring(&state)?;
    let id = id.into_inner();
    let secret = secret(&body.secret)?;
    let mut conn = state.conn().await?;
    match provider_keys::rotate(&mut conn, ring, session.org_id, id, &secret).await? {
        Some(row) => {
            log::info!("provider key {id} for {} rotated in org {}", row.provider, row.org_id);
            invalidate_org(&state, row.org_id, "rotation", id).await;
            Ok(HttpResponse::Ok().json(KeyOut::from(row)))
        }
        None => Err(not_live(&mut conn, session.org_id, id).await),
    }
}

pub async fn revoke(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    session.require_admin()?;
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    match provider_keys::revoke(&mut conn, session.org_id, id).await? {
        Some(row) => {
            log::info!("provider key {id} for {} revoked in org {}", row.provider, row.org_id);
            invalidate_org(&state, row.org_id, "revocation", id).await;
            Ok(HttpResponse::NoContent().finish())
        }
        // Already revoked: revoking again is a no-op, not an error.
        None if provider_keys::find(&mut conn, session.org_id, id).await?.is_some() => {
            Ok(HttpResponse::NoContent().finish())
        }
        None => Err(ApiError::NotFound("provider key")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_checked_without_being_echoed() {
        assert_eq!(secret(" sk-abc\n").ok().as_deref(), Some("sk-abc"));
        for bad in ["", "   ", "\n"] {
            assert!(matches!(secret(bad), Err(ApiError::Validation(_))), "{bad:?}");
        }
        let long = "hidden".repeat(MAX_SECRET_CHARS);
        for bad in ["sk-\u{0}-hidden", long.as_str()] {
            let e = secret(bad).unwrap_err();
            assert!(matches!(e, ApiError::Validation(_)));
            assert!(!e.to_string().contains("hidden"), "{e}");
        }
        assert!(secret(&"x".repeat(MAX_SECRET_CHARS)).is_ok());
    }
}
