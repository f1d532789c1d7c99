//! Writing audit batches with binary `COPY`: far cheaper per row than a bound multi-row
//! `INSERT` (diesel's bind encoding cost about 39k instructions a row), on plain tokio-postgres
//! connections (diesel-async has no `COPY`).
//!
//! A batch is written in rounds, each one transaction: lock the chain heads of some of the
//! batch's organizations, skip their rows already present (only when an earlier attempt may have
//! committed: a retry or a spool replay), link the rest onto each organization's chain, `COPY`
//! them, move the heads. So a row lands exactly once and in exactly one place in its chain,
//! however often it is retried.
//!
//! Writers (a proxy's four, times the replicas) meet on the same organizations: every batch holds
//! rows of whoever sent requests. A round locks only heads no other writer holds (`SKIP LOCKED`),
//! at most its share of the batch's organizations (their number over the writers), so writers
//! work on different organizations at once instead of queueing behind one another's whole batch;
//! when every head it needs is held, it waits for one. One organization's rows are one chain and
//! are written one batch at a time, whatever the number of writers.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Datelike, Utc};
use futures::pin_mut;
use tokio::sync::Mutex;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Transaction};
use uuid::Uuid;

use crate::audit::{chain, AuditEntry, AuditRecord};

const COLUMNS: &str = "id, org_id, team_id, api_key_id, endpoint, model, provider, upstream_model, status_code, \
    error_type, stream, prompt_tokens, completion_tokens, total_tokens, cost_usd, latency_ms, upstream_latency_ms, \
    ttft_ms, cache_status, policy_action, attempts, created_at, cached_tokens, reasoning_tokens, routing, policy, cache_creation_tokens, \
    cache_saved_usd, cache_similarity, deployment, overhead_us, client_ip, user_agent_id, request_body, response_body, \
    chain_seq, prev_hash, row_hash, settled_by, template_id, template_version, experiment_id, experiment_variant, origin";

const TYPES: [Type; 44] = [
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
    Type::TEXT,
    Type::INT4,
    Type::INET,
    Type::INT8,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::BYTEA,
    Type::BYTEA,
    Type::TEXT,
    Type::UUID,
    Type::INT4,
    Type::UUID,
    Type::TEXT,
    Type::TEXT,
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

/// Writers a process runs at once by default (the proxy's flusher runs this many).
pub const WRITERS: usize = 4;

/// A few connections reused across batches, opened on demand.
pub struct AuditCopier {
    url: String,
    pooler: crate::config::Pooler,
    /// Writers this process runs at once: a round locks at most 1/writers of a batch's heads.
    writers: usize,
    idle: Mutex<Vec<Client>>,
    /// Months whose partition this process has made sure of (`YYYY * 12 + month`).
    months: std::sync::Mutex<HashSet<i32>>,
    /// User agents already in `audit_user_agents`.
    agents: std::sync::Mutex<HashSet<i64>>,
    /// Organizations whose chain head exists.
    heads: std::sync::Mutex<HashSet<Uuid>>,
}

impl AuditCopier {
    pub fn new(db: &crate::config::DatabaseConfig) -> Self {
        Self {
            url: db.url.clone(),
            pooler: db.pooler,
            writers: WRITERS,
            idle: Mutex::new(Vec::new()),
            months: std::sync::Mutex::new(HashSet::new()),
            agents: std::sync::Mutex::new(HashSet::new()),
            heads: std::sync::Mutex::new(HashSet::new()),
        }
    }

    async fn client(&self) -> Result<Client, CopyError> {
        while let Some(c) = self.idle.lock().await.pop() {
            if !c.is_closed() {
                return Ok(c);
            }
        }
        super::raw_client(&self.url, self.pooler).await.map_err(CopyError::Unavailable)
    }

    async fn give_back(&self, client: Client) {
        if !client.is_closed() {
            self.idle.lock().await.push(client);
        }
    }

    /// Writes a batch. `maybe_written`: an earlier attempt of this batch may have committed, so
    /// rows already present must be skipped rather than chained again.
    pub async fn write(&self, entries: &[AuditEntry], maybe_written: bool) -> Result<(), CopyError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut client = self.client().await?;
        let result = self.write_on(&mut client, entries, maybe_written).await;
        self.give_back(client).await;
        result
    }

    async fn write_on(
        &self,
        client: &mut Client,
        entries: &[AuditEntry],
        maybe_written: bool,
    ) -> Result<(), CopyError> {
        self.ensure_partitions(client, entries).await?;
        let mut agents = self.new_agents(entries);
        let mut orgs: Vec<Uuid> = entries.iter().map(|e| e.record.org_id).collect();
        orgs.sort_unstable();
        orgs.dedup();
        self.ensure_heads(client, &orgs).await?;
        let share = orgs.len().div_ceil(self.writers.max(1)).max(1);
        while !orgs.is_empty() {
            let tx = client.transaction().await.map_err(classify)?;
            let mut heads = some_heads(&tx, &orgs, share).await?;
            if heads.is_empty() {
                // Every head left is another writer's now: wait for the first (holding nothing
                // else, so writers never deadlock).
                heads = wait_for_head(&tx, orgs[0]).await?;
                if heads.is_empty() {
                    // A head this process thought existed is gone (removed by hand): start it again.
                    create_heads(&tx, &orgs[..1]).await?;
                    heads = wait_for_head(&tx, orgs[0]).await?;
                }
            }
            let mut rows: Vec<AuditRecord> =
                entries.iter().filter(|e| heads.contains_key(&e.record.org_id)).map(|e| e.record.clone()).collect();
            if maybe_written {
                let present = present(&tx, entries, &heads).await?;
                rows.retain(|r| !present.contains(&r.id));
            }
            if !rows.is_empty() {
                let moved = link(&mut rows, heads.clone());
                let sink = tx.copy_in(&copy_statement("audit_logs")).await.map_err(classify)?;
                write_rows(sink, &rows).await?;
                move_heads(&tx, moved).await?;
            }
            if !agents.is_empty() {
                insert_agents(&tx, &agents).await?;
            }
            tx.commit().await.map_err(classify)?;
            self.remember_agents(std::mem::take(&mut agents));
            orgs.retain(|o| !heads.contains_key(o));
        }
        Ok(())
    }

    /// Makes the chain heads of organizations this process has not seen before (a head, once
    /// made, is never removed: one round trip saved on nearly every batch).
    async fn ensure_heads(&self, client: &Client, orgs: &[Uuid]) -> Result<(), CopyError> {
        let new: Vec<Uuid> = match self.heads.lock() {
            Ok(k) => orgs.iter().filter(|o| !k.contains(o)).copied().collect(),
            Err(_) => orgs.to_vec(),
        };
        if new.is_empty() {
            return Ok(());
        }
        client
            .execute(
                "INSERT INTO audit_chain_heads (org_id, seq, hash) SELECT o, 0, $2 FROM unnest($1::uuid[]) AS o \
                 ON CONFLICT (org_id) DO NOTHING",
                &[&new, &chain::GENESIS.as_slice()],
            )
            .await
            .map_err(classify)?;
        if let Ok(mut k) = self.heads.lock() {
            if k.len() > 1_000_000 {
                k.clear();
            }
            k.extend(new);
        }
        Ok(())
    }

    fn remember_agents(&self, agents: BTreeMap<i64, String>) {
        if agents.is_empty() {
            return;
        }
        if let Ok(mut known) = self.agents.lock() {
            if known.len() > 100_000 {
                known.clear();
            }
            known.extend(agents.keys().copied());
        }
    }

    /// Creates the monthly partitions this batch needs, once per month per process.
    async fn ensure_partitions(&self, client: &Client, entries: &[AuditEntry]) -> Result<(), CopyError> {
        let wanted: BTreeMap<i32, DateTime<Utc>> = entries
            .iter()
            .map(|e| (e.record.created_at.year() * 12 + e.record.created_at.month0() as i32, e.record.created_at))
            .collect();
        for (month, at) in wanted {
            if self.months.lock().map(|m| m.contains(&month)).unwrap_or(false) {
                continue;
            }
            client.execute("SELECT gw_audit_partition($1)", &[&at]).await.map_err(classify)?;
            if let Ok(mut m) = self.months.lock() {
                m.insert(month);
            }
        }
        Ok(())
    }

    /// The batch's user agents not yet known to be in the dictionary.
    fn new_agents(&self, entries: &[AuditEntry]) -> BTreeMap<i64, String> {
        let known = self.agents.lock();
        entries
            .iter()
            .filter_map(|e| Some((e.record.user_agent_id?, e.user_agent.as_ref()?)))
            .filter(|(id, _)| known.as_ref().map(|k| !k.contains(id)).unwrap_or(true))
            .map(|(id, ua)| (id, ua.clone()))
            .collect()
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

/// The batch's rows already in the table (looked up by primary key, so each is an index probe
/// in one partition).
async fn present(
    tx: &Transaction<'_>,
    entries: &[AuditEntry],
    heads: &BTreeMap<Uuid, (i64, Vec<u8>)>,
) -> Result<HashSet<Uuid>, CopyError> {
    let (ids, times): (Vec<Uuid>, Vec<DateTime<Utc>>) = entries
        .iter()
        .filter(|e| heads.contains_key(&e.record.org_id))
        .map(|e| (e.record.id, e.record.created_at))
        .unzip();
    let rows = tx
        .query(
            "SELECT a.id FROM audit_logs a JOIN unnest($1::uuid[], $2::timestamptz[]) AS v(id, created_at) \
             ON a.id = v.id AND a.created_at = v.created_at",
            &[&ids, &times],
        )
        .await
        .map_err(classify)?;
    Ok(rows.iter().map(|r| r.get::<_, Uuid>(0)).collect())
}

async fn create_heads(tx: &Transaction<'_>, orgs: &[Uuid]) -> Result<(), CopyError> {
    tx.execute(
        "INSERT INTO audit_chain_heads (org_id, seq, hash) SELECT o, 0, $2 FROM unnest($1::uuid[]) AS o \
         ON CONFLICT (org_id) DO NOTHING",
        &[&orgs, &chain::GENESIS.as_slice()],
    )
    .await
    .map(|_| ())
    .map_err(classify)
}

type Heads = BTreeMap<Uuid, (i64, Vec<u8>)>;

fn heads_of(rows: Vec<tokio_postgres::Row>) -> Heads {
    rows.iter().map(|r| (r.get::<_, Uuid>(0), (r.get::<_, i64>(1), r.get::<_, Vec<u8>>(2)))).collect()
}

/// Up to `share` of these organizations' heads that no other writer holds, locked.
async fn some_heads(tx: &Transaction<'_>, orgs: &[Uuid], share: usize) -> Result<Heads, CopyError> {
    let share = i64::try_from(share).unwrap_or(i64::MAX);
    tx.query(
        "SELECT org_id, seq, hash FROM audit_chain_heads WHERE org_id = ANY($1) ORDER BY org_id LIMIT $2 \
         FOR UPDATE SKIP LOCKED",
        &[&orgs, &share],
    )
    .await
    .map(heads_of)
    .map_err(classify)
}

/// One organization's head, locked, waiting for whoever holds it.
async fn wait_for_head(tx: &Transaction<'_>, org: Uuid) -> Result<Heads, CopyError> {
    tx.query("SELECT org_id, seq, hash FROM audit_chain_heads WHERE org_id = $1 FOR UPDATE", &[&org])
        .await
        .map(heads_of)
        .map_err(classify)
}

/// Links the rows onto their organizations' heads in time order; returns the moved heads.
fn link(rows: &mut [AuditRecord], mut heads: Heads) -> Heads {
    rows.sort_by_key(|r| (r.org_id, r.created_at, r.id));
    for group in rows.chunk_by_mut(|a, b| a.org_id == b.org_id) {
        let org = group[0].org_id;
        let head = heads.remove(&org).unwrap_or((0, chain::GENESIS.to_vec()));
        let mut refs: Vec<&mut AuditRecord> = group.iter_mut().collect();
        heads.insert(org, chain::append(head, &mut refs));
    }
    heads
}

async fn move_heads(tx: &Transaction<'_>, heads: Heads) -> Result<(), CopyError> {
    let mut orgs = Vec::with_capacity(heads.len());
    let mut seqs = Vec::with_capacity(heads.len());
    let mut hashes = Vec::with_capacity(heads.len());
    for (org, (seq, hash)) in heads {
        orgs.push(org);
        seqs.push(seq);
        hashes.push(hash);
    }
    tx.execute(
        "UPDATE audit_chain_heads h SET seq = v.seq, hash = v.hash \
         FROM unnest($1::uuid[], $2::bigint[], $3::bytea[]) AS v(org_id, seq, hash) WHERE h.org_id = v.org_id",
        &[&orgs, &seqs, &hashes],
    )
    .await
    .map(|_| ())
    .map_err(classify)
}

async fn insert_agents(tx: &Transaction<'_>, agents: &BTreeMap<i64, String>) -> Result<(), CopyError> {
    let (ids, values): (Vec<i64>, Vec<String>) = agents.iter().map(|(id, ua)| (*id, ua.clone())).unzip();
    tx.execute(
        "INSERT INTO audit_user_agents (id, value) SELECT * FROM unnest($1::bigint[], $2::text[]) \
         ON CONFLICT (id) DO NOTHING",
        &[&ids, &values],
    )
    .await
    .map(|_| ())
    .map_err(classify)
}

async fn write_rows(sink: tokio_postgres::CopyInSink<bytes::Bytes>, rows: &[AuditRecord]) -> Result<(), CopyError> {
    let writer = BinaryCopyInWriter::new(sink, &TYPES);
    pin_mut!(writer);
    for r in rows {
        let client_ip = r.client_ip.map(|n| n.addr());
        let row: [&(dyn ToSql + Sync); 44] = [
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
            &r.deployment,
            &r.overhead_us,
            &client_ip,
            &r.user_agent_id,
            &r.request_body,
            &r.response_body,
            &r.chain_seq,
            &r.prev_hash,
            &r.row_hash,
            &r.settled_by,
            &r.template_id,
            &r.template_version,
            &r.experiment_id,
            &r.experiment_variant,
            &r.origin,
        ];
        writer.as_mut().write(&row).await.map_err(classify)?;
    }
    writer.finish().await.map_err(classify)?;
    Ok(())
}
