//! The `[telemetry]` table: OpenTelemetry trace export from the proxy (OTLP over HTTP with
//! protobuf bodies), off unless an endpoint is set (docs/telemetry.md). The standard
//! `OTEL_EXPORTER_OTLP_*` variables configure it as well; the table's keys win.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's traces URL (`http://collector:4318/v1/traces`). Unset: no traces.
    pub otlp_endpoint: Option<String>,
    /// Headers sent with every export (a vendor's API key, a tenant header).
    pub otlp_headers: BTreeMap<String, String>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Spans waiting for the exporter, at most; past it spans are dropped (counted in
    /// `gw_otel_spans_dropped_total`), never waited for.
    pub queue_spans: usize,
    /// Bytes (encoded) the waiting spans may hold, at most: spans carrying bodies are large.
    pub queue_bytes: usize,
    /// Spans per export request, at most.
    pub batch_spans: usize,
    /// How long a span waits for its batch to fill before it is sent anyway.
    pub export_interval_ms: u64,
    /// How long one export request may take.
    pub export_timeout_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            otlp_headers: BTreeMap::new(),
            service_name: "gw-proxy".into(),
            queue_spans: 8192,
            queue_bytes: 32 * 1024 * 1024,
            batch_spans: 512,
            export_interval_ms: 1000,
            export_timeout_ms: 5000,
        }
    }
}

impl std::fmt::Debug for TelemetryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are credentials more often than not.
        f.debug_struct("TelemetryConfig")
            .field("otlp_endpoint", &self.otlp_endpoint.as_deref().map(shown))
            .field("otlp_headers", &self.otlp_headers.keys().collect::<Vec<_>>())
            .field("service_name", &self.service_name)
            .field("queue_spans", &self.queue_spans)
            .field("batch_spans", &self.batch_spans)
            .finish()
    }
}

impl TelemetryConfig {
    /// The OpenTelemetry SDK's variables, under what the table sets: the traces endpoint (or the
    /// base endpoint with `/v1/traces`), headers as `k=v,k2=v2` (values percent-encoded), the
    /// service name.
    pub fn apply_env(&mut self, env: &impl Fn(&str) -> Option<String>) {
        let set = |k: &str| env(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        if self.otlp_endpoint.is_none() {
            self.otlp_endpoint = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
                set("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
            });
        }
        // The traces-specific variable wins over the general one.
        for var in ["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"] {
            for (k, v) in set(var).as_deref().map(parse_headers).unwrap_or_default() {
                self.otlp_headers.entry(k).or_insert(v);
            }
        }
        if let Some(name) = set("OTEL_SERVICE_NAME") {
            if self.service_name == TelemetryConfig::default().service_name {
                self.service_name = name;
            }
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if let Some(url) = &self.otlp_endpoint {
            let parsed = url::Url::parse(url).map_err(|e| format!("telemetry.otlp_endpoint: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err("telemetry.otlp_endpoint must be an http or https URL".into());
            }
        }
        for (k, v) in &self.otlp_headers {
            http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("telemetry.otlp_headers: {k:?} is not a header name"))?;
            http::HeaderValue::from_str(v)
                .map_err(|_| format!("telemetry.otlp_headers: the value of {k:?} is not a header value"))?;
        }
        if self.queue_spans == 0 || self.batch_spans == 0 || self.queue_bytes == 0 {
            return Err("telemetry.queue_spans, queue_bytes and batch_spans must be positive".into());
        }
        Ok(())
    }
}

/// An endpoint as logs may show it: scheme, host, port and path (credentials in its user part
/// or query left out).
pub fn shown(endpoint: &str) -> String {
    match url::Url::parse(endpoint) {
        Ok(u) => format!(
            "{}://{}{}{}",
            u.scheme(),
            u.host_str().unwrap_or_default(),
            u.port().map(|p| format!(":{p}")).unwrap_or_default(),
            u.path()
        ),
        Err(_) => "<unparsable>".into(),
    }
}

/// `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs separated by commas, values percent-encoded.
fn parse_headers(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            // Percent-decoding only: a `+` stays a `+` (base64 keys hold them).
            let value = percent_encoding::percent_decode_str(v.trim()).decode_utf8().ok()?.into_owned();
            Some((k.trim().to_ascii_lowercase(), value))
        })
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_sdk_variables_fill_what_the_table_leaves_unset() {
        let mut t = TelemetryConfig::default();
        t.apply_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=a%20b, Authorization=Bearer%20t, x-key=ab+c/d=="),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-team=traces"),
            ("OTEL_SERVICE_NAME", "edge-gw"),
        ]));
        assert_eq!(t.otlp_endpoint.as_deref(), Some("http://collector:4318/v1/traces"));
        assert_eq!(t.otlp_headers.get("x-team").map(String::as_str), Some("traces"));
        assert_eq!(t.otlp_headers.get("x-key").map(String::as_str), Some("ab+c/d=="));
        assert_eq!(t.otlp_headers.get("authorization").map(String::as_str), Some("Bearer t"));
        assert_eq!(t.service_name, "edge-gw");
        assert!(t.validate().is_ok());

        let mut own = TelemetryConfig { otlp_endpoint: Some("https://mine/v1/traces".into()), ..Default::default() };
        own.apply_env(&env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://other/v1/traces")]));
        assert_eq!(own.otlp_endpoint.as_deref(), Some("https://mine/v1/traces"));
    }

    #[test]
    fn bad_endpoints_and_headers_are_refused() {
        let t = TelemetryConfig { otlp_endpoint: Some("collector:4318".into()), ..Default::default() };
        assert!(t.validate().is_err());
        let t = TelemetryConfig { otlp_endpoint: Some("ftp://collector/".into()), ..Default::default() };
        assert!(t.validate().is_err());
        let mut t = TelemetryConfig::default();
        t.otlp_headers.insert("bad header".into(), "v".into());
        assert!(t.validate().is_err());
        assert!(TelemetryConfig { queue_spans: 0, ..Default::default() }.validate().is_err());
        assert!(format!("{:?}", TelemetryConfig::default()).contains("otlp_endpoint"));
        let secret = TelemetryConfig {
            otlp_endpoint: Some("https://u:tok@c.example:4318/v1/traces?k=s".into()),
            ..Default::default()
        };
        let shown = format!("{secret:?}");
        assert!(shown.contains("https://c.example:4318/v1/traces") && !shown.contains("tok") && !shown.contains("k=s"));
    }
}
