//! The organization's policy: its document (own policies, defaults, mandatory list), the
//! built-in templates, applying one to the organization or a team, and the version history with
//! revert. Every change is a new version, committed, then published to the proxies (they drop
//! their compiled copy and read the new version on the next request).

use actix_web::{get, patch, post, put, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use gw_shared::db::invalidations;
use gw_shared::db::policies::{self, VersionRow};
use gw_shared::policy::builtin;
use gw_shared::policy::engine::{compiled_size, MAX_COMPILED_BYTES};
use gw_shared::policy::spec::OrgPolicy;
use gw_shared::redis::Invalidation;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::org_policy::current;
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{Entry, Trail};

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(get_policy)
        .service(put_policy)
        .service(patch_policy)
        .service(templates)
        .service(apply_template)
        .service(versions)
        .service(revert);
}

#[derive(Serialize, ToSchema)]
pub struct PolicyOut {
    /// 0 until the organization saves a policy.
    version: i64,
    updated_at: Option<DateTime<Utc>>,
    /// The document as stored: `defaults`, `mandatory`, `policies`.
    #[schema(value_type = Object)]
    document: Value,
    /// Every policy a request, team or default may name: built-ins and the organization's own,
    /// with the definition in force (an own policy replaces a built-in of the same name).
    #[schema(value_type = Object)]
    available: Value,
}

async fn out(conn: &mut AsyncPgConnection, org_id: Uuid) -> ApiResult<PolicyOut> {
    let latest = policies::latest(conn, org_id, None).await?;
    let (version, doc) = current(conn, org_id).await?;
    let mut available = serde_json::Map::new();
    for name in doc.available() {
        let def = doc.policies.iter().find(|p| p.name == name).cloned().or_else(|| builtin::policy(&name));
        let builtin = !doc.policies.iter().any(|p| p.name == name);
        if let Some(def) = def {
            let mut v = serde_json::to_value(&def).map_err(|e| ApiError::Internal(e.to_string()))?;
            if let Value::Object(o) = &mut v {
                o.insert("builtin".into(), Value::Bool(builtin));
                o.insert("mandatory".into(), Value::Bool(doc.mandatory.contains(&name)));
                o.insert("default".into(), Value::Bool(doc.defaults.contains(&name)));
            }
            available.insert(name, v);
        }
    }
    Ok(PolicyOut {
        version,
        updated_at: latest.map(|r| r.created_at),
        document: serde_json::to_value(&doc).map_err(|e| ApiError::Internal(e.to_string()))?,
        available: Value::Object(available),
    })
}

/// The effective organization policy.
#[utoipa::path(tag = "policy", responses((status = 200, body = PolicyOut), Errors))]
#[get("/organizations/current/policy")]
pub async fn get_policy(state: web::Data<AppState>, session: Session) -> ApiResult<HttpResponse> {
    let mut conn = state.conn().await?;
    Ok(HttpResponse::Ok().json(out(&mut conn, session.org_id).await?))
}

/// Parses and validates a document from a request body.
fn document(v: Value) -> ApiResult<OrgPolicy> {
    let doc: OrgPolicy = crate::decode::json(v)?;
    doc.validate().map_err(|p| ApiError::field(p.field, p.message))?;
    Ok(doc)
}

/// A `PUT` (the whole document) or `PATCH` (some of its fields; `null` empties one).
struct Edit {
    fields: Map<String, Value>,
    replace: bool,
    /// The version the client read, when it sent the body `GET` answered: a change made since
    /// is not overwritten (409).
    read_version: Option<i64>,
}

impl Edit {
    /// The document's fields, or the body `GET` answered: `document` with `version`, and the
    /// derived `updated_at` and `available` (ignored).
    fn of(body: Value, replace: bool) -> ApiResult<Edit> {
        let Value::Object(mut m) = body else {
            return Err(ApiError::Validation("the body must be a JSON object".into()));
        };
        let Some(doc) = m.remove("document") else {
            return Ok(Edit { fields: m, replace, read_version: None });
        };
        let read_version = match m.remove("version") {
            None => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| ApiError::field("version", "must be an integer"))?),
        };
        m.remove("updated_at");
        m.remove("available");
        if let Some(k) = m.keys().next() {
            return Err(ApiError::field(k.clone(), "is not a known field"));
        }
        let Value::Object(fields) = doc else {
            return Err(ApiError::field("document", "must be an object"));
        };
        Ok(Edit { fields, replace, read_version })
    }

    /// The document this edit makes of `old` (version `version`).
    fn apply(self, version: i64, old: &OrgPolicy) -> ApiResult<OrgPolicy> {
        if let Some(read) = self.read_version.filter(|r| *r != version) {
            return Err(ApiError::Conflict(format!(
                "the policy changed since version {read} was read (it is at version {version}); read it again"
            )));
        }
        if self.replace {
            return document(Value::Object(self.fields));
        }
        let mut merged = match serde_json::to_value(old) {
            Ok(Value::Object(m)) => m,
            _ => return Err(ApiError::Internal("the stored policy does not encode as an object".into())),
        };
        for (k, v) in self.fields {
            if v.is_null() {
                merged.remove(&k);
            } else {
                merged.insert(k, v);
            }
        }
        document(Value::Object(merged))
    }
}

/// Applies `edit` to the current document and saves the result, in one transaction.
async fn save_edit(conn: &mut AsyncPgConnection, trail: &Trail, edit: Edit) -> ApiResult<VersionRow> {
    if !policies::lock_org(conn, trail.org_id).await? {
        return Err(ApiError::NotFound("organization"));
    }
    let (version, old) = current(conn, trail.org_id).await?;
    let doc = edit.apply(version, &old)?;
    save(conn, trail, &doc, "update", true).await
}

/// Refuses a document that drops a policy a team still names among its default or mandatory
/// policies.
async fn check_teams(conn: &mut AsyncPgConnection, org_id: Uuid, old: &OrgPolicy, new: &OrgPolicy) -> ApiResult<()> {
    let dropped: Vec<String> = old.available().into_iter().filter(|n| !new.knows(n)).collect();
    let users = policies::teams_using(conn, org_id, &dropped).await?;
    if let Some((id, name, used)) = users.first() {
        let names: Vec<&String> = used.iter().filter(|u| dropped.contains(u)).collect();
        return Err(ApiError::Conflict(format!(
            "team {name:?} ({id}) names {names:?} among its default or mandatory policies; change the team first"
        )));
    }
    Ok(())
}

/// Saves a new version of the organization's document (in a transaction holding the org lock).
async fn save(
    conn: &mut AsyncPgConnection,
    trail: &Trail,
    doc: &OrgPolicy,
    source: &str,
    check: bool,
) -> ApiResult<VersionRow> {
    let org_id = trail.org_id;
    if !policies::lock_org(conn, org_id).await? {
        return Err(ApiError::NotFound("organization"));
    }
    let (_, old) = current(conn, org_id).await?;
    if check {
        check_teams(conn, org_id, &old, doc).await?;
    }
    // Compiled here, off the server's workers, as every proxy will compile it: refused when the
    // set would be too big to hold.
    let copy = doc.clone();
    let (fits, weight) = tokio::task::spawn_blocking(move || compiled_size(&copy))
        .await
        .map_err(|e| ApiError::Internal(format!("compiling a policy document: {e}")))?;
    if !fits {
        return Err(ApiError::field(
            "policies",
            format!(
                "the document compiles to about {} MiB; at most {} MiB (fewer phrases or simpler patterns)",
                weight.div_ceil(1 << 20),
                MAX_COMPILED_BYTES >> 20
            ),
        ));
    }
    let value = serde_json::to_value(doc).map_err(|e| ApiError::Internal(e.to_string()))?;
    let row = policies::append(conn, org_id, None, &value, source, trail.actor_user_id).await?;
    let entry = Entry {
        action: "policy.update",
        resource_type: "policy",
        resource_id: Some(format!("v{}", row.version)),
        detail: json!({"version": row.version, "source": source}),
    };
    trail.record(conn, entry).await?;
    Ok(row)
}

/// Replace the organization's policy document (a new version). The body is the document, or the
/// body `GET` answered (its `version` must still be current: 409 otherwise).
#[utoipa::path(tag = "policy", request_body(content = Object, description = "The policy document"),
    responses((status = 200, body = PolicyOut), Errors))]
#[put("/organizations/current/policy")]
pub async fn put_policy(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<Value>,
) -> ApiResult<HttpResponse> {
    store_edit(&state, &session, &req, Edit::of(body.into_inner(), true)?).await
}

/// Change some of the document's fields (`defaults`, `mandatory`, `policies`; absent ones stay,
/// `null` empties one): a new version. Takes the `GET` body too, like `PUT`.
#[utoipa::path(tag = "policy", request_body(content = Object, description = "Fields of the policy document"),
    responses((status = 200, body = PolicyOut), Errors))]
#[patch("/organizations/current/policy")]
pub async fn patch_policy(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<Value>,
) -> ApiResult<HttpResponse> {
    store_edit(&state, &session, &req, Edit::of(body.into_inner(), false)?).await
}

async fn store_edit(state: &AppState, session: &Session, req: &HttpRequest, edit: Edit) -> ApiResult<HttpResponse> {
    let trail = Trail::of(session, req);
    let mut conn = state.conn().await?;
    let org_id = session.org_id;
    let logged = conn
        .transaction(async |c| {
            save_edit(c, &trail, edit).await?;
            Ok::<_, ApiError>(invalidations::record_all(c, [Invalidation::Policy { org_id }]).await?)
        })
        .await?;
    state.announce(&logged, "a policy change").await;
    Ok(HttpResponse::Ok().json(out(&mut conn, session.org_id).await?))
}

/// The built-in templates.
#[utoipa::path(tag = "policy", responses((status = 200, description = "The templates"), Errors))]
#[get("/organizations/current/policy/templates")]
pub async fn templates() -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(json!({"data": builtin::templates()})))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyTemplateBody {
    /// `baseline`, `strict_pii`, `pci` or `healthcare`.
    template: String,
    /// Apply to this team's default policies instead of the organization's defaults.
    team_id: Option<Uuid>,
}

/// Apply a template: its policies are added to (or replace, by name) the organization's own;
/// then, for the organization, its defaults and mandatory list replace the organization's, or,
/// for a team, its policy names become the team's default policies. Each is a new version,
/// reverted like any other.
#[utoipa::path(tag = "policy", request_body = ApplyTemplateBody, responses((status = 200, body = PolicyOut), Errors))]
#[post("/organizations/current/policy/apply-template")]
pub async fn apply_template(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<ApplyTemplateBody>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let template = builtin::template(&b.template).ok_or_else(|| {
        let names: Vec<&str> = builtin::templates().iter().map(|t| t.name).collect();
        ApiError::field("template", format!("unknown template {:?}; templates: {}", b.template, names.join(", ")))
    })?;
    let trail = Trail::of(&session, &req);
    let org_id = session.org_id;
    let mut conn = state.conn().await?;
    let team = b.team_id;
    let logged = conn
        .transaction(async |c| {
            if !policies::lock_org(c, org_id).await? {
                return Err(ApiError::NotFound("organization"));
            }
            let (_, mut doc) = current(c, org_id).await?;
            for p in &template.policy.policies {
                doc.policies.retain(|q| q.name != p.name);
                doc.policies.push(p.clone());
            }
            let source = format!("template:{}", template.name);
            match team {
                None => {
                    doc.defaults = template.policy.defaults.clone();
                    doc.mandatory = template.policy.mandatory.clone();
                }
                Some(team_id) => {
                    policies::team_defaults(c, org_id, team_id).await?.ok_or(ApiError::NotFound("team"))?;
                    let names: Vec<String> = template.policy.policies.iter().map(|p| p.name.clone()).collect();
                    set_team(c, &trail, team_id, &names, &source).await?;
                }
            }
            doc.validate().map_err(|p| ApiError::Internal(format!("template {}: {}", template.name, p.message)))?;
            save(c, &trail, &doc, &source, false).await?;
            Ok(invalidations::record_all(c, policy_invalidations(org_id, team)).await?)
        })
        .await?;
    state.announce(&logged, "a policy change").await;
    Ok(HttpResponse::Ok().json(out(&mut conn, org_id).await?))
}

/// What a change to the organization's policy (and a team's defaults) invalidates: the policy,
/// then the team.
fn policy_invalidations(org_id: Uuid, team: Option<Uuid>) -> Vec<Invalidation> {
    let mut invs = vec![Invalidation::Policy { org_id }];
    invs.extend(team.map(|team_id| Invalidation::Team { org_id, team_id }));
    invs
}

/// Sets a team's defaults and records the version (inside the caller's transaction).
async fn set_team(
    c: &mut AsyncPgConnection,
    trail: &Trail,
    team_id: Uuid,
    names: &[String],
    source: &str,
) -> ApiResult<VersionRow> {
    if !policies::set_team_defaults(c, trail.org_id, team_id, names).await? {
        return Err(ApiError::NotFound("team"));
    }
    let row =
        policies::append(c, trail.org_id, Some(team_id), &json!({"defaults": names}), source, trail.actor_user_id)
            .await?;
    let entry = Entry {
        action: "team.policies",
        resource_type: "team",
        resource_id: Some(team_id.to_string()),
        detail: json!({"version": row.version, "source": source, "default_policies": names}),
    };
    trail.record(c, entry).await?;
    Ok(row)
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VersionsQuery {
    /// A team's versions instead of the organization's.
    team_id: Option<Uuid>,
    /// Versions older than this one (the page's `next_cursor`).
    before: Option<i32>,
    /// 1 to 100, default 20.
    limit: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct VersionOut {
    version: i32,
    team_id: Option<Uuid>,
    source: String,
    actor_user_id: Option<Uuid>,
    created_at: DateTime<Utc>,
    #[schema(value_type = Object)]
    document: Value,
}

/// The version history of the organization's policy, or of a team's defaults; newest first.
#[utoipa::path(tag = "policy", params(VersionsQuery), responses((status = 200, description = "A page of versions"), Errors))]
#[get("/organizations/current/policy/versions")]
pub async fn versions(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<VersionsQuery>,
) -> ApiResult<HttpResponse> {
    let limit = q.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::field("limit", "must be between 1 and 100"));
    }
    let mut conn = state.conn().await?;
    let mut rows = policies::history(&mut conn, session.org_id, q.team_id, q.before, limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(|r| r.version) } else { None };
    let data: Vec<VersionOut> = rows
        .into_iter()
        .map(|r| VersionOut {
            version: r.version,
            team_id: r.team_id,
            source: r.source,
            actor_user_id: r.actor_id,
            created_at: r.created_at,
            document: r.document,
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({"data": data, "has_more": more, "next_cursor": next})))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevertBody {
    version: i32,
    team_id: Option<Uuid>,
}

/// Put an earlier version back in force, as a new version.
#[utoipa::path(tag = "policy", request_body = RevertBody, responses((status = 200, body = PolicyOut), Errors))]
#[post("/organizations/current/policy/revert")]
pub async fn revert(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<RevertBody>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let trail = Trail::of(&session, &req);
    let org_id = session.org_id;
    let mut conn = state.conn().await?;
    let logged = conn
        .transaction(async |c| {
            if !policies::lock_org(c, org_id).await? {
                return Err(ApiError::NotFound("organization"));
            }
            let row = policies::version(c, org_id, b.team_id, b.version)
                .await?
                .ok_or(ApiError::NotFound("policy version"))?;
            let source = format!("revert:{}", b.version);
            match b.team_id {
                None => {
                    let doc: OrgPolicy = serde_json::from_value(row.document)
                        .map_err(|e| ApiError::Conflict(format!("version {} no longer parses: {e}", b.version)))?;
                    doc.validate().map_err(|p| {
                        ApiError::Conflict(format!(
                            "version {} is no longer valid: {}: {}",
                            b.version, p.field, p.message
                        ))
                    })?;
                    save(c, &trail, &doc, &source, true).await?;
                }
                Some(team_id) => {
                    let names: Vec<String> = row
                        .document
                        .get("defaults")
                        .and_then(|d| serde_json::from_value(d.clone()).ok())
                        .unwrap_or_default();
                    let (_, doc) = current(c, org_id).await?;
                    if let Some(gone) = names.iter().find(|n| !doc.knows(n)) {
                        return Err(ApiError::Conflict(format!(
                            "version {} names policy {gone:?}, which the organization no longer defines",
                            b.version
                        )));
                    }
                    set_team(c, &trail, team_id, &names, &source).await?;
                }
            }
            Ok(invalidations::record_all(c, policy_invalidations(org_id, b.team_id)).await?)
        })
        .await?;
    state.announce(&logged, "a policy change").await;
    Ok(HttpResponse::Ok().json(out(&mut conn, org_id).await?))
}
