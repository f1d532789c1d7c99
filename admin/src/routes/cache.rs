//! The response cache's settings and purge. The organization chooses which tiers are on, the
//! TTL and the semantic threshold; a team may depart from any of them (absent fields inherit).
//! `GET` answers the settings with the read-only `teams` and `semantic` beside them, and that body
//! can be sent back: `PUT` replaces the settings (absent fields take their defaults), `PATCH`
//! changes only the fields it names; `teams` and `semantic`, if sent, must be as `GET` said.
//! Every change commits, then goes to the proxies on the invalidation channel. A purge deletes
//! the organization's semantic entries and Redis entries (all, or one model's) and tells every
//! proxy to drop its in-process copies.

use actix_web::{delete, get, patch, post, put, web, HttpRequest, HttpResponse};
use diesel_async::AsyncConnection;
use gw_shared::cache::embed;
use gw_shared::cache::key::{generation_of, model_prefix, model_tag, org_prefix};
use gw_shared::cache::settings::{CacheSettings, TeamCacheSettings};
use gw_shared::db::{cache as db_cache, teams};
use gw_shared::redis::Invalidation;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::ToSchema;
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{Entry, Trail};
use crate::validate;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(get_cache)
        .service(put_cache)
        .service(patch_cache)
        .service(put_team_cache)
        .service(patch_team_cache)
        .service(delete_team_cache)
        .service(purge);
}

/// Longest model name a purge may name.
const MAX_MODEL_CHARS: usize = 256;
/// Redis keys asked for per SCAN step of a purge.
const SCAN_COUNT: usize = 1000;

#[derive(Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamCacheOut {
    team_id: Uuid,
    settings: TeamCacheSettings,
}

#[derive(Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SemanticInfo {
    /// The embedding model prompts are compared with.
    embedder: String,
    dimensions: usize,
}

/// The settings (as `CacheSettings`, listed here so the document can describe the whole body)
/// and their read-only context.
#[derive(Serialize, ToSchema)]
pub struct CacheOut {
    /// In-process tier (per proxy replica).
    l1: bool,
    /// Redis tier (shared by every replica).
    l2: bool,
    /// Semantic tier.
    l3: bool,
    /// How long a new entry lives, in seconds.
    ttl_seconds: u32,
    /// Cosine similarity an L3 neighbour needs to answer.
    similarity_threshold: f32,
    #[serde(skip)]
    settings: CacheSettings,
    /// Teams that depart from the organization's settings (read-only here: `PUT`/`PATCH
    /// /teams/{team_id}/cache`).
    teams: Vec<TeamCacheOut>,
    /// Read-only.
    semantic: SemanticInfo,
}

async fn out(state: &AppState, org_id: Uuid) -> ApiResult<CacheOut> {
    let mut conn = state.conn().await?;
    let s = db_cache::load(&mut conn, org_id).await?;
    let mut teams: Vec<TeamCacheOut> =
        s.teams.into_iter().map(|(team_id, settings)| TeamCacheOut { team_id, settings }).collect();
    teams.sort_by_key(|t| t.team_id);
    Ok(CacheOut {
        l1: s.org.l1,
        l2: s.org.l2,
        l3: s.org.l3,
        ttl_seconds: s.org.ttl_seconds,
        similarity_threshold: s.org.similarity_threshold,
        settings: s.org,
        teams,
        semantic: SemanticInfo { embedder: embed::LOCAL_MODEL.to_string(), dimensions: embed::DIMENSIONS },
    })
}

/// The organization's cache settings and its teams' departures from them.
#[utoipa::path(tag = "cache", responses((status = 200, body = CacheOut), Errors))]
#[get("/organizations/current/cache")]
pub async fn get_cache(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(out(&state, session.org_id).await?))
}

/// The settings a `PUT` (`merge_into: None`) or `PATCH` (the current settings) body asks for. The
/// read-only `teams` and `semantic` may come back as `GET` gave them, and only so.
fn org_settings(body: Value, current: &CacheOut, merge_into: Option<&CacheSettings>) -> ApiResult<CacheSettings> {
    let Value::Object(mut fields) = body else {
        return Err(ApiError::Validation("the body must be a JSON object".into()));
    };
    if let Some(teams) = fields.remove("teams") {
        let same = serde_json::from_value::<Vec<TeamCacheOut>>(teams).is_ok_and(|t| t == current.teams);
        if !same {
            return Err(ApiError::field(
                "teams",
                "is read-only here; change a team's settings with PUT or PATCH /teams/{team_id}/cache",
            ));
        }
    }
    if let Some(semantic) = fields.remove("semantic") {
        if serde_json::from_value::<SemanticInfo>(semantic).ok().as_ref() != Some(&current.semantic) {
            return Err(ApiError::field("semantic", "is read-only"));
        }
    }
    let settings: CacheSettings = merged(fields, merge_into)?;
    settings.validate().map_err(|p| ApiError::field(p.field, p.message))?;
    Ok(settings)
}

/// `fields` over `base` (serialized), read as `T`; a field that does not read is named.
fn merged<T: Serialize + serde::de::DeserializeOwned>(fields: Map<String, Value>, base: Option<&T>) -> ApiResult<T> {
    let mut doc = match base.map(serde_json::to_value).transpose() {
        Ok(Some(Value::Object(m))) => m,
        Ok(_) => Map::new(),
        Err(e) => return Err(ApiError::Internal(format!("cannot encode cache settings: {e}"))),
    };
    for (key, value) in fields {
        if value.is_null() && base.is_some() {
            // `null` in a PATCH: back to inheriting (a team) or the default (the organization).
            doc.remove(&key);
        } else {
            doc.insert(key, value);
        }
    }
    crate::decode::json(Value::Object(doc))
}

/// Stores the organization's settings, records the change and tells the proxies.
async fn store_org(state: &AppState, session: &Session, req: &HttpRequest, settings: &CacheSettings) -> ApiResult<()> {
    let trail = Trail::of(session, req);
    let org_id = session.org_id;
    let detail = serde_json::to_value(settings).map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut conn = state.conn().await?;
    let logged = conn
        .transaction(async |conn| {
            db_cache::put_org(conn, org_id, settings).await?;
            trail
                .record(conn, Entry { action: "cache.update", resource_type: "cache", resource_id: None, detail })
                .await?;
            Ok::<_, ApiError>(
                gw_shared::db::invalidations::record_all(conn, [Invalidation::CacheSettings { org_id }]).await?,
            )
        })
        .await?;
    state.announce(&logged, "a cache change").await;
    Ok(())
}

/// Replace the organization's cache settings (absent fields take their defaults). A `GET` body
/// may be sent back as it is.
#[utoipa::path(tag = "cache", request_body = CacheSettings, responses((status = 200, body = CacheOut), Errors))]
#[put("/organizations/current/cache")]
pub async fn put_cache(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<Value>,
) -> ApiResult<HttpResponse> {
    let current = out(&state, session.org_id).await?;
    let settings = org_settings(body.into_inner(), &current, None)?;
    store_org(&state, &session, &req, &settings).await?;
    Ok(HttpResponse::Ok().json(out(&state, session.org_id).await?))
}

/// Change the fields of the organization's cache settings the body names; the others stay.
#[utoipa::path(tag = "cache", request_body = CacheSettings, responses((status = 200, body = CacheOut), Errors))]
#[patch("/organizations/current/cache")]
pub async fn patch_cache(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<Value>,
) -> ApiResult<HttpResponse> {
    let current = out(&state, session.org_id).await?;
    let settings = org_settings(body.into_inner(), &current, Some(&current.settings))?;
    store_org(&state, &session, &req, &settings).await?;
    Ok(HttpResponse::Ok().json(out(&state, session.org_id).await?))
}

async fn team_of_org(state: &AppState, org_id: Uuid, team_id: Uuid) -> ApiResult<()> {
    let mut conn = state.conn().await?;
    if !teams::exists_in_org(&mut conn, org_id, team_id).await? {
        return Err(ApiError::NotFound("team"));
    }
    Ok(())
}

/// A team's departures as a body asks for them, over `base` for a `PATCH`.
fn team_settings(body: Value, base: Option<&TeamCacheSettings>) -> ApiResult<TeamCacheSettings> {
    let Value::Object(fields) = body else {
        return Err(ApiError::Validation("the body must be a JSON object".into()));
    };
    let settings: TeamCacheSettings = merged(fields, base)?;
    settings.validate().map_err(|p| ApiError::field(p.field, p.message))?;
    Ok(settings)
}

/// Stores a team's departures, records the change and tells the proxies.
async fn store_team(
    state: &AppState,
    session: &Session,
    req: &HttpRequest,
    team_id: Uuid,
    settings: &TeamCacheSettings,
) -> ApiResult<()> {
    let trail = Trail::of(session, req);
    let org_id = session.org_id;
    let detail = serde_json::to_value(settings).map_err(|e| ApiError::Internal(e.to_string()))?;
    let entry =
        Entry { action: "cache.team_update", resource_type: "team", resource_id: Some(team_id.to_string()), detail };
    let mut conn = state.conn().await?;
    let logged = conn
        .transaction(async |conn| {
            db_cache::put_team(conn, org_id, team_id, settings).await?;
            trail.record(conn, entry).await?;
            Ok::<_, ApiError>(
                gw_shared::db::invalidations::record_all(conn, [Invalidation::CacheSettings { org_id }]).await?,
            )
        })
        .await?;
    state.announce(&logged, "a cache change").await;
    Ok(())
}

/// Set a team's departures from the organization's cache settings (replacing earlier ones).
#[utoipa::path(tag = "cache", request_body = TeamCacheSettings, params(("team_id" = Uuid, Path)),
    responses((status = 200, body = CacheOut), Errors))]
#[put("/teams/{team_id}/cache")]
pub async fn put_team_cache(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
    body: crate::body::Json<Value>,
) -> ApiResult<HttpResponse> {
    let team_id = path.into_inner();
    let settings = team_settings(body.into_inner(), None)?;
    team_of_org(&state, session.org_id, team_id).await?;
    store_team(&state, &session, &req, team_id, &settings).await?;
    Ok(HttpResponse::Ok().json(out(&state, session.org_id).await?))
}

/// Change the team's departures the body names (`null`: inherit again); the others stay.
#[utoipa::path(tag = "cache", request_body = TeamCacheSettings, params(("team_id" = Uuid, Path)),
    responses((status = 200, body = CacheOut), Errors))]
#[patch("/teams/{team_id}/cache")]
pub async fn patch_team_cache(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
    body: crate::body::Json<Value>,
) -> ApiResult<HttpResponse> {
    let team_id = path.into_inner();
    team_of_org(&state, session.org_id, team_id).await?;
    let current = out(&state, session.org_id).await?;
    let base = current.teams.into_iter().find(|t| t.team_id == team_id).map(|t| t.settings).unwrap_or_default();
    let settings = team_settings(body.into_inner(), Some(&base))?;
    store_team(&state, &session, &req, team_id, &settings).await?;
    Ok(HttpResponse::Ok().json(out(&state, session.org_id).await?))
}

/// Drop a team's departures: it inherits the organization's cache settings again.
#[utoipa::path(tag = "cache", params(("team_id" = Uuid, Path)), responses((status = 204), Errors))]
#[delete("/teams/{team_id}/cache")]
pub async fn delete_team_cache(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let team_id = path.into_inner();
    team_of_org(&state, session.org_id, team_id).await?;
    let trail = Trail::of(&session, &req);
    let org_id = session.org_id;
    let mut conn = state.conn().await?;
    let logged = conn
        .transaction(async |conn| {
            if !db_cache::delete_team(conn, org_id, team_id).await? {
                return Err(ApiError::NotFound("team cache settings"));
            }
            let entry = Entry {
                action: "cache.team_reset",
                resource_type: "team",
                resource_id: Some(team_id.to_string()),
                detail: json!({}),
            };
            trail.record(conn, entry).await?;
            Ok::<_, ApiError>(
                gw_shared::db::invalidations::record_all(conn, [Invalidation::CacheSettings { org_id }]).await?,
            )
        })
        .await?;
    state.announce(&logged, "a cache change").await;
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct PurgeIn {
    /// Only this model's answers (the name clients ask for); absent: every answer.
    #[serde(default)]
    model: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct PurgeOut {
    model: Option<String>,
    /// Entries deleted from Redis (L2). They were unreachable already (the purge starts a new
    /// generation of the organization's keys); null when Redis could not be reached, in which
    /// case they expire with their TTL.
    l2_deleted: Option<u64>,
    /// Entries deleted from PostgreSQL (L3).
    l3_deleted: u64,
}

/// Purge the organization's cached answers, all or one model's, from every tier.
#[utoipa::path(tag = "cache", request_body(content = PurgeIn, description = "Optional: the model"),
    responses((status = 200, body = PurgeOut), Errors))]
#[post("/organizations/current/cache/purge")]
pub async fn purge(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: Option<crate::body::Json<serde_json::Value>>,
) -> ApiResult<HttpResponse> {
    let input: PurgeIn = match body {
        Some(b) => {
            serde_json::from_value(b.into_inner()).map_err(|e| ApiError::Validation(format!("invalid purge: {e}")))?
        }
        None => PurgeIn::default(),
    };
    let model = input.model.map(|m| validate::text("model", &m, MAX_MODEL_CHARS)).transpose()?;
    let org_id = session.org_id;
    let tag = model.as_deref().map(model_tag);
    let mut conn = state.conn().await?;
    let trail = Trail::of(&session, &req);
    // The purge itself, in one transaction: L3's rows, a new purge generation (every L2 entry
    // under an older one is unreachable from then on, on every Redis topology) and the proxies'
    // invalidation (their L1 copies and settings).
    let (l3_deleted, generation, logged) = conn
        .transaction(async |conn| {
            let l3_deleted = db_cache::purge(conn, org_id, model.as_deref()).await? as u64;
            let generation = db_cache::bump_generation(conn, org_id, tag.as_ref()).await?;
            let entry = Entry {
                action: "cache.purge",
                resource_type: "cache",
                resource_id: None,
                detail: json!({"model": model, "generation": generation, "l3_deleted": l3_deleted}),
            };
            trail.record(conn, entry).await?;
            let logged =
                gw_shared::db::invalidations::record_all(conn, [Invalidation::CachePurge { org_id, model: tag }])
                    .await?;
            Ok::<_, ApiError>((l3_deleted, generation, logged))
        })
        .await?;
    state.announce(&logged, "a cache purge").await;
    // Then the memory of the entries made unreachable.
    let pattern = match &tag {
        Some(t) => format!("{}*", model_prefix(org_id, t)),
        None => format!("{}*", org_prefix(org_id)),
    };
    let current = match tag {
        Some(_) => (0, Some(generation)),
        None => (generation, None),
    };
    let l2_deleted = match purge_redis(&state, org_id, &pattern, current).await {
        Ok(n) => Some(n),
        Err(e) => {
            log::warn!("cache purge of org {org_id}: old L2 entries left to expire ({e})");
            None
        }
    };
    Ok(HttpResponse::Ok().json(PurgeOut { model, l2_deleted, l3_deleted }))
}

/// Deletes the entries a purge made unreachable: those matching `pattern` written under a purge
/// generation older than `current` (organization's, model's), a SCAN step at a time (never `KEYS`,
/// which would stall Redis for every proxy), and takes them off the organization's L2 ledger so
/// its share is free again. Entries the proxies write meanwhile, under the new generation, stay.
/// An organization's keys share its hash tag, so on a cluster they all live on the primary owning
/// its slot: that is the node scanned, and each step is one script call (one slot).
async fn purge_redis(state: &AppState, org_id: Uuid, pattern: &str, current: (i64, Option<i64>)) -> ApiResult<u64> {
    let mut conn = state.cache_redis.get().await.map_err(|e| ApiError::Unavailable(format!("redis: {e}")))?;
    let unavailable = |e: redis::RedisError| ApiError::Unavailable(format!("redis: {e}"));
    let owner = org_prefix(org_id);
    let stale = |key: &str| match (generation_of(key), current) {
        (Some((_, model)), (_, Some(now))) => model < now,
        (Some((all, _)), (now, None)) => all < now,
        (None, _) => false,
    };
    let mut cursor: u64 = 0;
    let mut deleted = 0u64;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(SCAN_COUNT);
        let (next, keys): (u64, Vec<String>) = conn.query_on_node_of(&owner, scan).await.map_err(unavailable)?;
        let old: Vec<String> = keys.into_iter().filter(|k| stale(k)).collect();
        deleted += gw_shared::cache::l2_budget::forget(&mut conn, org_id, &old).await.map_err(unavailable)?;
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}
