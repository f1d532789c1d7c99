//! OpenTelemetry traces of `/v1` requests (docs/telemetry.md): the W3C trace context a request
//! joins and passes upstream (`context`), its spans built from the finished request's context
//! (`spans`), and their export over OTLP/HTTP (`export`), which never holds a request up.

pub mod context;
pub mod export;
pub mod spans;

pub use context::TraceCtx;
pub use export::{TraceExporter, Tracer};
