//! Audit records leave the request path through a bounded channel; a background flusher writes
//! them to Postgres in small binary-`COPY` batches (small, so a batch never holds a shared core
//! for long). A request never waits for Postgres.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gw_shared::audit::AuditRecord;
use gw_shared::db::audit_copy::{AuditCopier, CopyError};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::{mpsc, Mutex, Semaphore};
use uuid::Uuid;

use crate::logline::RateLimitedLog;
use crate::metrics::Metrics;

/// The request path's end of the audit channel.
#[derive(Clone)]
pub struct AuditSink {
    tx: mpsc::Sender<AuditRecord>,
    metrics: Arc<Metrics>,
    dropped_log: Arc<RateLimitedLog>,
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
                self.dropped_log
                    .error(|| format!("audit queue full: dropped audit record {} (org {})", rec.id, rec.org_id));
            }
        }
    }
}

/// Largest batch, written when records queue up faster than small batches drain them.
const BACKLOG_BATCH: usize = 1024;

/// Small batches while the queue is short: a `COPY` of a few dozen rows costs Postgres well under
/// a millisecond, so it never holds a core it shares with the proxy for long (the c=1 tail). A
/// backlog means the writers are busy: then batches grow, and fewer, larger writes catch up.
fn batch_limit(small: usize, queued: usize) -> usize {
    if queued >= small {
        BACKLOG_BATCH.max(small)
    } else {
        small
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
    database_url: &str,
    metrics: Arc<Metrics>,
    batch_size: usize,
    interval: Duration,
    drain_for: Duration,
) -> (AuditSink, AuditFlusher) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let dropped_log = Arc::new(RateLimitedLog::new(module_path!(), Duration::from_secs(1)));
    let sink = AuditSink { tx, metrics: metrics.clone(), dropped_log };
    let writer = Arc::new(BatchWriter {
        copier: AuditCopier::new(database_url),
        metrics,
        touched: std::sync::Mutex::new(HashMap::new()),
        log: RateLimitedLog::new(module_path!(), Duration::from_secs(5)),
    });
    let flusher = AuditFlusher { rx: Mutex::new(rx), writer, batch_size, interval, drain_for };
    (sink, flusher)
}

/// How often one key's `last_used_at` is moved forward at most.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

struct BatchWriter {
    copier: AuditCopier,
    metrics: Arc<Metrics>,
    /// When each key's `last_used_at` was last written.
    touched: std::sync::Mutex<HashMap<Uuid, Instant>>,
    log: RateLimitedLog,
}

impl BatchWriter {
    /// Writes one batch, retrying with backoff until it lands; past the shutdown deadline it gives
    /// up after a few tries. A retry after an unknown outcome skips rows already written, so it
    /// never duplicates. A batch Postgres refuses as data (not as an outage) is written row by
    /// row so one bad row cannot hold back the rest.
    async fn write(&self, batch: &[AuditRecord], shutdown: &ShutdownWatch) {
        let mut delay = Duration::from_millis(100);
        let mut tries = 0u32;
        let mut maybe_written = false;
        loop {
            tries += 1;
            match self.copier.write(batch, maybe_written).await {
                Ok(()) => {
                    self.written(batch.len());
                    self.touch(batch).await;
                    return;
                }
                Err(CopyError::Duplicate(_)) if !maybe_written => maybe_written = true,
                Err(e @ (CopyError::Data(_) | CopyError::Duplicate(_))) => {
                    log::error!("audit batch of {} rows refused ({e}); writing rows one by one", batch.len());
                    for rec in batch {
                        match self.copier.write(std::slice::from_ref(rec), true).await {
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
                Err(e @ CopyError::Unavailable(_)) => {
                    maybe_written = true;
                    self.metrics.audit_flush_errors.inc();
                    self.log.warn(|| format!("audit batch of {} rows failed (try {tries}): {e}", batch.len()));
                    if *shutdown.borrow() && tries >= 5 {
                        log::error!("giving up on {} audit rows at shutdown", batch.len());
                        self.metrics.audit_dropped.inc_by(batch.len() as u64);
                        self.metrics.audit_queue.sub(batch.len() as i64);
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

    /// `last_used_at` is informational: each key is moved forward at most once a minute, and a
    /// failure is logged, never retried (the audit rows are what must not be lost).
    async fn touch(&self, batch: &[AuditRecord]) {
        let uses: Vec<_> = {
            let Ok(mut touched) = self.touched.lock() else { return };
            let now = Instant::now();
            let mut uses = Vec::new();
            for r in batch {
                let Some(key) = r.api_key_id else { continue };
                if touched.get(&key).is_none_or(|t| now.duration_since(*t) >= TOUCH_EVERY) {
                    touched.insert(key, now);
                    uses.push((key, r.created_at));
                }
            }
            if touched.len() > 100_000 {
                touched.retain(|_, t| now.duration_since(*t) < TOUCH_EVERY);
            }
            uses
        };
        if let Err(e) = self.copier.touch_keys(&uses).await {
            self.log.warn(|| format!("updating api_keys.last_used_at failed: {e}"));
        }
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
            let limit = batch_limit(self.batch_size, rx.len());
            let room = limit.saturating_sub(batch.len());
            tokio::select! {
                n = rx.recv_many(&mut batch, room), if room > 0 => {
                    if n == 0 {
                        break; // every sender is gone
                    }
                    if batch.len() >= limit {
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
            let rest = batch.split_off(batch.len().min(BACKLOG_BATCH));
            self.dispatch(&slots, batch, &shutdown).await;
            batch = rest;
        }
        // Every write slot back means every batch has landed (or been given up on).
        let _ = slots.acquire_many(CONCURRENT_WRITES as u32).await;
        log::info!("audit flusher stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_grow_only_with_a_backlog() {
        assert_eq!(batch_limit(32, 0), 32);
        assert_eq!(batch_limit(32, 31), 32);
        assert_eq!(batch_limit(32, 32), BACKLOG_BATCH);
        assert_eq!(batch_limit(5000, 6000), 5000);
    }
}
