//! Spend reconciliation: put what a provider's own usage and cost reports say next to what gw
//! logged, per model and UTC day, and list every difference exactly.
//!
//! Tenants are charged from gw's log, while the provider bills from its own meters. Requests that
//! never reached the log, a price table that lags the provider's, or the same key used outside gw
//! all show up only here. This module is pure: it builds the report URLs, reads one page of a
//! report at a time and compares ledgers. Fetching (with the provider's admin key) is the caller's
//! job, so everything here is testable without a network.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use chrono::{DateTime, Days, NaiveDate, NaiveTime, SecondsFormat, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use serde_json::Value;
use url::Url;

/// The report API family a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Anthropic,
}

impl Dialect {
    /// From a provider's configured `kind`. Only OpenAI and Anthropic offer organisation usage
    /// and cost reports; Azure bills through Azure Cost Management and Bedrock through AWS Cost
    /// Explorer, which need other credentials and report other units.
    pub fn from_kind(kind: &str) -> Option<Dialect> {
        match kind {
            "openai" => Some(Dialect::OpenAi),
            "anthropic" => Some(Dialect::Anthropic),
            _ => None,
        }
    }

    /// As [`Dialect::from_kind`], with the error a caller can hand straight to the user.
    pub fn for_kind(kind: &str) -> Result<Dialect, ReconcileError> {
        Self::from_kind(kind).ok_or_else(|| ReconcileError::Unsupported(kind.to_string()))
    }
}

/// What was used on one model on one UTC day.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// `None` where the source does not count requests (Anthropic's reports).
    pub requests: Option<u64>,
    /// The whole prompt, cached and cache-written tokens included, as gw logs `prompt_tokens`.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of the input tokens, those read from the provider's prompt cache.
    pub cached_tokens: u64,
    pub cost_usd: Decimal,
}

impl Usage {
    /// Field-wise sum; `None` on overflow. A count known on either side stays known.
    pub fn checked_add(&self, other: &Usage) -> Option<Usage> {
        let requests = match (self.requests, other.requests) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).checked_add(b.unwrap_or(0))?),
        };
        Some(Usage {
            requests,
            input_tokens: self.input_tokens.checked_add(other.input_tokens)?,
            output_tokens: self.output_tokens.checked_add(other.output_tokens)?,
            cached_tokens: self.cached_tokens.checked_add(other.cached_tokens)?,
            cost_usd: self.cost_usd.checked_add(other.cost_usd)?,
        })
    }
}

/// Usage keyed by (model, UTC day). A `BTreeMap` so that walking it, and so every report built
/// from it, comes out in the same order every time.
pub type Ledger = BTreeMap<(String, NaiveDate), Usage>;

/// One field of one (model, day) on which the provider and gw disagree. The numbers are exact
/// decimal strings so that money never passes through a float on its way to a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Discrepancy {
    pub model: String,
    pub day: NaiveDate,
    /// `requests`, `input_tokens`, `output_tokens`, `cached_tokens` or `cost_usd`.
    pub field: &'static str,
    pub logged: String,
    pub reported: String,
    /// `reported - logged`: positive when the provider counts more than gw logged.
    pub difference: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("provider report malformed: {0}")]
    Malformed(String),
    #[error("provider {0} has no usage report API")]
    Unsupported(String),
    #[error("cannot build a report request: {0}")]
    InvalidRequest(String),
}

/// Which of a provider's two reports a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportKind {
    /// Token and request counts per model and day.
    Usage,
    /// Money per line item and day.
    Cost,
}

/// The first page of one report. Both APIs want an admin key, not a project key: OpenAI as
/// `Authorization: Bearer`, Anthropic as `x-api-key` with an `anthropic-version` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRequest {
    pub kind: ReportKind,
    pub url: Url,
}

/// Both APIs allow at most 31 daily buckets per page; asking for the maximum keeps the number of
/// round trips down, and `has_more` carries anything beyond.
const PAGE_LIMIT: &str = "31";

/// The headers that carry an admin key as the dialect's report APIs want it, built by the
/// provider's own adapter: OpenAI a bearer token, Anthropic `x-api-key` with its API version.
/// The key's header value is marked sensitive, so no debug output shows it.
pub fn credential_headers(
    dialect: Dialect,
    key: &str,
) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, ReconcileError> {
    let headers = match dialect {
        Dialect::OpenAi => crate::providers::openai::bearer(Some(key)),
        Dialect::Anthropic => crate::providers::anthropic::credentials(Some(key), None),
    };
    headers.map_err(|_| {
        ReconcileError::InvalidRequest(
            "the admin key cannot be sent in an HTTP header: use printable ASCII only".into(),
        )
    })
}

/// The usage and cost report URLs (first pages) covering the UTC days `start..=end_inclusive`.
/// `base_url` is the provider's API root including the version, e.g. `https://api.openai.com/v1`.
pub fn report_requests(
    dialect: Dialect,
    base_url: &str,
    start: NaiveDate,
    end_inclusive: NaiveDate,
) -> Result<Vec<ReportRequest>, ReconcileError> {
    if end_inclusive < start {
        return Err(ReconcileError::InvalidRequest("the range ends before it starts".into()));
    }
    let from = midnight(start);
    // Both APIs take an exclusive end.
    let to = end_inclusive
        .checked_add_days(Days::new(1))
        .map(midnight)
        .ok_or_else(|| ReconcileError::InvalidRequest("the range ends too far in the future".into()))?;
    // Never echo the base URL in an error: it may carry credentials in its user info.
    let base = Url::parse(base_url).map_err(|_| ReconcileError::InvalidRequest("base URL is not a URL".into()))?;

    let requests = match dialect {
        Dialect::OpenAi => {
            let (s, e) = (from.timestamp().to_string(), to.timestamp().to_string());
            vec![
                ReportRequest {
                    kind: ReportKind::Usage,
                    url: endpoint(
                        &base,
                        &["organization", "usage", "completions"],
                        &[
                            ("start_time", s.as_str()),
                            ("end_time", e.as_str()),
                            ("bucket_width", "1d"),
                            ("group_by", "model"),
                            ("limit", PAGE_LIMIT),
                        ],
                    )?,
                },
                ReportRequest {
                    kind: ReportKind::Cost,
                    url: endpoint(
                        &base,
                        &["organization", "costs"],
                        &[
                            ("start_time", s.as_str()),
                            ("end_time", e.as_str()),
                            ("bucket_width", "1d"),
                            ("group_by", "line_item"),
                            ("limit", PAGE_LIMIT),
                        ],
                    )?,
                },
            ]
        }
        Dialect::Anthropic => {
            let (s, e) = (rfc3339(from), rfc3339(to));
            vec![
                ReportRequest {
                    kind: ReportKind::Usage,
                    url: endpoint(
                        &base,
                        &["organizations", "usage_report", "messages"],
                        &[
                            ("starting_at", s.as_str()),
                            ("ending_at", e.as_str()),
                            ("bucket_width", "1d"),
                            ("group_by[]", "model"),
                            ("limit", PAGE_LIMIT),
                        ],
                    )?,
                },
                ReportRequest {
                    kind: ReportKind::Cost,
                    // Grouping by description is what makes the cost report fill in `model`.
                    url: endpoint(
                        &base,
                        &["organizations", "cost_report"],
                        &[
                            ("starting_at", s.as_str()),
                            ("ending_at", e.as_str()),
                            ("group_by[]", "description"),
                            ("limit", PAGE_LIMIT),
                        ],
                    )?,
                },
            ]
        }
    };
    Ok(requests)
}

/// The URL of the page after `first`'s: the same query with `page` set to the `next_page`
/// cursor the previous page returned.
pub fn next_page_url(first: &Url, dialect: Dialect, next_page: &str) -> Url {
    let param = match dialect {
        Dialect::OpenAi | Dialect::Anthropic => "page",
    };
    let kept: Vec<(String, String)> =
        first.query_pairs().filter(|(k, _)| k != param).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let mut url = first.clone();
    url.query_pairs_mut().clear().extend_pairs(&kept).append_pair(param, next_page);
    url
}

/// Adds one page of a report into `into` and returns the cursor of the next page, if any. A page
/// that fails to parse adds nothing, so a caller that gives up keeps a ledger of whole pages.
pub fn parse_page(
    dialect: Dialect,
    kind: ReportKind,
    body: &Value,
    into: &mut Ledger,
) -> Result<Option<String>, ReconcileError> {
    let mut rows = Vec::new();
    for bucket in array(body, "data")? {
        let day = bucket_day(dialect, bucket)?;
        for result in array(bucket, "results")? {
            let (model, usage) = match (dialect, kind) {
                (Dialect::OpenAi, ReportKind::Usage) => openai_usage(result)?,
                (Dialect::OpenAi, ReportKind::Cost) => openai_cost(result)?,
                (Dialect::Anthropic, ReportKind::Usage) => anthropic_usage(result)?,
                (Dialect::Anthropic, ReportKind::Cost) => anthropic_cost(result)?,
            };
            rows.push(((model, day), usage));
        }
    }
    let next = next_page(body)?;

    let mut staged = Ledger::new();
    for (key, usage) in rows {
        let current = staged.get(&key).or_else(|| into.get(&key)).cloned().unwrap_or_default();
        let sum = current.checked_add(&usage).ok_or_else(|| malformed("totals overflow"))?;
        staged.insert(key, sum);
    }
    into.extend(staged);
    Ok(next)
}

/// Every field on which `logged` and `reported` disagree, over the (model, day) pairs of both; a
/// pair missing on one side counts as all zeros there. Requests are compared only when asked and
/// when the provider counts them. Ordered by model, day, then field as listed on [`Discrepancy`].
pub fn compare(logged: &Ledger, reported: &Ledger, compare_requests: bool) -> Vec<Discrepancy> {
    let zero = Usage::default();
    let keys: BTreeSet<&(String, NaiveDate)> = logged.keys().chain(reported.keys()).collect();
    let mut out = Vec::new();
    for key in keys {
        let l = logged.get(key).unwrap_or(&zero);
        let r = reported.get(key).unwrap_or(&zero);
        let mut push = |field: &'static str, logged: String, reported: String, difference: String| {
            out.push(Discrepancy { model: key.0.clone(), day: key.1, field, logged, reported, difference })
        };

        let requests = match r.requests {
            Some(rr) if compare_requests => Some((l.requests.unwrap_or(0), rr)),
            _ => None,
        };
        let counts = [
            ("requests", requests),
            ("input_tokens", Some((l.input_tokens, r.input_tokens))),
            ("output_tokens", Some((l.output_tokens, r.output_tokens))),
            ("cached_tokens", Some((l.cached_tokens, r.cached_tokens))),
        ];
        for (field, pair) in counts {
            if let Some((lv, rv)) = pair.filter(|(lv, rv)| lv != rv) {
                push(field, lv.to_string(), rv.to_string(), (i128::from(rv) - i128::from(lv)).to_string());
            }
        }

        let (lc, rc) = (l.cost_usd.normalize(), r.cost_usd.normalize());
        if lc != rc {
            // Only sums near Decimal::MAX (about 8e28 USD) can fail to subtract.
            let difference =
                rc.checked_sub(lc).map_or_else(|| "out of range".to_string(), |d| d.normalize().to_string());
            push("cost_usd", lc.to_string(), rc.to_string(), difference);
        }
    }
    out
}

fn midnight(day: NaiveDate) -> DateTime<Utc> {
    day.and_time(NaiveTime::MIN).and_utc()
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// `base` with `segments` appended to its path and `query` as its whole query. Pairs go through
/// the form encoder so that `group_by[]` reaches the server as `group_by%5B%5D`.
fn endpoint(base: &Url, segments: &[&str], query: &[(&str, &str)]) -> Result<Url, ReconcileError> {
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    url.path_segments_mut()
        .map_err(|()| ReconcileError::InvalidRequest("base URL cannot take a path".into()))?
        .pop_if_empty()
        .extend(segments);
    url.query_pairs_mut().extend_pairs(query);
    Ok(url)
}

fn malformed(msg: impl Into<String>) -> ReconcileError {
    ReconcileError::Malformed(msg.into())
}

// Field accessors. Messages name only the field, never a value from the body, which may be
// large or carry account details.

fn array<'a>(v: &'a Value, name: &'static str) -> Result<&'a [Value], ReconcileError> {
    v.get(name)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| malformed(format!("`{name}` missing or not an array")))
}

fn count(v: &Value, name: &'static str) -> Result<u64, ReconcileError> {
    v.get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed(format!("`{name}` missing or not a non-negative integer")))
}

fn text<'a>(v: &'a Value, name: &'static str) -> Result<&'a str, ReconcileError> {
    v.get(name).and_then(Value::as_str).ok_or_else(|| malformed(format!("`{name}` missing or not a string")))
}

fn object<'a>(v: &'a Value, name: &'static str) -> Result<&'a Value, ReconcileError> {
    v.get(name).filter(|o| o.is_object()).ok_or_else(|| malformed(format!("`{name}` missing or not an object")))
}

/// Without the model the numbers cannot be put against the log, so a report that was not grouped
/// by model is an error rather than something to skip.
fn grouping_field(result: &Value, name: &'static str, grouping: &str) -> Result<String, ReconcileError> {
    text(result, name)
        .map(str::to_string)
        .map_err(|_| malformed(format!("a result has no `{name}`; the report must be grouped by {grouping}")))
}

fn usd(currency: &str) -> Result<(), ReconcileError> {
    if currency.eq_ignore_ascii_case("usd") {
        Ok(())
    } else {
        Err(malformed("a cost is not in USD"))
    }
}

fn next_page(body: &Value) -> Result<Option<String>, ReconcileError> {
    let has_more = body
        .get("has_more")
        .and_then(Value::as_bool)
        .ok_or_else(|| malformed("`has_more` missing or not a boolean"))?;
    if !has_more {
        return Ok(None);
    }
    // Stopping here would silently drop the rest of the report.
    match body.get("next_page").and_then(Value::as_str) {
        Some(cursor) if !cursor.is_empty() => Ok(Some(cursor.to_string())),
        _ => Err(malformed("`has_more` is true but `next_page` is missing")),
    }
}

fn bucket_day(dialect: Dialect, bucket: &Value) -> Result<NaiveDate, ReconcileError> {
    let start = match dialect {
        Dialect::OpenAi => {
            let secs = bucket
                .get("start_time")
                .and_then(Value::as_i64)
                .ok_or_else(|| malformed("`start_time` missing or not an integer"))?;
            DateTime::<Utc>::from_timestamp(secs, 0).ok_or_else(|| malformed("`start_time` out of range"))?
        }
        Dialect::Anthropic => DateTime::parse_from_rfc3339(text(bucket, "starting_at")?)
            .map_err(|_| malformed("`starting_at` is not an RFC 3339 time"))?
            .with_timezone(&Utc),
    };
    // A bucket that does not start at midnight UTC straddles two days of the log.
    if start.time() != NaiveTime::MIN {
        return Err(malformed("a bucket does not start at midnight UTC"));
    }
    Ok(start.date_naive())
}

fn openai_usage(result: &Value) -> Result<(String, Usage), ReconcileError> {
    let usage = Usage {
        requests: Some(count(result, "num_model_requests")?),
        // OpenAI's input tokens already include the cached ones, like gw's prompt tokens.
        input_tokens: count(result, "input_tokens")?,
        output_tokens: count(result, "output_tokens")?,
        cached_tokens: count(result, "input_cached_tokens")?,
        cost_usd: Decimal::ZERO,
    };
    Ok((grouping_field(result, "model", "model")?, usage))
}

fn openai_cost(result: &Value) -> Result<(String, Usage), ReconcileError> {
    let amount = object(result, "amount")?;
    usd(text(amount, "currency")?)?;
    let cost = match result.get("amount_exact") {
        Some(Value::String(s)) => {
            Decimal::from_str_exact(s).map_err(|_| malformed("`amount_exact` is not an exact decimal"))?
        }
        None | Some(Value::Null) => float_amount(amount.get("value"))?,
        Some(_) => return Err(malformed("`amount_exact` is not a string")),
    };
    // Line items read "<model>, <what>" ("gpt-4o-2024-08-06, cached input"); the model is all
    // before the last separator.
    let line_item = grouping_field(result, "line_item", "line item")?;
    let model = line_item.rsplit_once(", ").map_or(line_item.as_str(), |(m, _)| m).to_string();
    Ok((model, Usage { cost_usd: cost, ..Usage::default() }))
}

/// OpenAI reports money as a JSON float, so a cost is only as exact as the float it sent. Rust
/// prints an `f64` as the shortest decimal that reads back as the same float, without an
/// exponent, so that decimal is taken as the amount: `0.1` stays `0.1` rather than becoming
/// `0.1000000000000000055511151231257827`.
fn float_amount(value: Option<&Value>) -> Result<Decimal, ReconcileError> {
    let n = value.and_then(Value::as_number).ok_or_else(|| malformed("`value` missing or not a number"))?;
    if let Some(i) = n.as_i64() {
        return Ok(Decimal::from(i));
    }
    let f = n.as_f64().ok_or_else(|| malformed("`value` is not a finite number"))?;
    Decimal::from_str(&f.to_string()).map_err(|_| malformed("`value` is out of range"))
}

fn anthropic_usage(result: &Value) -> Result<(String, Usage), ReconcileError> {
    let cache_creation = object(result, "cache_creation")?;
    let cache_read = count(result, "cache_read_input_tokens")?;
    // Anthropic splits the prompt in parts; gw logs the whole prompt as prompt tokens.
    let input_tokens = [
        count(result, "uncached_input_tokens")?,
        count(cache_creation, "ephemeral_1h_input_tokens")?,
        count(cache_creation, "ephemeral_5m_input_tokens")?,
        cache_read,
    ]
    .into_iter()
    .try_fold(0u64, u64::checked_add)
    .ok_or_else(|| malformed("token counts overflow"))?;
    let usage = Usage {
        requests: None,
        input_tokens,
        output_tokens: count(result, "output_tokens")?,
        cached_tokens: cache_read,
        cost_usd: Decimal::ZERO,
    };
    Ok((grouping_field(result, "model", "model")?, usage))
}

fn anthropic_cost(result: &Value) -> Result<(String, Usage), ReconcileError> {
    usd(text(result, "currency")?)?;
    // Amounts are decimal strings in cents ("123.45" is $1.2345), so dividing by 100 is exact.
    let cents =
        Decimal::from_str_exact(text(result, "amount")?).map_err(|_| malformed("`amount` is not an exact decimal"))?;
    let cost = cents.checked_div(Decimal::ONE_HUNDRED).ok_or_else(|| malformed("`amount` is out of range"))?;
    Ok((grouping_field(result, "model", "description")?, Usage { cost_usd: cost, ..Usage::default() }))
}

#[cfg(test)]
mod tests;
