//! What every streamed export shares: its two formats, file-name time stamps, and CSV fields
//! defused against spreadsheet formulas.

use chrono::{DateTime, Utc};

use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Csv,
}

impl Format {
    pub fn parse(value: Option<&str>) -> ApiResult<Format> {
        match value.map(str::trim) {
            None | Some("jsonl") => Ok(Format::Jsonl),
            Some("csv") => Ok(Format::Csv),
            Some(_) => Err(ApiError::field("format", "must be csv or jsonl")),
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Jsonl => "application/x-ndjson",
            Format::Csv => "text/csv; charset=utf-8",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
        }
    }
}

/// A time as a file name may hold it (no `:`), e.g. `20260131T120000Z`.
pub fn stamp(t: DateTime<Utc>) -> String {
    t.format("%Y%m%dT%H%M%SZ").to_string()
}

/// Characters a spreadsheet reads as the start of a formula (CSV injection).
const FORMULA_STARTS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// One CSV field (RFC 4180), defused: a field a spreadsheet would run as a formula gets a
/// leading `'`, which makes it text.
pub fn csv_field(out: &mut Vec<u8>, value: &str) {
    let quoted = value.contains([',', '"', '\r', '\n']);
    if quoted {
        out.push(b'"');
    }
    if value.starts_with(FORMULA_STARTS) {
        out.push(b'\'');
    }
    out.extend_from_slice(value.replace('"', "\"\"").as_bytes());
    if quoted {
        out.push(b'"');
    }
}

/// One CSV record (RFC 4180, CRLF-terminated) of defused fields.
pub fn csv_row(out: &mut Vec<u8>, fields: &[String]) {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        csv_field(out, f);
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(Format::parse(None).unwrap(), Format::Jsonl);
        assert_eq!(Format::parse(Some("csv")).unwrap(), Format::Csv);
        assert!(Format::parse(Some("xml")).is_err());
    }

    #[test]
    fn csv_fields_are_quoted_and_defused() {
        let field = |v: &str| {
            let mut out = Vec::new();
            csv_field(&mut out, v);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("EMAIL×2, PHONE×1"), "\"EMAIL×2, PHONE×1\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("a\nb"), "\"a\nb\"");
        assert_eq!(field("=1+2"), "'=1+2");
        assert_eq!(field("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(field("-2,3"), "\"'-2,3\"");
        assert_eq!(field(""), "");
    }
}
