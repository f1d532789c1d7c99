//! The events outbox, the proxy's side: governance events (budget thresholds, policy blocks)
//! are queued without waiting and written in batches to Postgres's `events` table by one
//! background writer, from which the control plane's webhook relay delivers them. A request
//! never waits for this; a full queue drops the event, counted and logged.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gw_shared::db::{events, DbPool};
use gw_shared::limits::events::NewEvent;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::mpsc;

use crate::logline::RateLimitedLog;
use crate::metrics::Metrics;

/// Events waiting for the writer, at most.
const QUEUE: usize = 16_384;
/// Events per insert, at most.
const BATCH: usize = 256;
/// How long the writer keeps trying what is queued after shutdown begins.
const DRAIN_FOR: Duration = Duration::from_secs(2);

pub struct Outbox {
    tx: mpsc::Sender<NewEvent>,
    rx: tokio::sync::Mutex<mpsc::Receiver<NewEvent>>,
    db: DbPool,
    metrics: Arc<Metrics>,
    log: RateLimitedLog,
}

impl Outbox {
    pub fn new(db: DbPool, metrics: Arc<Metrics>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        Self {
            tx,
            rx: tokio::sync::Mutex::new(rx),
            db,
            metrics,
            log: RateLimitedLog::new(module_path!(), Duration::from_secs(5)),
        }
    }

    /// Queues an event (never waits: a full queue drops it, counted and logged).
    pub fn emit(&self, ev: NewEvent) {
        if self.tx.try_send(ev).is_err() {
            self.metrics.events_dropped.inc();
            self.log.error(|| "the events queue is full: an event was dropped".into());
        }
    }

    async fn write(&self, batch: &[NewEvent]) -> bool {
        let result = async {
            let mut conn = self.db.get().await.map_err(|e| e.to_string())?;
            events::insert_new(&mut conn, batch).await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(Duration::from_secs(10), result).await {
            Ok(Ok(n)) => {
                self.metrics.events_written.inc_by(n as u64);
                true
            }
            Ok(Err(e)) => {
                self.log.warn(|| format!("could not write {} events to the outbox: {e}", batch.len()));
                false
            }
            Err(_) => {
                self.log.warn(|| "writing events to the outbox timed out".into());
                false
            }
        }
    }

    /// Writes what is queued, retrying with backoff, until the queue closes.
    async fn run(&self) {
        let mut rx = self.rx.lock().await;
        let mut batch = Vec::with_capacity(BATCH);
        let mut backoff = Duration::from_millis(100);
        loop {
            if batch.is_empty() && rx.recv_many(&mut batch, BATCH).await == 0 {
                return;
            }
            if self.write(&batch).await {
                batch.clear();
                backoff = Duration::from_millis(100);
            } else {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// The outbox's writer, a background service of its own.
pub struct OutboxWriter(pub Arc<Outbox>);

#[async_trait]
impl BackgroundService for OutboxWriter {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        crate::priority::background_thread();
        let outbox = self.0.clone();
        let writer = tokio::spawn(async move { outbox.run().await });
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        // Requests finishing during shutdown still queue events: let the queue empty, briefly.
        let until = tokio::time::Instant::now() + DRAIN_FOR;
        while self.0.tx.capacity() < QUEUE && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        writer.abort();
    }
}
