//! Provider keys: an organization's own credentials for an upstream provider. Create (sealed with
//! the master keyring), list and get (only a hint of the secret, never the secret or its
//! ciphertext), rename, rotate (new secret, same id) and revoke. Changes that alter what the proxy
//! sends upstream (create, rotate, revoke) invalidate the proxies' caches once committed.
//!
//! Log lines name the key id, the provider and the organization: never the secret or its hint.

use actix_web::{delete, get, patch, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::config::Routes;
use gw_shared::db::provider_keys::{self, NewKey, ProviderKey};
use gw_shared::db::{events, invalidations};
use gw_shared::ids::new_id;
use gw_shared::redis::Invalidation;
use gw_shared::webhooks::payloads::{self, ProviderKeyFacts};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{is_unique_violation, ApiError, ApiResult, Errors};
use crate::pagination::{self, Page};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{self, Entry, Trail};
use crate::validate;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list).service(create).service(get).service(rename).service(revoke).service(rotate).service(test);
}
/// The provider kind served in process: it takes no key.
const IN_PROCESS_KIND: &str = "mock";

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProviderKey {
    provider: String,
    name: String,
    secret: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameProviderKey {
    name: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateProviderKey {
    secret: String,
    /// Seconds the replaced secret stays usable (0 to 86400; default 300): proxies send the new
    /// secret, and while the overlap lasts retry a refused one once with the previous. A second
    /// rotation or a revocation ends it.
    #[serde(default)]
    overlap_seconds: Option<i64>,
}

/// The overlap a rotation keeps when the request names none.
const DEFAULT_OVERLAP_SECS: i64 = 300;
const MAX_OVERLAP_SECS: i64 = 86_400;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ProviderKeyQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
}

/// A provider key as the API shows it: never the secret, never the ciphertext.
#[derive(Serialize, ToSchema)]
pub struct ProviderKeyOut {
    id: Uuid,
    provider: String,
    name: String,
    secret_hint: String,
    /// The key's own version: 1 when added, one more per rotation.
    version: i32,
    /// The version of gw's master key that sealed the secret (it changes when the operator
    /// re-encrypts after a master key rotation, not when this key is rotated).
    master_key_version: i16,
    /// `active` or `revoked`.
    status: &'static str,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    rotated_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    /// Until when the secret the last rotation replaced is still tried (a refused new secret
    /// is retried with it); null when there is no overlap.
    previous_valid_until: Option<DateTime<Utc>>,
}

impl From<ProviderKey> for ProviderKeyOut {
    fn from(k: ProviderKey) -> Self {
        ProviderKeyOut {
            id: k.id,
            provider: k.provider,
            name: k.name,
            secret_hint: k.secret_hint,
            version: k.version,
            master_key_version: k.key_version,
            status: if k.revoked_at.is_some() { "revoked" } else { "active" },
            created_by: k.created_by,
            created_at: k.created_at,
            updated_at: k.updated_at,
            rotated_at: k.rotated_at,
            revoked_at: k.revoked_at,
            previous_valid_until: k.previous_expires_at.filter(|t| *t > Utc::now()),
        }
    }
}

/// The catalog's providers an organization may bring a key for (not the in-process ones).
fn keyed_providers(routes: &Routes) -> impl Iterator<Item = &str> {
    routes.providers.iter().filter(|p| p.kind != IN_PROCESS_KIND).map(|p| p.name.as_str())
}

fn provider(routes: &Routes, org_kinds: &[String], requested: &str) -> ApiResult<String> {
    let known = || {
        let names: Vec<&str> = keyed_providers(routes).collect();
        if names.is_empty() {
            "none are configured".to_string()
        } else {
            names.join(", ")
        }
    };
    match routes.provider(requested) {
        Some(p) if p.kind != IN_PROCESS_KIND => Ok(p.name.clone()),
        Some(p) => Err(ApiError::field(
            "provider",
            format!("provider {:?} runs in process and takes no key; known providers: {}", p.name, known()),
        )),
        // A key for a kind organizations may deploy themselves (their own providers name it).
        None if org_kinds.iter().any(|k| k == requested) => Ok(requested.to_string()),
        None => {
            Err(ApiError::field("provider", format!("unknown provider {requested:?}; known providers: {}", known())))
        }
    }
}

fn secret(value: &str) -> ApiResult<String> {
    validate::secret("secret", value)
}

/// Records, in the change's transaction, that the proxies drop their copies of an
/// organization's keys; the entries, for [`announce_org`] once it commits.
async fn record_org(conn: &mut AsyncPgConnection, org_id: Uuid) -> ApiResult<Vec<(i64, Invalidation)>> {
    Ok(invalidations::record_all(conn, [Invalidation::ProviderKeys { org_id }]).await?)
}

/// Announces what [`record_org`] recorded.
async fn announce_org(state: &AppState, logged: &[(i64, Invalidation)], org_id: Uuid, what: &str, id: Uuid) {
    state.announce(logged, format_args!("the {what} of provider key {id} in org {org_id}")).await;
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

/// Store an organization's own key for a configured provider (sealed with the master key).
#[utoipa::path(operation_id = "create_provider_key", tag = "provider-keys", request_body = CreateProviderKey, responses((status = 201, body = ProviderKeyOut), Errors))]
#[post("/provider-keys")]
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<CreateProviderKey>,
) -> ApiResult<HttpResponse> {
    let ring = state.keyring("provider keys need")?;
    let b = body.into_inner();
    let provider = provider(&state.routes().await?, &state.cfg.routing.org_provider_kinds, &b.provider)?;
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
    let trail = Trail::of(&session, &req);
    // The key, its trail row and the proxies' invalidation commit together.
    let (row, logged) = conn
        .transaction(async |conn| {
            let row = match provider_keys::insert(conn, ring, &new).await {
                Ok(row) => row,
                Err(e) if is_unique_violation(&e) => {
                    return Err(ApiError::Conflict(format!(
                        "this organization already has a live key for provider {provider:?}: rotate or revoke it first"
                    )))
                }
                Err(e) => return Err(e.into()),
            };
            let entry = Entry {
                action: "provider_key.create",
                resource_type: "provider_key",
                resource_id: Some(row.id.to_string()),
                detail: json!({"provider": row.provider, "name": row.name}),
            };
            trail.record(conn, entry).await?;
            let logged = record_org(conn, row.org_id).await?;
            Ok::<_, ApiError>((row, logged))
        })
        .await?;
    log::info!("provider key {} for {} created in org {}", row.id, row.provider, row.org_id);
    announce_org(&state, &logged, row.org_id, "creation", row.id).await;
    Ok(HttpResponse::Created().json(ProviderKeyOut::from(row)))
}

/// List the organization's provider keys, newest first.
#[utoipa::path(operation_id = "list_provider_keys", tag = "provider-keys", params(ProviderKeyQuery), responses((status = 200, body = Page<ProviderKeyOut>), Errors))]
#[get("/provider-keys")]
pub async fn list(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<ProviderKeyQuery>,
) -> ApiResult<HttpResponse> {
    let limit = pagination::limit(q.limit)?;
    let mut conn = state.conn().await?;
    let rows = provider_keys::list(&mut conn, session.org_id, q.cursor, limit + 1).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(rows, limit, |k| k.id, ProviderKeyOut::from)))
}

/// One provider key (a hint of the secret, never the secret).
#[utoipa::path(operation_id = "get_provider_key", tag = "provider-keys", params(("key_id" = Uuid, Path, description = "The provider key's id")), responses((status = 200, body = ProviderKeyOut), Errors))]
#[get("/provider-keys/{key_id}")]
pub async fn get(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let row = provider_keys::find(&mut conn, session.org_id, id.into_inner())
        .await?
        .ok_or(ApiError::NotFound("provider key"))?;
    Ok(HttpResponse::Ok().json(ProviderKeyOut::from(row)))
}

/// Rename a live provider key.
#[utoipa::path(operation_id = "rename_provider_key", tag = "provider-keys", params(("key_id" = Uuid, Path, description = "The provider key's id")), request_body = RenameProviderKey, responses((status = 200, body = ProviderKeyOut), Errors))]
#[patch("/provider-keys/{key_id}")]
pub async fn rename(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
    body: crate::body::Json<RenameProviderKey>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let name = validate::text("name", &body.name, 200)?;
    let mut conn = state.conn().await?;
    // The name is not part of what the proxy caches: no invalidation.
    match provider_keys::rename(&mut conn, session.org_id, id, &name).await? {
        Some(row) => {
            let entry = Entry {
                action: "provider_key.rename",
                resource_type: "provider_key",
                resource_id: Some(id.to_string()),
                detail: json!({"name": row.name}),
            };
            trail::by(&mut conn, &session, &req, entry).await?;
            log::info!("provider key {id} for {} renamed in org {}", row.provider, row.org_id);
            Ok(HttpResponse::Ok().json(ProviderKeyOut::from(row)))
        }
        None => Err(not_live(&mut conn, session.org_id, id).await),
    }
}

/// Replace a live provider key's secret (same id). The old secret stays usable for
/// `overlap_seconds` (default 300): a refused new secret is retried with it, so traffic does not
/// fail while the provider takes the new one.
#[utoipa::path(operation_id = "rotate_provider_key", tag = "provider-keys", params(("key_id" = Uuid, Path, description = "The provider key's id")), request_body = RotateProviderKey, responses((status = 200, body = ProviderKeyOut), Errors))]
#[post("/provider-keys/{key_id}/rotate")]
pub async fn rotate(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
    body: crate::body::Json<RotateProviderKey>,
) -> ApiResult<HttpResponse> {
    let ring = state.keyring("provider keys need")?;
    let id = id.into_inner();
    let secret = secret(&body.secret)?;
    let overlap = body.overlap_seconds.unwrap_or(DEFAULT_OVERLAP_SECS);
    if !(0..=MAX_OVERLAP_SECS).contains(&overlap) {
        return Err(ApiError::field("overlap_seconds", format!("must be between 0 and {MAX_OVERLAP_SECS}")));
    }
    let mut conn = state.conn().await?;
    let overlap = chrono::Duration::seconds(overlap);
    let trail = Trail::of(&session, &req);
    // The new secret, its event and its trail row commit together.
    let rotated = conn
        .transaction(async |conn| {
            let Some(row) = provider_keys::rotate(conn, ring, session.org_id, id, &secret, overlap).await? else {
                return Ok::<_, ApiError>(None);
            };
            let facts = ProviderKeyFacts { id, provider: &row.provider, name: &row.name, version: row.version };
            let event =
                payloads::provider_key_rotated(row.org_id, &facts, Some(session.user_id), row.previous_expires_at);
            events::emit(conn, event).await?;
            let entry = Entry {
                action: "provider_key.rotate",
                resource_type: "provider_key",
                resource_id: Some(id.to_string()),
                detail: json!({"provider": row.provider, "overlap_seconds": overlap.num_seconds()}),
            };
            trail.record(conn, entry).await?;
            let logged = record_org(conn, row.org_id).await?;
            Ok(Some((row, logged)))
        })
        .await?;
    match rotated {
        Some((row, logged)) => {
            log::info!("provider key {id} for {} rotated in org {}", row.provider, row.org_id);
            announce_org(&state, &logged, row.org_id, "rotation", id).await;
            Ok(HttpResponse::Ok().json(ProviderKeyOut::from(row)))
        }
        None => Err(not_live(&mut conn, session.org_id, id).await),
    }
}

/// Test a live key: one minimal call (one token at most) to its provider through gw's adapter,
/// answering what the provider said. 200 whatever the provider answered; `ok` says whether it
/// accepted the key.
#[utoipa::path(operation_id = "test_provider_key", tag = "provider-keys", params(("key_id" = Uuid, Path, description = "The provider key's id")), responses((status = 200, body = crate::key_check::KeyCheck), Errors))]
#[post("/provider-keys/{key_id}/test")]
pub async fn test(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let ring = state.keyring("provider keys need")?;
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    let live = provider_keys::live_for_org(&mut conn, session.org_id).await?;
    let Some(key) = live.keys.iter().find(|k| k.id == id) else {
        return Err(not_live(&mut conn, session.org_id, id).await);
    };
    let secret = key.open(ring, session.org_id).map_err(|e| ApiError::Internal(format!("provider key {id}: {e}")))?;
    let gateway = crate::route_catalog::routes(&state, &mut conn).await?;
    // A key for a kind serves the organization's own provider that names it.
    let own = match gateway.provider(&key.provider) {
        Some(_) => None,
        None => gw_shared::db::org_routes::current(&mut conn, session.org_id).await?.and_then(|s| {
            let name = s.routes.providers.iter().find(|p| p.provider_key_id == Some(id))?.name.clone();
            Some((s.routes, name))
        }),
    };
    let (routes, provider_name) = own.unwrap_or((gateway, key.provider.clone()));
    let result = crate::key_check::check(&state.cfg, &routes, &provider_name, &secret).await?;
    let entry = Entry {
        action: "provider_key.test",
        resource_type: "provider_key",
        resource_id: Some(id.to_string()),
        detail: json!({"provider": key.provider, "ok": result.ok, "status": result.status}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    Ok(HttpResponse::Ok().json(result))
}

/// Revoke a provider key. Revoking again is a no-op.
#[utoipa::path(operation_id = "revoke_provider_key", tag = "provider-keys", params(("key_id" = Uuid, Path, description = "The provider key's id")), responses((status = 204, description = "Revoked"), Errors))]
#[delete("/provider-keys/{key_id}")]
pub async fn revoke(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    let trail = Trail::of(&session, &req);
    let revoked = conn
        .transaction(async |conn| {
            let Some(row) = provider_keys::revoke(conn, session.org_id, id).await? else {
                return Ok::<_, ApiError>(None);
            };
            let facts = ProviderKeyFacts { id, provider: &row.provider, name: &row.name, version: row.version };
            events::emit(conn, payloads::provider_key_revoked(row.org_id, &facts, Some(session.user_id))).await?;
            let entry = Entry {
                action: "provider_key.revoke",
                resource_type: "provider_key",
                resource_id: Some(id.to_string()),
                detail: json!({"provider": row.provider}),
            };
            trail.record(conn, entry).await?;
            let logged = record_org(conn, row.org_id).await?;
            Ok(Some((row, logged)))
        })
        .await?;
    match revoked {
        Some((row, logged)) => {
            log::info!("provider key {id} for {} revoked in org {}", row.provider, row.org_id);
            announce_org(&state, &logged, row.org_id, "revocation", id).await;
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
            assert!(matches!(secret(bad), Err(ApiError::Field { .. })), "{bad:?}");
        }
        let long = "hidden".repeat(crate::validate::MAX_SECRET_CHARS);
        for bad in ["sk-\u{0}-hidden", long.as_str()] {
            let e = secret(bad).unwrap_err();
            assert!(matches!(e, ApiError::Field { .. }));
            assert!(!e.to_string().contains("hidden"), "{e}");
        }
        assert!(secret(&"x".repeat(crate::validate::MAX_SECRET_CHARS)).is_ok());
    }
}
