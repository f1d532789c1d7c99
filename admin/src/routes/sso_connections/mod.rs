//! SSO connections: an organization's OpenID Connect identity provider (owners change them,
//! admins read them; the plan must be growth or enterprise). Create, list, get, update, delete,
//! and prove a domain. The client secret is sealed with the master keyring and never returned
//! (`client_secret_set: true` says one is stored). A connection's e-mail domains are claims:
//! each becomes active only after a DNS TXT record proves the organization controls it
//! (`POST .../domains/{domain}/verify`), and a domain proven by one connection cannot be proven
//! by another (409). Every write is in the admin audit trail, without the secret.
//!
//! Sign-in through a connection is `routes::sso`; see docs/sso.md.

use std::collections::BTreeMap;

use actix_web::{delete, get, patch, post, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::AsyncPgConnection;
use gw_shared::db::orgs;
use gw_shared::db::sso::{self as sso_db, Change, Connection, NewConnection};
use gw_shared::ids::new_id;
use gw_shared::roles::Role;
use gw_shared::sso;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{is_unique_violation, ApiError, ApiResult, Errors};
use crate::pagination::{self, Page};
use crate::session::Session;
use crate::sso_config::{plan_required, redirect_uri};
use crate::state::AppState;
use crate::trail::{self, Entry};
use crate::validate;

mod fields;
use fields::{default_role, domain_conflict, domains, domains_free, groups_claim, role_mapping, secret, team_mapping};

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list).service(create).service(get).service(update).service(remove).service(verify_domain);
}

const MAX_CLIENT_ID_CHARS: usize = 512;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSsoConnection {
    /// 1 to 200 characters.
    name: String,
    /// The identity provider's issuer URL, exactly as its ID tokens' `iss` claim spells it
    /// (`https`; plain `http` only on localhost).
    issuer: String,
    client_id: String,
    /// Stored sealed; never returned.
    client_secret: String,
    /// 1 to 20 domains whose users sign in through this connection (`example.com`; no wildcards).
    email_domains: Vec<String>,
    /// The ID token claim holding group names; default `groups`.
    #[serde(default)]
    groups_claim: Option<String>,
    /// Group name → `admin`, `member` or `viewer`; the highest role among a user's groups wins.
    #[serde(default)]
    role_mapping: Option<BTreeMap<String, String>>,
    /// Group name → ids of teams of this organization the user is added to.
    #[serde(default)]
    team_mapping: Option<BTreeMap<String, Vec<Uuid>>>,
    /// The role of a user none of whose groups is mapped: `admin`, `member` (default) or `viewer`.
    #[serde(default)]
    default_role: Option<String>,
    /// Default true.
    #[serde(default)]
    enabled: Option<bool>,
}

/// Any subset of the fields of a connection; `email_domains`, `role_mapping` and `team_mapping`
/// replace the whole list or map; `client_secret` replaces the stored secret.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSsoConnection {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    issuer: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    email_domains: Option<Vec<String>>,
    #[serde(default)]
    groups_claim: Option<String>,
    #[serde(default)]
    role_mapping: Option<BTreeMap<String, String>>,
    #[serde(default)]
    team_mapping: Option<BTreeMap<String, Vec<Uuid>>>,
    #[serde(default)]
    default_role: Option<String>,
    #[serde(default)]
    enabled: Option<bool>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SsoConnectionQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<Uuid>,
}

/// A connection as the API shows it: never the client secret or its ciphertext.
#[derive(Serialize, ToSchema)]
pub struct ConnectionOut {
    id: Uuid,
    name: String,
    issuer: String,
    client_id: String,
    /// Always true: a client secret is stored (sealed); it is never returned.
    client_secret_set: bool,
    email_domains: Vec<String>,
    /// Each e-mail domain's proof: what to publish in DNS, and whether it is proven. Only
    /// proven domains sign in.
    domains: Vec<DomainOut>,
    groups_claim: String,
    /// Group name → `admin`, `member` or `viewer`.
    role_mapping: BTreeMap<String, String>,
    /// Group name → team ids.
    team_mapping: BTreeMap<String, Vec<Uuid>>,
    default_role: String,
    enabled: bool,
    /// The redirect URI to register with the identity provider.
    redirect_uri: String,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// An e-mail domain a connection claims, and its proof.
#[derive(Serialize, ToSchema)]
pub struct DomainOut {
    domain: String,
    /// `pending` until the TXT record is found, then `verified`.
    status: &'static str,
    /// Publish a TXT record under this name...
    txt_name: String,
    /// ...with this value, then `POST /sso/connections/{connection_id}/domains/{domain}/verify`.
    txt_value: String,
    verified_at: Option<DateTime<Utc>>,
    /// When gw last looked the record up.
    checked_at: Option<DateTime<Utc>>,
}

impl From<sso_db::DomainClaim> for DomainOut {
    fn from(d: sso_db::DomainClaim) -> Self {
        DomainOut {
            txt_name: crate::domain_proof::record_name(&d.domain),
            txt_value: crate::domain_proof::record_value(&d.verification_token),
            status: if d.verified_at.is_some() { "verified" } else { "pending" },
            domain: d.domain,
            verified_at: d.verified_at,
            checked_at: d.checked_at,
        }
    }
}

fn out(state: &AppState, c: Connection, claims: Vec<sso_db::DomainClaim>) -> ConnectionOut {
    let domains = claims.into_iter().filter(|d| d.connection_id == c.id).map(DomainOut::from).collect();
    let role_mapping =
        sso::role_mapping_from_json(&c.role_mapping).into_iter().map(|(g, r)| (g, r.as_str().to_string())).collect();
    ConnectionOut {
        id: c.id,
        name: c.name,
        issuer: c.issuer,
        client_id: c.client_id,
        client_secret_set: !c.client_secret_sealed.is_empty(),
        email_domains: c.email_domains,
        domains,
        groups_claim: c.groups_claim,
        role_mapping,
        team_mapping: sso::team_mapping_from_json(&c.team_mapping),
        default_role: c.default_role,
        enabled: c.enabled,
        redirect_uri: redirect_uri(state),
        created_by: c.created_by,
        created_at: c.created_at,
        updated_at: c.updated_at,
    }
}

async fn require_plan(conn: &mut AsyncPgConnection, org_id: Uuid) -> ApiResult<()> {
    let org = orgs::find(conn, org_id).await?.ok_or(ApiError::NotFound("organization"))?;
    if sso::plan_allows_sso(&org.plan) {
        Ok(())
    } else {
        Err(plan_required(&org.plan))
    }
}

/// Create an SSO connection (growth and enterprise plans).
#[utoipa::path(operation_id = "create_sso_connection", tag = "sso", request_body = CreateSsoConnection,
    responses((status = 201, description = "Created", body = ConnectionOut), Errors))]
#[post("/sso/connections")]
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<CreateSsoConnection>,
) -> ApiResult<HttpResponse> {
    let ring = state.keyring("SSO connections need")?;
    let b = body.into_inner();
    let name = validate::text("name", &b.name, 200)?;
    let issuer = sso::validate_issuer(&b.issuer).map_err(|m| ApiError::field("issuer", m))?;
    let client_id = validate::text("client_id", &b.client_id, MAX_CLIENT_ID_CHARS)?;
    let client_secret = secret(&b.client_secret)?;
    let email_domains = domains(&b.email_domains)?;
    let groups = match b.groups_claim.as_deref() {
        Some(c) => groups_claim(c)?,
        None => sso::DEFAULT_GROUPS_CLAIM.to_string(),
    };
    let roles = role_mapping(&b.role_mapping.unwrap_or_default())?;
    let default = match b.default_role.as_deref() {
        Some(r) => default_role(r)?,
        None => Role::Member,
    };
    let mut conn = state.conn().await?;
    require_plan(&mut conn, session.org_id).await?;
    let team_map = team_mapping(&mut conn, session.org_id, &b.team_mapping.unwrap_or_default()).await?;
    domains_free(&mut conn, &email_domains, None).await?;
    let role_json = sso::role_mapping_to_json(&roles);
    let team_json = sso::team_mapping_to_json(&team_map);
    let new = NewConnection {
        id: new_id(),
        org_id: session.org_id,
        name: &name,
        issuer: &issuer,
        client_id: &client_id,
        client_secret: &client_secret,
        email_domains: &email_domains,
        groups_claim: &groups,
        role_mapping: &role_json,
        team_mapping: &team_json,
        default_role: default.as_str(),
        enabled: b.enabled.unwrap_or(true),
        created_by: Some(session.user_id),
    };
    let row = match sso_db::insert(&mut conn, ring, &new).await {
        Ok(row) => row,
        Err(e) if is_unique_violation(&e) => return Err(domain_conflict()),
        Err(e) => return Err(e.into()),
    };
    let entry = Entry {
        action: "sso_connection.create",
        resource_type: "sso_connection",
        resource_id: Some(row.id.to_string()),
        detail: json!({
            "name": row.name,
            "issuer": row.issuer,
            "email_domains": row.email_domains,
            "default_role": row.default_role,
            "enabled": row.enabled,
        }),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    log::info!("SSO connection {} created in org {}", row.id, row.org_id);
    let claims = sso_db::domains(&mut conn, session.org_id, row.id).await?;
    Ok(HttpResponse::Created().json(out(&state, row, claims)))
}

/// List the organization's SSO connections, newest first.
#[utoipa::path(operation_id = "list_sso_connections", tag = "sso", params(SsoConnectionQuery), responses((status = 200, body = Page<ConnectionOut>), Errors))]
#[get("/sso/connections")]
pub async fn list(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<SsoConnectionQuery>,
) -> ApiResult<HttpResponse> {
    let limit = pagination::limit(q.limit)?;
    let mut conn = state.conn().await?;
    let rows = sso_db::list(&mut conn, session.org_id, q.cursor, limit + 1).await?;
    let ids: Vec<Uuid> = rows.iter().map(|c| c.id).collect();
    let claims = sso_db::domains_of(&mut conn, session.org_id, &ids).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(rows, limit, |c| c.id, |c| out(&state, c, claims.clone()))))
}

/// One SSO connection (never its client secret).
#[utoipa::path(operation_id = "get_sso_connection", tag = "sso",
    params(("connection_id" = Uuid, Path, description = "The SSO connection's id")),
    responses((status = 200, body = ConnectionOut), Errors))]
#[get("/sso/connections/{connection_id}")]
pub async fn get(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    let row =
        sso_db::find(&mut conn, session.org_id, id.into_inner()).await?.ok_or(ApiError::NotFound("SSO connection"))?;
    let claims = sso_db::domains(&mut conn, session.org_id, row.id).await?;
    Ok(HttpResponse::Ok().json(out(&state, row, claims)))
}

/// Update an SSO connection. Only disabling (`{"enabled": false}`) is allowed once the plan no
/// longer includes SSO.
#[utoipa::path(operation_id = "update_sso_connection", tag = "sso",
    params(("connection_id" = Uuid, Path, description = "The SSO connection's id")),
    request_body = UpdateSsoConnection,
    responses((status = 200, body = ConnectionOut), Errors))]
#[patch("/sso/connections/{connection_id}")]
pub async fn update(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
    body: crate::body::Json<UpdateSsoConnection>,
) -> ApiResult<HttpResponse> {
    let ring = state.keyring("SSO connections need")?;
    let id = id.into_inner();
    let b = body.into_inner();
    let mut change = Change {
        name: b.name.as_deref().map(|n| validate::text("name", n, 200)).transpose()?,
        issuer: b
            .issuer
            .as_deref()
            .map(|i| sso::validate_issuer(i).map_err(|m| ApiError::field("issuer", m)))
            .transpose()?,
        client_id: b.client_id.as_deref().map(|c| validate::text("client_id", c, MAX_CLIENT_ID_CHARS)).transpose()?,
        client_secret: b.client_secret.as_deref().map(secret).transpose()?,
        email_domains: b.email_domains.as_deref().map(domains).transpose()?,
        groups_claim: b.groups_claim.as_deref().map(groups_claim).transpose()?,
        role_mapping: b.role_mapping.as_ref().map(role_mapping).transpose()?.map(|m| sso::role_mapping_to_json(&m)),
        team_mapping: None,
        default_role: b.default_role.as_deref().map(default_role).transpose()?.map(|r| r.as_str().to_string()),
        enabled: b.enabled,
    };
    let mut changed: Vec<&str> = Vec::new();
    let fields = [
        ("name", change.name.is_some()),
        ("issuer", change.issuer.is_some()),
        ("client_id", change.client_id.is_some()),
        ("client_secret", change.client_secret.is_some()),
        ("email_domains", change.email_domains.is_some()),
        ("groups_claim", change.groups_claim.is_some()),
        ("role_mapping", change.role_mapping.is_some()),
        ("team_mapping", b.team_mapping.is_some()),
        ("default_role", change.default_role.is_some()),
        ("enabled", change.enabled.is_some()),
    ];
    for (field, present) in fields {
        if present {
            changed.push(field);
        }
    }
    if changed.is_empty() {
        return Err(ApiError::Validation("nothing to update: send at least one field of the connection".into()));
    }
    let mut conn = state.conn().await?;
    let only_disabling = changed == ["enabled"] && change.enabled == Some(false);
    if !only_disabling {
        require_plan(&mut conn, session.org_id).await?;
    }
    if let Some(raw) = b.team_mapping.as_ref() {
        let mapping = team_mapping(&mut conn, session.org_id, raw).await?;
        change.team_mapping = Some(sso::team_mapping_to_json(&mapping));
    }
    if let Some(domains) = change.email_domains.as_deref() {
        domains_free(&mut conn, domains, Some(id)).await?;
    }
    let row = match sso_db::update(&mut conn, ring, session.org_id, id, &change).await {
        Ok(Some(row)) => row,
        Ok(None) => return Err(ApiError::NotFound("SSO connection")),
        Err(e) if is_unique_violation(&e) => return Err(domain_conflict()),
        Err(e) => return Err(e.into()),
    };
    let entry = Entry {
        action: "sso_connection.update",
        resource_type: "sso_connection",
        resource_id: Some(row.id.to_string()),
        detail: json!({"changed": &changed}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    log::info!("SSO connection {id} updated in org {} ({})", row.org_id, changed.join(", "));
    let claims = sso_db::domains(&mut conn, session.org_id, row.id).await?;
    Ok(HttpResponse::Ok().json(out(&state, row, claims)))
}

/// Delete an SSO connection; its domains no longer sign in through SSO. Members it provisioned
/// stay members.
#[utoipa::path(operation_id = "delete_sso_connection", tag = "sso",
    params(("connection_id" = Uuid, Path, description = "The SSO connection's id")),
    responses((status = 204, description = "Deleted"), Errors))]
#[delete("/sso/connections/{connection_id}")]
pub async fn remove(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    let row = sso_db::delete(&mut conn, session.org_id, id).await?.ok_or(ApiError::NotFound("SSO connection"))?;
    let entry = Entry {
        action: "sso_connection.delete",
        resource_type: "sso_connection",
        resource_id: Some(row.id.to_string()),
        detail: json!({"name": row.name, "issuer": row.issuer, "email_domains": row.email_domains}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    log::info!("SSO connection {id} deleted in org {}", row.org_id);
    Ok(HttpResponse::NoContent().finish())
}

/// Prove a domain of a connection: gw looks up the TXT record the connection's `domains` entry
/// names, through the operator's resolver. Found: the domain is verified and signs in through
/// this connection. Not found: 400 saying what was expected and what was seen.
#[utoipa::path(operation_id = "verify_sso_domain", tag = "sso",
    params(("connection_id" = Uuid, Path, description = "The SSO connection's id"),
           ("domain" = String, Path, description = "One of the connection's e-mail domains")),
    responses((status = 200, description = "Verified", body = DomainOut), Errors))]
#[post("/sso/connections/{connection_id}/domains/{domain}/verify")]
pub async fn verify_domain(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<(Uuid, String)>,
) -> ApiResult<HttpResponse> {
    let (id, raw) = path.into_inner();
    let domain = sso::normalize_domain(&raw).map_err(|m| ApiError::field("domain", m))?;
    let mut conn = state.conn().await?;
    require_plan(&mut conn, session.org_id).await?;
    sso_db::find(&mut conn, session.org_id, id).await?.ok_or(ApiError::NotFound("SSO connection"))?;
    let claim = sso_db::domains(&mut conn, session.org_id, id)
        .await?
        .into_iter()
        .find(|d| d.domain == domain)
        .ok_or(ApiError::NotFound("domain of this SSO connection"))?;
    if claim.verified_at.is_some() {
        return Ok(HttpResponse::Ok().json(DomainOut::from(claim)));
    }
    domains_free(&mut conn, std::slice::from_ref(&domain), Some(id)).await?;
    // No database connection is held across the lookup.
    drop(conn);
    let found = state.domain_proof.check(&domain, &claim.verification_token).await.map_err(|e| {
        log::warn!("domain proof lookup failed: {e}");
        ApiError::BadGateway(e.to_string())
    })?;
    let proven = found == crate::domain_proof::Found::Proven;
    let mut conn = state.conn().await?;
    let row = match sso_db::record_check(&mut conn, session.org_id, id, &domain, proven).await {
        Ok(Some(row)) => row,
        Ok(None) => return Err(ApiError::NotFound("domain of this SSO connection")),
        Err(e) if is_unique_violation(&e) => return Err(domain_conflict()),
        Err(e) => return Err(e.into()),
    };
    if !proven {
        let seen = match found {
            crate::domain_proof::Found::Other(n) => format!("{n} other TXT record(s)"),
            _ => "no TXT record".to_string(),
        };
        return Err(ApiError::field(
            "domain",
            format!(
                "not proven: expected a TXT record {} at {}, found {seen}",
                crate::domain_proof::record_value(&claim.verification_token),
                crate::domain_proof::record_name(&domain)
            ),
        ));
    }
    let entry = Entry {
        action: "sso_connection.domain_verified",
        resource_type: "sso_connection",
        resource_id: Some(id.to_string()),
        detail: json!({"domain": domain}),
    };
    trail::by(&mut conn, &session, &req, entry).await?;
    log::info!("SSO domain proven for connection {id} in org {}", session.org_id);
    Ok(HttpResponse::Ok().json(DomainOut::from(row)))
}
