//! `/api/v1/prompt-templates`: chat messages over typed variables, versioned. Every edit is a new
//! immutable version (author, time, note, content hash); versions are never changed or removed,
//! labels (`production`, `staging`, ...) point at one each, and a deleted template keeps its
//! versions readable. Viewers read, members write, admins delete (`docs/prompt-templates.md`).

use actix_web::{delete, get, post, put, web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use diesel_async::AsyncConnection;
use gw_shared::db::invalidations;
use gw_shared::db::prompt_templates::{self as db, NewVersion, Template, Version};
use gw_shared::ids::new_id;
use gw_shared::prompt_template::{Content, TemplateMessage, Variable};
use gw_shared::redis::Invalidation;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};
use utoipa_actix_web::service_config::ServiceConfig;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, Errors};
use crate::pagination::{self, CursorPage, Page, PageQuery};
use crate::session::Session;
use crate::state::AppState;
use crate::trail::{self, Entry};
use crate::validate;

pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(list)
        .service(create)
        .service(get)
        .service(remove)
        .service(list_versions)
        .service(create_version)
        .service(get_version)
        .service(set_label)
        .service(delete_label)
        .service(render);
}

/// Live templates one organization may have.
const MAX_TEMPLATES: i64 = 1000;
const MAX_NAME_CHARS: usize = 200;
const MAX_DESCRIPTION_CHARS: usize = 1000;
const MAX_NOTE_CHARS: usize = 1000;
const MAX_LABELS: usize = 20;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTemplate {
    /// Unique among the organization's live templates; 1 to 200 characters.
    name: String,
    #[serde(default)]
    description: Option<String>,
    /// The first version's messages (1 to 100).
    messages: Vec<TemplateMessage>,
    /// The variables the messages use, by name, with their types.
    #[serde(default)]
    variables: BTreeMap<String, Variable>,
    /// A note on the version (like a commit message), at most 1000 characters.
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTemplateVersion {
    messages: Vec<TemplateMessage>,
    #[serde(default)]
    variables: BTreeMap<String, Variable>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetTemplateLabel {
    /// The version the label points at.
    version: i32,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenderTemplate {
    /// A version number; default the latest (or `label`'s).
    #[serde(default)]
    version: Option<i32>,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    variables: Map<String, Value>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TemplateVersionsQuery {
    /// 1 to 200; default 50.
    limit: Option<i64>,
    /// The `next_cursor` of the previous page (versions come newest first).
    cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct TemplateOut {
    id: Uuid,
    name: String,
    description: String,
    latest_version: i32,
    /// Label to version.
    labels: BTreeMap<String, i32>,
    created_by: Option<Uuid>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    /// Set once deleted: the versions stay readable.
    deleted_at: Option<DateTime<Utc>>,
}

#[derive(Serialize, ToSchema)]
pub struct TemplateVersionOut {
    template_id: Uuid,
    version: i32,
    messages: Vec<TemplateMessage>,
    variables: BTreeMap<String, Variable>,
    /// The author's note.
    message: String,
    /// SHA-256 (hex) of the version's messages and variables as canonical JSON.
    content_hash: String,
    author_id: Option<Uuid>,
    created_at: DateTime<Utc>,
}

/// A template with its latest version.
#[derive(Serialize, ToSchema)]
pub struct TemplateWithVersion {
    #[serde(flatten)]
    template: TemplateOut,
    latest: TemplateVersionOut,
}

#[derive(Serialize, ToSchema)]
pub struct RenderedTemplate {
    template_id: Uuid,
    version: i32,
    messages: Vec<TemplateMessage>,
}

fn template_out(t: Template, labels: BTreeMap<String, i32>) -> TemplateOut {
    TemplateOut {
        id: t.id,
        name: t.name,
        description: t.description,
        latest_version: t.latest_version,
        labels,
        created_by: t.created_by,
        created_at: t.created_at,
        updated_at: t.updated_at,
        deleted_at: t.deleted_at,
    }
}

fn version_out(v: Version) -> TemplateVersionOut {
    TemplateVersionOut {
        template_id: v.template_id,
        version: v.version,
        messages: serde_json::from_value(v.messages).unwrap_or_default(),
        variables: serde_json::from_value(v.variables).unwrap_or_default(),
        message: v.message,
        content_hash: v.content_hash,
        author_id: v.author_id,
        created_at: v.created_at,
    }
}

/// The content checked, as it is stored.
fn content(messages: Vec<TemplateMessage>, variables: BTreeMap<String, Variable>) -> ApiResult<Content> {
    let c = Content { messages, variables };
    c.validate().map_err(|e| ApiError::field(&e.field, e.message))?;
    Ok(c)
}

fn note(message: Option<&str>) -> ApiResult<String> {
    validate::optional_text("message", message.unwrap_or_default(), MAX_NOTE_CHARS)
}

fn label_name(label: &str) -> ApiResult<String> {
    let ok = !label.is_empty()
        && label.len() <= 64
        && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
        && label.parse::<i64>().is_err();
    if !ok {
        return Err(ApiError::field("label", "1 to 64 lowercase letters, digits, - _ . (not a number)"));
    }
    Ok(label.to_string())
}

fn json_of<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A version's content checked and in its stored form, with the author's note and its hash.
struct Saved {
    messages: Value,
    variables: Value,
    note: String,
    hash: String,
}

impl Saved {
    fn check(
        messages: Vec<TemplateMessage>,
        variables: BTreeMap<String, Variable>,
        message: Option<&str>,
    ) -> ApiResult<Saved> {
        let note = note(message)?;
        let c = content(messages, variables)?;
        Ok(Saved { messages: json_of(&c.messages), variables: json_of(&c.variables), note, hash: c.hash() })
    }

    fn version(&self, author: Uuid) -> NewVersion<'_> {
        NewVersion {
            messages: &self.messages,
            variables: &self.variables,
            message: &self.note,
            content_hash: &self.hash,
            author_id: Some(author),
        }
    }
}

/// The organization's live templates, newest first.
#[utoipa::path(operation_id = "list_prompt_templates", tag = "prompt-templates", params(PageQuery),
    responses((status = 200, body = Page<TemplateOut>), Errors))]
#[get("/prompt-templates")]
pub async fn list(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<PageQuery>,
) -> ApiResult<HttpResponse> {
    let limit = pagination::limit(q.limit)?;
    let mut conn = state.conn().await?;
    let rows = db::list(&mut conn, session.org_id, q.cursor, limit + 1).await?;
    let ids: Vec<Uuid> = rows.iter().map(|t| t.id).collect();
    let mut labels = db::labels_of(&mut conn, session.org_id, &ids).await?;
    Ok(HttpResponse::Ok().json(Page::from_rows(
        rows,
        limit,
        |t| t.id,
        |t| {
            let l = labels.remove(&t.id).unwrap_or_default();
            template_out(t, l)
        },
    )))
}

/// Create a template with its first version.
#[utoipa::path(operation_id = "create_prompt_template", tag = "prompt-templates", request_body = CreateTemplate,
    responses((status = 201, body = TemplateWithVersion), Errors))]
#[post("/prompt-templates")]
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    body: crate::body::Json<CreateTemplate>,
) -> ApiResult<HttpResponse> {
    let b = body.into_inner();
    let name = validate::text("name", &b.name, MAX_NAME_CHARS)?;
    let description =
        validate::optional_text("description", b.description.as_deref().unwrap_or_default(), MAX_DESCRIPTION_CHARS)?;
    let saved = Saved::check(b.messages, b.variables, b.message.as_deref())?;
    let v = saved.version(session.user_id);
    let id = new_id();
    let trail = trail::Trail::of(&session, &req);
    let mut conn = state.conn().await?;
    let (t, version) = conn
        .transaction(async |conn| {
            if db::count_live(conn, session.org_id).await? >= MAX_TEMPLATES {
                return Err(ApiError::Conflict(format!("an organization has at most {MAX_TEMPLATES} templates")));
            }
            let made = db::create(conn, session.org_id, id, &name, &description, &v).await?;
            let (t, version) = made.ok_or_else(|| ApiError::Conflict(format!("a template named {name:?} exists")))?;
            let entry = Entry {
                action: "prompt_template.create",
                resource_type: "prompt_template",
                resource_id: Some(id.to_string()),
                detail: json!({"name": t.name, "version": 1, "content_hash": version.content_hash}),
            };
            trail.record(conn, entry).await?;
            Ok::<_, ApiError>((t, version))
        })
        .await?;
    let out = TemplateWithVersion { template: template_out(t, BTreeMap::new()), latest: version_out(version) };
    Ok(HttpResponse::Created().json(out))
}

async fn live(
    conn: &mut diesel_async::AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    deleted: bool,
) -> ApiResult<Template> {
    db::find(conn, org_id, id, deleted).await?.ok_or(ApiError::NotFound("prompt template"))
}

/// A template (deleted ones too) with its latest version.
#[utoipa::path(operation_id = "get_prompt_template", tag = "prompt-templates",
    params(("template_id" = Uuid, Path, description = "The template's id")),
    responses((status = 200, body = TemplateWithVersion), Errors))]
#[get("/prompt-templates/{template_id}")]
pub async fn get(state: web::Data<AppState>, session: Session, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let mut conn = state.conn().await?;
    let t = live(&mut conn, session.org_id, id, true).await?;
    let latest = db::version(&mut conn, session.org_id, id, t.latest_version)
        .await?
        .ok_or(ApiError::NotFound("prompt template version"))?;
    let labels = db::labels(&mut conn, session.org_id, id).await?;
    Ok(HttpResponse::Ok().json(TemplateWithVersion { template: template_out(t, labels), latest: version_out(latest) }))
}

/// Delete a template: it stops being usable and listed; its versions stay readable.
#[utoipa::path(operation_id = "delete_prompt_template", tag = "prompt-templates",
    params(("template_id" = Uuid, Path, description = "The template's id")),
    responses((status = 204, description = "Deleted"), Errors))]
#[delete("/prompt-templates/{template_id}")]
pub async fn remove(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let trail = trail::Trail::of(&session, &req);
    let mut conn = state.conn().await?;
    let logged = conn
        .transaction(async |conn| {
            if !db::soft_delete(conn, session.org_id, id).await? {
                return Err(ApiError::NotFound("prompt template"));
            }
            let entry = Entry {
                action: "prompt_template.delete",
                resource_type: "prompt_template",
                resource_id: Some(id.to_string()),
                detail: json!({}),
            };
            trail.record(conn, entry).await?;
            record_template(conn, session.org_id, id).await
        })
        .await?;
    state.announce(&logged, format_args!("prompt template {id}")).await;
    Ok(HttpResponse::NoContent().finish())
}

/// The template's versions, newest first.
#[utoipa::path(operation_id = "list_prompt_template_versions", tag = "prompt-templates",
    params(("template_id" = Uuid, Path, description = "The template's id"), TemplateVersionsQuery),
    responses((status = 200, body = CursorPage<TemplateVersionOut>), Errors))]
#[get("/prompt-templates/{template_id}/versions")]
pub async fn list_versions(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<Uuid>,
    q: crate::body::Query<TemplateVersionsQuery>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let limit = pagination::limit(q.limit)?;
    let before = match &q.cursor {
        Some(c) => Some(c.parse::<i32>().map_err(|_| ApiError::field("cursor", "not a cursor of this list"))?),
        None => None,
    };
    let mut conn = state.conn().await?;
    live(&mut conn, session.org_id, id, true).await?;
    let rows = db::versions(&mut conn, session.org_id, id, before, limit + 1).await?;
    Ok(HttpResponse::Ok().json(CursorPage::from_rows(rows, limit, |v| v.version.to_string(), version_out)))
}

/// Save a new version (the template's next number; concurrent saves each get their own).
#[utoipa::path(operation_id = "create_prompt_template_version", tag = "prompt-templates",
    params(("template_id" = Uuid, Path, description = "The template's id")), request_body = CreateTemplateVersion,
    responses((status = 201, body = TemplateVersionOut), Errors))]
#[post("/prompt-templates/{template_id}/versions")]
pub async fn create_version(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    id: web::Path<Uuid>,
    body: crate::body::Json<CreateTemplateVersion>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let b = body.into_inner();
    let saved = Saved::check(b.messages, b.variables, b.message.as_deref())?;
    let v = saved.version(session.user_id);
    let trail = trail::Trail::of(&session, &req);
    let mut conn = state.conn().await?;
    let (version, logged) = conn
        .transaction(async |conn| {
            let version =
                db::add_version(conn, session.org_id, id, &v).await?.ok_or(ApiError::NotFound("prompt template"))?;
            let entry = Entry {
                action: "prompt_template.version",
                resource_type: "prompt_template",
                resource_id: Some(id.to_string()),
                detail: json!({"version": version.version, "content_hash": version.content_hash}),
            };
            trail.record(conn, entry).await?;
            let logged = record_template(conn, session.org_id, id).await?;
            Ok::<_, ApiError>((version, logged))
        })
        .await?;
    state.announce(&logged, format_args!("prompt template {id}")).await;
    Ok(HttpResponse::Created().json(version_out(version)))
}

/// One version (of a deleted template too).
#[utoipa::path(operation_id = "get_prompt_template_version", tag = "prompt-templates",
    params(("template_id" = Uuid, Path, description = "The template's id"),
           ("version" = i32, Path, description = "The version number")),
    responses((status = 200, body = TemplateVersionOut), Errors))]
#[get("/prompt-templates/{template_id}/versions/{version}")]
pub async fn get_version(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<(Uuid, i32)>,
) -> ApiResult<HttpResponse> {
    let (id, n) = path.into_inner();
    let mut conn = state.conn().await?;
    let v =
        db::version(&mut conn, session.org_id, id, n).await?.ok_or(ApiError::NotFound("prompt template version"))?;
    Ok(HttpResponse::Ok().json(version_out(v)))
}

/// Point a label at a version (moving it if it points elsewhere).
#[utoipa::path(operation_id = "set_prompt_template_label", tag = "prompt-templates",
    params(("template_id" = Uuid, Path, description = "The template's id"),
           ("label" = String, Path, description = "The label, e.g. production")), request_body = SetTemplateLabel,
    responses((status = 200, body = TemplateOut), Errors))]
#[put("/prompt-templates/{template_id}/labels/{label}")]
pub async fn set_label(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<(Uuid, String)>,
    body: crate::body::Json<SetTemplateLabel>,
) -> ApiResult<HttpResponse> {
    let (id, label) = path.into_inner();
    let label = label_name(&label)?;
    let version = body.version;
    let mut conn = state.conn().await?;
    let t = live(&mut conn, session.org_id, id, false).await?;
    let labels = db::labels(&mut conn, session.org_id, id).await?;
    if !labels.contains_key(&label) && labels.len() >= MAX_LABELS {
        return Err(ApiError::Conflict(format!("a template has at most {MAX_LABELS} labels")));
    }
    let trail = trail::Trail::of(&session, &req);
    let logged = conn
        .transaction(async |conn| {
            if !db::set_label(conn, session.org_id, id, &label, version, Some(session.user_id)).await? {
                return Err(ApiError::field("version", format!("the template has no version {version}")));
            }
            let entry = Entry {
                action: "prompt_template.label",
                resource_type: "prompt_template",
                resource_id: Some(id.to_string()),
                detail: json!({"label": label, "version": version, "previous": labels.get(&label)}),
            };
            trail.record(conn, entry).await?;
            record_template(conn, session.org_id, id).await
        })
        .await?;
    let labels = db::labels(&mut conn, session.org_id, id).await?;
    state.announce(&logged, format_args!("prompt template {id}")).await;
    Ok(HttpResponse::Ok().json(template_out(t, labels)))
}

/// Remove a label.
#[utoipa::path(operation_id = "delete_prompt_template_label", tag = "prompt-templates",
    params(("template_id" = Uuid, Path, description = "The template's id"),
           ("label" = String, Path, description = "The label")),
    responses((status = 204, description = "Removed"), Errors))]
#[delete("/prompt-templates/{template_id}/labels/{label}")]
pub async fn delete_label(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    path: web::Path<(Uuid, String)>,
) -> ApiResult<HttpResponse> {
    let (id, label) = path.into_inner();
    let trail = trail::Trail::of(&session, &req);
    let mut conn = state.conn().await?;
    let logged = conn
        .transaction(async |conn| {
            if !db::delete_label(conn, session.org_id, id, &label).await? {
                return Err(ApiError::NotFound("prompt template label"));
            }
            let entry = Entry {
                action: "prompt_template.unlabel",
                resource_type: "prompt_template",
                resource_id: Some(id.to_string()),
                detail: json!({"label": label}),
            };
            trail.record(conn, entry).await?;
            record_template(conn, session.org_id, id).await
        })
        .await?;
    state.announce(&logged, format_args!("prompt template {id}")).await;
    Ok(HttpResponse::NoContent().finish())
}

/// Render a version with variables, as a chat request referencing it would (nothing is sent).
#[utoipa::path(operation_id = "render_prompt_template", tag = "prompt-templates",
    params(("template_id" = Uuid, Path, description = "The template's id")), request_body = RenderTemplate,
    responses((status = 200, body = RenderedTemplate), Errors))]
#[post("/prompt-templates/{template_id}/render")]
pub async fn render(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<Uuid>,
    body: crate::body::Json<RenderTemplate>,
) -> ApiResult<HttpResponse> {
    let id = id.into_inner();
    let b = body.into_inner();
    let reference = match (b.version, b.label) {
        (Some(_), Some(_)) => return Err(ApiError::field("label", "send version or label, not both")),
        (Some(n), None) => db::Reference::Number(n),
        (None, Some(l)) => db::Reference::Label(label_name(&l)?),
        (None, None) => db::Reference::Latest,
    };
    let mut conn = state.conn().await?;
    let v = db::resolve(&mut conn, session.org_id, id, &reference)
        .await?
        .ok_or(ApiError::NotFound("prompt template version"))?;
    let out = version_out(v);
    let c = Content { messages: out.messages, variables: out.variables };
    let messages = c.render(&b.variables).map_err(|e| ApiError::field(&e.field, e.message))?;
    Ok(HttpResponse::Ok().json(RenderedTemplate { template_id: id, version: out.version, messages }))
}

/// Records the template's invalidation, last in a change's transaction.
async fn record_template(
    conn: &mut diesel_async::AsyncPgConnection,
    org_id: Uuid,
    template_id: Uuid,
) -> ApiResult<Vec<(i64, Invalidation)>> {
    Ok(invalidations::record_all(conn, [Invalidation::Template { org_id, template_id }]).await?)
}
