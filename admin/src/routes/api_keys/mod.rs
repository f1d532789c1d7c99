//! API keys: create (the secret is shown once), list with filters, get, update (name, expiry,
//! model allow-list) and revoke; never the secret after creation. Members create and change only
//! keys of the teams they belong to. Changes that alter what the proxy enforces (expiry, models,
//! revocation) invalidate the proxies' cached copy of the key once committed.

use actix_web::{delete, get, patch, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::AsyncConnection;
use gw_shared::accounts::{issue_api_key, KeySpec, DEFAULT_PERMISSION, KNOWN_PERMISSIONS};
use gw_shared::db::rollups::Owner;
use gw_shared::db::{api_keys, invalidations, teams};
use gw_shared::limits::settings::{Budget, RateLimits};
use gw_shared::redis::Invalidation;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::{self, Page};
use crate::read_only::{self, Fixed};
use crate::session::Session;
use crate::spend::{self, PeriodSpend};
use crate::state::AppState;
use crate::trail::{Entry, Trail};
use crate::validate;

/// What a key's `GET` body holds that the server derives (ignored when sent back).
const KEY_DERIVED: &[&str] = &["created_at", "last_used_at", "status", "spend", "previous_key_expires_at"];

const WARNING: &str = "Store this key now: it is shown only once and cannot be retrieved again.";

mod regenerate;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list).service(create).service(get_one).service(update).service(revoke).service(regenerate::regenerate);
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKey {
    name: String,
    /// Default `["proxy:llm"]`. Known: `proxy:llm` (every proxy endpoint), `proxy:chat`,
    /// `proxy:embeddings`, `proxy:models`, `proxy:messages` (Anthropic's Messages API), `proxy:responses` (OpenAI's Responses API).
    #[serde(default)]
    permissions: Option<Vec<String>>,
    /// The team whose budget the key's usage counts toward; required for members.
    #[serde(default)]
    team_id: Option<Uuid>,
    #[serde(default)]
    expires_at: Option<DateTime<Utc>>,
    /// Models the key may use (names or aliases); omitted or null: every model; `[]`: none.
    #[serde(default)]
    models: Option<Vec<String>>,
    /// A budget of the key's own (on top of its team's and the organization's).
    #[serde(default)]
    budget: Option<Budget>,
    /// Rate limits of the key's own.
    #[serde(default)]
    rate_limits: Option<RateLimits>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateApiKey {
    #[serde(default)]
    name: Option<String>,
    /// What the key may call (as on creation); changed by admins and owners only.
    #[serde(default)]
    permissions: Option<Vec<String>>,
    /// A future time, or null for no expiry.
    #[serde(default, deserialize_with = "crate::validate::double_option")]
    #[schema(value_type = Option<DateTime<Utc>>)]
    expires_at: Option<Option<DateTime<Utc>>>,
    /// The model allow-list, or null for every model.
    #[serde(default, deserialize_with = "crate::validate::double_option")]
    #[schema(value_type = Option<Vec<String>>)]
    models: Option<Option<Vec<String>>>,
    /// The key's own budget, or null to remove it.
    #[serde(default, deserialize_with = "crate::validate::double_option")]
    #[schema(value_type = Option<Budget>)]
    budget: Option<Option<Budget>>,
    /// The key's own rate limits, or null to remove them.
    #[serde(default, deserialize_with = "crate::validate::double_option")]
    #[schema(value_type = Option<RateLimits>)]
    rate_limits: Option<Option<RateLimits>>,
}

#[derive(Serialize, ToSchema)]
pub struct CreatedApiKey {
    /// Every field `GET /api-keys/{key_id}` answers.
    #[serde(flatten)]
    api_key: ApiKeyOut,
    /// The secret: shown here once, never again.
    key: String,
    warning: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct ApiKeyOut {
    id: Uuid,
    name: String,
    key_prefix: String,
    permissions: Vec<String>,
    team_id: Option<Uuid>,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    /// Updated in batches by the audit writer, so it may trail real use by a few seconds.
    last_used_at: Option<DateTime<Utc>>,
    expires_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    /// The model allow-list; null: every model.
    models: Option<Vec<String>>,
    /// The key's own budget; null: none.
    budget: Option<Budget>,
    /// The key's own rate limits; null: none.
    rate_limits: Option<RateLimits>,
    /// `active`, `expired` or `revoked`.
    status: &'static str,
    /// After a regeneration with a grace period: until when the replaced secret still works.
    previous_key_expires_at: Option<DateTime<Utc>>,
    /// The key's spend in its budget's current period, or this calendar month without one.
    spend: PeriodSpend,
}

impl ApiKeyOut {
    fn new(k: api_keys::ApiKey, spend: PeriodSpend) -> Self {
        let status = if k.revoked_at.is_some() {
            "revoked"
        } else if k.expires_at.is_some_and(|t| t <= Utc::now()) {
            "expired"
        } else {
            "active"
        };
        ApiKeyOut {
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
            budget: k.budget.and_then(|v| serde_json::from_value(v).ok()),
            rate_limits: k.rate_limits.and_then(|v| serde_json::from_value(v).ok()),
            status,
            previous_key_expires_at: k.previous_key_expires_at.filter(|t| *t > Utc::now()),
            spend,
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
    team_id: Option<Uuid>,
    created_by: Option<Uuid>,
    /// `active`, `expired` or `revoked`.
    status: Option<String>,
    /// Case-insensitive part of the name.
    name: Option<String>,
}

fn permissions(requested: Option<Vec<String>>) -> ApiResult<Vec<String>> {
    let mut perms = requested.unwrap_or_else(|| vec![DEFAULT_PERMISSION.to_string()]);
    if perms.is_empty() {
        return Err(ApiError::field("permissions", "must not be empty"));
    }
    if let Some(bad) = perms.iter().find(|p| !KNOWN_PERMISSIONS.contains(&p.as_str())) {
        return Err(ApiError::field(
            "permissions",
            format!("unknown permission {bad:?}; known permissions: {}", KNOWN_PERMISSIONS.join(", ")),
        ));
    }
    perms.sort();
    perms.dedup();
    Ok(perms)
}

fn future(field: &str, t: Option<DateTime<Utc>>) -> ApiResult<()> {
    if t.is_some_and(|t| t <= Utc::now()) {
        return Err(ApiError::field(field, "must be in the future"));
    }
    Ok(())
}

/// Members act only on keys of their teams; a key without a team is an admin's.
async fn require_key_access(
    conn: &mut diesel_async::AsyncPgConnection,
    session: &Session,
    key: &api_keys::ApiKey,
) -> ApiResult<()> {
    if session.is_admin() {
        return Ok(());
    }
    match key.team_id {
        Some(team) => session.require_team(conn, team).await,
        None => Err(ApiError::Forbidden("members act only on keys of the teams they belong to".into())),
    }
}

/// Create an API key; the secret is in the response and nowhere else, ever.
#[utoipa::path(operation_id = "create_api_key", tag = "api-keys", request_body = CreateApiKey, responses((status = 201, body = CreatedApiKey), Errors))]
#[post("/api-keys")]
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<CreateApiKey>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let name = validate::text("name", &b.name, 200)?;
    let perms = permissions(b.permissions)?;
    let allowed_models = match b.models {
        Some(m) => Some(validate::models(&state.routes().await?, m)?),
        None => None,
    };
    future("expires_at", b.expires_at)?;
    let budget = b.budget.map(validate::budget).transpose()?;
    let rate_limits = b.rate_limits.map(validate::rate_limits).transpose()?;
    let mut conn = state.conn().await?;
    let trail = Trail::of(&session, &req);
    let team_id = b.team_id;
    let created_by = session.user_id;
    // One transaction with the team row locked: a team deleted meanwhile cannot end up with a
    // live key, and the key and its trail row commit together.
    let (row, secret, logged) = conn
        .transaction(async |conn| {
            match team_id {
                // Another org's team looks exactly like a missing one.
                Some(team) if teams::find_live_for_update(conn, session.org_id, team).await?.is_none() => {
                    return Err(ApiError::field("team_id", "does not name a team of this organization"));
                }
                Some(team) => session.require_team(conn, team).await?,
                None if !session.is_admin() => {
                    return Err(ApiError::field("team_id", "is required: members create keys for their teams"));
                }
                None => {}
            }
            let spec = KeySpec {
                org_id: session.org_id,
                team_id,
                name: &name,
                permissions: &perms,
                allowed_models: allowed_models.as_deref(),
                created_by: Some(created_by),
                expires_at: b.expires_at,
                budget: budget.as_ref(),
                rate_limits: rate_limits.as_ref(),
            };
            let (row, secret) = issue_api_key(conn, spec).await?;
            let entry = Entry {
                action: "api_key.create",
                resource_type: "api_key",
                resource_id: Some(row.id.to_string()),
                detail: json!({"name": row.name, "key_prefix": row.key_prefix, "team_id": row.team_id, "permissions": row.permissions}),
            };
            trail.record(conn, entry).await?;
            // Proxies may remember this hash as unknown (someone tried it before it existed).
            let hash = gw_shared::keys::hash_secret(&secret);
            let logged = invalidations::record_all(conn, [Invalidation::ApiKey(hash)]).await?;
            Ok::<_, ApiError>((row, secret, logged))
        })
        .await?;
    log::info!("api key {} ({}) created in org {}", row.id, row.key_prefix, row.org_id);
    state.announce(&logged, format_args!("the creation of key {}", row.id)).await;
    let spend = spend::none(row.budget.as_ref());
    Ok(HttpResponse::Created().json(CreatedApiKey {
        api_key: ApiKeyOut::new(row, spend),
        key: secret,
        warning: WARNING,
    }))
}

/// List the organization's API keys, newest first.
#[utoipa::path(operation_id = "list_api_keys", tag = "api-keys", params(ApiKeyQuery), responses((status = 200, body = Page<ApiKeyOut>), Errors))]
#[get("/api-keys")]
pub async fn list(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<ApiKeyQuery>,
) -> ApiResult<HttpResponse> {
    let q = q.into_inner();
    let limit = pagination::limit(q.limit)?;
    let status = match q.status.as_deref() {
        None => None,
        Some("active") => Some(api_keys::Status::Active),
        Some("revoked") => Some(api_keys::Status::Revoked),
        Some("expired") => Some(api_keys::Status::Expired),
        Some(_) => return Err(ApiError::field("status", "must be active, expired or revoked")),
    };
    let name = q.name.as_deref().map(|n| validate::text("name", n, 200)).transpose()?;
    let filter = api_keys::Filter { team_id: q.team_id, created_by: q.created_by, status, name };
    let mut conn = state.conn().await?;
    let rows = api_keys::list(&mut conn, session.org_id, &filter, q.cursor, limit + 1).await?;
    let owners: Vec<_> = rows.iter().map(|k| (k.id, spend::period_of(k.budget.as_ref()))).collect();
    let mut spends = spend::current(&mut conn, session.org_id, Owner::Key, &owners).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(
        rows,
        limit,
        |k| k.id,
        |k| {
            let s = spends.remove(&k.id).unwrap_or_else(|| spend::none(k.budget.as_ref()));
            ApiKeyOut::new(k, s)
        },
    )))
}

/// One API key (never its secret).
#[utoipa::path(operation_id = "get_api_key", tag = "api-keys", params(("key_id" = Uuid, Path, description = "The key's id")),
    responses((status = 200, body = ApiKeyOut), Errors))]
#[get("/api-keys/{key_id}")]
pub async fn get_one(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let key = api_keys::find(&mut conn, session.org_id, id.into_inner()).await?.ok_or(ApiError::NotFound("api key"))?;
    let s = spend::of_one(&mut conn, session.org_id, Owner::Key, key.id, key.budget.as_ref()).await?;
    Ok(HttpResponse::Ok().json(ApiKeyOut::new(key, s)))
}

/// Update a live key's name, expiry, model allow-list, budget or rate limits; absent fields stay
/// as they are; `permissions` too, by admins and owners. The body `GET` answers may be sent back:
/// `id`, `key_prefix`, `team_id`, `created_by` and `revoked_at` as they are; `created_at`,
/// `last_used_at`, `status`, `spend` and `previous_key_expires_at` ignored.
#[utoipa::path(operation_id = "update_api_key", tag = "api-keys", params(("key_id" = Uuid, Path, description = "The key's id")),
    request_body = UpdateApiKey, responses((status = 200, body = ApiKeyOut), Errors))]
#[patch("/api-keys/{key_id}")]
pub async fn update(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
    body: crate::body::Json<Value>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    let key = api_keys::find(&mut conn, session.org_id, id).await?.ok_or(ApiError::NotFound("api key"))?;
    let fixed = [
        Fixed::new("id", key.id, "it names the key"),
        Fixed::new("key_prefix", &key.key_prefix, "it is part of the secret"),
        Fixed::new("team_id", key.team_id, "a key stays with its team"),
        Fixed::new("created_by", key.created_by, "it records who created the key"),
        Fixed::new("revoked_at", key.revoked_at, "revoke with DELETE"),
    ];
    let b: UpdateApiKey = read_only::writable(body.into_inner(), &fixed, KEY_DERIVED)?;
    let name = b.name.as_deref().map(|n| validate::text("name", n, 200)).transpose()?;
    let perms = b.permissions.map(|p| permissions(Some(p))).transpose()?;
    if let Some(t) = b.expires_at {
        future("expires_at", t)?;
    }
    let allowed_models = match b.models {
        Some(Some(m)) => Some(Some(validate::models(&state.routes().await?, m)?)),
        Some(None) => Some(None),
        None => None,
    };
    let budget = b.budget.map(|o| o.map(validate::budget).transpose()).transpose()?;
    let rate_limits = b.rate_limits.map(|o| o.map(validate::rate_limits).transpose()).transpose()?;
    let changed: Vec<&str> = [
        ("name", name.is_some()),
        ("permissions", perms.is_some()),
        ("expires_at", b.expires_at.is_some()),
        ("models", allowed_models.is_some()),
        ("budget", budget.is_some()),
        ("rate_limits", rate_limits.is_some()),
    ]
    .into_iter()
    .filter_map(|(f, set)| set.then_some(f))
    .collect();
    if changed.is_empty() {
        return Err(ApiError::Validation(
            "nothing to update: send name, permissions, expires_at, models, budget or rate_limits".into(),
        ));
    }
    require_key_access(&mut conn, &session, &key).await?;
    if perms.as_ref().is_some_and(|p| *p != key.permissions) && !session.is_admin() {
        return Err(ApiError::Forbidden("changing a key's permissions needs the admin role or higher".into()));
    }
    if !session.is_admin() {
        if let Some(field) = loosened(&key, &b.expires_at, &allowed_models, &budget, &rate_limits) {
            return Err(ApiError::Forbidden(format!(
                "members may tighten a key's restrictions, not loosen them: loosening {field} needs the admin role or \
                 higher"
            )));
        }
    }
    let change =
        api_keys::Change { name, permissions: perms, expires_at: b.expires_at, allowed_models, budget, rate_limits };
    let trail = Trail::of(&session, &req);
    // The change, its trail row and the proxies' invalidation commit together.
    let (row, logged) = conn
        .transaction(async |conn| {
            let Some((row, hash)) = api_keys::update(conn, session.org_id, id, &change).await? else {
                return Err(ApiError::Conflict("api key is revoked".into()));
            };
            let entry = Entry {
                action: "api_key.update",
                resource_type: "api_key",
                resource_id: Some(id.to_string()),
                detail: json!({"changed": changed}),
            };
            trail.record(conn, entry).await?;
            let logged = invalidations::record_keys(conn, &hash).await?;
            Ok::<_, ApiError>((row, logged))
        })
        .await?;
    state.announce(&logged, format_args!("the update of key {id}")).await;
    let s = spend::of_one(&mut conn, session.org_id, Owner::Key, row.id, row.budget.as_ref()).await?;
    Ok(HttpResponse::Ok().json(ApiKeyOut::new(row, s)))
}

/// The first restriction of `key` a change loosens, if any (`gw_shared::limits::narrowing`).
fn loosened(
    key: &api_keys::ApiKey,
    expires_at: &Option<Option<DateTime<Utc>>>,
    models: &Option<Option<Vec<String>>>,
    budget: &Option<Option<Value>>,
    rate_limits: &Option<Option<Value>>,
) -> Option<&'static str> {
    use gw_shared::limits::narrowing;
    use gw_shared::limits::settings::{Budget, RateLimits};
    let parse_budget = |v: Option<&Value>| v.and_then(|v| serde_json::from_value::<Budget>(v.clone()).ok());
    let parse_limits = |v: Option<&Value>| v.and_then(|v| serde_json::from_value::<RateLimits>(v.clone()).ok());
    if let Some(new) = models {
        if narrowing::models_loosened(key.allowed_models.as_deref(), new.as_deref()) {
            return Some("models");
        }
    }
    if let Some(new) = budget {
        if narrowing::budget_loosened(parse_budget(key.budget.as_ref()).as_ref(), parse_budget(new.as_ref()).as_ref()) {
            return Some("budget");
        }
    }
    if let Some(new) = rate_limits {
        let (cur, new) = (parse_limits(key.rate_limits.as_ref()), parse_limits(new.as_ref()));
        if narrowing::rate_limits_loosened(cur.as_ref(), new.as_ref()) {
            return Some("rate_limits");
        }
    }
    if let Some(new) = expires_at {
        if narrowing::expiry_loosened(key.expires_at, *new) {
            return Some("expires_at");
        }
    }
    None
}

/// Revoke a key: the proxies refuse it within a second. Revoking again is a no-op.
#[utoipa::path(operation_id = "revoke_api_key", tag = "api-keys", params(("key_id" = Uuid, Path, description = "The key's id")),
    responses((status = 204, description = "Revoked"), Errors))]
#[delete("/api-keys/{key_id}")]
pub async fn revoke(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    let key = api_keys::find(&mut conn, session.org_id, id).await?.ok_or(ApiError::NotFound("api key"))?;
    require_key_access(&mut conn, &session, &key).await?;
    let trail = Trail::of(&session, &req);
    // The revocation, its event and its trail row commit together.
    let revoked = conn
        .transaction(async |conn| {
            let Some(hashes) = api_keys::revoke(conn, session.org_id, id).await? else {
                return Ok::<_, ApiError>(None);
            };
            gw_shared::db::events::keys_revoked(conn, session.org_id, &[id], Some(session.user_id), "revoked").await?;
            let entry = Entry {
                action: "api_key.revoke",
                resource_type: "api_key",
                resource_id: Some(id.to_string()),
                detail: json!({"name": key.name}),
            };
            trail.record(conn, entry).await?;
            // Last: the invalidation log's writers are serialized until commit.
            let logged = gw_shared::db::invalidations::record_keys(conn, &hashes).await?;
            Ok(Some(logged))
        })
        .await?;
    if let Some(logged) = revoked {
        log::info!("api key {id} revoked in org {}", session.org_id);
        state.announce(&logged, format_args!("the revocation of key {id}")).await;
    }
    Ok(HttpResponse::NoContent().finish())
}
