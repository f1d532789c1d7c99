//! Where heavy guardrail scans run: a few threads at the lowest CPU priority, fed by a bounded
//! queue, at most a few scans of one organization at a time. A request whose guardrail work
//! (bytes times passes) is past `policy_inline_scan_work` waits here instead of holding the
//! worker thread every other tenant's requests share; on a contended core the scan gets what the
//! workers leave. A scan, once started, runs to its end (a regex cannot be interrupted): its
//! organization's slot is released by the pool thread when it ends, not when the request gives
//! up waiting.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScanError {
    /// The queue is full: the pool is behind.
    #[error("the scan queue is full")]
    Busy,
    /// The scan panicked, or the pool is gone.
    #[error("the scan failed")]
    Failed,
}

pub struct ScanPool {
    jobs: SyncSender<Job>,
    /// One semaphore per organization with scans in flight (idle ones age out).
    per_org: moka::sync::Cache<Uuid, Arc<Semaphore>>,
    per_org_limit: usize,
}

impl ScanPool {
    pub fn start(threads: usize, queue: usize, per_org: usize) -> std::io::Result<Arc<Self>> {
        let (tx, rx) = sync_channel::<Job>(queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new().name(format!("gw-scan-{i}")).spawn(move || worker(&rx))?;
        }
        Ok(Arc::new(Self {
            jobs: tx,
            per_org: moka::sync::Cache::builder().max_capacity(100_000).time_to_idle(Duration::from_secs(600)).build(),
            per_org_limit: per_org.max(1),
        }))
    }

    /// Waits for one of the organization's slots (the caller bounds the wait by the request's
    /// deadline), then runs `work` on a pool thread and hands back its result.
    pub async fn run<T, F>(&self, org_id: Uuid, work: F) -> Result<T, ScanError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let sem = self.per_org.get_with(org_id, || Arc::new(Semaphore::new(self.per_org_limit)));
        let permit: OwnedSemaphorePermit = sem.acquire_owned().await.map_err(|_| ScanError::Failed)?;
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let out = catch_unwind(AssertUnwindSafe(work));
            drop(permit);
            let _ = tx.send(out);
        });
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(ScanError::Busy),
            Err(TrySendError::Disconnected(_)) => return Err(ScanError::Failed),
        }
        match rx.await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(_)) => {
                log::error!("a policy scan panicked");
                Err(ScanError::Failed)
            }
            Err(_) => Err(ScanError::Failed),
        }
    }
}

fn worker(rx: &Mutex<Receiver<Job>>) {
    crate::priority::scan_thread();
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_work_and_returns_its_result() {
        let pool = ScanPool::start(1, 4, 1).expect("pool");
        assert_eq!(pool.run(Uuid::nil(), || 6 * 7).await, Ok(42));
    }

    #[tokio::test]
    async fn a_panic_is_an_error_not_a_lost_thread() {
        let pool = ScanPool::start(1, 4, 1).expect("pool");
        let r: Result<(), _> = pool.run(Uuid::nil(), || panic!("boom")).await;
        assert_eq!(r, Err(ScanError::Failed));
        assert_eq!(pool.run(Uuid::nil(), || 1).await, Ok(1), "the thread survived");
    }

    #[tokio::test]
    async fn a_full_queue_is_busy() {
        // The one thread held by a job that waits for a signal, the queue of one filled: the next
        // scan is refused at once.
        let pool = ScanPool::start(1, 1, 1).expect("pool");
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = oneshot::channel::<()>();
        let p = pool.clone();
        let first = tokio::spawn(async move {
            p.run(Uuid::from_u128(1), move || {
                let _ = started_tx.send(());
                let _ = held.recv();
            })
            .await
        });
        started.await.expect("first job started");
        let (filler_ran, filler_done) = oneshot::channel::<()>();
        pool.jobs
            .try_send(Box::new(move || {
                let _ = filler_ran.send(());
            }))
            .expect("the queue had room");
        assert_eq!(pool.run(Uuid::from_u128(3), || 3).await, Err(ScanError::Busy));
        release.send(()).expect("release");
        assert_eq!(first.await.expect("join"), Ok(()));
        filler_done.await.expect("the queued job ran");
        assert_eq!(pool.run(Uuid::from_u128(3), || 3).await, Ok(3));
    }

    #[tokio::test]
    async fn one_organization_waits_for_its_own_slot() {
        let pool = ScanPool::start(2, 8, 1).expect("pool");
        let org = Uuid::from_u128(7);
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = oneshot::channel::<()>();
        let p = pool.clone();
        let first = tokio::spawn(async move {
            p.run(org, move || {
                let _ = started_tx.send(());
                let _ = held.recv();
            })
            .await
        });
        started.await.expect("first job started");
        // The organization's second scan waits (a free thread notwithstanding); another
        // organization's runs.
        let p = pool.clone();
        let mut second = tokio::spawn(async move { p.run(org, || 2).await });
        assert_eq!(pool.run(Uuid::from_u128(8), || 8).await, Ok(8));
        assert!(tokio::time::timeout(Duration::from_millis(50), &mut second).await.is_err(), "it waited");
        release.send(()).expect("release");
        assert_eq!(first.await.expect("join"), Ok(()));
        assert_eq!(second.await.expect("join"), Ok(2));
    }
}
