//! gw-proxy: the data plane. One Pingora server answering `/v1`, plus the audit flusher, the
//! invalidation listener and the operations listener (`/metrics`, `/healthz`, `/readyz`). A library so an embedder (or a test) can
//! run it with provider adapters of its own: `run(config, registry)`.

mod audit_flusher;
mod audit_journal;
mod audit_spool;
mod ctx;
mod drain;
mod embedder;
mod error;
mod events;
mod gateway;
mod health;
mod invalidation;
mod limiter;
mod logline;
mod lookup;
mod metrics;
mod ops;
mod org_routes;
mod pipeline;
mod priority;
mod response_cache;
mod routes_watch;
mod scan_pool;
mod server;
mod sources;
mod state;
mod throttle;
mod traces;
mod traffic_metrics;
mod transport;

pub use server::{run, run_with, RunOptions};
