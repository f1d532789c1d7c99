//! Time ranges, named `from` (inclusive) and `to` (exclusive) everywhere in `/api/v1`: RFC 3339
//! times or dates (midnight UTC); the analytics' ranges have a default length and a year at most.

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeDelta, Utc};

use crate::error::{ApiError, ApiResult};

/// Longest period one call may cover: a year, leap day included.
const MAX_DAYS: i64 = 366;

/// A `from` or `to`: an RFC 3339 time, or a date meaning its midnight UTC.
pub fn instant(field: &str, value: &str) -> ApiResult<DateTime<Utc>> {
    let v = value.trim();
    let t = DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&Utc))
        .or_else(|_| NaiveDate::parse_from_str(v, "%Y-%m-%d").map(|d| d.and_time(NaiveTime::MIN).and_utc()))
        .map_err(|_| {
            ApiError::field(field, "must be an RFC 3339 time (2026-01-31T12:00:00Z) or a date (2026-01-31)")
        })?;
    // A date may carry a signed year of any length; PostgreSQL's range ends long before chrono's,
    // and an out-of-range bind would be a 500 instead of the client's error.
    if !(1..=9999).contains(&t.year()) {
        return Err(ApiError::field(field, "must be within the years 1 to 9999"));
    }
    Ok(t)
}

/// A period from its optional start and end (each a field name and its value): the end defaults
/// to `now`, the start to `default_days` before the end; the start must come first, and the
/// period may span at most a year.
pub fn period(
    (from_field, from): (&str, Option<&str>),
    (to_field, to): (&str, Option<&str>),
    default_days: i64,
    now: DateTime<Utc>,
) -> ApiResult<(DateTime<Utc>, DateTime<Utc>)> {
    let to = to.map(|t| instant(to_field, t)).transpose()?.unwrap_or(now);
    let from = from.map(|f| instant(from_field, f)).transpose()?.unwrap_or(to - TimeDelta::days(default_days));
    if from >= to {
        return Err(ApiError::field(to_field, format!("must be after {from_field}")));
    }
    if to - from > TimeDelta::days(MAX_DAYS) {
        return Err(ApiError::field(from_field, format!("must be at most {MAX_DAYS} days before {to_field}")));
    }
    Ok((from, to))
}
