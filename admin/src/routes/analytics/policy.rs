//! Policy analytics: how often each guardrail acted on the organization's requests over a period,
//! and every decision behind those counts as a streamed JSON Lines or CSV export. Decisions name
//! entity types and counts, never matched values.

use std::io;

use actix_web::http::header::CONTENT_DISPOSITION;
use actix_web::web::Bytes;
use actix_web::{get, web, HttpRequest, HttpResponse};
use chrono::{DateTime, SecondsFormat, Utc};
use futures::Stream;
use gw_shared::db::policy_decisions::{self, Decision, ExportRow, Filter, Hits};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::export::{csv_field, stamp, Format};
use crate::error::{ApiResult, Errors};
use crate::period::period;
use crate::session::Session;
use crate::state::AppState;
use crate::{trail, validate};

/// The period when the query names no `from`.
const DEFAULT_DAYS: i64 = 7;
/// Audit rows per export query: each batch takes a pooled connection and gives it back, so a
/// slow client never holds one.
const BATCH: usize = 1000;
/// Most decisions one export writes; a longer one stops there (narrow the period for the rest).
pub const MAX_EXPORT_DECISIONS: u64 = 1_000_000;
/// Longest `policy`, `action` or `guardrail` filter.
const MAX_NAME_CHARS: usize = 200;

#[derive(Serialize, ToSchema)]
pub struct PolicyTotals {
    /// Requests with at least one matching decision.
    requests: i64,
    /// Matching decisions.
    decisions: i64,
}

#[derive(Serialize, ToSchema)]
pub struct PolicyHits {
    /// e.g. `pii_redact`.
    policy: String,
    guardrail: String,
    /// `flagged`, `redacted` or `blocked`.
    action: String,
    /// Null for requests attributed to no team.
    team_id: Option<Uuid>,
    /// Decisions.
    hits: i64,
    /// Distinct requests behind them.
    requests: i64,
}

impl From<Hits> for PolicyHits {
    fn from(h: Hits) -> Self {
        PolicyHits {
            policy: h.policy,
            guardrail: h.guardrail,
            action: h.action,
            team_id: h.team_id,
            hits: h.hits,
            requests: h.requests,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct PolicyAnalytics {
    /// Start of the period (inclusive).
    from: DateTime<Utc>,
    /// End of the period (exclusive).
    to: DateTime<Utc>,
    total: PolicyTotals,
    /// Most hits first, then by policy, guardrail, action and team.
    data: Vec<PolicyHits>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PolicyQuery {
    /// Start of the period, inclusive: an RFC 3339 time or a date (`2026-01-31`, midnight UTC).
    /// Default: 7 days before `to`.
    pub(super) from: Option<String>,
    /// End of the period, exclusive: an RFC 3339 time or a date (midnight UTC). Default: now.
    /// At most 366 days after `from`.
    pub(super) to: Option<String>,
    /// Only requests attributed to this team.
    pub(super) team_id: Option<Uuid>,
    /// Only decisions of this policy, e.g. `pii_redact`.
    pub(super) policy: Option<String>,
    /// Only decisions with this action: `flagged`, `redacted` or `blocked`.
    pub(super) action: Option<String>,
    /// Only decisions of this guardrail.
    pub(super) guardrail: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// `jsonl` (default) or `csv`.
    #[param(pattern = "^(csv|jsonl)$")]
    format: Option<String>,
    /// Start of the period, inclusive: an RFC 3339 time or a date (`2026-01-31`, midnight UTC).
    /// Default: 7 days before `to`.
    from: Option<String>,
    /// End of the period, exclusive: an RFC 3339 time or a date (midnight UTC). Default: now.
    /// At most 366 days after `from`.
    to: Option<String>,
    /// Only requests attributed to this team.
    team_id: Option<Uuid>,
    /// Only decisions of this policy, e.g. `pii_redact`.
    policy: Option<String>,
    /// Only decisions with this action: `flagged`, `redacted` or `blocked`.
    action: Option<String>,
    /// Only decisions of this guardrail.
    guardrail: Option<String>,
}

impl ExportQuery {
    fn split(self) -> (PolicyQuery, Option<String>) {
        let ExportQuery { format, from, to, team_id, policy, action, guardrail } = self;
        (PolicyQuery { from, to, team_id, policy, action, guardrail }, format)
    }
}

impl PolicyQuery {
    pub(super) fn filter(self, now: DateTime<Utc>) -> ApiResult<Filter> {
        let (from, to) = period(("from", self.from.as_deref()), ("to", self.to.as_deref()), DEFAULT_DAYS, now)?;
        let name = |field: &str, v: Option<String>| v.map(|v| validate::text(field, &v, MAX_NAME_CHARS)).transpose();
        Ok(Filter {
            from,
            to,
            team_id: self.team_id,
            policy: name("policy", self.policy)?,
            action: name("action", self.action)?,
            guardrail: name("guardrail", self.guardrail)?,
        })
    }
}

/// Policy decisions over a period, counted per policy, guardrail, action and team.
#[utoipa::path(operation_id = "get_policy_analytics", tag = "analytics", params(PolicyQuery),
    responses((status = 200, body = PolicyAnalytics), Errors))]
#[get("/analytics/policy")]
pub async fn summary(
    state: web::Data<AppState>,
    session: Session,
    q: crate::body::Query<PolicyQuery>,
) -> ApiResult<HttpResponse> {
    let filter = q.into_inner().filter(Utc::now())?;
    let mut conn = state.read_conn().await?;
    let summary = policy_decisions::summary(&mut conn, session.org_id, &filter).await?;
    Ok(HttpResponse::Ok().json(PolicyAnalytics {
        from: filter.from,
        to: filter.to,
        total: PolicyTotals { requests: summary.requests, decisions: summary.decisions },
        data: summary.groups.into_iter().map(PolicyHits::from).collect(),
    }))
}

/// Every matching decision, one line each, oldest first, streamed.
#[utoipa::path(operation_id = "export_policy_decisions", tag = "analytics", params(ExportQuery),
    responses((status = 200, description = "One line per decision, oldest first (at most 1,000,000): JSON Lines, \
        or CSV with a header row. Fields: created_at, request_id, team_id, api_key_id, model, policy, guardrail, \
        action, stage, reason, entities.",
        content(("application/x-ndjson"), ("text/csv"))), Errors))]
#[get("/analytics/policy/export")]
pub async fn export(
    state: web::Data<AppState>,
    session: Session,
    req: HttpRequest,
    q: crate::body::Query<ExportQuery>,
) -> ApiResult<HttpResponse> {
    let (q, format) = q.into_inner().split();
    let format = Format::parse(format.as_deref())?;
    let filter = q.filter(Utc::now())?;
    let after = (filter.from, Uuid::nil());
    // The first batch is read before answering, so an unavailable database is still a 503
    // rather than a 200 with an empty body.
    // The replica when it has caught up with the primary (`crate::replica`), else the primary.
    let mut reader = crate::replica::Reader::for_export(&state).await?;
    let first = {
        let mut conn = reader.conn().await?;
        policy_decisions::export_batch(&mut conn, session.org_id, &filter, after, BATCH as i64).await?
    };
    let read_from = reader.source();
    let filename = format!("policy-{}-{}.{}", stamp(filter.from), stamp(filter.to), format.extension());
    let export = Export {
        reader,
        org_id: session.org_id,
        request_id: trail::request_id(&req).unwrap_or_default(),
        filter,
        format,
        pending: Some(first),
        after,
        written: 0,
        header_pending: format == Format::Csv,
        done: false,
    };
    Ok(HttpResponse::Ok()
        .content_type(format.content_type())
        .insert_header(("x-gw-read-from", read_from))
        .insert_header((CONTENT_DISPOSITION, format!("attachment; filename=\"{filename}\"")))
        .streaming(export.into_stream()))
}

/// An export under way: where it stands between batches.
struct Export {
    reader: crate::replica::Reader,
    org_id: Uuid,
    request_id: String,
    filter: Filter,
    format: Format,
    /// A batch read and not yet written.
    pending: Option<Vec<ExportRow>>,
    /// The last row read: the next batch starts after it.
    after: (DateTime<Utc>, Uuid),
    written: u64,
    header_pending: bool,
    done: bool,
}

type Chunk = Result<Bytes, io::Error>;

impl Export {
    fn into_stream(self) -> impl Stream<Item = Chunk> {
        futures::stream::unfold(self, |mut ex| async move {
            loop {
                if ex.done {
                    return None;
                }
                let rows = match ex.pending.take() {
                    Some(rows) => rows,
                    None => {
                        let fetched = ex.fetch().await;
                        match fetched {
                            Ok(rows) => rows,
                            Err(e) => {
                                let err = ex.fail(&e.to_string());
                                return Some((Err(err), ex));
                            }
                        }
                    }
                };
                let rendered = ex.render(&rows);
                match rendered {
                    // An empty chunk would end a chunked body early: read on instead.
                    Ok(chunk) if chunk.is_empty() => continue,
                    Ok(chunk) => {
                        let item: Chunk = Ok(Bytes::from(chunk));
                        return Some((item, ex));
                    }
                    Err(e) => {
                        let err = ex.fail(&e);
                        return Some((Err(err), ex));
                    }
                }
            }
        })
    }

    async fn fetch(&mut self) -> gw_shared::Result<Vec<ExportRow>> {
        let mut conn = self.reader.conn().await?;
        policy_decisions::export_batch(&mut conn, self.org_id, &self.filter, self.after, BATCH as i64).await
    }

    /// Ends the export with an error rather than a clean end: the status and headers are sent
    /// already, and a body that simply stopped would pass for a complete export. Yielding the
    /// error makes the server drop the connection before the last chunk, which clients report.
    fn fail(&mut self, detail: &str) -> io::Error {
        self.done = true;
        log::error!(
            "policy export {} of org {} stopped after {} decision(s): {detail}",
            self.request_id,
            self.org_id,
            self.written
        );
        io::Error::other("the policy export stopped early")
    }

    /// The lines of one batch; marks the export done after a short batch or at the cap.
    fn render(&mut self, rows: &[ExportRow]) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        if std::mem::take(&mut self.header_pending) {
            out.extend_from_slice(CSV_HEADER.as_bytes());
        }
        if rows.len() < BATCH {
            self.done = true;
        }
        if let Some(last) = rows.last() {
            self.after = (last.created_at, last.id);
        }
        for row in rows {
            for d in self.filter.decisions(&row.policy) {
                if self.written >= MAX_EXPORT_DECISIONS {
                    self.done = true;
                    return Ok(out);
                }
                match self.format {
                    Format::Csv => csv_line(&mut out, row, &d),
                    Format::Jsonl => jsonl_line(&mut out, row, &d)?,
                }
                self.written += 1;
            }
        }
        Ok(out)
    }
}

const CSV_HEADER: &str =
    "created_at,request_id,team_id,api_key_id,model,policy,guardrail,action,stage,reason,entities\r\n";

fn created_at(row: &ExportRow) -> String {
    row.created_at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[derive(Serialize)]
struct Line<'a> {
    created_at: String,
    request_id: Uuid,
    team_id: Option<Uuid>,
    api_key_id: Option<Uuid>,
    model: Option<&'a str>,
    policy: &'a str,
    guardrail: &'a str,
    action: &'a str,
    stage: Option<&'a str>,
    reason: Option<&'a str>,
    entities: &'a std::collections::BTreeMap<String, u64>,
}

fn jsonl_line(out: &mut Vec<u8>, row: &ExportRow, d: &Decision) -> Result<(), String> {
    let line = Line {
        created_at: created_at(row),
        request_id: row.id,
        team_id: row.team_id,
        api_key_id: row.api_key_id,
        model: row.model.as_deref(),
        policy: &d.policy,
        guardrail: &d.guardrail,
        action: &d.action,
        stage: d.stage.as_deref(),
        reason: d.reason.as_deref(),
        entities: &d.entities,
    };
    serde_json::to_writer(&mut *out, &line).map_err(|e| format!("cannot encode a decision: {e}"))?;
    out.push(b'\n');
    Ok(())
}

fn csv_line(out: &mut Vec<u8>, row: &ExportRow, d: &Decision) {
    let uuid = |u: Option<Uuid>| u.map(|u| u.to_string()).unwrap_or_default();
    let fields = [
        created_at(row),
        row.id.to_string(),
        uuid(row.team_id),
        uuid(row.api_key_id),
        row.model.clone().unwrap_or_default(),
        d.policy.clone(),
        d.guardrail.clone(),
        d.action.clone(),
        d.stage.clone().unwrap_or_default(),
        d.reason.clone().unwrap_or_default(),
        entities_text(&d.entities),
    ];
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        csv_field(out, f);
    }
    out.extend_from_slice(b"\r\n");
}

/// `TYPE:count;TYPE:count`.
fn entities_text(entities: &std::collections::BTreeMap<String, u64>) -> String {
    entities.iter().map(|(k, n)| format!("{k}:{n}")).collect::<Vec<_>>().join(";")
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;
    use crate::error::ApiError;
    use crate::period::instant;

    fn query(from: Option<&str>, to: Option<&str>) -> PolicyQuery {
        PolicyQuery {
            from: from.map(str::to_string),
            to: to.map(str::to_string),
            team_id: None,
            policy: None,
            action: None,
            guardrail: None,
        }
    }

    fn field_of(r: ApiResult<Filter>) -> String {
        match r {
            Err(ApiError::Field { field, .. }) => field,
            Err(other) => panic!("{other:?}"),
            Ok(f) => panic!("accepted {f:?}"),
        }
    }

    #[test]
    fn periods() {
        let now = instant("to", "2026-03-10T12:00:00Z").unwrap();
        let f = query(None, None).filter(now).unwrap();
        assert_eq!((f.to, f.to - f.from), (now, TimeDelta::days(7)));
        let f = query(Some("2026-01-01"), Some("2026-01-08T00:00:00+02:00")).filter(now).unwrap();
        assert_eq!(f.from, instant("from", "2026-01-01T00:00:00Z").unwrap());
        assert_eq!(f.to, instant("to", "2026-01-07T22:00:00Z").unwrap());
        assert!(query(Some("2025-01-01"), Some("2026-01-02")).filter(now).is_ok());
        assert_eq!(field_of(query(Some("2025-01-01"), Some("2026-01-03")).filter(now)), "from");
        assert_eq!(field_of(query(Some("2026-01-02"), Some("2026-01-02")).filter(now)), "to");
        assert_eq!(field_of(query(Some("yesterday"), None).filter(now)), "from");
        assert_eq!(field_of(query(None, Some("2026-13-01")).filter(now)), "to");
        assert_eq!(field_of(query(Some("+12026-01-01"), None).filter(now)), "from");
    }

    #[test]
    fn entities_are_listed_by_type_and_count() {
        let entities = [("PHONE".to_string(), 1), ("EMAIL".to_string(), 2)].into_iter().collect();
        assert_eq!(entities_text(&entities), "EMAIL:2;PHONE:1");
        assert_eq!(entities_text(&Default::default()), "");
    }
}
