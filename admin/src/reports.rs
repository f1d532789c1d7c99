//! Reading a provider's usage and cost reports over HTTP, for spend reconciliation. What the
//! URLs are, how a page reads and how pages chain are `gw_shared::reconcile`; the credential
//! headers come from the provider adapters. This module only makes the calls, with bounds on
//! time, pages and bytes.
//!
//! The admin key goes to the provider and nowhere else. A failure names the provider, the report
//! and at most a status, never the provider's answer (which may echo the key) or the URL (whose
//! user info may hold credentials).

use std::time::Duration;

use gw_shared::reconcile::{self as rec, Dialect, Ledger, ReportKind, ReportRequest};
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::error::ApiError;

/// Pages one report may take. 93 days need 3 pages of 31; a provider still paging after 100 is
/// looping, and stopping quietly would drop the rest of its report.
const MAX_PAGES: usize = 100;
/// One report call, body included.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest report page read; 31 days of a few hundred models stay far below it.
const MAX_PAGE_BYTES: usize = 16 * 1024 * 1024;

/// A client for one run, its credential in every request.
pub struct ReportClient {
    http: reqwest::Client,
    dialect: Dialect,
}

impl ReportClient {
    pub fn new(dialect: Dialect, key: &str) -> Result<Self, ApiError> {
        let headers: HeaderMap = match rec::credential_headers(dialect, key) {
            Ok(h) => h.into_iter().collect(),
            Err(rec::ReconcileError::InvalidRequest(why)) => return Err(ApiError::Validation(why)),
            Err(other) => return Err(ApiError::Internal(other.to_string())),
        };
        let http = reqwest::Client::builder()
            // reqwest drops `Authorization` on a redirect to another host but keeps `x-api-key`:
            // no redirect may take the key anywhere the config did not name.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(CALL_TIMEOUT)
            .default_headers(headers)
            .build()
            .map_err(|e| ApiError::Internal(format!("cannot build the report client: {}", e.without_url())))?;
        Ok(Self { http, dialect })
    }

    /// Every page of every report, summed into one ledger. `ApiError::BadGateway` when the
    /// provider could not be read.
    pub async fn ledger(&self, requests: &[ReportRequest], provider: &str) -> Result<Ledger, ApiError> {
        let mut ledger = Ledger::new();
        for r in requests {
            let report = match r.kind {
                ReportKind::Usage => "usage",
                ReportKind::Cost => "cost",
            };
            let fail = |why: String| ApiError::BadGateway(format!("provider {provider:?}, {report} report: {why}"));
            let mut url = r.url.clone();
            let mut pages = 0;
            loop {
                if pages == MAX_PAGES {
                    return Err(fail(format!("more than {MAX_PAGES} pages")));
                }
                pages += 1;
                let body = self.page(url).await.map_err(fail)?;
                match rec::parse_page(self.dialect, r.kind, &body, &mut ledger).map_err(|e| fail(e.to_string()))? {
                    Some(cursor) => url = rec::next_page_url(&r.url, self.dialect, &cursor),
                    None => break,
                }
            }
        }
        Ok(ledger)
    }

    /// One page as JSON; the error says what went wrong without quoting the answer.
    async fn page(&self, url: reqwest::Url) -> Result<Value, String> {
        let mut resp = self.http.get(url).send().await.map_err(transport)?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("answered HTTP {}", status.as_u16()));
        }
        let too_large = || format!("a page is larger than {MAX_PAGE_BYTES} bytes");
        if resp.content_length().is_some_and(|n| n > MAX_PAGE_BYTES as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(transport)? {
            if body.len() + chunk.len() > MAX_PAGE_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|_| "a page is not JSON".to_string())
    }
}

fn transport(e: reqwest::Error) -> String {
    let what = if e.is_timeout() {
        format!("timed out after {} s", CALL_TIMEOUT.as_secs())
    } else if e.is_connect() {
        "could not connect".into()
    } else {
        "the request failed".into()
    };
    log::warn!("a provider report request failed: {}", e.without_url());
    what
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::AUTHORIZATION;

    fn headers(dialect: Dialect, key: &str) -> HeaderMap {
        rec::credential_headers(dialect, key).unwrap().into_iter().collect()
    }

    #[test]
    fn credentials_go_in_the_dialects_headers_and_are_never_echoed() {
        let h = headers(Dialect::OpenAi, "sk-admin");
        assert_eq!(h[AUTHORIZATION], "Bearer sk-admin");
        assert!(h[AUTHORIZATION].is_sensitive());
        let h = headers(Dialect::Anthropic, "sk-ant-admin");
        assert_eq!(h["x-api-key"], "sk-ant-admin");
        assert!(h["x-api-key"].is_sensitive());
        assert_eq!(h["anthropic-version"], gw_shared::providers::anthropic::DEFAULT_VERSION);
        assert!(h.get(AUTHORIZATION).is_none());
        let Err(e) = ReportClient::new(Dialect::OpenAi, "sk-hidden\n") else { panic!("accepted") };
        assert!(!e.to_string().contains("hidden"), "{e}");
    }
}
