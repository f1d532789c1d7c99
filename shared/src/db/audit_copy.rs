//! Writing audit batches with binary `COPY`: far cheaper per row than a bound multi-row
//! `INSERT` (diesel's bind encoding cost about 39k instructions a row), on plain tokio-postgres
//! connections (diesel-async has no `COPY`).
//!
//! `COPY` cannot skip rows that already exist, so a batch whose earlier attempt may have
//! committed (the connection died mid-write) goes through a staging table and
//! `INSERT ... ON CONFLICT (id) DO NOTHING` instead: retries never duplicate a row.

use chrono::{DateTime, Utc};
use futures::pin_mut;
use tokio::sync::Mutex;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls};
use uuid::Uuid;

use crate::audit::AuditRecord;

const COLUMNS: &str = "id, org_id, team_id, api_key_id, endpoint, model, provider, upstream_model, status_code, \
    error_type, stream, prompt_tokens, completion_tokens, total_tokens, cost_usd, latency_ms, upstream_latency_ms, \
    ttft_ms, cache_status, policy_action, attempts, created_at, cached_tokens, reasoning_tokens, routing, policy, cache_creation_tokens, \
    cache_saved_usd, cache_similarity";

const TYPES: [Type; 29] = [
    Type::UUID,
    Type::UUID,
    Type::UUID,
    Type::UUID,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT4,
    Type::TEXT,
    Type::BOOL,
    Type::INT4,
    Type::INT4,
    Type::INT4,
    Type::NUMERIC,
    Type::INT4,
    Type::INT4,
    Type::INT4,
    Type::TEXT,
    Type::TEXT,
    Type::INT4,
    Type::TIMESTAMPTZ,
    Type::INT4,
    Type::INT4,
    Type::JSONB,
    Type::JSONB,
    Type::INT4,
    Type::NUMERIC,
    Type::FLOAT4,
];

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// Postgres refused the data itself (encoding, constraint): retrying it is futile.
    #[error("audit rows refused: {0}")]
    Data(String),
    /// Postgres refused the rows because some already exist.
    #[error("audit rows already present: {0}")]
    Duplicate(String),
    /// Could not reach Postgres, or the connection broke: whether the batch committed is unknown.
    #[error("audit store unavailable: {0}")]
    Unavailable(String),
}

fn classify(e: tokio_postgres::Error) -> CopyError {
    match e.as_db_error() {
        Some(db) if db.code() == &tokio_postgres::error::SqlState::UNIQUE_VIOLATION => {
            CopyError::Duplicate(db.message().to_string())
        }
        // Class 22 (data exception) and 23 (integrity constraint): the rows are at fault.
        Some(db) if db.code().code().starts_with("22") || db.code().code().starts_with("23") => {
            CopyError::Data(db.message().to_string())
        }
        _ => CopyError::Unavailable(e.to_string()),
    }
}

/// A few connections reused across batches, opened on demand.
pub struct AuditCopier {
    url: String,
    idle: Mutex<Vec<Client>>,
}

impl AuditCopier {
    pub fn new(url: &str) -> Self {
        Self { url: url.to_string(), idle: Mutex::new(Vec::new()) }
    }

    async fn client(&self) -> Result<Client, CopyError> {
        while let Some(c) = self.idle.lock().await.pop() {
            if !c.is_closed() {
                return Ok(c);
            }
        }
        let (client, conn) = tokio_postgres::connect(&self.url, NoTls).await.map_err(classify)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                log::debug!("audit connection ended: {e}");
            }
        });
        Ok(client)
    }

    async fn give_back(&self, client: Client) {
        if !client.is_closed() {
            self.idle.lock().await.push(client);
        }
    }

    /// Writes a batch. `maybe_written`: an earlier attempt of this batch may have committed, so
    /// rows already present must be skipped rather than refused.
    pub async fn write(&self, rows: &[AuditRecord], maybe_written: bool) -> Result<(), CopyError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut client = self.client().await?;
        let result = if maybe_written { copy_idempotent(&mut client, rows).await } else { copy(&client, rows).await };
        self.give_back(client).await;
        result
    }

    /// Moves `last_used_at` of these keys forward (informational; never on the request path).
    pub async fn touch_keys(&self, uses: &[(Uuid, DateTime<Utc>)]) -> Result<(), CopyError> {
        if uses.is_empty() {
            return Ok(());
        }
        let (ids, times): (Vec<Uuid>, Vec<DateTime<Utc>>) = uses.iter().copied().unzip();
        let client = self.client().await?;
        let result = client
            .execute(
                "UPDATE api_keys k SET last_used_at = v.ts \
                 FROM (SELECT id, max(ts) AS ts FROM unnest($1::uuid[], $2::timestamptz[]) AS u(id, ts) GROUP BY id) v \
                 WHERE k.id = v.id AND (k.last_used_at IS NULL OR k.last_used_at < v.ts)",
                &[&ids, &times],
            )
            .await
            .map(|_| ())
            .map_err(classify);
        self.give_back(client).await;
        result
    }
}

fn copy_statement(table: &str) -> String {
    format!("COPY {table} ({COLUMNS}) FROM STDIN BINARY")
}

async fn copy(client: &Client, rows: &[AuditRecord]) -> Result<(), CopyError> {
    let sink = client.copy_in(&copy_statement("audit_logs")).await.map_err(classify)?;
    write_rows(sink, rows).await
}

async fn copy_idempotent(client: &mut Client, rows: &[AuditRecord]) -> Result<(), CopyError> {
    let tx = client.transaction().await.map_err(classify)?;
    tx.batch_execute(
        "CREATE TEMP TABLE IF NOT EXISTS audit_stage (LIKE audit_logs INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
    )
    .await
    .map_err(classify)?;
    let sink = tx.copy_in(&copy_statement("audit_stage")).await.map_err(classify)?;
    write_rows(sink, rows).await?;
    tx.batch_execute(&format!(
        "INSERT INTO audit_logs ({COLUMNS}) SELECT {COLUMNS} FROM audit_stage ON CONFLICT (id) DO NOTHING"
    ))
    .await
    .map_err(classify)?;
    tx.commit().await.map_err(classify)
}

async fn write_rows(sink: tokio_postgres::CopyInSink<bytes::Bytes>, rows: &[AuditRecord]) -> Result<(), CopyError> {
    let writer = BinaryCopyInWriter::new(sink, &TYPES);
    pin_mut!(writer);
    for r in rows {
        let row: [&(dyn ToSql + Sync); 29] = [
            &r.id,
            &r.org_id,
            &r.team_id,
            &r.api_key_id,
            &r.endpoint,
            &r.model,
            &r.provider,
            &r.upstream_model,
            &r.status_code,
            &r.error_type,
            &r.stream,
            &r.prompt_tokens,
            &r.completion_tokens,
            &r.total_tokens,
            &r.cost_usd,
            &r.latency_ms,
            &r.upstream_latency_ms,
            &r.ttft_ms,
            &r.cache_status,
            &r.policy_action,
            &r.attempts,
            &r.created_at,
            &r.cached_tokens,
            &r.reasoning_tokens,
            &r.routing,
            &r.policy,
            &r.cache_creation_tokens,
            &r.cache_saved_usd,
            &r.cache_similarity,
        ];
        writer.as_mut().write(&row).await.map_err(classify)?;
    }
    writer.finish().await.map_err(classify)?;
    Ok(())
}
