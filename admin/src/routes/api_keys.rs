//! API keys: create (the secret is shown once; optionally limited to some models), list (never
//! the secret), revoke.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use gw_shared::accounts::{issue_api_key, KeySpec, DEFAULT_PERMISSION, KNOWN_PERMISSIONS};
use gw_shared::db::{api_keys, teams};
use gw_shared::redis::{invalidate, publish, Invalidation};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::session::Session;
use crate::state::AppState;
use crate::validate;

const WARNING: &str = "Store this key now: it is shown only once and cannot be retrieved again.";
const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 200;
/// Most entries a key's model allow-list may have.
const MAX_MODELS: usize = 100;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    name: String,
    #[serde(default)]
    permissions: Option<Vec<String>>,
    #[serde(default)]
    team_id: Option<String>,
    #[serde(default)]
    expires_at: Option<DateTime<Utc>>,
    /// Models the key may use (names or aliases); omitted or null: every model; `[]`: none.
    #[serde(default)]
    models: Option<Vec<String>>,
}

#[derive(Serialize)]
struct Created {
    id: Uuid,
    name: String,
    key: String,
    key_prefix: String,
    permissions: Vec<String>,
    team_id: Option<Uuid>,
    created_at: DateTime<Utc>,
    expires_at: Option<DateTime<Utc>>,
    /// The model allow-list; null: every model.
    models: Option<Vec<String>>,
    warning: &'static str,
}

#[derive(Serialize)]
struct KeyOut {
    id: Uuid,
    name: String,
    key_prefix: String,
    permissions: Vec<String>,
    team_id: Option<Uuid>,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    last_used_at: Option<DateTime<Utc>>,
    expires_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    /// The model allow-list; null: every model.
    models: Option<Vec<String>>,
    status: &'static str,
}

impl From<api_keys::ApiKey> for KeyOut {
    fn from(k: api_keys::ApiKey) -> Self {
        let status = if k.revoked_at.is_some() {
            "revoked"
        } else if k.expires_at.is_some_and(|t| t <= Utc::now()) {
            "expired"
        } else {
            "active"
        };
        KeyOut {
            id: k.id,
            name: k.name,
            key_prefix: k.key_prefix,
            permissions: k.permissions,
            team_id: k.team_id,
            created_by: k.created_by,
            created_at: k.created_at,
            last_used_at: k.last_used_at,
            expires_at: k.expires_at,
            revoked_at: k.revoked_at,
            models: k.allowed_models,
            status,
        }
    }
}

#[derive(Serialize)]
struct Page {
    data: Vec<KeyOut>,
    /// Pass as `cursor` to get the next page; null on the last page.
    next_cursor: Option<Uuid>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<i64>,
    cursor: Option<Uuid>,
}

fn permissions(requested: Option<Vec<String>>) -> ApiResult<Vec<String>> {
    let mut perms = requested.unwrap_or_else(|| vec![DEFAULT_PERMISSION.to_string()]);
    if perms.is_empty() {
        return Err(ApiError::Validation("permissions must not be empty".into()));
    }
    if let Some(bad) = perms.iter().find(|p| !KNOWN_PERMISSIONS.contains(&p.as_str())) {
        return Err(ApiError::Validation(format!(
            "unknown permission {bad:?}; known permissions: {}",
            KNOWN_PERMISSIONS.join(", ")
        )));
    }
    perms.sort();
    perms.dedup();
    Ok(perms)
}

/// The allow-list as stored: every entry a configured model name or alias, duplicates dropped
/// (first occurrence kept, so the caller's order holds). `None` stays `None` (every model).
fn models(state: &AppState, requested: Option<Vec<String>>) -> ApiResult<Option<Vec<String>>> {
    let Some(requested) = requested else {
        return Ok(None);
    };
    if requested.len() > MAX_MODELS {
        return Err(ApiError::Validation(format!("models must have at most {MAX_MODELS} entries")));
    }
    let known = |m: &str| state.cfg.models.iter().any(|c| c.name == m || c.aliases.iter().any(|a| a == m));
    let mut out: Vec<String> = Vec::with_capacity(requested.len());
    for m in requested {
        if !known(&m) {
            return Err(ApiError::Validation(format!(
                "unknown model {m:?} in models: each entry must be a configured model name or alias"
            )));
        }
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(Some(out))
}

pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    body: web::Json<CreateBody>,
) -> ApiResult<HttpResponse> {
    session.require_admin()?;
    let b = body.into_inner();
    let name = validate::text("name", &b.name, 200)?;
    let perms = permissions(b.permissions)?;
    let allowed_models = models(&state, b.models)?;
    let team_id = match b.team_id.as_deref() {
        None => None,
        Some(raw) => Some(Uuid::parse_str(raw).map_err(|_| ApiError::Validation("team_id must be a UUID".into()))?),
    };
    if b.expires_at.is_some_and(|t| t <= Utc::now()) {
        return Err(ApiError::Validation("expires_at must be in the future".into()));
    }
    let mut conn = state.conn().await?;
    if let Some(team) = team_id {
        // Another org's team looks exactly like a missing one.
        if !teams::exists_in_org(&mut conn, session.org_id, team).await? {
            return Err(ApiError::Validation("team_id does not name a team of this organization".into()));
        }
    }
    let spec = KeySpec {
        org_id: session.org_id,
        team_id,
        name: &name,
        permissions: &perms,
        allowed_models: allowed_models.as_deref(),
        created_by: Some(session.user_id),
        expires_at: b.expires_at,
    };
    let (row, secret) = issue_api_key(&mut conn, spec).await?;
    log::info!("api key {} ({}) created in org {}", row.id, row.key_prefix, row.org_id);
    // Proxies may remember this hash as unknown (someone tried it before it existed).
    if let Err(e) = publish(&state.redis, &Invalidation::ApiKey(gw_shared::keys::hash_secret(&secret))).await {
        log::warn!("could not publish creation of key {}: {e}", row.id);
    }
    Ok(HttpResponse::Created().json(Created {
        id: row.id,
        name: row.name,
        key: secret,
        key_prefix: row.key_prefix,
        permissions: row.permissions,
        team_id: row.team_id,
        created_at: row.created_at,
        expires_at: row.expires_at,
        models: row.allowed_models,
        warning: WARNING,
    }))
}

pub async fn list(state: web::Data<AppState>, session: Session, q: web::Query<ListQuery>) -> ApiResult<HttpResponse> {
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::Validation(format!("limit must be between 1 and {MAX_PAGE}")));
    }
    let mut conn = state.conn().await?;
    // One extra row tells whether another page exists.
    let mut rows = api_keys::list(&mut conn, session.org_id, q.cursor, limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = if more { rows.last().map(|k| k.id) } else { None };
    Ok(HttpResponse::Ok().json(Page { data: rows.into_iter().map(KeyOut::from).collect(), next_cursor }))
}

pub async fn revoke(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    session.require_admin()?;
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    match api_keys::revoke(&mut conn, session.org_id, id).await? {
        Some(hash) => {
            log::info!("api key {id} revoked in org {}", session.org_id);
            let hash: [u8; 32] =
                hash.try_into().map_err(|_| ApiError::Internal("stored key hash is not 32 bytes".into()))?;
            // The revoke is committed; if this publish fails the proxies' cache TTL still ends
            // the key's life, so it is logged rather than failing the request.
            if let Err(e) = invalidate(&state.redis, &Invalidation::ApiKey(hash)).await {
                log::warn!("could not publish revocation of key {id}: {e}");
            }
            Ok(HttpResponse::NoContent().finish())
        }
        // Already revoked: revoking again is a no-op, not an error.
        None if api_keys::find(&mut conn, session.org_id, id).await?.is_some() => {
            Ok(HttpResponse::NoContent().finish())
        }
        None => Err(ApiError::NotFound("api key")),
    }
}
