//! Regenerating a key: a new secret under the same id, so its settings, limits, spend and
//! history stay; the replaced secret stops working at once, or after a grace period the caller
//! chooses so clients can switch over without failed requests.

use actix_web::{post, web, HttpRequest, HttpResponse};
use chrono::{TimeDelta, Utc};
use diesel_async::AsyncConnection;
use gw_shared::db::api_keys;
use gw_shared::db::rollups::Owner;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{require_key_access, ApiKeyOut, CreatedApiKey, WARNING};
use crate::error::{ApiError, ApiResult, Errors};
use crate::session::Session;
use crate::spend;
use crate::state::AppState;
use crate::trail::{Entry, Trail};

/// The longest grace a replaced secret may get: a day.
const MAX_GRACE_SECONDS: i64 = 86_400;

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct RegenerateApiKey {
    /// How long the replaced secret keeps working, 0 (default: it stops at once) to 86400.
    #[serde(default)]
    grace_seconds: Option<i64>,
}

/// Give a live key a new secret (shown once, like on creation) under the same id; the old
/// secret stops working at once or after `grace_seconds`. A secret still in an earlier
/// regeneration's grace stops at once.
#[utoipa::path(operation_id = "regenerate_api_key", tag = "api-keys",
    params(("key_id" = Uuid, Path, description = "The key's id")),
    request_body = Option<RegenerateApiKey>, responses((status = 200, body = CreatedApiKey), Errors))]
#[post("/api-keys/{key_id}/regenerate")]
pub async fn regenerate(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let b: RegenerateApiKey = crate::body::optional_json(&body)?;
    let grace = b.grace_seconds.unwrap_or(0);
    if !(0..=MAX_GRACE_SECONDS).contains(&grace) {
        return Err(ApiError::field("grace_seconds", format!("must be between 0 and {MAX_GRACE_SECONDS}")));
    }
    let grace_until = (grace > 0).then(|| Utc::now() + TimeDelta::seconds(grace));
    let mut conn = state.conn().await?;
    let key = api_keys::find(&mut conn, session.org_id, id).await?.ok_or(ApiError::NotFound("api key"))?;
    require_key_access(&mut conn, &session, &key).await?;
    let fresh = gw_shared::keys::generate_api_key();
    let trail = Trail::of(&session, &req);
    let done = conn
        .transaction(async |conn| {
            let Some(done) =
                api_keys::regenerate(conn, session.org_id, id, &fresh.prefix, &fresh.hash, grace_until).await?
            else {
                return Err(ApiError::Conflict("api key is revoked".into()));
            };
            let entry = Entry {
                action: "api_key.regenerate",
                resource_type: "api_key",
                resource_id: Some(id.to_string()),
                detail: json!({"key_prefix": done.key.key_prefix, "grace_seconds": grace}),
            };
            trail.record(conn, entry).await?;
            // The replaced secret's cached copies go (with a grace, proxies read it again with
            // its end); the new one may be remembered as unknown.
            let mut stale = done.stale_hashes.clone();
            stale.push(fresh.hash.to_vec());
            let logged = gw_shared::db::invalidations::record_keys(conn, &stale).await?;
            Ok::<_, ApiError>((done, logged))
        })
        .await?;
    let (done, logged) = done;
    log::info!("api key {id} regenerated in org {} (grace {grace} s)", session.org_id);
    state.announce(&logged, format_args!("the regeneration of key {id}")).await;
    let s = spend::of_one(&mut conn, session.org_id, Owner::Key, id, done.key.budget.as_ref()).await?;
    Ok(HttpResponse::Ok().json(CreatedApiKey {
        api_key: ApiKeyOut::new(done.key, s),
        key: fresh.secret,
        warning: WARNING,
    }))
}
