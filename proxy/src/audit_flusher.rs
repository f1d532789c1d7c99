//! Audit records leave the request path through a bounded channel; a background flusher writes
//! them to Postgres in small binary-`COPY` batches (small, so a batch never holds a shared core
//! for long). A request never waits for Postgres.
//!
//! Nothing is dropped while the disk has room: a batch Postgres fails to take, or one that waits
//! too long for a writer, spills to the local [`Spool`]; a record that finds the queue full
//! spills straight from the request. While the spool holds anything, new batches queue behind
//! it there, and a replayer writes it back in order once Postgres answers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gw_shared::audit::AuditEntry;
use gw_shared::db::audit_copy::{AuditCopier, CopyError};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::{mpsc, Mutex, Notify, Semaphore};
use uuid::Uuid;

use crate::audit_journal::{Journal, Ticket};
use crate::audit_spool::{Spool, SpoolError};
use crate::logline::RateLimitedLog;
use crate::metrics::Metrics;

/// A row on its way to Postgres, with its hold on the journal file it was written to first.
struct Queued {
    entry: AuditEntry,
    ticket: Option<Ticket>,
}

/// Lets go of the journal's copies of rows now written or spooled (`durable`); otherwise the
/// tickets are dropped unreleased and their journal files kept for a replay.
fn settle(tickets: Vec<Option<Ticket>>, durable: bool) {
    if durable {
        tickets.into_iter().flatten().for_each(Ticket::release);
    }
}

/// The request path's end of the audit channel.
#[derive(Clone)]
pub struct AuditSink {
    tx: mpsc::Sender<Queued>,
    /// Rung once a batch's worth of rows waits. The flusher does not wait on the channel itself:
    /// a receiver parked in `recv` is woken (an eventfd write and a thread switch on the core
    /// the requests run on) by every record.
    batch_ready: Arc<Notify>,
    batch_size: usize,
    spool: Arc<Spool>,
    metrics: Arc<Metrics>,
    dropped_log: Arc<RateLimitedLog>,
}

impl AuditSink {
    /// Queues a record without waiting. A full queue means Postgres has been unable to keep up
    /// for a while: the record goes to the spool (one small file append); only a full spool
    /// drops it, counted and logged.
    /// `ticket`: the row's hold on the journal (`audit_journal`), let go once it is written or
    /// spooled.
    pub fn record(&self, entry: AuditEntry, ticket: Option<Ticket>) {
        match self.tx.try_send(Queued { entry, ticket }) {
            Ok(()) => {
                self.metrics.audit_enqueued.inc();
                self.metrics.audit_queue.inc();
                if self.tx.max_capacity() - self.tx.capacity() >= self.batch_size {
                    self.batch_ready.notify_one();
                }
            }
            Err(mpsc::error::TrySendError::Full(queued)) | Err(mpsc::error::TrySendError::Closed(queued)) => {
                self.metrics.audit_enqueued.inc();
                let spooled = spill(&self.spool, &self.metrics, &self.dropped_log, std::slice::from_ref(&queued.entry));
                settle(vec![queued.ticket], spooled);
            }
        }
    }
}

/// Spills entries that are not (or no longer) counted in the queue gauge; a full or broken
/// spool drops them, counted and logged. Whether they were spooled.
fn spill(spool: &Spool, metrics: &Metrics, log: &RateLimitedLog, entries: &[AuditEntry]) -> bool {
    if let Err(e) = spool.append(entries) {
        metrics.audit_dropped.inc_by(entries.len() as u64);
        let first = entries.first().map(|e| (e.record.id, e.record.org_id));
        log.error(|| match (&e, first) {
            (SpoolError::Full(_), Some((id, org))) => {
                format!("{e}: dropped {} audit record(s), the first {id} (org {org})", entries.len())
            }
            _ => format!("audit spool write failed ({e}): dropped {} audit record(s)", entries.len()),
        });
        return false;
    }
    true
}

/// Largest batch: what a backlog (Postgres away, then back) is replayed in.
const BACKLOG_BATCH: usize = 1024;

/// The rows a wake-up drains, cut into batches of at most `size` (each one transaction: its fixed
/// cost, the chain heads locked and moved and a commit, is why batches are not smaller).
fn batches(queued: usize, size: usize) -> usize {
    queued.div_ceil(size.max(1))
}

/// Batches in flight at once: one writer would cap the flusher at one batch per round trip.
const CONCURRENT_WRITES: usize = gw_shared::db::audit_copy::WRITERS;

/// Longest a batch's write may take (a connection that hangs, a chain head held by a stuck
/// transaction): past it the batch spills, and its replay skips whatever did land.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct AuditFlusher {
    rx: Mutex<mpsc::Receiver<Queued>>,
    batch_ready: Arc<Notify>,
    writer: Arc<BatchWriter>,
    /// How long a batch waits for a free writer before it spills.
    spill_after: Duration,
    batch_size: usize,
    interval: Duration,
    /// How long to keep draining after shutdown begins (requests still finishing), at most.
    drain_for: Duration,
    /// Requests in flight: once shutdown began and none is left, the last rows are in the queue.
    in_flight: crate::drain::InFlight,
    /// The folder holding every process's spool folder (this one's and those it adopts).
    spool_root: std::path::PathBuf,
    journal: Option<Arc<Journal>>,
}

pub struct ChannelOptions {
    pub capacity: usize,
    pub batch_size: usize,
    pub interval: Duration,
    pub drain_for: Duration,
    pub spill_after: Duration,
    pub in_flight: crate::drain::InFlight,
    pub spool_root: std::path::PathBuf,
    pub journal: Option<Arc<Journal>>,
}

pub fn channel(
    opts: ChannelOptions,
    database: &gw_shared::config::DatabaseConfig,
    spool: Arc<Spool>,
    metrics: Arc<Metrics>,
) -> (AuditSink, AuditFlusher) {
    let (tx, rx) = mpsc::channel(opts.capacity.max(1));
    let dropped_log = Arc::new(RateLimitedLog::new(module_path!(), Duration::from_secs(1)));
    let batch_ready = Arc::new(Notify::new());
    let sink = AuditSink {
        tx,
        batch_ready: batch_ready.clone(),
        batch_size: opts.batch_size.max(1),
        spool: spool.clone(),
        metrics: metrics.clone(),
        dropped_log: dropped_log.clone(),
    };
    let writer = Arc::new(BatchWriter {
        copier: AuditCopier::new(database),
        spool,
        metrics,
        touched: std::sync::Mutex::new(HashMap::new()),
        log: RateLimitedLog::new(module_path!(), Duration::from_secs(5)),
        dropped_log,
    });
    let flusher = AuditFlusher {
        rx: Mutex::new(rx),
        batch_ready,
        writer,
        spill_after: opts.spill_after,
        batch_size: opts.batch_size,
        interval: opts.interval,
        drain_for: opts.drain_for,
        in_flight: opts.in_flight,
        spool_root: opts.spool_root,
        journal: opts.journal,
    };
    (sink, flusher)
}

/// How often one key's `last_used_at` is moved forward at most.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

struct BatchWriter {
    copier: AuditCopier,
    spool: Arc<Spool>,
    metrics: Arc<Metrics>,
    dropped_log: Arc<RateLimitedLog>,
    /// When each key's `last_used_at` was last written.
    touched: std::sync::Mutex<HashMap<Uuid, Instant>>,
    log: RateLimitedLog,
}

impl BatchWriter {
    /// Writes one batch. A batch Postgres cannot take now spills to the spool (the replayer
    /// brings it back); one Postgres refuses as data (not as an outage) is written row by row so
    /// one bad row cannot hold back the rest. False when some row could be neither written nor
    /// spooled (a row Postgres refuses as data is dropped for good, counted and logged).
    async fn write(&self, batch: &[AuditEntry]) -> bool {
        let started = Instant::now();
        let mut maybe_written = false;
        loop {
            let written = tokio::time::timeout(WRITE_TIMEOUT, self.copier.write(batch, maybe_written))
                .await
                .unwrap_or_else(|_| Err(CopyError::Unavailable(format!("no answer within {WRITE_TIMEOUT:?}"))));
            match written {
                Ok(()) => {
                    self.metrics.audit_flush_duration.observe(started.elapsed().as_secs_f64());
                    self.written(batch.len());
                    self.touch(batch).await;
                    return true;
                }
                Err(CopyError::Duplicate(_)) if !maybe_written => maybe_written = true,
                Err(e @ (CopyError::Data(_) | CopyError::Duplicate(_))) => {
                    log::error!("audit batch of {} rows refused ({e}); writing rows one by one", batch.len());
                    return self.one_by_one(batch).await;
                }
                Err(e @ CopyError::Unavailable(_)) => {
                    self.metrics.audit_flush_errors.inc();
                    self.log.warn(|| format!("audit batch of {} rows failed, spilling to the spool: {e}", batch.len()));
                    self.metrics.audit_queue.sub(batch.len() as i64);
                    return spill(&self.spool, &self.metrics, &self.dropped_log, batch);
                }
            }
        }
    }

    async fn one_by_one(&self, batch: &[AuditEntry]) -> bool {
        let mut durable = true;
        for entry in batch {
            match self.copier.write(std::slice::from_ref(entry), true).await {
                Ok(()) => self.written(1),
                Err(CopyError::Unavailable(_)) => {
                    self.metrics.audit_queue.dec();
                    durable &= spill(&self.spool, &self.metrics, &self.dropped_log, std::slice::from_ref(entry));
                }
                Err(e) => {
                    log::error!("dropping audit row {} (org {}): {e}", entry.record.id, entry.record.org_id);
                    self.metrics.audit_dropped.inc();
                    self.metrics.audit_queue.dec();
                }
            }
        }
        durable
    }

    /// Writes spooled batches back in order while Postgres takes them; returns when the spool
    /// is empty or Postgres fails again.
    async fn replay(&self) -> bool {
        self.replay_spool(&self.spool).await
    }

    /// [`Self::replay`] for any spool: this process's own, or one it adopted.
    async fn replay_spool(&self, spool: &Spool) -> bool {
        loop {
            let taken = match spool.take(BACKLOG_BATCH) {
                Ok(Some(t)) => t,
                Ok(None) => return true,
                Err(e) => {
                    self.log.error(|| format!("reading the audit spool failed: {e}"));
                    return false;
                }
            };
            let started = Instant::now();
            match self.copier.write(&taken.entries, true).await {
                Ok(()) => {
                    self.metrics.audit_flush_duration.observe(started.elapsed().as_secs_f64());
                    self.metrics.audit_written.inc_by(taken.entries.len() as u64);
                    spool.done(&taken);
                }
                Err(CopyError::Unavailable(e)) => {
                    self.log.warn(|| format!("audit spool replay waits for Postgres: {e}"));
                    return false;
                }
                Err(e) => {
                    log::error!(
                        "spooled audit batch of {} rows refused ({e}); writing rows one by one",
                        taken.entries.len()
                    );
                    for entry in &taken.entries {
                        match self.copier.write(std::slice::from_ref(entry), true).await {
                            Ok(()) => self.metrics.audit_written.inc(),
                            Err(CopyError::Unavailable(_)) => return false,
                            Err(e) => {
                                log::error!("dropping spooled audit row {}: {e}", entry.record.id);
                                self.metrics.audit_dropped.inc();
                            }
                        }
                    }
                    spool.done(&taken);
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
    async fn touch(&self, batch: &[AuditEntry]) {
        let uses: Vec<_> = {
            let Ok(mut touched) = self.touched.lock() else { return };
            let now = Instant::now();
            let mut uses = Vec::new();
            for r in batch.iter().map(|e| &e.record) {
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
    /// Hands a batch to a writer task once a write slot is free. While the spool holds
    /// anything, or no slot frees up within `spill_after`, the batch spills instead.
    /// Each row's journal ticket is let go once the row is written or spilled.
    async fn dispatch(&self, slots: &Arc<Semaphore>, queued: Vec<Queued>) {
        let (batch, tickets): (Vec<AuditEntry>, Vec<Option<Ticket>>) =
            queued.into_iter().map(|q| (q.entry, q.ticket)).unzip();
        if !self.writer.spool.is_empty() {
            settle(tickets, self.spill_queued(&batch));
            return;
        }
        let permit = match tokio::time::timeout(self.spill_after, slots.clone().acquire_owned()).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) | Err(_) => {
                settle(tickets, self.spill_queued(&batch));
                return;
            }
        };
        let writer = self.writer.clone();
        tokio::spawn(async move {
            let durable = writer.write(&batch).await;
            settle(tickets, durable);
            drop(permit);
        });
    }

    fn spill_queued(&self, batch: &[AuditEntry]) -> bool {
        self.writer.metrics.audit_queue.sub(batch.len() as i64);
        spill(&self.writer.spool, &self.writer.metrics, &self.writer.dropped_log, batch)
    }
}

/// How often a proxy looks for spool folders no process holds any more.
const ADOPT_EVERY: Duration = Duration::from_secs(2);

/// Replays the spool folders other processes left (`audit_spool::orphans`): a process stopped
/// with records in its folder, or one upgraded away; a crashed one's too.
async fn adopter(writer: Arc<BatchWriter>, root: std::path::PathBuf, mut shutdown: ShutdownWatch) {
    loop {
        for dir in crate::audit_spool::orphans(&root, writer.spool.dir()) {
            match Spool::adopt(&dir, writer.metrics.clone()) {
                Ok(spool) => {
                    log::info!("replaying the audit spool {} another process left", dir.display());
                    if !writer.replay_spool(&spool).await {
                        break; // Postgres is away: the next round tries again
                    }
                }
                Err(crate::audit_spool::SpoolError::Busy(_)) => {} // another process took it first
                Err(e) => writer.log.warn(|| format!("adopting the audit spool {}: {e}", dir.display())),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(ADOPT_EVERY) => {}
            _ = shutdown.changed() => {
                if *shutdown.borrow() {
                    return;
                }
            }
        }
    }
}

/// Brings the spool back into Postgres, retrying with backoff while Postgres is away.
async fn replayer(writer: Arc<BatchWriter>, mut shutdown: ShutdownWatch) {
    let mut delay = Duration::from_millis(100);
    loop {
        if writer.spool.is_empty() || writer.replay().await {
            delay = Duration::from_millis(100);
        } else {
            delay = (delay * 2).min(Duration::from_secs(2));
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.changed() => {
                if *shutdown.borrow() {
                    return;
                }
            }
        }
    }
}

#[async_trait]
impl BackgroundService for AuditFlusher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        crate::priority::background_thread();
        let mut rx = self.rx.lock().await;
        let slots = Arc::new(Semaphore::new(CONCURRENT_WRITES));
        let replay = tokio::spawn(replayer(self.writer.clone(), shutdown.clone()));
        let adopt = tokio::spawn(adopter(self.writer.clone(), self.spool_root.clone(), shutdown.clone()));
        let size = self.batch_size.clamp(1, BACKLOG_BATCH);
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut deadline: Option<tokio::time::Instant> = None;
        // Until every sender is gone and the queue is drained, or, once shutdown began, nothing is
        // in flight any more (every request's row is queued) or the drain window ends.
        while !(rx.is_closed() && rx.is_empty()) {
            tokio::select! {
                _ = self.batch_ready.notified() => {}
                _ = tick.tick() => {}
                changed = shutdown.changed(), if deadline.is_none() => {
                    if changed.is_err() || *shutdown.borrow() {
                        deadline = Some(tokio::time::Instant::now() + self.drain_for);
                        // From now on every record is the last chance to write it: flush at once
                        // and keep flushing often until the drain window closes.
                        tick = tokio::time::interval(self.interval.min(Duration::from_millis(50)));
                    }
                }
            }
            // Everything queued so far, in as few batches as the size allows.
            let queued = rx.len();
            for _ in 0..batches(queued, size) {
                let mut batch = Vec::with_capacity(size.min(queued));
                while batch.len() < size {
                    let Ok(rec) = rx.try_recv() else { break };
                    batch.push(rec);
                }
                if batch.is_empty() {
                    break;
                }
                self.dispatch(&slots, batch).await;
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d || self.in_flight.count() == 0) {
                break;
            }
        }
        // From here a record sent (a request that came in on a kept-alive connection as the
        // process stopped) finds the queue closed and goes to the spool at once.
        rx.close();
        let mut batch = Vec::new();
        while let Ok(rec) = rx.try_recv() {
            batch.push(rec);
        }
        while !batch.is_empty() {
            let rest = batch.split_off(batch.len().min(BACKLOG_BATCH));
            self.dispatch(&slots, batch).await;
            batch = rest;
        }
        // Every write slot back means every batch has landed or spilled.
        let _ = slots.acquire_many(CONCURRENT_WRITES as u32).await;
        replay.abort();
        adopt.abort();
        if let Some(journal) = &self.journal {
            journal.close();
        }
        if !self.writer.spool.is_empty() {
            log::warn!("audit flusher stopped with records in the spool: the next start replays them");
        }
        log::info!("audit flusher stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_up_writes_everything_queued_in_whole_batches() {
        assert_eq!(batches(0, 512), 0);
        assert_eq!(batches(1, 512), 1);
        assert_eq!(batches(512, 512), 1);
        assert_eq!(batches(513, 512), 2);
        assert_eq!(batches(3, 0), 3);
    }
}
