//! Prompt templates, their immutable versions and their labels. Every query takes the
//! organization's id. A new version takes its number from the template's counter in the same
//! statement that bumps it (the row lock orders concurrent edits), so none is lost or reused.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use diesel::sql_types::{Integer, Jsonb, Nullable, Text, Timestamptz, Uuid as SqlUuid};
use diesel::{OptionalExtension, QueryableByName};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;
use uuid::Uuid;

use crate::error::Result;

#[derive(Debug, Clone, QueryableByName)]
pub struct Template {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = Text)]
    pub name: String,
    #[diesel(sql_type = Text)]
    pub description: String,
    #[diesel(sql_type = Integer)]
    pub latest_version: i32,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    pub created_by: Option<Uuid>,
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    pub updated_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub deleted_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, QueryableByName)]
pub struct Version {
    #[diesel(sql_type = SqlUuid)]
    pub template_id: Uuid,
    #[diesel(sql_type = Integer)]
    pub version: i32,
    #[diesel(sql_type = Jsonb)]
    pub messages: Value,
    #[diesel(sql_type = Jsonb)]
    pub variables: Value,
    #[diesel(sql_type = Text)]
    pub message: String,
    #[diesel(sql_type = Text)]
    pub content_hash: String,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    pub author_id: Option<Uuid>,
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
}

const TEMPLATE: &str = "id, name, description, latest_version, created_by, created_at, updated_at, deleted_at";
const VERSION: &str = "template_id, version, messages, variables, message, content_hash, author_id, created_at";

/// A version's content and provenance, to save.
pub struct NewVersion<'a> {
    pub messages: &'a Value,
    pub variables: &'a Value,
    pub message: &'a str,
    pub content_hash: &'a str,
    pub author_id: Option<Uuid>,
}

/// Creates a template with its first version; `None` when a live template has the name.
pub async fn create(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    name: &str,
    description: &str,
    first: &NewVersion<'_>,
) -> Result<Option<(Template, Version)>> {
    let t: Option<Template> = diesel::sql_query(format!(
        "INSERT INTO prompt_templates (id, org_id, name, description, latest_version, created_by) \
         VALUES ($1, $2, $3, $4, 1, $5) ON CONFLICT (org_id, name) WHERE deleted_at IS NULL DO NOTHING \
         RETURNING {TEMPLATE}"
    ))
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .bind::<Text, _>(name)
    .bind::<Text, _>(description)
    .bind::<Nullable<SqlUuid>, _>(first.author_id)
    .get_result(conn)
    .await
    .optional()?;
    let Some(t) = t else { return Ok(None) };
    let v = insert_version(conn, org_id, id, 1, first).await?;
    Ok(Some((t, v)))
}

async fn insert_version(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    version: i32,
    v: &NewVersion<'_>,
) -> Result<Version> {
    Ok(diesel::sql_query(format!(
        "INSERT INTO prompt_template_versions (template_id, org_id, version, messages, variables, message, \
           content_hash, author_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {VERSION}"
    ))
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .bind::<Integer, _>(version)
    .bind::<Jsonb, _>(v.messages)
    .bind::<Jsonb, _>(v.variables)
    .bind::<Text, _>(v.message)
    .bind::<Text, _>(v.content_hash)
    .bind::<Nullable<SqlUuid>, _>(v.author_id)
    .get_result(conn)
    .await?)
}

#[derive(QueryableByName)]
struct Number {
    #[diesel(sql_type = Integer)]
    latest_version: i32,
}

/// A new version of a live template (the caller's transaction); `None` when there is none.
pub async fn add_version(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    v: &NewVersion<'_>,
) -> Result<Option<Version>> {
    let n: Option<Number> = diesel::sql_query(
        "UPDATE prompt_templates SET latest_version = latest_version + 1, updated_at = now() \
         WHERE id = $1 AND org_id = $2 AND deleted_at IS NULL RETURNING latest_version",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .get_result(conn)
    .await
    .optional()?;
    match n {
        Some(n) => Ok(Some(insert_version(conn, org_id, id, n.latest_version, v).await?)),
        None => Ok(None),
    }
}

/// Live templates, newest first, after `cursor`.
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    cursor: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Template>> {
    Ok(diesel::sql_query(format!(
        "SELECT {TEMPLATE} FROM prompt_templates WHERE org_id = $1 AND deleted_at IS NULL \
         AND ($2::uuid IS NULL OR id < $2) ORDER BY id DESC LIMIT $3"
    ))
    .bind::<SqlUuid, _>(org_id)
    .bind::<Nullable<SqlUuid>, _>(cursor)
    .bind::<diesel::sql_types::BigInt, _>(limit)
    .load(conn)
    .await?)
}

/// How many live templates the organization has.
pub async fn count_live(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<i64> {
    super::count_of_org(
        conn,
        "SELECT count(*) AS n FROM prompt_templates WHERE org_id = $1 AND deleted_at IS NULL",
        org_id,
    )
    .await
}

/// A template, deleted ones too when `deleted` (their versions stay readable).
pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid, deleted: bool) -> Result<Option<Template>> {
    Ok(diesel::sql_query(format!(
        "SELECT {TEMPLATE} FROM prompt_templates WHERE id = $1 AND org_id = $2 AND ($3 OR deleted_at IS NULL)"
    ))
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .bind::<diesel::sql_types::Bool, _>(deleted)
    .get_result(conn)
    .await
    .optional()?)
}

/// Versions, newest first, below `before`.
pub async fn versions(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    before: Option<i32>,
    limit: i64,
) -> Result<Vec<Version>> {
    Ok(diesel::sql_query(format!(
        "SELECT {VERSION} FROM prompt_template_versions WHERE template_id = $1 AND org_id = $2 \
         AND ($3::int IS NULL OR version < $3) ORDER BY version DESC LIMIT $4"
    ))
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .bind::<Nullable<Integer>, _>(before)
    .bind::<diesel::sql_types::BigInt, _>(limit)
    .load(conn)
    .await?)
}

pub async fn version(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid, version: i32) -> Result<Option<Version>> {
    Ok(diesel::sql_query(format!(
        "SELECT {VERSION} FROM prompt_template_versions WHERE template_id = $1 AND org_id = $2 AND version = $3"
    ))
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .bind::<Integer, _>(version)
    .get_result(conn)
    .await
    .optional()?)
}

#[derive(QueryableByName)]
struct Label {
    #[diesel(sql_type = SqlUuid)]
    template_id: Uuid,
    #[diesel(sql_type = Text)]
    label: String,
    #[diesel(sql_type = Integer)]
    version: i32,
}

/// The template's labels and the versions they point at.
pub async fn labels(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<BTreeMap<String, i32>> {
    Ok(labels_of(conn, org_id, &[id]).await?.remove(&id).unwrap_or_default())
}

/// The labels of each of `ids` (templates without labels are absent), in one query.
pub async fn labels_of(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    ids: &[Uuid],
) -> Result<BTreeMap<Uuid, BTreeMap<String, i32>>> {
    let rows: Vec<Label> = diesel::sql_query(
        "SELECT l.template_id, l.label, l.version FROM prompt_template_labels l \
         JOIN prompt_templates t ON t.id = l.template_id WHERE l.template_id = ANY($1) AND t.org_id = $2",
    )
    .bind::<diesel::sql_types::Array<SqlUuid>, _>(ids)
    .bind::<SqlUuid, _>(org_id)
    .load(conn)
    .await?;
    let mut out: BTreeMap<Uuid, BTreeMap<String, i32>> = BTreeMap::new();
    for l in rows {
        out.entry(l.template_id).or_default().insert(l.label, l.version);
    }
    Ok(out)
}

/// Points `label` at `version` (an existing version of a live template of the organization);
/// false when there is no such template or version.
pub async fn set_label(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    label: &str,
    version: i32,
    by: Option<Uuid>,
) -> Result<bool> {
    let n = diesel::sql_query(
        "INSERT INTO prompt_template_labels (template_id, label, version, updated_by) \
         SELECT v.template_id, $3, v.version, $5 FROM prompt_template_versions v \
           JOIN prompt_templates t ON t.id = v.template_id \
         WHERE v.template_id = $1 AND t.org_id = $2 AND t.deleted_at IS NULL AND v.version = $4 \
         ON CONFLICT (template_id, label) DO UPDATE SET version = excluded.version, \
           updated_by = excluded.updated_by, updated_at = now()",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .bind::<Text, _>(label)
    .bind::<Integer, _>(version)
    .bind::<Nullable<SqlUuid>, _>(by)
    .execute(conn)
    .await?;
    Ok(n == 1)
}

pub async fn delete_label(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid, label: &str) -> Result<bool> {
    let n = diesel::sql_query(
        "DELETE FROM prompt_template_labels l USING prompt_templates t \
         WHERE l.template_id = $1 AND t.id = l.template_id AND t.org_id = $2 AND l.label = $3",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .bind::<Text, _>(label)
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Soft-deletes a live template (its versions stay); false when there is none.
pub async fn soft_delete(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<bool> {
    let n = diesel::sql_query(
        "UPDATE prompt_templates SET deleted_at = now(), updated_at = now() \
         WHERE id = $1 AND org_id = $2 AND deleted_at IS NULL",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<SqlUuid, _>(org_id)
    .execute(conn)
    .await?;
    Ok(n == 1)
}

pub use crate::prompt_template::VersionRef as Reference;

/// What the proxy keeps of a live template to resolve references: its latest version and labels.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Head {
    pub latest_version: i32,
    pub labels: BTreeMap<String, i32>,
}

impl Head {
    /// The version number a reference names; `None` for an unknown label or number.
    pub fn number(&self, r: &Reference) -> Option<i32> {
        match r {
            Reference::Number(n) => Some(*n).filter(|n| (1..=self.latest_version).contains(n)),
            Reference::Latest => Some(self.latest_version),
            Reference::Label(l) => self.labels.get(l).copied(),
        }
    }
}

/// A live template's head; `None` when there is none (or it was deleted).
pub async fn head(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<Head>> {
    let Some(t) = find(conn, org_id, id, false).await? else { return Ok(None) };
    Ok(Some(Head { latest_version: t.latest_version, labels: labels(conn, org_id, id).await? }))
}

/// A version's content as rendering reads it; `None` when there is none.
pub async fn content(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    version_no: i32,
) -> Result<Option<crate::prompt_template::Content>> {
    let Some(v) = version(conn, org_id, id, version_no).await? else { return Ok(None) };
    let messages = serde_json::from_value(v.messages)
        .map_err(|e| crate::error::Error::Invalid(format!("stored template version: {e}")))?;
    let variables = serde_json::from_value(v.variables)
        .map_err(|e| crate::error::Error::Invalid(format!("stored template version: {e}")))?;
    Ok(Some(crate::prompt_template::Content { messages, variables }))
}

/// The version a reference names, of a live template of the organization.
pub async fn resolve(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid, r: &Reference) -> Result<Option<Version>> {
    let Some(t) = find(conn, org_id, id, false).await? else { return Ok(None) };
    let n = match r {
        Reference::Number(n) => *n,
        Reference::Latest => t.latest_version,
        Reference::Label(l) => match labels(conn, org_id, id).await?.get(l) {
            Some(n) => *n,
            None => return Ok(None),
        },
    };
    version(conn, org_id, id, n).await
}
