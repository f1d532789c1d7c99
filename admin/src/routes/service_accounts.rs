//! Service accounts: credentials for automation (CI, infrastructure as code) on `/api/v1`,
//! created by an owner, with a role (admin, member or viewer) and optional scopes that narrow it
//! to resources and reads or writes (`teams:read`, `api-keys:write`, `*:read`; see
//! `crate::authz`). The token (`gw_sa_…`) is shown once, stored as prefix + SHA-256, may
//! expire, is listed with its last use, and stops at once when revoked. It is refused on `/v1`,
//! and service accounts never manage service accounts, reach the operator's routes or sign in.

use actix_web::{delete, get, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::AsyncConnection;
use gw_shared::db::service_accounts::{self as sa_db, NewServiceAccount, ServiceAccount};
use gw_shared::ids::new_id;
use gw_shared::keys::generate_service_token;
use gw_shared::roles::Role;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::{self, Page};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{self, Entry, Trail};
use crate::{authz, validate};

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list).service(create).service(get).service(revoke);
}

/// Scopes one account may carry.
const MAX_SCOPES: usize = 50;
/// The longest lifetime a token may be given.
const MAX_DAYS: i64 = 366 * 2;
const WARNING: &str = "Store this token now (for example in your CI's secret store): it is shown only once.";

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateServiceAccount {
    /// 1 to 200 characters.
    name: String,
    /// `admin`, `member` or `viewer` (never owner).
    role: String,
    /// `resource:read` or `resource:write` (write includes read), `*` for every resource;
    /// omitted or empty: everything the role allows. Resources are the first path segment of an
    /// operation (`teams`, `api-keys`, `analytics`, ...; `policy`, `cache`, `routes`, `limits`,
    /// `organization` for the organization's settings).
    #[serde(default)]
    scopes: Vec<String>,
    /// Days until the token stops working (1 to 732); omitted: it does not expire.
    #[serde(default)]
    expires_in_days: Option<i64>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ServiceAccountQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
}

/// A service account (never its token).
#[derive(Serialize, ToSchema)]
pub struct ServiceAccountOut {
    id: Uuid,
    name: String,
    role: String,
    scopes: Vec<String>,
    /// The token's first characters, to recognize it.
    token_prefix: String,
    /// `active`, `expired` or `revoked`.
    status: &'static str,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    expires_at: Option<DateTime<Utc>>,
    /// The last request made with the token (to the minute).
    last_used_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<ServiceAccount> for ServiceAccountOut {
    fn from(a: ServiceAccount) -> Self {
        let status = if a.revoked_at.is_some() {
            "revoked"
        } else if a.expires_at.is_some_and(|t| t <= Utc::now()) {
            "expired"
        } else {
            "active"
        };
        ServiceAccountOut {
            id: a.id,
            name: a.name,
            role: a.role,
            scopes: a.scopes,
            token_prefix: a.token_prefix,
            status,
            created_by: a.created_by,
            created_at: a.created_at,
            expires_at: a.expires_at,
            last_used_at: a.last_used_at,
            revoked_at: a.revoked_at,
        }
    }
}

/// A new service account with its token: shown here once, never again.
#[derive(Serialize, ToSchema)]
pub struct CreatedServiceAccount {
    #[serde(flatten)]
    account: ServiceAccountOut,
    /// Send as `Authorization: Bearer <token>` on `/api/v1`.
    token: String,
    warning: &'static str,
}

fn scopes(raw: &[String]) -> ApiResult<Vec<String>> {
    if raw.len() > MAX_SCOPES {
        return Err(ApiError::field("scopes", format!("at most {MAX_SCOPES}")));
    }
    let known = authz::resources();
    let mut out: Vec<String> = Vec::with_capacity(raw.len());
    for s in raw {
        let bad = || {
            ApiError::field(
                "scopes",
                format!(
                    "each scope is resource:read or resource:write, with resource * or one of {}",
                    known.join(", ")
                ),
            )
        };
        let (resource, level) = s.split_once(':').ok_or_else(bad)?;
        if !(resource == "*" || known.contains(&resource)) || !matches!(level, "read" | "write") {
            return Err(bad());
        }
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    Ok(out)
}

/// Create a service account and its token (owners only).
#[utoipa::path(operation_id = "create_service_account", tag = "service-accounts", request_body = CreateServiceAccount,
    responses((status = 201, description = "Created; the token is in this answer only", body = CreatedServiceAccount), Errors))]
#[post("/service-accounts")]
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<CreateServiceAccount>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let name = validate::text("name", &b.name, 200)?;
    let role = b
        .role
        .parse::<Role>()
        .ok()
        .filter(|r| *r != Role::Owner)
        .ok_or_else(|| ApiError::field("role", "must be admin, member or viewer"))?;
    let scopes = scopes(&b.scopes)?;
    let expires_at = match b.expires_in_days {
        Some(d) if (1..=MAX_DAYS).contains(&d) => Some(Utc::now() + chrono::Duration::days(d)),
        Some(_) => return Err(ApiError::field("expires_in_days", format!("must be between 1 and {MAX_DAYS}"))),
        None => None,
    };
    let token = generate_service_token();
    let new = NewServiceAccount {
        id: new_id(),
        org_id: session.org_id,
        name: &name,
        role: role.as_str(),
        scopes: &scopes,
        token_prefix: &token.prefix,
        token_hash: &token.hash,
        created_by: Some(session.user_id),
        expires_at,
    };
    let mut conn = state.conn().await?;
    let row = sa_db::insert(&mut conn, &new).await?;
    let entry = Entry {
        action: "service_account.create",
        resource_type: "service_account",
        resource_id: Some(row.id.to_string()),
        detail: json!({"name": row.name, "role": row.role, "scopes": row.scopes, "expires_at": row.expires_at}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    log::info!("service account {} created in org {}", row.id, row.org_id);
    Ok(HttpResponse::Created().json(CreatedServiceAccount {
        account: row.into(),
        token: token.secret,
        warning: WARNING,
    }))
}

/// List the organization's service accounts, newest first (revoked ones included).
#[utoipa::path(operation_id = "list_service_accounts", tag = "service-accounts", params(ServiceAccountQuery),
    responses((status = 200, body = Page<ServiceAccountOut>), Errors))]
#[get("/service-accounts")]
pub async fn list(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<ServiceAccountQuery>,
) -> ApiResult<HttpResponse> {
    let limit = pagination::limit(q.limit)?;
    let mut conn = state.conn().await?;
    let rows = sa_db::list(&mut conn, session.org_id, q.cursor, limit + 1).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(rows, limit, |a| a.id, ServiceAccountOut::from)))
}

/// One service account (never its token).
#[utoipa::path(operation_id = "get_service_account", tag = "service-accounts",
    params(("account_id" = Uuid, Path, description = "The service account's id")),
    responses((status = 200, body = ServiceAccountOut), Errors))]
#[get("/service-accounts/{account_id}")]
pub async fn get(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let row =
        sa_db::find(&mut conn, session.org_id, id.into_inner()).await?.ok_or(ApiError::NotFound("service account"))?;
    Ok(HttpResponse::Ok().json(ServiceAccountOut::from(row)))
}

/// Revoke a service account: its token stops working at once.
#[utoipa::path(operation_id = "revoke_service_account", tag = "service-accounts",
    params(("account_id" = Uuid, Path, description = "The service account's id")),
    responses((status = 204, description = "Revoked"), Errors))]
#[delete("/service-accounts/{account_id}")]
pub async fn revoke(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    let trail = Trail::of(&session, &req);
    // The account, the API keys it created (they go with it, like a removed member's), their
    // events and the trail row change together.
    let (row, keys) = conn
        .transaction(async |conn| {
            let row = sa_db::revoke(conn, session.org_id, id).await?.ok_or(ApiError::NotFound("service account"))?;
            let keys = gw_shared::db::api_keys::revoke_created_by(conn, session.org_id, id).await?;
            let ids: Vec<Uuid> = keys.iter().map(|(id, _)| *id).collect();
            let actor = Some(session.user_id);
            gw_shared::db::events::keys_revoked(conn, session.org_id, &ids, actor, "service_account_revoked").await?;
            let entry = Entry {
                action: "service_account.revoke",
                resource_type: "service_account",
                resource_id: Some(row.id.to_string()),
                detail: json!({"name": row.name}),
            };
            trail.record(conn, entry).await?;
            // Last: the invalidation log's writers are serialized until commit.
            let mut logged = Vec::new();
            for (_, hashes) in &keys {
                logged.extend(gw_shared::db::invalidations::record_keys(conn, hashes).await?);
            }
            Ok::<_, ApiError>((row, logged))
        })
        .await?;
    state.announce(&keys, format_args!("the revocation of service account {id}'s keys")).await;
    log::info!("service account {id} revoked in org {}", row.org_id);
    Ok(HttpResponse::NoContent().finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_name_known_resources_and_levels() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(scopes(&s(&["teams:read", "teams:read", "*:write"])).unwrap(), s(&["teams:read", "*:write"]));
        for bad in ["teams", "teams:admin", "nothing:read", "service-accounts:read", ":read"] {
            assert!(scopes(&s(&[bad])).is_err(), "{bad}");
        }
    }
}
