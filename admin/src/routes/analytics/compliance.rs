//! The compliance export: every audit row of a date range (optionally one team's, or those one
//! policy acted on), with its chain fields, and a verification of the organization's hash chain
//! over the span the rows occupy. Streamed in keyset batches, so a year of rows never sits in
//! memory and a slow client never holds a database connection.
//!
//! The chain is walked in position order from the link before the range's first row to the link
//! after its last: every link's content is hashed again and checked against its stored hash and
//! its successor's `prev_hash`, so a row deleted or edited directly in the database makes the
//! verification fail and names the position and request id where it broke.

use std::io;

use actix_web::http::header::CONTENT_DISPOSITION;
use actix_web::web::Bytes;
use actix_web::{get, web, HttpRequest, HttpResponse};
use chrono::{DateTime, SecondsFormat, Utc};
use futures::Stream;
use gw_shared::audit::chain::{Break, Verifier};
use gw_shared::audit::detail::Decision;
use gw_shared::audit::AuditRecord;
use gw_shared::db::audit_logs;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::IntoParams;
use uuid::Uuid;

use super::export::{csv_row, stamp, Format};
use crate::error::{ApiError, ApiResult, Errors};
use crate::period::period;
use crate::session::Session;
use crate::state::AppState;
use crate::{trail, validate};

const BATCH: i64 = 1000;
const DEFAULT_DAYS: i64 = 30;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ComplianceQuery {
    /// Start, inclusive: an RFC 3339 time or a date (midnight UTC). Default: 30 days before `to`.
    from: Option<String>,
    /// End, exclusive: an RFC 3339 time or a date. Default: now. At most 366 days after `from`.
    to: Option<String>,
    /// Only this team's rows.
    team_id: Option<Uuid>,
    /// Only rows this policy made a decision on.
    policy: Option<String>,
    /// `jsonl` (default) or `csv`.
    format: Option<String>,
}

#[derive(Serialize)]
struct Summary {
    record_type: &'static str,
    /// The chain checked out over every link walked, and nothing was missing at either end.
    verified: bool,
    /// Rows written to this export.
    rows: u64,
    /// Links walked (rows of the range and rows between them outside it or the filters).
    links_checked: u64,
    first_seq: Option<i64>,
    last_seq: Option<i64>,
    /// The hash the first walked link follows (hex), when that link is still stored: chains
    /// consecutive exports together.
    anchor_hash: Option<String>,
    last_hash: Option<String>,
    /// Rows in the range written before the chain existed (exported, not verifiable).
    unchained_rows: u64,
    breaks: Vec<Break>,
    /// Breaks beyond the first 100, counted.
    more_breaks: u64,
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Chain,
    Ends,
    Unchained,
    Summary,
    Done,
}

struct Compliance {
    state: web::Data<AppState>,
    reader: crate::replica::Reader,
    org_id: Uuid,
    request_id: String,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    team_id: Option<Uuid>,
    policy: Option<String>,
    format: Format,
    phase: Phase,
    /// The chain positions of the range, and the last one walked.
    hi: i64,
    cursor: i64,
    unchained_after: Option<(DateTime<Utc>, Uuid)>,
    verifier: Verifier,
    /// The first chain position walked.
    first_seq: Option<i64>,
    anchor_hash: Option<String>,
    rows: u64,
    unchained: u64,
    header_pending: bool,
}

/// Every audit row of a date range, with the organization's hash chain verified.
#[utoipa::path(operation_id = "export_compliance", tag = "analytics", params(ComplianceQuery),
    responses((status = 200, description = "JSON Lines (one object per row with `record_type: \"log\"`, then one \
        `record_type: \"verification\"` summary) or CSV (a header row, one row per log, and a last row whose \
        `record_type` is `verification` and whose `detail` holds the summary as JSON). Rows come in chain order.",
        content(("application/x-ndjson"), ("text/csv"))), Errors))]
#[get("/analytics/compliance/export")]
pub async fn export(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    q: crate::body::Query<ComplianceQuery>,
) -> ApiResult<HttpResponse> {
    let q = q.into_inner();
    let format = Format::parse(q.format.as_deref())?;
    let (from, to) = period(("from", q.from.as_deref()), ("to", q.to.as_deref()), DEFAULT_DAYS, Utc::now())?;
    let policy = q.policy.as_deref().map(|p| validate::text("policy", p, 200)).transpose()?;
    // The replica when it has caught up with the primary (`crate::replica`), else the primary.
    let mut reader = crate::replica::Reader::for_export(&state).await?;
    let (lo, hi, count, anchor) = {
        let mut conn = reader.conn().await?;
        let (lo, hi, count) = audit_logs::chain_span(&mut conn, session.org_id, from, to).await?;
        let anchor = match lo {
            Some(lo) if lo > 1 => audit_logs::chain_link(&mut conn, session.org_id, lo - 1).await?,
            _ => None,
        };
        (lo, hi, count, anchor)
    };
    let max = state.cfg.admin.export_max_rows;
    if count as u64 > max {
        return Err(ApiError::Validation(format!(
            "the range holds {count} rows, more than one export may ({max}): narrow it"
        )));
    }
    // Walk from the stored link before the range when there is one, so its first row's link is
    // checked too; without one (the organization's first rows, or dropped by retention) the walk
    // starts at the range.
    let mut verifier = Verifier::after(None);
    let mut anchor_hash = None;
    let mut first_seq = lo;
    let start = match (lo, anchor) {
        (Some(lo), Some(a)) => {
            anchor_hash = a.prev_hash.as_deref().map(hex::encode);
            first_seq = a.chain_seq;
            verifier.check(&a);
            lo - 1
        }
        (Some(lo), None) => lo - 1,
        (None, _) => 0,
    };
    let read_from = reader.source();
    let export = Compliance {
        state,
        reader,
        org_id: session.org_id,
        request_id: trail::request_id(&req).unwrap_or_default(),
        from,
        to,
        team_id: q.team_id,
        policy,
        format,
        phase: if lo.is_some() { Phase::Chain } else { Phase::Unchained },
        hi: hi.unwrap_or(0),
        cursor: start,
        unchained_after: None,
        verifier,
        first_seq,
        anchor_hash,
        rows: 0,
        unchained: 0,
        header_pending: format == Format::Csv,
    };
    let filename = format!("compliance-{}-{}.{}", stamp(from), stamp(to), format.extension());
    Ok(HttpResponse::Ok()
        .content_type(format.content_type())
        .insert_header(("x-gw-read-from", read_from))
        .insert_header((CONTENT_DISPOSITION, format!("attachment; filename=\"{filename}\"")))
        .streaming(export.into_stream()))
}

type Chunk = Result<Bytes, io::Error>;

const CSV_HEADER: &str = "record_type,id,created_at,team_id,key_id,endpoint,model,provider,upstream_model,status,\
    error_type,cache,policy_action,prompt_tokens,completion_tokens,cost_usd,latency_ms,chain_seq,prev_hash,row_hash,\
    detail\r\n";

impl Compliance {
    fn into_stream(self) -> impl Stream<Item = Chunk> {
        futures::stream::unfold(self, |mut ex| async move {
            loop {
                if ex.phase == Phase::Done {
                    return None;
                }
                match ex.step().await {
                    Ok(chunk) if chunk.is_empty() => continue,
                    Ok(chunk) => return Some((Ok(Bytes::from(chunk)), ex)),
                    Err(e) => {
                        ex.phase = Phase::Done;
                        log::error!(
                            "compliance export {} of org {} stopped after {} row(s): {e}",
                            ex.request_id,
                            ex.org_id,
                            ex.rows
                        );
                        return Some((Err(io::Error::other("the compliance export stopped early")), ex));
                    }
                }
            }
        })
    }

    /// The next piece of the body.
    async fn step(&mut self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        if std::mem::take(&mut self.header_pending) {
            out.extend_from_slice(CSV_HEADER.as_bytes());
        }
        if self.phase == Phase::Summary {
            // A break found is announced once (the event's dedupe key names it), whoever walks:
            // a write, so on the primary.
            if let Some(event) = chain_broken(self.org_id, &self.verifier) {
                let mut conn = self.state.db.get().await.map_err(|e| e.to_string())?;
                gw_shared::db::events::emit(&mut conn, event).await.map_err(|e| e.to_string())?;
            }
            self.summary(&mut out)?;
            self.phase = Phase::Done;
            return Ok(out);
        }
        let mut conn = self.reader.conn().await.map_err(|e| e.to_string())?;
        match self.phase {
            Phase::Chain => {
                let rows = audit_logs::chain_batch(&mut conn, self.org_id, self.cursor, self.hi, BATCH)
                    .await
                    .map_err(|e| e.to_string())?;
                if (rows.len() as i64) < BATCH {
                    self.phase = Phase::Ends;
                }
                for r in &rows {
                    self.verifier.check(r);
                    self.cursor = r.chain_seq.unwrap_or(self.cursor);
                    if self.wanted(r) {
                        self.line(&mut out, r)?;
                    }
                }
            }
            Phase::Ends => {
                // Rows removed from the end of the range show only against what follows it.
                let head = audit_logs::chain_head(&mut conn, self.org_id).await.map_err(|e| e.to_string())?;
                let last = self.verifier.last().cloned();
                if let (Some((head_seq, head_hash)), Some((last_seq, last_hash))) = (head, last) {
                    if head_seq > last_seq {
                        match audit_logs::chain_link(&mut conn, self.org_id, last_seq + 1)
                            .await
                            .map_err(|e| e.to_string())?
                        {
                            Some(next) => self.verifier.check(&next),
                            None => self.verifier.report(Break::MissingAfter { after_seq: last_seq, head_seq }),
                        }
                    } else if head_seq != last_seq || head_hash != last_hash {
                        self.verifier.report(Break::HeadMismatch { head_seq });
                    }
                }
                self.phase = Phase::Unchained;
            }
            Phase::Unchained => {
                let rows = audit_logs::unchained_batch(
                    &mut conn,
                    self.org_id,
                    self.from,
                    self.to,
                    self.unchained_after,
                    BATCH,
                )
                .await
                .map_err(|e| e.to_string())?;
                if (rows.len() as i64) < BATCH {
                    self.phase = Phase::Summary;
                }
                for r in &rows {
                    self.unchained_after = Some((r.created_at, r.id));
                    if self.wanted(r) {
                        self.unchained += 1;
                        self.line(&mut out, r)?;
                    }
                }
            }
            Phase::Summary | Phase::Done => {}
        }
        Ok(out)
    }

    fn wanted(&self, r: &AuditRecord) -> bool {
        r.created_at >= self.from
            && r.created_at < self.to
            && self.team_id.is_none_or(|t| r.team_id == Some(t))
            && self.policy.as_deref().is_none_or(|p| Decision::list(&r.policy).iter().any(|d| d.policy == p))
    }

    fn line(&mut self, out: &mut Vec<u8>, r: &AuditRecord) -> Result<(), String> {
        self.rows += 1;
        let hex = |b: &Option<Vec<u8>>| b.as_deref().map(hex::encode);
        match self.format {
            Format::Jsonl => {
                let mut v = serde_json::to_value(r).map_err(|e| e.to_string())?;
                if let Some(o) = v.as_object_mut() {
                    o.insert("record_type".into(), json!("log"));
                    o.insert("prev_hash".into(), json!(hex(&r.prev_hash)));
                    o.insert("row_hash".into(), json!(hex(&r.row_hash)));
                    o.insert("client_ip".into(), json!(r.client_ip.map(|ip| ip.addr().to_string())));
                }
                serde_json::to_writer(&mut *out, &v).map_err(|e| e.to_string())?;
                out.push(b'\n');
            }
            Format::Csv => {
                let opt = |v: &Option<String>| v.clone().unwrap_or_default();
                let uuid = |u: Option<Uuid>| u.map(|u| u.to_string()).unwrap_or_default();
                let fields = [
                    "log".to_string(),
                    r.id.to_string(),
                    r.created_at.to_rfc3339_opts(SecondsFormat::Micros, true),
                    uuid(r.team_id),
                    uuid(r.api_key_id),
                    r.endpoint.clone(),
                    opt(&r.model),
                    opt(&r.provider),
                    opt(&r.upstream_model),
                    r.status_code.to_string(),
                    opt(&r.error_type),
                    r.cache_status.clone(),
                    r.policy_action.as_deref().unwrap_or("none").to_string(),
                    r.prompt_tokens.to_string(),
                    r.completion_tokens.to_string(),
                    r.cost_usd.normalize().to_string(),
                    r.latency_ms.to_string(),
                    r.chain_seq.map(|s| s.to_string()).unwrap_or_default(),
                    hex(&r.prev_hash).unwrap_or_default(),
                    hex(&r.row_hash).unwrap_or_default(),
                    String::new(),
                ];
                csv_row(out, &fields);
            }
        }
        Ok(())
    }

    fn summary(&mut self, out: &mut Vec<u8>) -> Result<(), String> {
        let v = &self.verifier;
        let s = Summary {
            record_type: "verification",
            verified: v.verified(),
            rows: self.rows,
            links_checked: v.checked,
            first_seq: self.first_seq.filter(|_| v.checked > 0),
            last_seq: v.last().map(|l| l.0),
            anchor_hash: self.anchor_hash.clone(),
            last_hash: v.last().map(|l| hex::encode(&l.1)),
            unchained_rows: self.unchained,
            breaks: v.breaks.clone(),
            more_breaks: v.more_breaks,
        };
        if !s.verified {
            log::warn!("compliance export {} of org {}: the audit chain does not verify", self.request_id, self.org_id);
        }
        match self.format {
            Format::Jsonl => {
                serde_json::to_writer(&mut *out, &s).map_err(|e| e.to_string())?;
                out.push(b'\n');
            }
            Format::Csv => {
                let detail = serde_json::to_string(&s).map_err(|e| e.to_string())?;
                let mut fields = vec![String::new(); 21];
                fields[0] = "verification".into();
                fields[20] = detail;
                csv_row(out, &fields);
            }
        }
        Ok(())
    }
}

/// `audit.chain_broken` for the first altered, missing or relinked link a walk found.
fn chain_broken(org_id: Uuid, v: &Verifier) -> Option<gw_shared::limits::events::NewEvent> {
    let (problem, first_bad) = v.breaks.iter().find_map(|b| match b {
        Break::Altered { log_id, .. } => Some(("altered", log_id.to_string())),
        Break::Relinked { log_id, .. } => Some(("relinked", log_id.to_string())),
        Break::Missing { before_log_id, .. } => Some(("missing", before_log_id.to_string())),
        Break::MissingAfter { after_seq, .. } => Some(("missing", format!("seq:{}", after_seq + 1))),
        Break::HeadMismatch { head_seq } => Some(("missing", format!("seq:{head_seq}"))),
        // Rows written before the chain existed are reported by the export, not a break.
        Break::Unchained { .. } => None,
    })?;
    Some(gw_shared::webhooks::payloads::audit_chain_broken(org_id, "audit_logs", &first_bad, problem, v.checked))
}
