//! Experiments, their lifecycle and their results' raw figures (per variant: count, mean and
//! variance of the metric, read from the audit log), and feedback scores. Every query takes the
//! organization's id.

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Double, Integer, Jsonb, Nullable, Text, Timestamptz, Uuid as SqlUuid};
use diesel::{OptionalExtension, QueryableByName};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::experiments::spec::{LiveExperiment, Metric, Running, Traffic, Variant};

#[derive(Debug, Clone, QueryableByName)]
pub struct Experiment {
    #[diesel(sql_type = SqlUuid)]
    pub id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    pub org_id: Uuid,
    #[diesel(sql_type = Text)]
    pub name: String,
    #[diesel(sql_type = Text)]
    pub description: String,
    #[diesel(sql_type = Text)]
    pub metric: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub match_model: Option<String>,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    pub match_template_id: Option<Uuid>,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    pub match_team_id: Option<Uuid>,
    #[diesel(sql_type = Jsonb)]
    pub variants: Value,
    #[diesel(sql_type = Integer)]
    pub max_samples_per_variant: i32,
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub completion_reason: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub winner: Option<String>,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    pub created_by: Option<Uuid>,
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    pub updated_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub started_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub ended_at: Option<DateTime<Utc>>,
}

impl Experiment {
    pub fn traffic(&self) -> Traffic {
        Traffic { model: self.match_model.clone(), template_id: self.match_template_id, team_id: self.match_team_id }
    }

    pub fn variant_list(&self) -> Result<Vec<Variant>> {
        serde_json::from_value(self.variants.clone())
            .map_err(|e| Error::Invalid(format!("stored experiment variants: {e}")))
    }

    pub fn metric(&self) -> Metric {
        Metric::parse(&self.metric).unwrap_or(Metric::Latency)
    }
}

const COLUMNS: &str = "id, org_id, name, description, metric, match_model, match_template_id, match_team_id, variants, \
    max_samples_per_variant, status, completion_reason, winner, created_by, created_at, updated_at, started_at, ended_at";

pub struct NewExperiment<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub description: &'a str,
    pub metric: Metric,
    pub traffic: &'a Traffic,
    pub variants: &'a [Variant],
    pub max_samples_per_variant: i32,
    pub created_by: Option<Uuid>,
}

pub async fn create(conn: &mut AsyncPgConnection, org_id: Uuid, e: &NewExperiment<'_>) -> Result<Experiment> {
    let variants = serde_json::to_value(e.variants).map_err(|err| Error::Invalid(err.to_string()))?;
    Ok(diesel::sql_query(format!(
        "INSERT INTO experiments (id, org_id, name, description, metric, match_model, match_template_id, match_team_id, \
           variants, max_samples_per_variant, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
         RETURNING {COLUMNS}"
    ))
    .bind::<SqlUuid, _>(e.id)
    .bind::<SqlUuid, _>(org_id)
    .bind::<Text, _>(e.name)
    .bind::<Text, _>(e.description)
    .bind::<Text, _>(e.metric.label())
    .bind::<Nullable<Text>, _>(e.traffic.model.as_deref())
    .bind::<Nullable<SqlUuid>, _>(e.traffic.template_id)
    .bind::<Nullable<SqlUuid>, _>(e.traffic.team_id)
    .bind::<Jsonb, _>(&variants)
    .bind::<Integer, _>(e.max_samples_per_variant)
    .bind::<Nullable<SqlUuid>, _>(e.created_by)
    .get_result(conn)
    .await?)
}

/// Experiments, newest first, after `cursor`; `status` filters.
pub async fn list(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    status: Option<&str>,
    cursor: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Experiment>> {
    Ok(diesel::sql_query(format!(
        "SELECT {COLUMNS} FROM experiments WHERE org_id = $1 AND ($2::text IS NULL OR status = $2) \
         AND ($3::uuid IS NULL OR id < $3) ORDER BY id DESC LIMIT $4"
    ))
    .bind::<SqlUuid, _>(org_id)
    .bind::<Nullable<Text>, _>(status)
    .bind::<Nullable<SqlUuid>, _>(cursor)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?)
}

/// Experiments not completed (what the per-organization cap counts).
pub async fn count_open(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<i64> {
    super::count_of_org(
        conn,
        "SELECT count(*) AS n FROM experiments WHERE org_id = $1 AND status <> 'completed'",
        org_id,
    )
    .await
}

pub async fn find(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<Experiment>> {
    Ok(diesel::sql_query(format!("SELECT {COLUMNS} FROM experiments WHERE org_id = $1 AND id = $2"))
        .bind::<SqlUuid, _>(org_id)
        .bind::<SqlUuid, _>(id)
        .get_result(conn)
        .await
        .optional()?)
}

/// The experiment, locked for a transition (the caller's transaction).
pub async fn lock(conn: &mut AsyncPgConnection, org_id: Uuid, id: Uuid) -> Result<Option<Experiment>> {
    Ok(diesel::sql_query(format!("SELECT {COLUMNS} FROM experiments WHERE org_id = $1 AND id = $2 FOR UPDATE"))
        .bind::<SqlUuid, _>(org_id)
        .bind::<SqlUuid, _>(id)
        .get_result(conn)
        .await
        .optional()?)
}

/// Moves a locked experiment to `status`; `started_at` is set on its first start, `ended_at` on
/// completion.
pub async fn set_status(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    id: Uuid,
    status: &str,
    completion: Option<(&str, Option<&str>)>,
) -> Result<Experiment> {
    let (reason, winner) = completion.map_or((None, None), |(r, w)| (Some(r), w));
    Ok(diesel::sql_query(format!(
        "UPDATE experiments SET status = $3, updated_at = now(), \
           started_at = CASE WHEN $3 = 'running' THEN coalesce(started_at, now()) ELSE started_at END, \
           ended_at = CASE WHEN $3 = 'completed' THEN now() ELSE ended_at END, \
           completion_reason = $4, winner = $5 \
         WHERE org_id = $1 AND id = $2 RETURNING {COLUMNS}"
    ))
    .bind::<SqlUuid, _>(org_id)
    .bind::<SqlUuid, _>(id)
    .bind::<Text, _>(status)
    .bind::<Nullable<Text>, _>(reason)
    .bind::<Nullable<Text>, _>(winner)
    .get_result(conn)
    .await?)
}

/// Another running experiment of the organization over exactly the same traffic, if any.
pub async fn running_over(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    except: Uuid,
    t: &Traffic,
) -> Result<Option<Uuid>> {
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = SqlUuid)]
        id: Uuid,
    }
    let row: Option<Id> = diesel::sql_query(
        "SELECT id FROM experiments WHERE org_id = $1 AND id <> $2 AND status = 'running' \
         AND match_model IS NOT DISTINCT FROM $3 AND match_template_id IS NOT DISTINCT FROM $4 \
         AND match_team_id IS NOT DISTINCT FROM $5 LIMIT 1",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<SqlUuid, _>(except)
    .bind::<Nullable<Text>, _>(t.model.as_deref())
    .bind::<Nullable<SqlUuid>, _>(t.template_id)
    .bind::<Nullable<SqlUuid>, _>(t.team_id)
    .get_result(conn)
    .await
    .optional()?;
    Ok(row.map(|r| r.id))
}

/// The organization's running experiments, oldest started first: what the proxy assigns by.
pub async fn running(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<Running> {
    let rows: Vec<Experiment> = diesel::sql_query(format!(
        "SELECT {COLUMNS} FROM experiments WHERE org_id = $1 AND status = 'running' ORDER BY started_at, id LIMIT 100"
    ))
    .bind::<SqlUuid, _>(org_id)
    .load(conn)
    .await?;
    let mut experiments = Vec::with_capacity(rows.len());
    for e in rows {
        experiments.push(LiveExperiment { id: e.id, traffic: e.traffic(), variants: e.variant_list()? });
    }
    Ok(Running { experiments })
}

/// Running experiments' organizations and ids after `after` (by id), for the leader's completion
/// check, which pages through them all.
pub async fn all_running(conn: &mut AsyncPgConnection, after: Option<Uuid>, limit: i64) -> Result<Vec<(Uuid, Uuid)>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = SqlUuid)]
        org_id: Uuid,
        #[diesel(sql_type = SqlUuid)]
        id: Uuid,
    }
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT org_id, id FROM experiments WHERE status = 'running' AND ($1::uuid IS NULL OR id > $1) \
         ORDER BY id LIMIT $2",
    )
    .bind::<Nullable<SqlUuid>, _>(after)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.org_id, r.id)).collect())
}

/// One variant's figures: how many requests counted, the metric's mean and sample variance.
#[derive(Debug, Clone, QueryableByName)]
pub struct VariantFigures {
    #[diesel(sql_type = Text)]
    pub variant: String,
    #[diesel(sql_type = BigInt)]
    pub n: i64,
    #[diesel(sql_type = Double)]
    pub mean: f64,
    #[diesel(sql_type = Double)]
    pub variance: f64,
}

/// Per variant, the metric over the experiment's requests in the audit log (`docs/experiments.md`
/// says which requests count for each metric).
pub async fn figures(conn: &mut AsyncPgConnection, org_id: Uuid, e: &Experiment) -> Result<Vec<VariantFigures>> {
    // Answered by a model, not the response cache: what the variant itself did.
    const ANSWERED: &str = "audit_logs a WHERE a.status_code < 400 AND a.cache_status NOT IN ('L1', 'L2', 'L3') AND";
    let (value, from) = match e.metric() {
        Metric::Latency => ("a.latency_ms::float8", ANSWERED),
        Metric::Cost => ("a.cost_usd::float8", ANSWERED),
        Metric::ErrorRate => (
            "CASE WHEN a.status_code >= 500 OR a.error_type IN (\
               'upstream_rate_limited', 'upstream_stream_broken', 'model_not_found', 'wrong_endpoint', \
               'unsupported_parameter', 'model_not_in_region', 'prompt_not_found') \
             THEN 1.0 ELSE 0.0 END",
            "audit_logs a WHERE",
        ),
        Metric::Feedback => {
            ("f.score", "audit_logs a JOIN request_feedback f ON f.org_id = a.org_id AND f.request_id = a.id WHERE")
        }
    };
    // Rows are only ever written after the experiment was created: the bound prunes partitions.
    Ok(diesel::sql_query(format!(
        "SELECT a.experiment_variant AS variant, count(*)::int8 AS n, coalesce(avg({value}), 0)::float8 AS mean, \
           coalesce(var_samp({value}), 0)::float8 AS variance \
         FROM {from} a.org_id = $1 AND a.experiment_id = $2 AND a.created_at >= $3 - interval '1 hour' \
         AND a.experiment_variant IS NOT NULL GROUP BY a.experiment_variant"
    ))
    .bind::<SqlUuid, _>(org_id)
    .bind::<SqlUuid, _>(e.id)
    .bind::<Timestamptz, _>(e.created_at)
    .load(conn)
    .await?)
}

/// Serializes starting experiments of one organization (the caller's transaction), so two
/// experiments over the same traffic cannot both start.
pub async fn lock_starts(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<()> {
    let b = org_id.as_bytes();
    let key = i64::from_be_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]) ^ 0x0067_7765_7870_7374;
    diesel::sql_query("SELECT pg_advisory_xact_lock($1)").bind::<BigInt, _>(key).execute(conn).await?;
    Ok(())
}

/// Deletes feedback recorded before `cutoff` (audit retention), up to `limit` rows.
pub async fn prune_feedback(conn: &mut AsyncPgConnection, cutoff: DateTime<Utc>, limit: i64) -> Result<usize> {
    Ok(diesel::sql_query(
        "DELETE FROM request_feedback WHERE ctid IN \
           (SELECT ctid FROM request_feedback WHERE created_at < $1 LIMIT $2)",
    )
    .bind::<Timestamptz, _>(cutoff)
    .bind::<BigInt, _>(limit)
    .execute(conn)
    .await?)
}

/// Records (or replaces) a request's feedback score.
pub async fn put_feedback(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    request_id: Uuid,
    score: f64,
    comment: &str,
    by: Option<Uuid>,
) -> Result<()> {
    diesel::sql_query(
        "INSERT INTO request_feedback (org_id, request_id, score, comment, created_by) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (org_id, request_id) DO UPDATE SET score = EXCLUDED.score, comment = EXCLUDED.comment, \
           created_by = EXCLUDED.created_by, created_at = now()",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<SqlUuid, _>(request_id)
    .bind::<Double, _>(score)
    .bind::<Text, _>(comment)
    .bind::<Nullable<SqlUuid>, _>(by)
    .execute(conn)
    .await?;
    Ok(())
}
