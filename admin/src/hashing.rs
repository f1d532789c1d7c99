//! Password hashing on a few long-lived threads of its own. argon2id works in ~19 MiB, which
//! each hashing thread keeps and reuses (`gw_shared::password`); on tokio's blocking pool a
//! flood would spread hashes over many threads, each keeping its own. Here at most `threads`
//! hashes run at once, always on the same threads, so the memory is `threads` × 19 MiB
//! (measured under a login flood, release build: 22 → 63 MiB with 2 threads; it was 355 MiB
//! when each hash allocated its memory). A caller that waits longer than `wait` for a free
//! thread gets 503 instead of queueing.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::error::{ApiError, ApiResult};

type Job = Box<dyn FnOnce() + Send>;

pub struct Hashing {
    jobs: SyncSender<Job>,
    free: Semaphore,
    wait: Duration,
}

impl Hashing {
    pub fn new(threads: usize, wait: Duration) -> std::io::Result<Self> {
        let threads = threads.max(1);
        // One waiting job per thread at most: a job is only sent while holding a permit.
        let (jobs, rx) = sync_channel::<Job>(threads);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new().name(format!("gw-hash-{i}")).spawn(move || work(&rx))?;
        }
        Ok(Hashing { jobs, free: Semaphore::new(threads), wait })
    }

    /// Runs `f` (a hash or a verification) on a hashing thread.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> ApiResult<T> {
        let busy = || ApiError::Unavailable("too many sign-ins at once; retry in a few seconds".into());
        let _permit = match tokio::time::timeout(self.wait, self.free.acquire()).await {
            Ok(Ok(p)) => p,
            _ => return Err(busy()),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(busy()),
            Err(TrySendError::Disconnected(_)) => return Err(ApiError::Internal("hashing threads are gone".into())),
        }
        rx.await.map_err(|_| ApiError::Internal("a hashing job was dropped".into()))
    }
}

fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = match rx.lock() {
            Ok(guard) => match guard.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
            Err(_) => return,
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_and_a_full_pool_refuses_after_the_wait() {
        let h = Hashing::new(1, Duration::from_millis(20)).unwrap();
        assert_eq!(h.run(|| 2 + 2).await.ok(), Some(4));
        let (slow, fast) = tokio::join!(h.run(|| std::thread::sleep(Duration::from_millis(300))), async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            h.run(|| 1).await
        });
        assert!(slow.is_ok());
        assert!(matches!(fast, Err(ApiError::Unavailable(_))));
    }
}
