//! Audit records leave the request path through a bounded channel; a background flusher writes
//! them to Postgres in batches. A request never waits for Postgres.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gw_shared::audit::AuditRecord;
use gw_shared::db::{api_keys, audit_logs, DbPool};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::{mpsc, Mutex, Semaphore};

use crate::metrics::Metrics;

/// The request path's end of the audit channel.
#[derive(Clone)]
pub struct AuditSink {
    tx: mpsc::Sender<AuditRecord>,
    metrics: Arc<Metrics>,
}

impl AuditSink {
    /// Queues a record without waiting. A full queue means Postgres has been unable to keep up
    /// for a long while: the record is counted as dropped and logged, never blocking the client.
    pub fn record(&self, rec: AuditRecord) {
        match self.tx.try_send(rec) {
            Ok(()) => {
                self.metrics.audit_enqueued.inc();
                self.metrics.audit_queue.inc();
            }
            Err(mpsc::error::TrySendError::Full(rec)) | Err(mpsc::error::TrySendError::Closed(rec)) => {
                self.metrics.audit_dropped.inc();
                log::error!("audit queue full: dropped audit record {} (org {})", rec.id, rec.org_id);
            }
        }
    }
}

/// Batches in flight at once: one writer would cap the flusher at one batch per round trip.
const CONCURRENT_WRITES: usize = 4;

pub struct AuditFlusher {
    rx: Mutex<mpsc::Receiver<AuditRecord>>,
    writer: Arc<BatchWriter>,
    batch_size: usize,
    interval: Duration,
    /// How long to keep draining after shutdown begins (requests still finishing).
    drain_for: Duration,
}

pub fn channel(
    capacity: usize,
    db: DbPool,
    metrics: Arc<Metrics>,
    batch_size: usize,
    interval: Duration,
    drain_for: Duration,
) -> (AuditSink, AuditFlusher) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let sink = AuditSink { tx, metrics: metrics.clone() };
    let writer = Arc::new(BatchWriter { db, metrics });
    let flusher = AuditFlusher { rx: Mutex::new(rx), writer, batch_size, interval, drain_for };
    (sink, flusher)
}

struct BatchWriter {
    db: DbPool,
    metrics: Arc<Metrics>,
}

impl BatchWriter {
    /// Writes one batch, retrying with backoff until it lands; past the shutdown deadline it gives
    /// up after a few tries. The insert is idempotent (`ON CONFLICT DO NOTHING` on the request
    /// id), so a retry never duplicates. A batch Postgres refuses as data (not as an outage) is
    /// written row by row so one bad row cannot hold back the rest.
    async fn write(&self, batch: &[AuditRecord], shutdown: &ShutdownWatch) {
        let mut delay = Duration::from_millis(100);
        let mut tries = 0u32;
        loop {
            tries += 1;
            match self.try_write(batch).await {
                Ok(()) => {
                    self.written(batch.len());
                    return;
                }
                Err(e) if is_data_error(&e) => {
                    log::error!("audit batch of {} rows refused ({e}); writing rows one by one", batch.len());
                    for rec in batch {
                        match self.try_write(std::slice::from_ref(rec)).await {
                            Ok(()) => self.written(1),
                            Err(e) => {
                                log::error!("dropping audit row {} (org {}): {e}", rec.id, rec.org_id);
                                self.metrics.audit_dropped.inc();
                                self.metrics.audit_queue.dec();
                            }
                        }
                    }
                    return;
                }
                Err(e) => {
                    self.metrics.audit_flush_errors.inc();
                    log::warn!("audit batch of {} rows failed (try {tries}): {e}", batch.len());
                    if *shutdown.borrow() && tries >= 5 {
                        log::error!("giving up on {} audit rows at shutdown", batch.len());
                        self.metrics.audit_dropped.inc_by(batch.len() as u64);
                        return;
                    }
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    fn written(&self, n: usize) {
        self.metrics.audit_written.inc_by(n as u64);
        self.metrics.audit_queue.sub(n as i64);
    }

    async fn try_write(&self, batch: &[AuditRecord]) -> gw_shared::Result<()> {
        let mut conn = self.db.get().await?;
        audit_logs::insert_batch(&mut conn, batch).await?;
        let uses: Vec<_> = batch.iter().filter_map(|r| r.api_key_id.map(|k| (k, r.created_at))).collect();
        if let Err(e) = api_keys::touch_last_used(&mut conn, &uses).await {
            // last_used_at is informational; the audit rows are what must not be lost.
            log::warn!("updating api_keys.last_used_at failed: {e}");
        }
        Ok(())
    }
}

/// Postgres refused the data itself (bad encoding, constraint): retrying the same batch is futile.
fn is_data_error(e: &gw_shared::Error) -> bool {
    use diesel::result::{DatabaseErrorKind, Error as D};
    match e {
        gw_shared::Error::Database(D::DatabaseError(kind, _)) => {
            !matches!(kind, DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::SerializationFailure)
        }
        gw_shared::Error::Database(D::SerializationError(_)) => true,
        _ => false,
    }
}

impl AuditFlusher {
    /// Hands a batch to a writer task once a write slot is free; while all are busy, records wait
    /// in the channel (which is the buffer).
    async fn dispatch(&self, slots: &Arc<Semaphore>, batch: Vec<AuditRecord>, shutdown: &ShutdownWatch) {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let writer = self.writer.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            writer.write(&batch, &shutdown).await;
            drop(permit);
        });
    }
}

#[async_trait]
impl BackgroundService for AuditFlusher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut rx = self.rx.lock().await;
        let slots = Arc::new(Semaphore::new(CONCURRENT_WRITES));
        let mut batch = Vec::with_capacity(self.batch_size);
        let mut tick = tokio::time::interval(self.interval);
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            let room = self.batch_size.saturating_sub(batch.len());
            tokio::select! {
                n = rx.recv_many(&mut batch, room), if room > 0 => {
                    if n == 0 {
                        break; // every sender is gone
                    }
                    if batch.len() >= self.batch_size {
                        self.dispatch(&slots, std::mem::take(&mut batch), &shutdown).await;
                    }
                }
                _ = tick.tick() => {
                    if !batch.is_empty() {
                        self.dispatch(&slots, std::mem::take(&mut batch), &shutdown).await;
                    }
                    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                        break;
                    }
                }
                changed = shutdown.changed(), if deadline.is_none() => {
                    if changed.is_err() || *shutdown.borrow() {
                        deadline = Some(tokio::time::Instant::now() + self.drain_for);
                        // From now on every record is the last chance to write it: flush at once
                        // and keep flushing often until the drain window closes.
                        if !batch.is_empty() {
                            self.dispatch(&slots, std::mem::take(&mut batch), &shutdown).await;
                        }
                        tick = tokio::time::interval(self.interval.min(Duration::from_millis(50)));
                    }
                }
            }
        }
        while let Ok(rec) = rx.try_recv() {
            batch.push(rec);
        }
        while !batch.is_empty() {
            let rest = batch.split_off(batch.len().min(self.batch_size));
            self.dispatch(&slots, batch, &shutdown).await;
            batch = rest;
        }
        // Every write slot back means every batch has landed (or been given up on).
        let _ = slots.acquire_many(CONCURRENT_WRITES as u32).await;
        log::info!("audit flusher stopped");
    }
}
