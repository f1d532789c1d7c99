//! The cache's rows: settings (`cache_settings`) and the semantic tier's entries
//! (`semantic_cache`, pgvector). Every query is scoped to one organization.

use std::collections::HashMap;
use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bytea, Double, Float4, Integer, Jsonb, Nullable, Text, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use pgvector::Vector;
use serde_json::Value;
use uuid::Uuid;

use super::schema::cache_settings;
use crate::cache::settings::{CacheSettings, OrgCacheSettings, TeamCacheSettings};
use crate::error::{Error, Result};

/// The organization's settings and every team's departures from them.
pub async fn load(conn: &mut AsyncPgConnection, org_id: Uuid) -> Result<OrgCacheSettings> {
    let rows: Vec<(Option<Uuid>, Value)> = cache_settings::table
        .filter(cache_settings::org_id.eq(org_id))
        .select((cache_settings::team_id, cache_settings::settings))
        .load(conn)
        .await?;
    let mut out = OrgCacheSettings::default();
    let mut teams = HashMap::new();
    for (team, doc) in rows {
        let bad = |e: serde_json::Error| Error::Invalid(format!("stored cache settings: {e}"));
        match team {
            None => out.org = serde_json::from_value(doc).map_err(bad)?,
            Some(t) => {
                teams.insert(t, serde_json::from_value(doc).map_err(bad)?);
            }
        }
    }
    out.teams = teams;
    #[derive(QueryableByName)]
    struct Gen {
        #[diesel(sql_type = Text)]
        model_tag: String,
        #[diesel(sql_type = BigInt)]
        generation: i64,
    }
    let gens: Vec<Gen> = diesel::sql_query("SELECT model_tag, generation FROM cache_generations WHERE org_id = $1")
        .bind::<SqlUuid, _>(org_id)
        .load(conn)
        .await?;
    for g in gens {
        if g.model_tag.is_empty() {
            out.generations.all = g.generation;
        } else {
            out.generations.models.insert(g.model_tag, g.generation);
        }
    }
    Ok(out)
}

/// Starts a new purge generation for the organization's entries (one model's, by its tag, or
/// all): every L2 entry kept under an older one is unreachable from then on. The new number.
pub async fn bump_generation(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    model: Option<&crate::cache::key::ModelTag>,
) -> Result<i64> {
    #[derive(QueryableByName)]
    struct Gen {
        #[diesel(sql_type = BigInt)]
        generation: i64,
    }
    let g: Gen = diesel::sql_query(
        "INSERT INTO cache_generations (org_id, model_tag, generation) VALUES ($1, $2, 1) \
         ON CONFLICT (org_id, model_tag) DO UPDATE \
         SET generation = cache_generations.generation + 1, purged_at = now() RETURNING generation",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<Text, _>(model.map(hex::encode).unwrap_or_default())
    .get_result(conn)
    .await?;
    Ok(g.generation)
}

pub async fn put_org(conn: &mut AsyncPgConnection, org_id: Uuid, s: &CacheSettings) -> Result<()> {
    upsert(conn, org_id, None, serde_json::to_value(s).map_err(|e| Error::Invalid(e.to_string()))?).await
}

pub async fn put_team(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid, s: &TeamCacheSettings) -> Result<()> {
    upsert(conn, org_id, Some(team_id), serde_json::to_value(s).map_err(|e| Error::Invalid(e.to_string()))?).await
}

async fn upsert(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Option<Uuid>, doc: Value) -> Result<()> {
    diesel::sql_query(
        "INSERT INTO cache_settings (org_id, team_id, settings) VALUES ($1, $2, $3) \
         ON CONFLICT (org_id, team_id) DO UPDATE SET settings = EXCLUDED.settings, updated_at = now()",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<Nullable<SqlUuid>, _>(team_id)
    .bind::<Jsonb, _>(doc)
    .execute(conn)
    .await?;
    Ok(())
}

/// Drops a team's departures (it inherits everything again); whether it had any.
pub async fn delete_team(conn: &mut AsyncPgConnection, org_id: Uuid, team_id: Uuid) -> Result<bool> {
    let n = diesel::delete(
        cache_settings::table.filter(cache_settings::org_id.eq(org_id)).filter(cache_settings::team_id.eq(team_id)),
    )
    .execute(conn)
    .await?;
    Ok(n > 0)
}

/// A new semantic entry.
pub struct NewSemantic<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub model: &'a str,
    pub scope: &'a [u8; 32],
    pub embedding: Vec<f32>,
    pub prompt: &'a str,
    pub answer: &'a [u8],
    pub ttl: Duration,
}

pub async fn insert_semantic(conn: &mut AsyncPgConnection, row: NewSemantic<'_>) -> Result<()> {
    let dims = i32::try_from(row.embedding.len()).map_err(|_| Error::Invalid("embedding too long".into()))?;
    let ttl_secs = row.ttl.as_secs();
    diesel::sql_query(
        "INSERT INTO semantic_cache (id, org_id, model, scope, dims, embedding, prompt, answer, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9))",
    )
    .bind::<SqlUuid, _>(row.id)
    .bind::<SqlUuid, _>(row.org_id)
    .bind::<Text, _>(row.model)
    .bind::<Bytea, _>(&row.scope[..])
    .bind::<Integer, _>(dims)
    .bind::<pgvector::sql_types::Vector, _>(Vector::from(row.embedding))
    .bind::<Text, _>(row.prompt)
    .bind::<Bytea, _>(row.answer)
    .bind::<Double, _>(ttl_secs as f64)
    .execute(conn)
    .await?;
    Ok(())
}

/// A live entry near a prompt.
#[derive(Debug, QueryableByName)]
pub struct Neighbour {
    #[diesel(sql_type = Float4)]
    pub similarity: f32,
    #[diesel(sql_type = Text)]
    pub prompt: String,
    #[diesel(sql_type = Bytea)]
    pub answer: Vec<u8>,
    /// Seconds the entry has left.
    #[diesel(sql_type = Double)]
    pub ttl_secs: f64,
}

/// The query [`nearest`] runs (binds: org, scope, dims, embedding, limit, threshold).
pub fn nearest_sql(dims: usize) -> String {
    // The cast to the local model's dimension lets the planner use its HNSW index; the scope
    // index serves every other dimension.
    let distance = if dims == crate::cache::embed::DIMENSIONS {
        "embedding::vector(384) <=> $4::vector(384)"
    } else {
        "embedding <=> $4"
    };
    format!(
        "SELECT * FROM (SELECT (1 - ({distance}))::real AS similarity, prompt, answer, \
         extract(epoch FROM expires_at - now())::float8 AS ttl_secs FROM semantic_cache \
         WHERE org_id = $1 AND scope = $2 AND dims = $3 AND expires_at > now() \
         ORDER BY {distance} LIMIT $5) near WHERE similarity >= $6"
    )
}

/// Up to `limit` live entries of `scope` nearest to `embedding` with a cosine similarity of at
/// least `threshold`, nearest first.
///
/// One HNSW index serves every organization and scope. When the planner takes it (a scope it
/// judges common), the index yields the `hnsw.ef_search` nearest entries of all scopes and the
/// scope filter runs after: the same prompt cached for many models or parameter sets fills those
/// with other scopes' entries, and a scope's own match is missed. The lookup therefore runs with
/// pgvector's iterative scan (`strict_order`: the index is scanned on until `limit` rows pass the
/// filter, in exact order, up to `hnsw.max_scan_tuples`), in a transaction of its own so the
/// settings are the lookup's alone (`SET LOCAL`, which a transaction pooler keeps too).
pub async fn nearest(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    scope: &[u8; 32],
    embedding: &[f32],
    threshold: f32,
    limit: i64,
) -> Result<Vec<Neighbour>> {
    use diesel_async::AsyncConnection;
    let dims = i32::try_from(embedding.len()).map_err(|_| Error::Invalid("embedding too long".into()))?;
    let sql = nearest_sql(embedding.len());
    let vector = Vector::from(embedding.to_vec());
    conn.transaction(async |conn| {
        diesel::sql_query("SELECT set_config('hnsw.iterative_scan', 'strict_order', true)").execute(conn).await?;
        Ok::<_, Error>(
            diesel::sql_query(sql)
                .bind::<SqlUuid, _>(org_id)
                .bind::<Bytea, _>(&scope[..])
                .bind::<Integer, _>(dims)
                .bind::<pgvector::sql_types::Vector, _>(vector)
                .bind::<BigInt, _>(limit)
                .bind::<Float4, _>(threshold)
                .load(conn)
                .await?,
        )
    })
    .await
}

/// Deletes an organization's semantic entries (all, or one model's); how many.
pub async fn purge(conn: &mut AsyncPgConnection, org_id: Uuid, model: Option<&str>) -> Result<usize> {
    Ok(diesel::sql_query("DELETE FROM semantic_cache WHERE org_id = $1 AND ($2::text IS NULL OR model = $2)")
        .bind::<SqlUuid, _>(org_id)
        .bind::<Nullable<Text>, _>(model)
        .execute(conn)
        .await?)
}

/// Deletes up to `limit` expired entries of every organization (a background job); how many.
pub async fn delete_expired(conn: &mut AsyncPgConnection, limit: i64) -> Result<usize> {
    Ok(diesel::sql_query(
        "DELETE FROM semantic_cache WHERE id IN \
         (SELECT id FROM semantic_cache WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)",
    )
    .bind::<BigInt, _>(limit)
    .execute(conn)
    .await?)
}

/// Requests over a period by cache result (`L1`, `L2`, `L3`, `miss`, `bypass`), with what the
/// hits saved.
#[derive(Debug, QueryableByName)]
pub struct TierCount {
    #[diesel(sql_type = Text)]
    pub cache_status: String,
    #[diesel(sql_type = BigInt)]
    pub requests: i64,
    #[diesel(sql_type = diesel::sql_types::Numeric)]
    pub saved_usd: rust_decimal::Decimal,
}

pub async fn tier_counts(
    conn: &mut AsyncPgConnection,
    org_id: Uuid,
    from: chrono::DateTime<chrono::Utc>,
    to: chrono::DateTime<chrono::Utc>,
    team_id: Option<Uuid>,
) -> Result<Vec<TierCount>> {
    use diesel::sql_types::Timestamptz;
    Ok(diesel::sql_query(
        "SELECT cache_status, count(*) AS requests, coalesce(sum(cache_saved_usd), 0) AS saved_usd \
         FROM audit_logs WHERE org_id = $1 AND created_at >= $2 AND created_at < $3 \
         AND ($4::uuid IS NULL OR team_id = $4) GROUP BY cache_status",
    )
    .bind::<SqlUuid, _>(org_id)
    .bind::<Timestamptz, _>(from)
    .bind::<Timestamptz, _>(to)
    .bind::<Nullable<SqlUuid>, _>(team_id)
    .load(conn)
    .await?)
}
