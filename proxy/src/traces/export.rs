//! The exporter: finished requests' spans wait in a bounded queue (a full queue drops them,
//! counted, never waits) and a background task sends them in batches to the OTLP/HTTP endpoint
//! as protobuf. A failed export is dropped and counted, not retried: traces are worth less than
//! the requests they describe, and the collector's outage must not build up work in gw.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gw_shared::config::TelemetryConfig;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use prost::Message;
use tokio::sync::mpsc;

use crate::logline::RateLimitedLog;

/// The semantic conventions the spans' attribute names follow.
const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.37.0";

struct TraceMetrics {
    exported: IntCounter,
    /// By reason: `queue_full`, `export_failed`.
    dropped: IntCounterVec,
    /// Spans waiting or being sent.
    queued: IntGauge,
}

pub struct Tracer {
    tx: mpsc::Sender<Span>,
    rx: tokio::sync::Mutex<mpsc::Receiver<Span>>,
    endpoint: String,
    headers: http::HeaderMap,
    batch: usize,
    /// Encoded bytes of the spans waiting or being sent, and their bound.
    bytes: AtomicUsize,
    max_bytes: usize,
    interval: Duration,
    timeout: Duration,
    resource: Resource,
    metrics: TraceMetrics,
    log: RateLimitedLog,
}

impl Tracer {
    /// The exporter `cfg` describes; `None` when no endpoint is set (traces off).
    pub fn new(cfg: &TelemetryConfig, registry: &Registry) -> Result<Option<Arc<Self>>, prometheus::Error> {
        let Some(endpoint) = cfg.otlp_endpoint.clone() else { return Ok(None) };
        let metrics = TraceMetrics {
            exported: IntCounter::new("gw_otel_spans_exported_total", "Spans the OTLP endpoint accepted")?,
            dropped: IntCounterVec::new(
                Opts::new("gw_otel_spans_dropped_total", "Spans dropped: their queue was full or their export failed"),
                &["reason"],
            )?,
            queued: IntGauge::new("gw_otel_queue_depth", "Spans waiting for export")?,
        };
        registry.register(Box::new(metrics.exported.clone()))?;
        registry.register(Box::new(metrics.dropped.clone()))?;
        registry.register(Box::new(metrics.queued.clone()))?;
        // Validated with the configuration: a bad name or value cannot reach here.
        let headers = cfg
            .otlp_headers
            .iter()
            .filter_map(|(k, v)| {
                Some((http::HeaderName::from_bytes(k.as_bytes()).ok()?, http::HeaderValue::from_str(v).ok()?))
            })
            .collect();
        let (tx, rx) = mpsc::channel(cfg.queue_spans.max(1));
        let text = |k: &str, v: &str| KeyValue {
            key: k.to_string(),
            value: Some(AnyValue { value: Some(any_value::Value::StringValue(v.to_string())) }),
            ..Default::default()
        };
        let resource = Resource {
            attributes: vec![
                text("service.name", &cfg.service_name),
                text("service.version", env!("CARGO_PKG_VERSION")),
                text("service.instance.id", &gw_shared::ids::new_id().to_string()),
            ],
            ..Default::default()
        };
        Ok(Some(Arc::new(Self {
            tx,
            rx: tokio::sync::Mutex::new(rx),
            endpoint,
            headers,
            batch: cfg.batch_spans.max(1),
            bytes: AtomicUsize::new(0),
            max_bytes: cfg.queue_bytes.max(1),
            interval: Duration::from_millis(cfg.export_interval_ms.max(1)),
            timeout: Duration::from_millis(cfg.export_timeout_ms.max(1)),
            resource,
            metrics,
            log: RateLimitedLog::new(module_path!(), Duration::from_secs(10)),
        })))
    }

    /// Queues a request's spans; never waits. A span that would take the queue past its count
    /// or its bytes is dropped.
    pub fn record(&self, spans: Vec<Span>) {
        for span in spans {
            let size = span.encoded_len();
            let held = self.bytes.fetch_add(size, Ordering::Relaxed);
            if held + size > self.max_bytes || self.tx.try_send(span).is_err() {
                self.bytes.fetch_sub(size, Ordering::Relaxed);
                self.metrics.dropped.with_label_values(&["queue_full"]).inc();
                self.log.warn(|| "the trace export queue is full: spans are dropped".into());
            } else {
                self.metrics.queued.inc();
            }
        }
    }

    fn encode(&self, spans: Vec<Span>) -> Vec<u8> {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "gw-proxy".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    spans,
                    schema_url: SCHEMA_URL.into(),
                }],
                schema_url: SCHEMA_URL.into(),
            }],
        }
        .encode_to_vec()
    }

    async fn export(&self, client: &reqwest::Client, spans: Vec<Span>) {
        let n = spans.len() as u64;
        let body = self.encode(spans);
        let sent = client
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(body)
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => self.metrics.exported.inc_by(n),
            Ok(r) => {
                self.metrics.dropped.with_label_values(&["export_failed"]).inc_by(n);
                let status = r.status();
                self.log.warn(|| format!("the OTLP endpoint refused {n} spans: {status}"));
            }
            Err(e) => {
                self.metrics.dropped.with_label_values(&["export_failed"]).inc_by(n);
                // The error names the endpoint, not its headers.
                self.log.warn(|| format!("exporting {n} spans failed: {}", e.without_url()));
            }
        }
    }

    /// Sends batches until the queue closes: a batch goes when it is full or its first span has
    /// waited `interval`.
    async fn run(&self) {
        let client = match reqwest::Client::builder().timeout(self.timeout).connect_timeout(self.timeout).build() {
            Ok(c) => c,
            Err(e) => {
                log::error!("traces are not exported: no HTTP client: {e}");
                return;
            }
        };
        let mut rx = self.rx.lock().await;
        let mut batch = Vec::with_capacity(self.batch);
        loop {
            if rx.recv_many(&mut batch, self.batch).await == 0 {
                return;
            }
            let until = tokio::time::Instant::now() + self.interval;
            while batch.len() < self.batch {
                let room = self.batch - batch.len();
                match tokio::time::timeout_at(until, rx.recv_many(&mut batch, room)).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            let (n, size) = (batch.len(), batch.iter().map(Message::encoded_len).sum::<usize>());
            self.export(&client, std::mem::take(&mut batch)).await;
            // Only now: shutdown waits for what is being sent too.
            self.metrics.queued.sub(n as i64);
            self.bytes.fetch_sub(size, Ordering::Relaxed);
        }
    }

    /// Spans still waiting or being sent, for the shutdown's last export.
    fn waiting(&self) -> i64 {
        self.metrics.queued.get()
    }
}

/// The exporter's background service. A stopping process keeps it until the requests in flight
/// have finished and their spans have had their export (within the shutdown grace period).
pub struct TraceExporter {
    pub tracer: Arc<Tracer>,
    pub in_flight: crate::drain::InFlight,
    pub grace: Duration,
}

#[async_trait]
impl BackgroundService for TraceExporter {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        crate::priority::background_thread();
        let tracer = self.tracer.clone();
        let task = tokio::spawn(async move { tracer.run().await });
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        // Requests finishing during shutdown still record spans; each batch waits at most one
        // interval and one export.
        let until = tokio::time::Instant::now() + self.grace;
        while (self.in_flight.count() > 0 || self.tracer.waiting() > 0) && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        task.abort();
    }
}
